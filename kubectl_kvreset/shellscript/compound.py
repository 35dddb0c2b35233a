"""Following where a simple command stands: inside compound commands (``if``, ``while``, ``for``,
``case`` ...), ``{ }`` groups, ``( )`` subshells and function bodies (POSIX XCU 2.9.4, 2.9.5), or
after ``&&``/``||``, in a pipeline or a background job. There an assignment may run or not, or
in another process, so the reader does not follow it as straight-line code. Pure: the open
regions are kept in a :class:`~.state.ShellState`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .state import ShellState
from .words import ASSIGN_RE, CLOSERS, COMPOUND, FUNC_RE, NAME_RE, SKIP_WORDS


def enter(shell: ShellState, words: list[str], before: str, after: str) -> tuple[list[str], str | None, int]:
    """Track compound commands, groups, subshells and function bodies around one command whose
    words are ``words``, preceded by separator ``before`` and ended by ``after``.

    Returns the words left to run, why assignments in them are not followed as
    straight-line code (None when they are) and how many regions close after it."""
    words = _close_regions(shell, list(words))
    why = _position_reason(before, after) or shell.uncertain()
    words, why = _open_regions(shell, words, why)
    words, pops = _close_subshell(shell, words)
    words = _drop_case_pattern(shell, words)
    while words and words[-1] in (";;", ";&", ";;&"):
        words = words[:-1]
    return words, why, pops


def _close_regions(shell: ShellState, words: list[str]) -> list[str]:
    """Drop the leading closers (``fi``, ``done``, ``esac``, ``}``), each closing a region."""
    while words and (words[0] in CLOSERS or words[0] == "}"):
        if shell.regions:
            shell.regions.pop()
        words = words[1:]
    return words


def _position_reason(before: str, after: str) -> str | None:
    """Why a command between separators ``before`` and ``after`` may not run as straight-line
    code (after ``&&``/``||``, in a pipeline, in the background), or None."""
    if before in ("&&", "||"):
        return f"a command after {before}, which runs or not depending on the one before"
    if before == "|" or after == "|":
        return "a pipeline element, which runs in a subshell"
    if after == "&":
        return "a background job, which runs in a subshell"
    return None


def _open_regions(shell: ShellState, words: list[str], why: str | None) -> tuple[list[str], str | None]:
    """Consume the leading words that open regions (``if``, ``while``, ``for``, ``case``, a
    function definition, ``{``, ``(``) or only continue one (``then``, ``do``, ``else``,
    ``elif``, ``!``). Returns the words left and the reason assignments in them are not
    followed: ``why`` if set, else the first region opened here that has one."""
    while words:
        head = words[0]
        if head in ("then", "do", "else", "elif", "!"):
            words = words[1:]
        elif head in COMPOUND:
            reason = (f"inside a {head} command, whose body the plugin does not follow (it may run "
                      "or not, or more than once)")
            shell.regions.append((COMPOUND[head], reason))
            why = why or reason
            words = _compound_rest(shell, head, words)
        elif _defines_function(words):
            reason, words = _open_function(shell, words)
            why = why or reason
        elif head == "{":
            shell.regions.append(("}", why))
            words = words[1:]
        elif head.startswith("(") and not head.startswith("(("):
            reason = "inside a subshell ( ... ), whose assignments the plugin does not follow"
            shell.regions.append((")", reason))
            why = why or reason
            words = [head[1:], *words[1:]] if head[1:] else words[1:]
        else:
            break
    return words, why


def _compound_rest(shell: ShellState, head: str, words: list[str]) -> list[str]:
    """The words after the compound command keyword ``head`` that may start a command: none
    after ``for NAME``/``select NAME`` (NAME is marked, the loop assigns it), those after ``in``
    for ``case``, else those after the keyword."""
    if head in ("for", "select") and len(words) > 1 and NAME_RE.fullmatch(words[1]):
        shell.mark(words[1], f"{words[1]} is the variable of a {head} loop, which the plugin does not follow")
        return []
    if head == "case":
        return words[words.index("in") + 1:] if "in" in words else []
    return words[1:]


def _defines_function(words: list[str]) -> bool:
    """True when ``words`` start a function definition: ``name()``, ``function name`` or
    ``name ()``."""
    head = words[0]
    return FUNC_RE.match(head) is not None or (head == "function" and len(words) > 1) or (
        len(words) > 1 and words[1] == "()" and NAME_RE.fullmatch(head) is not None)


def _open_function(shell: ShellState, words: list[str]) -> tuple[str, list[str]]:
    """Open the body of the function defined by ``words`` (see :func:`_defines_function`) and
    remember its name; returns the reason its assignments are not followed and the words after
    the header (and its ``()`` and ``{``)."""
    head = words[0]
    func = FUNC_RE.match(head)
    name = func.group(1) if func is not None else words[1] if head == "function" else head
    shell.functions.add(name.removesuffix("()"))
    reason = f"inside the body of function {name.removesuffix('()')}, which the plugin does not follow"
    shell.regions.append(("}", reason))
    words = words[1 if func is not None else 2:]
    if words and words[0] == "()":
        words = words[1:]
    if words and words[0] == "{":
        words = words[1:]
    return reason, words


def _close_subshell(shell: ShellState, words: list[str]) -> tuple[list[str], int]:
    """A command ending in ``)`` inside an open subshell closes it after the command: drop the
    ``)`` and count one region to close (not for a ``$(...)`` word)."""
    if words and shell.regions and shell.regions[-1][0] == ")" and words[-1].endswith(")") and "$(" not in words[-1]:
        return ([*words[:-1], words[-1][:-1]] if words[-1][:-1] else words[:-1]), 1
    return words, 0


def _drop_case_pattern(shell: ShellState, words: list[str]) -> list[str]:
    """Inside a ``case``: drop a pattern ``PAT)`` before the command of a branch (the words up
    to the first ending in ``)``, unless an assignment or a skipped word comes first)."""
    if words and any(closer == "esac" for closer, _ in shell.regions):
        for k, w in enumerate(words):
            if w.endswith(")") and "$(" not in w and "=" not in w:
                return words[k + 1:]
            if ASSIGN_RE.match(w) or w in SKIP_WORDS:
                break
    return words


def mark_words(shell: ShellState, words: Sequence[str], why: str) -> None:
    """Mark every variable a command run where assignments are not followed may assign:
    each ``NAME=`` word (prefix, ``export``, ``declare``, ``local`` alike)."""
    for w in words:
        m = ASSIGN_RE.match(w)
        if m is not None:
            shell.mark(m.group(1), f"{m.group(1)} is assigned {why}")
