"""What the shell reader knows while it walks a script: variables, exports, positional
parameters, the open regions whose assignments it does not follow, and its findings (unset
variables, notes, constructs left as written). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

#: ``wanted(words)``: True for the command the reader looks for (its words after expansion).
Wanted = Callable[[Sequence[str]], bool]


class ShellState:
    """State of the tiny shell reader and the records it keeps; :class:`~kubectl_kvreset.shellscript.Shell`
    adds expansion and running commands.

    ``env``: the process environment; ``positional``: ``$1...``; ``wanted``: which simple
    command to stop at; ``external``: names set in the process from a source not in ``env``.
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

    def make_opaque(self, reason: str) -> None:
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

    def record_unset(self, name: str, literal: str) -> None:
        """An unset variable ``name`` written as ``literal``: recorded as unresolved and as
        left as written (its value may come from the image or a source not read)."""
        self.missing(name)
        self.left_as_written(literal, f"variable {name} is not set in the container's spec (its value may "
                                      "come from the image's environment or a source not read)")

    def uncertain(self) -> str | None:
        """Why an assignment now is not followed (the innermost open region's), or None."""
        for _, why in reversed(self.regions):
            if why is not None:
                return why
        return None

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
