"""Parameter, arithmetic and quote expansion of one command's text (POSIX XCU 2.6 "Word
Expansions"): ``$VAR``, ``${...}``, ``$((...))``, ``$'...'``; command substitution is left as
written. The result is text for :func:`shlex.split`, escaped so that it splits as bash would.
Pure: names are read from a :class:`~.state.ShellState`, whose findings record what was not
evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .arith import Arith, ArithError
from .state import ShellState
from .words import (
    NAME_RE,
    ansi_c_decode,
    ansi_c_end,
    escape_dquoted,
    escape_literal,
    escape_unquoted,
    matching,
    unquote_word,
)

#: ``${NAME}``, ``${NAME-word}`` and the other operators ``:-``, ``=``, ``:=``, ``+``, ``:+``, ``?``, ``:?``
_BRACE_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#])(?:(:?[-=+?])(.*))?", re.DOTALL | re.ASCII)
#: a name an arithmetic expression assigns: ``N=``, ``N+=`` (and the other operators), ``N++``, ``--N``
_ARITH_ASSIGN_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:[-+*/%]?=(?!=)|\+\+|--)"
                              r"|(?:\+\+|--)\s*([A-Za-z_][A-Za-z0-9_]*)")


def expand(shell: ShellState, text: str, raw: bool = False) -> str:
    """Expand ``$VAR``, ``${...}``, ``$((...))`` in ``text`` outside single quotes.

    With ``raw`` the values are inserted as they are (used inside arithmetic and for
    ``${VAR:-word}`` words); otherwise they are escaped so that :func:`shlex.split` reads
    them as bash would (word splitting of unquoted values only). Unresolvable references
    stay literal and are recorded in ``shell``.
    """
    return _Expander(shell, text, raw).run()


class _Expander:
    """One left-to-right pass over ``text``: the output so far, the position and the open
    quote (``'`` or ``"``; quotes are not tracked with ``raw``)."""

    def __init__(self, shell: ShellState, text: str, raw: bool) -> None:
        self.shell = shell
        self.text = text
        self.raw = raw
        self.out: list[str] = []
        self.i = 0
        self.n = len(text)
        self.quote: str | None = None

    def run(self) -> str:
        """Expand the whole text."""
        while self.i < self.n:
            c = self.text[self.i]
            nxt = self.text[self.i + 1] if self.i + 1 < self.n else ""
            if self.quote == "'":
                if c == "'":
                    self.quote = None
                self._copy(c, 1)
            elif c == "\\":
                self._copy(nxt if self.quote == '"' and nxt in "$`" else c + nxt, 2)
            elif c == '"' and not self.raw:
                self.quote = None if self.quote == '"' else '"'
                self._copy(c, 1)
            elif c == "'" and self.quote is None and not self.raw:
                self.quote = "'"
                self._copy(c, 1)
            elif c == "`" and not self.raw and self._backquoted():
                pass
            elif c != "$" or not nxt:
                self._copy(c, 1)
            else:
                self._dollar(nxt)
        return "".join(self.out)

    def _copy(self, text: str, advance: int) -> None:
        """Copy ``text`` as it is and move ``advance`` characters on."""
        self.out.append(text)
        self.i += advance

    def _put(self, value: str, literal: bool = False) -> None:
        """Insert an expansion's ``value``: as it is with ``raw``; else escaped for the open
        quote, as one word when ``literal`` (a construct kept as written), or split on
        whitespace like an unquoted expansion."""
        if self.raw:
            self.out.append(value)
        elif self.quote == '"':
            self.out.append(escape_dquoted(value))
        elif literal:
            self.out.append(escape_literal(value))
        else:
            self.out.append(escape_unquoted(value))

    def _substitution(self, literal: str) -> None:
        """A command substitution, ```...``` or ``$(...)``: not evaluated, kept as written."""
        self.shell.note(f"command substitution {literal} not evaluated")
        self.shell.left_as_written(literal, f"command substitution {literal} is not evaluated (it runs in the pod)")
        self._put(literal, literal=True)

    def _backquoted(self) -> bool:
        """```...``` at the position; False (nothing consumed) when it is not closed."""
        end = self.text.find("`", self.i + 1)
        if end == -1:
            return False
        self._substitution(self.text[self.i:end + 1])
        self.i = end + 1
        return True

    def _dollar(self, nxt: str) -> None:
        """A ``$`` followed by ``nxt``: ANSI-C quoting, arithmetic, command substitution,
        ``${...}``, a name or a special parameter; else a literal ``$``."""
        if nxt == "'" and self.quote is None and not self.raw:
            end = ansi_c_end(self.text, self.i + 2)
            if end != -1:
                self._put(ansi_c_decode(self.text[self.i + 2:end]), literal=True)
                self.i = end + 1
                return
        if self.text.startswith("$((", self.i):
            self._enclosed("((", "))", self._arithmetic)
        elif nxt == "(":
            self._enclosed("(", ")", lambda inner, literal: self._substitution(literal))
        elif nxt == "{":
            self._enclosed("{", "}", self._braced)
        elif (m := NAME_RE.match(self.text, self.i + 1)) is not None:
            name = m.group(0)
            value = self.shell.lookup(name)
            if value is None:
                self.shell.record_unset(name, "$" + name)
                self._put("$" + name, literal=True)
            else:
                self._put(value)
            self.i = m.end()
        elif (nxt.isascii() and nxt.isdigit()) or nxt in "@*#":
            value = self.shell.lookup(nxt)
            self._put(value if value is not None else "")
            self.i += 2
        else:
            self._copy("$", 1)

    def _enclosed(self, open_s: str, close_s: str, handle: Callable[[str, str], None]) -> None:
        """``$`` + ``open_s`` ... ``close_s`` at the position: ``handle(inner, literal)`` with the
        text between and the whole construct; an unbalanced one leaves the ``$`` literal."""
        start = self.i + 1 + len(open_s)
        end = matching(self.text, start, open_s, close_s)
        if end == -1:
            self._copy("$", 1)
            return
        handle(self.text[start:end], self.text[self.i:end + len(close_s)])
        self.i = end + len(close_s)

    def _arithmetic(self, expr_src: str, literal: str) -> None:
        """``$((expr_src))``: its value, or the construct as written when it cannot be evaluated."""
        self._put(arith(self.shell, expr_src, literal), literal=True)

    def _braced(self, inner: str, literal: str) -> None:
        """``${inner}``: see :func:`brace`."""
        self._put(*brace(self.shell, inner, literal))


def brace(shell: ShellState, inner: str, literal: str) -> tuple[str, bool]:
    """Expand the inside of ``${...}`` (``inner``; ``literal`` is the whole construct); returns
    (value, is_literal_fallback). ``${#NAME}`` is the length of a set variable; anything else
    not understood is kept as written."""
    m = _BRACE_RE.fullmatch(inner)
    if m is None:
        if inner.startswith("#") and NAME_RE.fullmatch(inner[1:]):
            value = shell.lookup(inner[1:])
            if value is not None:
                return str(len(value)), False
        shell.note(f"parameter expansion {literal} not understood")
        shell.left_as_written(literal, f"parameter expansion {literal} is not understood here")
        return literal, True
    name, op, word = m.group(1), m.group(2), m.group(3) or ""
    value = shell.lookup(name)
    if op is None:
        if value is None:
            shell.record_unset(name, literal)
            return literal, True
        return value, False
    if value is None and name in shell.external:
        shell.record_unset(name, literal)
        return literal, True
    return _brace_operator(shell, name, op, word, value, literal)


def _brace_operator(shell: ShellState, name: str, op: str, word: str, value: str | None,
                    literal: str) -> tuple[str, bool]:
    """``${NAME<op>word}`` with NAME's ``value`` (None when unset): ``-``/``=`` (the default,
    ``=`` assigns it), ``+`` (the alternative) and ``?`` (an error when unset, kept as written);
    with ``:`` a null value counts as unset (POSIX XCU 2.6.2 "Parameter Expansion")."""
    unset_or_null = value is None or (op.startswith(":") and value == "")
    kind = op[-1]
    if kind in "-=":
        if unset_or_null:
            default = unquote_word(expand(shell, word, raw=True))
            if kind == "=":
                shell.vars[name] = default
            return default, False
        return value or "", False
    if kind == "+":
        return ("" if unset_or_null else unquote_word(expand(shell, word, raw=True))), False
    # "?": error when unset
    if unset_or_null:
        shell.record_unset(name, literal)
        return literal, True
    return value or "", False


def arith(shell: ShellState, expr_src: str, literal: str) -> str:
    """Evaluate ``$(( expr ))``; on failure keep ``literal`` and record why. A variable the
    expression assigns (``N=1``, ``N+=1``, ``N++``) is marked unevaluated."""
    for m in _ARITH_ASSIGN_RE.finditer(expr_src):
        name = m.group(1) or m.group(2)
        shell.mark(name, f"{name} is assigned by the arithmetic {literal}, which the plugin does not follow")
        shell.left_as_written(literal, f"arithmetic {literal} assigns a variable, which the plugin does not follow")
    if any(lit == literal for lit, _ in shell.unevaluated):
        return literal
    before = len(shell.unresolved)
    expanded = expand(shell, expr_src, raw=True)
    if len(shell.unresolved) > before:
        shell.left_as_written(literal, f"arithmetic {literal} uses a variable that is not set")
        return literal
    evaluator = Arith(expanded, shell.lookup)
    try:
        return str(evaluator.evaluate())
    except ArithError as exc:
        for name in evaluator.missing:
            shell.missing(name)
        if not evaluator.missing:
            shell.note(f"arithmetic {literal} not evaluated: {exc}")
        shell.left_as_written(literal, f"arithmetic {literal} is not evaluated: {exc}")
        return literal
