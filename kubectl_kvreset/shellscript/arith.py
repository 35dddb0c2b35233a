"""Integer arithmetic of ``$(( ... ))``: ``+ - * / %``, parentheses and unary signs, the way bash
evaluates them (bash manual, "Shell Arithmetic"). Pure: names are read through a callable.
"""

from __future__ import annotations

import re
from collections.abc import Callable


class ArithError(ValueError):
    """An arithmetic expression that cannot be evaluated (unset name, syntax, division by 0)."""


class Arith:
    """Recursive-descent evaluator of integer ``+ - * / %`` with parentheses and unary signs.

    Names are looked up in ``lookup`` (bash semantics for a set name; an unset name raises
    :class:`ArithError` so the caller can report it instead of silently using 0).
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
            raise ArithError("unexpected end of expression")
        self.pos += 1
        return tok

    def evaluate(self) -> int:
        """Evaluate the whole expression; raises :class:`ArithError`."""
        if not self.tokens:
            return 0
        value = self._sum()
        if self._peek() is not None:
            raise ArithError(f"unexpected token {self._peek()!r}")
        if self.missing:
            raise ArithError("unset: " + ",".join(self.missing))
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
                    raise ArithError("division by 0")
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
                raise ArithError(f"{text}={raw!r} is not an integer") from exc
        if text == "(":
            value = self._sum()
            if self._take() != ("op", ")"):
                raise ArithError("missing )")
            return value
        raise ArithError(f"unexpected {text!r}")
