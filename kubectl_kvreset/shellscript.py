"""Reading a container's shell script the way ``sh -c`` would, without running it: enough of
POSIX sh and bash (assignments, ``export``, quoting, parameter and arithmetic expansion,
``&&``/``;`` lists, ``exec``, redirections) to find the command the script starts and the
environment it gives that command. Pure: no I/O, no process is started.

Used by :mod:`kubectl_kvreset.servecmd`, which reads vLLM's own flags from the words found here.
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
_SKIP_WORDS = frozenset({"then", "do", "else", "{", "!", "time", "nohup", "command", "builtin"})
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
    and environment are what :meth:`run_words` and :meth:`run_script` return).

    Raises (from its methods):
        ShellScriptError: unbalanced quotes, an unreadable arithmetic expansion.
    """

    def __init__(self, env: Mapping[str, str], positional: Sequence[str] = (), *,
                 wanted: Wanted = lambda words: False) -> None:
        self.wanted = wanted
        self.vars: dict[str, str] = dict(env)
        self.exported: set[str] = set(env)
        self.positional: list[str] = list(positional)
        self.unresolved: list[str] = []
        self.notes: list[str] = []

    def child(self, positional: Sequence[str]) -> Shell:
        """A nested shell (``bash -c`` inside a script) that sees the exported variables."""
        sub = Shell({k: v for k, v in self.vars.items() if k in self.exported}, positional, wanted=self.wanted)
        sub.unresolved = self.unresolved
        sub.notes = self.notes
        return sub

    def note(self, text: str) -> None:
        """Record a note once."""
        if text not in self.notes:
            self.notes.append(text)

    def missing(self, name: str) -> None:
        """Record an unresolved variable once."""
        if name not in self.unresolved:
            self.unresolved.append(name)

    # ---- splitting a script into simple commands ----------------------------------------

    @staticmethod
    def split_commands(script: str) -> list[str]:
        """Split a script into simple commands; drop comments and ``\\<newline>`` pairs.

        Separators (outside quotes and ``$( )``/``${ }``): newline, ``;``, ``&&``, ``||``, ``|``
        and a lone ``&``. Quoting is kept in the returned texts.

        Raises:
            ServeCommandError: unbalanced quotes.
        """
        cmds: list[str] = []
        buf: list[str] = []
        quote: str | None = None
        depth = 0
        i = 0
        n = len(script)

        def flush() -> None:
            text = "".join(buf).strip()
            if text:
                cmds.append(text)
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
            elif depth == 0 and c in "\n;":
                flush()
            elif depth == 0 and c == "&" and nxt == "&":
                flush()
                i += 2
                continue
            elif depth == 0 and c == "|":
                flush()
                i += 2 if nxt == "|" else 1
                continue
            elif depth == 0 and c == "&" and nxt != ">" and not (buf and buf[-1].endswith((">", "<"))):
                flush()
            else:
                buf.append(c)
            i += 1
        if quote is not None:
            raise ShellScriptError(f"shell script: unbalanced {quote} quote")
        flush()
        return cmds

    # ---- parameter expansion ------------------------------------------------------------

    def lookup(self, name: str) -> str | None:
        """Value of a variable or special parameter, None when unset."""
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
            if c != "$" or not nxt:
                out.append(c)
                i += 1
                continue
            # c == "$"
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
                    self.missing(name)
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
            return literal, True
        name, op, word = m.group(1), m.group(2), m.group(3) or ""
        value = self.lookup(name)
        if op is None:
            if value is None:
                self.missing(name)
                return literal, True
            return value, False
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
            self.missing(name)
            return literal, True
        return value or "", False

    def _arith(self, expr_src: str, literal: str) -> str:
        """Evaluate ``$(( expr ))``; on failure keep ``literal`` and record why."""
        before = len(self.unresolved)
        expanded = self.expand(expr_src, raw=True)
        if len(self.unresolved) > before:
            return literal
        evaluator = _Arith(expanded, self.lookup)
        try:
            return str(evaluator.evaluate())
        except _ArithError as exc:
            for name in evaluator.missing:
                self.missing(name)
            if not evaluator.missing:
                self.note(f"arithmetic {literal} not evaluated: {exc}")
            return literal

    # ---- running a script ---------------------------------------------------------------

    def run_script(self, script: str) -> tuple[list[str], dict[str, str]] | None:
        """Walk the commands of ``script``; return the first wanted command (its words) and the
        environment it runs with, or None when the script never starts one."""
        for cmd in self.split_commands(script):
            expanded = self.expand(cmd)
            try:
                words = shlex.split(expanded, comments=False, posix=True)
            except ValueError as exc:
                raise ShellScriptError(f"shell script: {exc}: {cmd[:80]!r}") from exc
            found = self.run_words(_drop_redirections(words))
            if found is not None:
                return found
        return None

    def command_env(self, extra: Mapping[str, str]) -> dict[str, str]:
        """The environment a command started now would get."""
        env = {k: v for k, v in self.vars.items() if k in self.exported}
        env.update(extra)
        return env

    def run_words(self, words: list[str]) -> tuple[list[str], dict[str, str]] | None:
        """Interpret one simple command (already split into words)."""
        temp: dict[str, str] = {}
        i = 0
        while i < len(words):
            w = words[i]
            if w in _SKIP_WORDS:
                i += 1
                continue
            m = _ASSIGN_RE.match(w)
            if m is not None:
                temp[m.group(1)] = m.group(2)
                i += 1
                continue
            break
        rest = words[i:]
        if not rest:
            self.vars.update(temp)
            return None
        head = rest[0]
        base = head.rsplit("/", 1)[-1]
        if base in _EXPORT_WORDS:
            for arg in rest[1:]:
                if arg.startswith(("-", "+")):
                    continue
                m = _ASSIGN_RE.match(arg)
                if m is not None:
                    self.vars[m.group(1)] = m.group(2)
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
            return self._with_env(temp, None, script=" ".join(rest[1:]))
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


