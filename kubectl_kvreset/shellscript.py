"""Reading a container's shell script the way ``sh -c`` would, without running it: enough of
POSIX sh and bash (assignments, ``export``, quoting, parameter and arithmetic expansion,
``&&``/``;`` lists, ``exec``, redirections) to find the command the script starts and the
environment it gives that command. Pure: no I/O, no process is started.

Only straight-line code is followed. An assignment the reader cannot follow that way (inside
``if``/``case``/``while``/``for``/``until``/``select`` bodies, after ``&&``/``||``, in a
pipeline, a background job, a subshell or a function; ``read``, ``printf -v``, ``mapfile``,
``getopts``, ``let``/``((...))``, ``export -n``, ``unset`` there) leaves its variable
unevaluated; after ``eval``, ``source``/``.`` or a ``declare -n`` name reference, which may
assign any variable, every variable read is unevaluated; after ``set --`` or ``shift`` so are
the positional parameters. A value built from such a variable is then reported as not what the
shell gives (:attr:`Shell.unevaluated`), never a guess.

Used by :mod:`kubectl_kvreset.engines.vllm.servecmd`, which reads vLLM's own flags from the words found here.
Rules follow POSIX ``sh`` (XCU 2.x "Shell Command Language") and bash's manual where bash differs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\+?=(.*)$", re.DOTALL)
_REDIRECT_RE = re.compile(r"^(\d*(?:>>?|<|>&|&>>?|<&)|&>)(.*)$", re.ASCII | re.DOTALL)
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ash", "ksh"})
_SKIP_WORDS = frozenset({"then", "do", "else", "elif", "{", "!", "time", "nohup", "command", "builtin"})
#: compound commands whose bodies may or may not run (POSIX XCU 2.9.4), closed by the value
_COMPOUND = {"if": "fi", "while": "done", "until": "done", "for": "done", "select": "done", "case": "esac"}
_CLOSERS = frozenset({"fi", "done", "esac"})
_HEREDOC_RE = re.compile(r"""<<(-)?\s*(?:'([^']*)'|"([^"]*)"|\\?([A-Za-z0-9_.-]+))""")
_FUNC_HEADER_RE = re.compile(r"^\s*(?:function\s+([A-Za-z_][A-Za-z0-9_.:-]*)(?:\s*\(\s*\))?|"
                             r"([A-Za-z_][A-Za-z0-9_.:-]*)\s*\(\s*\))\s*\{?")
_FUNC_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.:-]*)\(\)$")
_EXPORT_WORDS = frozenset({"export", "declare", "typeset", "readonly", "local"})


class _ArithError(ValueError):
    """An arithmetic expression that cannot be evaluated (unset name, syntax, division by 0)."""


class _Arith:
    """Recursive-descent evaluator of integer ``+ - * / %`` with parentheses and unary signs.

    Names are looked up in ``lookup`` (bash semantics for a set name; an unset name raises
    :class:`_ArithError` so the caller can report it instead of silently using 0).
    Division truncates toward zero, as bash does.
    """

    _TOKEN_RE = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))", re.ASCII)

    def __init__(self, expr: str, lookup: Callable[[str], str | None]) -> None:
        self.tokens: list[tuple[str, str]] = []
        for m in self._TOKEN_RE.finditer(expr):
            if m.group(1) is not None:
                self.tokens.append(("num", m.group(1)))
            elif m.group(2) is not None:
                self.tokens.append(("name", m.group(2)))
            elif m.group(3) is not None and m.group(3).strip():
                self.tokens.append(("op", m.group(3)))
        self.pos = 0
        self.lookup = lookup
        self.missing: list[str] = []

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> tuple[str, str]:
        tok = self._peek()
        if tok is None:
            raise _ArithError("unexpected end of expression")
        self.pos += 1
        return tok

    def evaluate(self) -> int:
        """Evaluate the whole expression; raises :class:`_ArithError`."""
        if not self.tokens:
            return 0
        value = self._sum()
        if self._peek() is not None:
            raise _ArithError(f"unexpected token {self._peek()!r}")
        if self.missing:
            raise _ArithError("unset: " + ",".join(self.missing))
        return value

    def _sum(self) -> int:
        value = self._product()
        while (tok := self._peek()) is not None and tok in (("op", "+"), ("op", "-")):
            self.pos += 1
            rhs = self._product()
            value = value + rhs if tok[1] == "+" else value - rhs
        return value

    def _product(self) -> int:
        value = self._unary()
        while (tok := self._peek()) is not None and tok[0] == "op" and tok[1] in "*/%":
            self.pos += 1
            rhs = self._unary()
            if tok[1] == "*":
                value *= rhs
            else:
                if rhs == 0:
                    raise _ArithError("division by 0")
                quot = abs(value) // abs(rhs)
                if (value < 0) != (rhs < 0):
                    quot = -quot
                value = quot if tok[1] == "/" else value - quot * rhs
        return value

    def _unary(self) -> int:
        tok = self._peek()
        if tok in (("op", "+"), ("op", "-")):
            self.pos += 1
            val = self._unary()
            return -val if tok == ("op", "-") else val
        return self._atom()

    def _atom(self) -> int:
        kind, text = self._take()
        if kind == "num":
            return int(text)
        if kind == "name":
            raw = self.lookup(text)
            if raw is None or raw.strip() == "":
                self.missing.append(text)
                return 0
            try:
                return int(raw.strip())
            except ValueError as exc:
                raise _ArithError(f"{text}={raw!r} is not an integer") from exc
        if text == "(":
            value = self._sum()
            if self._take() != ("op", ")"):
                raise _ArithError("missing )")
            return value
        raise _ArithError(f"unexpected {text!r}")


def _escape_unquoted(value: str) -> str:
    """Make an expansion's value safe for :func:`shlex.split` outside quotes.

    Whitespace stays active (bash splits unquoted expansions into words); quotes and backslashes
    become literal.
    """
    return re.sub(r"""(["'\\])""", r"\\\1", value)


def _escape_dquoted(value: str) -> str:
    """Make a value safe inside a double-quoted shlex word."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _escape_literal(value: str) -> str:
    """Keep ``value`` as one literal shlex word outside quotes (whitespace escaped too)."""
    return re.sub(r"""(["'\\\s])""", r"\\\1", value)


def _ansi_c_end(text: str, start: int) -> int:
    """Index of the ``'`` closing a ``$'...'`` whose body starts at ``start`` (a backslash
    escapes the next character), or -1."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "'":
            return i
        i += 1
    return -1


_ANSI_C_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
                  "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def ansi_c_decode(body: str) -> str:
    """The value of bash's ANSI-C quoting ``$'body'`` (bash manual, "ANSI-C Quoting"):
    ``\\a \\b \\e \\E \\f \\n \\r \\t \\v \\\\ \\' \\" \\?``, ``\\nnn`` (octal, 1-3 digits),
    ``\\xHH`` (1-2 hex digits), ``\\uHHHH``, ``\\UHHHHHHHH`` and ``\\cX`` (control-X); any other
    backslash stays with the character after it, as bash leaves it."""
    out: list[str] = []
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in _ANSI_C_SIMPLE:
            out.append(_ANSI_C_SIMPLE[e])
            i += 2
            continue
        m = None
        for pattern, base in ((r"[0-7]{1,3}", 8), (r"x([0-9A-Fa-f]{1,2})", 16), (r"u([0-9A-Fa-f]{1,4})", 16),
                              (r"U([0-9A-Fa-f]{1,8})", 16)):
            m = re.compile(pattern).match(body, i + 1)
            if m is not None:
                code = int(m.group(1) if m.groups() else m.group(0), base)
                out.append(chr(code & 0xFF if base == 8 else min(code, 0x10FFFF)))
                i = m.end()
                break
        if m is not None:
            continue
        if e == "c" and i + 2 < n:
            out.append(chr(ord(body[i + 2]) & 0x1F))
            i += 3
            continue
        out.append(c + e)
        i += 2
    return "".join(out)


def _matching(text: str, start: int, open_s: str, close_s: str) -> int:
    """Index of the ``close_s`` that balances an ``open_s`` already consumed before ``start``.

    Quotes inside are skipped. Returns -1 when unbalanced.
    """
    depth = 1
    i = start
    n = len(text)
    quote: str | None = None
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                quote = None
        elif c == "\\":
            i += 2
            continue
        elif c in "'\"":
            quote = c
        elif text.startswith(open_s, i):
            depth += 1
            i += len(open_s)
            continue
        elif text.startswith(close_s, i):
            depth -= 1
            if depth == 0:
                return i
            i += len(close_s)
            continue
        i += 1
    return -1


class ShellScriptError(ValueError):
    """A script that cannot be read (unbalanced quotes, a bad arithmetic expression); the
    message names the construct at fault."""


#: ``wanted(words)``: True for the command the reader looks for (its words after expansion).
Wanted = Callable[[Sequence[str]], bool]


class Shell:
    """State of the tiny shell reader: variables, positional parameters, findings.

    ``env``: the process environment; ``wanted``: which simple command to stop at (its words
    and environment are what :meth:`run_words` and :meth:`run_script` return); ``external``:
    names set in the process from a source not in ``env`` (a ``valueFrom`` ConfigMap or Secret
    key): while not set by the script, ``${NAME:-word}`` is not taken as ``word`` but left as
    written (the source's value wins over the default in the real process).

    Raises (from its methods):
        ShellScriptError: unbalanced quotes, an unreadable arithmetic expansion.
    """

    def __init__(self, env: Mapping[str, str], positional: Sequence[str] = (), *,
                 wanted: Wanted = lambda words: False, external: frozenset[str] = frozenset()) -> None:
        self.wanted = wanted
        self.external = external - set(env)
        self.vars: dict[str, str] = dict(env)
        self.exported: set[str] = set(env)
        self.positional: list[str] = list(positional)
        self.unresolved: list[str] = []
        self.notes: list[str] = []
        #: ``(literal, reason)`` for each construct left as written because it was not
        #: evaluated (command substitution, an unset variable, an arithmetic expansion that
        #: failed): a value holding ``literal`` is not what the shell would give.
        self.unevaluated: list[tuple[str, str]] = []
        #: why every variable read from now on is unknown (after ``eval``, ``source``,
        #: ``declare -n``), or None
        self.opaque: str | None = None
        #: why the positional parameters are unknown (after ``set --``, ``shift``, in a
        #: function body), or None
        self.positional_unknown: str | None = None
        #: open compound commands, groups, subshells and function bodies:
        #: ``(closer, why assignments there are not followed, or None)``
        self.regions: list[tuple[str, str | None]] = []
        self.functions: set[str] = set()
        #: variables assigned in straight-line code since :attr:`opaque` was set (known again)
        self.fresh: set[str] = set()

    def child(self, positional: Sequence[str]) -> Shell:
        """A nested shell (``bash -c`` inside a script) that sees the exported variables."""
        sub = Shell({k: v for k, v in self.vars.items() if k in self.exported}, positional, wanted=self.wanted,
                    external=self.external)
        sub.unresolved = self.unresolved
        sub.notes = self.notes
        sub.unevaluated = self.unevaluated
        sub.opaque = self.opaque
        return sub

    def _make_opaque(self, reason: str) -> None:
        """From now on every variable read is unknown (``reason``) until assigned again."""
        self.opaque = self.opaque or reason
        self.fresh.clear()

    def mark(self, name: str, reason: str) -> None:
        """Record that ``name`` may have been assigned where the reader does not follow: its
        value becomes the literal ``${name}``, recorded as left as written with ``reason``, so a
        value built from it is unevaluated (never the value before, nor the one assigned)."""
        literal = "${" + name + "}"
        self.vars[name] = literal
        self.fresh.discard(name)
        self.left_as_written(literal, reason)

    def note(self, text: str) -> None:
        """Record a note once."""
        if text not in self.notes:
            self.notes.append(text)

    def missing(self, name: str) -> None:
        """Record an unresolved variable once."""
        if name not in self.unresolved:
            self.unresolved.append(name)

    def left_as_written(self, literal: str, reason: str) -> None:
        """Record a construct kept literally in the expansion because it was not evaluated."""
        if literal and (literal, reason) not in self.unevaluated:
            self.unevaluated.append((literal, reason))

    def _unset(self, name: str, literal: str) -> None:
        """An unset variable ``name`` written as ``literal``: recorded as unresolved and as
        left as written (its value may come from the image or a source not read)."""
        self.missing(name)
        self.left_as_written(literal, f"variable {name} is not set in the container's spec (its value may "
                                      "come from the image's environment or a source not read)")

    # ---- splitting a script into simple commands ----------------------------------------

    @staticmethod
    def split_commands(script: str) -> list[str]:
        """Split a script into simple commands; drop comments and ``\\<newline>`` pairs.

        Separators (outside quotes and ``$( )``/``${ }``): newline, ``;``, ``&&``, ``||``, ``|``
        and a lone ``&``. Quoting is kept in the returned texts.

        Raises:
            ShellScriptError: unbalanced quotes.
        """
        return [text for text, _, _ in Shell.split_list(script)]

    @staticmethod
    def split_list(script: str) -> list[tuple[str, str, str]]:
        """:meth:`split_commands` with the separators: ``(text, before, after)`` where
        ``before``/``after`` is the separator preceding/ending the command (a newline, ``";"``,
        ``"&&"``, ``"||"``, ``"|"``, ``"&"``, ``""`` at the ends). The lines of a here-document
        (``<<WORD`` ... ``WORD``) are skipped: they are the command's input, not commands.

        Raises:
            ShellScriptError: unbalanced quotes.
        """
        cmds: list[tuple[str, str, str]] = []
        buf: list[str] = []
        quote: str | None = None
        depth = 0
        i = 0
        n = len(script)
        last_sep = [""]
        #: here-documents started on the current line: (delimiter, <<- strips leading tabs)
        pending: list[tuple[str, bool]] = []

        def flush(sep: str = "") -> None:
            text = "".join(buf).strip()
            if text:
                cmds.append((text, last_sep[0], sep))
                last_sep[0] = sep
            elif sep in ("&&", "||", "|"):
                last_sep[0] = sep
            buf.clear()

        while i < n:
            c = script[i]
            nxt = script[i + 1] if i + 1 < n else ""
            if quote == "'":
                buf.append(c)
                if c == "'":
                    quote = None
                i += 1
                continue
            if c == "\\":
                if nxt == "\n":
                    i += 2
                    continue
                buf.append(c + nxt)
                i += 2
                continue
            if quote == '"':
                buf.append(c)
                if c == '"':
                    quote = None
                elif c == "$" and nxt == "(":
                    depth += 1
                    buf.append(nxt)
                    i += 1
                elif c == ")" and depth > 0:
                    depth -= 1
                i += 1
                continue
            # unquoted
            if c == "$" and nxt == "'":
                end = _ansi_c_end(script, i + 2)
                if end == -1:
                    raise ShellScriptError("shell script: unbalanced $' quote")
                buf.append(script[i:end + 1])
                i = end + 1
                continue
            if c in "'\"":
                quote = c
                buf.append(c)
            elif c == "#" and (not buf or buf[-1][-1:].isspace() or buf[-1][-1:] in ";&|()"):
                end = script.find("\n", i)
                i = n if end == -1 else end
                continue
            elif c == "$" and nxt in "({":
                depth += 1
                buf.append(c + nxt)
                i += 2
                continue
            elif c == "(" and depth > 0:
                depth += 1
                buf.append(c)
            elif c in ")}" and depth > 0:
                depth -= 1
                buf.append(c)
            elif depth == 0 and c == "<" and nxt == "<" and script[i + 2:i + 3] != "<":
                # a here-document: its lines are data for the command, not commands (XCU 2.7.4)
                m = _HEREDOC_RE.match(script, i)
                if m is not None:
                    pending.append((m.group(2) or m.group(3) or m.group(4), bool(m.group(1))))
                    buf.append(script[i:m.end()])
                    i = m.end()
                    continue
                buf.append(c)
            elif depth == 0 and c in "\n;":
                flush(c)
                if c == "\n" and pending:
                    i += 1
                    for word, strip_tabs in pending:
                        while i < n:
                            end = script.find("\n", i)
                            line = script[i:n if end == -1 else end]
                            i = n if end == -1 else end + 1
                            if (line.lstrip("\t") if strip_tabs else line) == word:
                                break
                    pending.clear()
                    continue
            elif depth == 0 and c == "&" and nxt == "&":
                flush("&&")
                i += 2
                continue
            elif depth == 0 and c == "|":
                flush("||" if nxt == "|" else "|")
                i += 2 if nxt == "|" else 1
                continue
            elif depth == 0 and c == "&" and nxt != ">" and not (buf and buf[-1].endswith((">", "<"))):
                flush("&")
            else:
                buf.append(c)
            i += 1
        if quote is not None:
            raise ShellScriptError(f"shell script: unbalanced {quote} quote")
        flush()
        return cmds

    # ---- parameter expansion ------------------------------------------------------------

    def lookup(self, name: str) -> str | None:
        """Value of a variable or special parameter, None when unset.

        After a construct that may assign any variable (:attr:`opaque`) or the positional
        parameters (:attr:`positional_unknown`), the value is the literal ``${name}``, recorded
        as left as written."""
        positional = (name.isascii() and name.isdigit() and name != "0") or name in ("@", "*", "#")
        why = self.positional_unknown if positional else self.opaque
        if positional and why is None:
            # a function's positional parameters are its call's arguments
            why = next((w for _, w in self.regions if w and w.startswith("inside the body of function")), None)
        if why is not None and name != "0" and not (not positional and name in self.fresh):
            literal = "${" + name + "}"
            self.left_as_written(literal, why)
            return literal
        if name.isascii() and name.isdigit():
            idx = int(name)
            if idx == 0:
                return self.vars.get("0", "bash")
            return self.positional[idx - 1] if idx - 1 < len(self.positional) else None
        if name in ("@", "*"):
            return " ".join(self.positional)
        if name == "#":
            return str(len(self.positional))
        return self.vars.get(name)

    def expand(self, text: str, raw: bool = False) -> str:
        """Expand ``$VAR``, ``${...}``, ``$((...))`` in ``text`` outside single quotes.

        With ``raw`` the values are inserted as they are (used inside arithmetic and for
        ``${VAR:-word}`` words); otherwise they are escaped so that :func:`shlex.split` reads
        them as bash would (word splitting of unquoted values only). Unresolvable references
        stay literal and are recorded.
        """
        out: list[str] = []
        i = 0
        n = len(text)
        quote: str | None = None

        def put(value: str, literal: bool = False) -> None:
            if raw:
                out.append(value)
            elif quote == '"':
                out.append(_escape_dquoted(value))
            elif literal:
                out.append(_escape_literal(value))
            else:
                out.append(_escape_unquoted(value))

        while i < n:
            c = text[i]
            nxt = text[i + 1] if i + 1 < n else ""
            if quote == "'":
                out.append(c)
                if c == "'":
                    quote = None
                i += 1
                continue
            if c == "\\":
                if quote == '"' and nxt in "$`":
                    out.append(nxt)
                else:
                    out.append(c + nxt)
                i += 2
                continue
            if c == '"' and not raw:
                quote = None if quote == '"' else '"'
                out.append(c)
                i += 1
                continue
            if c == "'" and quote is None and not raw:
                quote = "'"
                out.append(c)
                i += 1
                continue
            if c == "`" and not raw:
                end = text.find("`", i + 1)
                if end != -1:
                    literal = text[i:end + 1]
                    self.note(f"command substitution {literal} not evaluated")
                    self.left_as_written(literal, f"command substitution {literal} is not evaluated (it runs "
                                                  "in the pod)")
                    put(literal, literal=True)
                    i = end + 1
                    continue
            if c != "$" or not nxt:
                out.append(c)
                i += 1
                continue
            # c == "$"
            if nxt == "'" and quote is None and not raw:
                end = _ansi_c_end(text, i + 2)
                if end != -1:
                    put(ansi_c_decode(text[i + 2:end]), literal=True)
                    i = end + 1
                    continue
            if text.startswith("$((", i):
                end = _matching(text, i + 3, "((", "))")
                if end == -1:
                    out.append(c)
                    i += 1
                    continue
                expr_src = text[i + 3:end]
                literal = text[i:end + 2]
                put(self._arith(expr_src, literal), literal=True)
                i = end + 2
                continue
            if nxt == "(":
                end = _matching(text, i + 2, "(", ")")
                if end == -1:
                    out.append(c)
                    i += 1
                    continue
                literal = text[i:end + 1]
                self.note(f"command substitution {literal} not evaluated")
                self.left_as_written(literal, f"command substitution {literal} is not evaluated (it runs "
                                              "in the pod)")
                put(literal, literal=True)
                i = end + 1
                continue
            if nxt == "{":
                end = _matching(text, i + 2, "{", "}")
                if end == -1:
                    out.append(c)
                    i += 1
                    continue
                put(*self._brace(text[i + 2:end], text[i:end + 1]))
                i = end + 1
                continue
            m = _NAME_RE.match(text, i + 1)
            if m is not None:
                name = m.group(0)
                value = self.lookup(name)
                if value is None:
                    self._unset(name, "$" + name)
                    put("$" + name, literal=True)
                else:
                    put(value)
                i = m.end()
                continue
            if (nxt.isascii() and nxt.isdigit()) or nxt in "@*#":
                value = self.lookup(nxt)
                put(value if value is not None else "")
                i += 2
                continue
            out.append(c)
            i += 1
        return "".join(out)

    def _brace(self, inner: str, literal: str) -> tuple[str, bool]:
        """Expand the inside of ``${...}``; returns (value, is_literal_fallback)."""
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#])(?:(:?[-=+?])(.*))?", inner, re.DOTALL | re.ASCII)
        if m is None:
            if inner.startswith("#") and _NAME_RE.fullmatch(inner[1:]):
                value = self.lookup(inner[1:])
                if value is not None:
                    return str(len(value)), False
            self.note(f"parameter expansion {literal} not understood")
            self.left_as_written(literal, f"parameter expansion {literal} is not understood here")
            return literal, True
        name, op, word = m.group(1), m.group(2), m.group(3) or ""
        value = self.lookup(name)
        if op is None:
            if value is None:
                self._unset(name, literal)
                return literal, True
            return value, False
        if value is None and name in self.external:
            self._unset(name, literal)
            return literal, True
        unset_or_null = value is None or (op.startswith(":") and value == "")
        kind = op[-1]
        if kind in "-=":
            if unset_or_null:
                default = _unquote_word(self.expand(word, raw=True))
                if kind == "=":
                    self.vars[name] = default
                return default, False
            return value or "", False
        if kind == "+":
            return ("" if unset_or_null else _unquote_word(self.expand(word, raw=True))), False
        # "?": error when unset
        if unset_or_null:
            self._unset(name, literal)
            return literal, True
        return value or "", False

    def _arith(self, expr_src: str, literal: str) -> str:
        """Evaluate ``$(( expr ))``; on failure keep ``literal`` and record why. A variable the
        expression assigns (``N=1``, ``N+=1``, ``N++``) is marked unevaluated."""
        for m in re.finditer(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:[-+*/%]?=(?!=)|\+\+|--)|(?:\+\+|--)\s*([A-Za-z_][A-Za-z0-9_]*)",
                             expr_src):
            name = m.group(1) or m.group(2)
            self.mark(name, f"{name} is assigned by the arithmetic {literal}, which the plugin does not follow")
            self.left_as_written(literal, f"arithmetic {literal} assigns a variable, which the plugin does not follow")
        if any(lit == literal for lit, _ in self.unevaluated):
            return literal
        before = len(self.unresolved)
        expanded = self.expand(expr_src, raw=True)
        if len(self.unresolved) > before:
            self.left_as_written(literal, f"arithmetic {literal} uses a variable that is not set")
            return literal
        evaluator = _Arith(expanded, self.lookup)
        try:
            return str(evaluator.evaluate())
        except _ArithError as exc:
            for name in evaluator.missing:
                self.missing(name)
            if not evaluator.missing:
                self.note(f"arithmetic {literal} not evaluated: {exc}")
            self.left_as_written(literal, f"arithmetic {literal} is not evaluated: {exc}")
            return literal

    # ---- running a script ---------------------------------------------------------------

    def run_script(self, script: str) -> tuple[list[str], dict[str, str]] | None:
        """Walk the commands of ``script``; return the first wanted command (its words) and the
        environment it runs with, or None when the script never starts one."""
        for cmd, before, after in self.split_list(script):
            header = _FUNC_HEADER_RE.match(cmd)
            if header is not None:
                # a function body: entered before expanding it, so its $1... are the call's
                name = header.group(1) or header.group(2)
                self.functions.add(name)
                self.regions.append(("}", f"inside the body of function {name}, which the plugin does not follow"))
                cmd = cmd[header.end():]
            expanded = self.expand(cmd)
            try:
                words = shlex.split(expanded, comments=False, posix=True)
            except ValueError as exc:
                raise ShellScriptError(f"shell script: {exc}: {cmd[:80]!r}") from exc
            words, why, pops = self._enter(_drop_redirections(words), before, after)
            try:
                found = self.run_words(words, why)
                if found is not None:
                    return found
                if why is not None:
                    self._mark_words(words, why)
            finally:
                for _ in range(pops):
                    if self.regions:
                        self.regions.pop()
        return None

    def _uncertain(self) -> str | None:
        """Why an assignment now is not followed (the innermost open region's), or None."""
        for _, why in reversed(self.regions):
            if why is not None:
                return why
        return None

    def _enter(self, words: list[str], before: str, after: str) -> tuple[list[str], str | None, int]:
        """Track compound commands, groups, subshells and function bodies around one command.

        Returns the words left to run, why assignments in them are not followed as
        straight-line code (None when they are) and how many regions close after it."""
        pops = 0
        words = list(words)
        # closers first: ``fi``, ``done``, ``esac``, ``}``, ``;;`` remnants
        while words and (words[0] in _CLOSERS or words[0] == "}"):
            if self.regions:
                self.regions.pop()
            words = words[1:]
        why: str | None = None
        if before in ("&&", "||"):
            why = f"a command after {before}, which runs or not depending on the one before"
        elif before == "|" or after == "|":
            why = "a pipeline element, which runs in a subshell"
        elif after == "&":
            why = "a background job, which runs in a subshell"
        inherited = self._uncertain()
        why = why or inherited
        while words:
            head = words[0]
            if head in ("then", "do", "else", "elif", "!"):
                words = words[1:]
                continue
            if head in _COMPOUND:
                reason = (f"inside a {head} command, whose body the plugin does not follow (it may run "
                          "or not, or more than once)")
                self.regions.append((_COMPOUND[head], reason))
                why = why or reason
                if head in ("for", "select") and len(words) > 1 and _NAME_RE.fullmatch(words[1]):
                    self.mark(words[1], f"{words[1]} is the variable of a {head} loop, which the plugin does not "
                                        "follow")
                    words = []
                elif head == "case":
                    words = words[words.index("in") + 1:] if "in" in words else []
                else:
                    words = words[1:]
                continue
            func = _FUNC_RE.match(head)
            if func is not None or (head == "function" and len(words) > 1) or (
                    len(words) > 1 and words[1] == "()" and _NAME_RE.fullmatch(head)):
                name = func.group(1) if func is not None else words[1] if head == "function" else head
                self.functions.add(name.removesuffix("()"))
                reason = f"inside the body of function {name.removesuffix('()')}, which the plugin does not follow"
                self.regions.append(("}", reason))
                why = why or reason
                skip = 1 if func is not None else 2
                words = words[skip:]
                if words and words[0] == "()":
                    words = words[1:]
                if words and words[0] == "{":
                    words = words[1:]
                continue
            if head == "{":
                self.regions.append(("}", why))
                words = words[1:]
                continue
            if head.startswith("(") and not head.startswith("(("):
                reason = "inside a subshell ( ... ), whose assignments the plugin does not follow"
                self.regions.append((")", reason))
                why = why or reason
                words = [head[1:], *words[1:]] if head[1:] else words[1:]
                continue
            break
        if words and self.regions and self.regions[-1][0] == ")" and words[-1].endswith(")") and "$(" not in words[-1]:
            words = [*words[:-1], words[-1][:-1]] if words[-1][:-1] else words[:-1]
            pops += 1
        # a case pattern ``PAT)`` before the command of a branch
        if words and any(closer == "esac" for closer, _ in self.regions):
            for k, w in enumerate(words):
                if w.endswith(")") and "$(" not in w and "=" not in w:
                    words = words[k + 1:]
                    break
                if _ASSIGN_RE.match(w) or w in _SKIP_WORDS:
                    break
        while words and words[-1] in (";;", ";&", ";;&"):
            words = words[:-1]
        return words, why, pops

    def _mark_words(self, words: Sequence[str], why: str) -> None:
        """Mark every variable a command run where assignments are not followed may assign:
        each ``NAME=`` word (prefix, ``export``, ``declare``, ``local`` alike)."""
        for w in words:
            m = _ASSIGN_RE.match(w)
            if m is not None:
                self.mark(m.group(1), f"{m.group(1)} is assigned {why}")

    def _assigned(self, word: str, m: re.Match[str], temp: Mapping[str, str]) -> str:
        """The value an assignment word ``NAME=value`` or ``NAME+=value`` (matched by ``m``)
        gives NAME. ``+=`` appends to the current value (bash manual, "Shell Parameters": for a
        variable without the integer attribute, which ``declare -i`` would give and the plugin
        does not follow); the current value is the command's earlier prefix assignment in
        ``temp``, else the variable's. A variable set from a source not read (``external``)
        makes the result unevaluated."""
        name, value = m.group(1), m.group(2)
        if word[len(name)] != "+":
            return value
        prior = temp[name] if name in temp else self.lookup(name)
        if prior is None and name in self.external:
            literal = "${" + name + "}"
            self.left_as_written(literal, f"{name}+= appends to {name}, which the kubelet sets from a source not "
                                          "read with the pod spec")
            return literal + value
        return (prior or "") + value

    def command_env(self, extra: Mapping[str, str]) -> dict[str, str]:
        """The environment a command started now would get."""
        env = {k: v for k, v in self.vars.items() if k in self.exported}
        env.update(extra)
        return env

    def run_words(self, words: list[str], why: str | None = None) -> tuple[list[str], dict[str, str]] | None:
        """Interpret one simple command (already split into words); ``why``: the reason its
        assignments are not followed as straight-line code (see :meth:`_enter`), or None."""
        temp: dict[str, str] = {}
        i = 0
        while i < len(words):
            w = words[i]
            if w in _SKIP_WORDS:
                i += 1
                continue
            m = _ASSIGN_RE.match(w)
            if m is not None:
                temp[m.group(1)] = self._assigned(w, m, temp)
                i += 1
                continue
            break
        rest = words[i:]
        if not rest:
            self.vars.update(temp)
            self.fresh.update(temp)
            return None
        head = rest[0]
        base = head.rsplit("/", 1)[-1]
        if self._assigning_builtin(base, rest, why):
            return None
        if base in _EXPORT_WORDS:
            for arg in rest[1:]:
                if arg.startswith(("-", "+")):
                    continue
                m = _ASSIGN_RE.match(arg)
                if m is not None:
                    self.vars[m.group(1)] = self._assigned(arg, m, {})
                    self.fresh.add(m.group(1))
                    if base in ("export", "declare", "typeset"):
                        self.exported.add(m.group(1))
                elif base == "export":
                    self.exported.add(arg)
            return None
        if base == "exec":
            j = 1
            while j < len(rest) and rest[j].startswith("-"):
                j += 2 if rest[j] == "-a" else 1
            return self._with_env(temp, rest[j:])
        if base == "env":
            j = 1
            while j < len(rest):
                arg = rest[j]
                m = _ASSIGN_RE.match(arg)
                if m is not None:
                    temp[m.group(1)] = m.group(2)
                elif arg in ("-u", "--unset"):
                    j += 1
                elif not arg.startswith("-"):
                    break
                j += 1
            return self._with_env(temp, rest[j:])
        if base == "eval":
            # the words are read again as a script; what that script assigns is not followed
            found = self._with_env(temp, None, script=" ".join(rest[1:]))
            if found is None:
                self._make_opaque("eval may assign any variable, and the plugin does not follow what "
                                  f"it assigns (eval {' '.join(rest[1:])[:60]})")
            return found
        if base in _SHELLS:
            script, positional = shell_c_script(rest)
            if script is not None:
                sub = self.child(positional)
                sub.vars.update(temp)
                sub.exported.update(temp)
                return sub.run_script(script)
            return None
        if self.wanted(rest):
            return rest, self.command_env(temp)
        return None

    def _assigning_builtin(self, base: str, rest: Sequence[str], why: str | None) -> bool:
        """Handle a builtin that assigns variables or positional parameters other than by
        ``NAME=value`` (bash manual, "Shell Builtin Commands"); True when ``base`` is one.

        Their targets are marked unevaluated (:meth:`mark`), or every later read
        (:attr:`opaque`, :attr:`positional_unknown`) when the target cannot be known."""
        args = list(rest[1:])
        names = [a for a in args if _NAME_RE.fullmatch(a)]
        where = f" ({why})" if why else ""
        if base in ("source", "."):
            self._make_opaque(f"{base} {' '.join(args)[:60]} runs a file the plugin does not read, which "
                              "may assign any variable")
            self.positional_unknown = self.positional_unknown or self.opaque
            return True
        if base in ("read", "mapfile", "readarray"):
            takes_value = {"read": "adinNptu", "mapfile": "cdnOsuC", "readarray": "cdnOsuC"}[base]
            targets: list[str] = []
            j = 0
            while j < len(args):
                a = args[j]
                if a.startswith("-") and len(a) > 1:
                    if a[-1] in takes_value:
                        if a[-1] == "a" and j + 1 < len(args):
                            targets.append(args[j + 1])
                        j += 2
                        continue
                    j += 1
                    continue
                if _NAME_RE.fullmatch(a):
                    targets.append(a)
                j += 1
            for name in targets or (["REPLY"] if base == "read" else ["MAPFILE"]):
                self.mark(name, f"{name} is set by {base}, which reads input the plugin does not see{where}")
            return True
        if base == "printf":
            for j, a in enumerate(args[:-1]):
                if a == "-v":
                    self.mark(args[j + 1], f"{args[j + 1]} is set by printf -v, which the plugin does not "
                                           f"evaluate{where}")
                    return True
            return False
        if base == "getopts":
            for name in [*(args[1:2] if len(args) > 1 else []), "OPTARG", "OPTIND"]:
                self.mark(name, f"{name} is set by getopts, which the plugin does not follow{where}")
            return True
        if base == "let" or base.startswith("(("):
            text = " ".join(rest)
            for name in dict.fromkeys(_NAME_RE.findall(text.removeprefix("let"))):
                self.mark(name, f"{name} may be assigned by the arithmetic command {text[:60]}, which the plugin "
                                f"does not follow{where}")
            return True
        if base in ("declare", "typeset", "local") and any(a.startswith("-") and "n" in a[1:] for a in args):
            self._make_opaque(f"{base} {' '.join(args)[:60]} makes a name reference, through which any "
                              "variable may be assigned")
            return True
        if base == "export" and any(a.startswith("-") and "n" in a[1:] for a in args):
            for a in args:
                name = a.split("=", 1)[0]
                if not a.startswith("-") and _NAME_RE.fullmatch(name):
                    self.mark(name, f"{name} is changed by export -n, which the plugin does not follow")
            return True
        if base == "unset":
            for name in names:
                if why is not None:
                    self.mark(name, f"{name} is unset {why}")
                elif "-f" not in args:
                    self.vars.pop(name, None)
                    self.exported.discard(name)
            return True
        if base == "set":
            j = 0
            while j < len(args):
                if args[j] == "--" or not args[j].startswith(("-", "+")):
                    self.positional_unknown = self.positional_unknown or (
                        "the positional parameters are reset by set, which the plugin does not follow")
                    break
                j += 2 if args[j].endswith("o") else 1
            return True
        if base == "shift":
            self.positional_unknown = self.positional_unknown or (
                "the positional parameters are shifted by shift, which the plugin does not follow")
            return True
        if base in self.functions:
            # its body was walked where it was defined (and its assignments marked there)
            return True
        return False

    def _with_env(
        self, temp: dict[str, str], words: list[str] | None, script: str | None = None
    ) -> tuple[list[str], dict[str, str]] | None:
        """Run ``words`` (or ``script``) with ``temp`` assignments exported for it."""
        saved_vars, saved_exp = dict(self.vars), set(self.exported)
        self.vars.update(temp)
        self.exported.update(temp)
        try:
            if script is not None:
                return self.run_script(script)
            return self.run_words(words or [])
        finally:
            self.vars, self.exported = saved_vars, saved_exp


def _unquote_word(word: str) -> str:
    """Remove one level of shell quoting from a ``${VAR:-word}`` word."""
    try:
        parts = shlex.split(word, comments=False, posix=True)
    except ValueError:
        return word
    return " ".join(parts) if parts else ""


def _drop_redirections(words: list[str]) -> list[str]:
    """Remove ``2>&1``, ``> file``, ``>>log`` and similar redirections from a word list."""
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        m = _REDIRECT_RE.match(w)
        if m is not None:
            if m.group(2) == "":
                skip = True
            continue
        out.append(w)
    return out


def shell_c_script(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """For ``bash [opts] -c SCRIPT [NAME [ARGS...]]`` return (SCRIPT, [NAME, ARGS...] minus NAME).

    Returns (None, []) when the shell is not given ``-c`` (e.g. it runs a script file).
    Positional list returned holds ``$1...``; ``$0`` is not tracked.
    """
    j = 1
    has_c = False
    while j < len(argv):
        arg = argv[j]
        if arg == "--":
            j += 1
            break
        if arg.startswith("--"):
            j += 1
            continue
        if arg.startswith(("-", "+")) and len(arg) > 1:
            letters = arg[1:]
            if "c" in letters:
                has_c = True
            j += 1
            if "o" in letters and j < len(argv):
                j += 1
            continue
        break
    if not has_c or j >= len(argv):
        return None, []
    return argv[j], list(argv[j + 2:])


