"""The builtins that assign variables or the positional parameters other than by ``NAME=value``
(bash manual, "Shell Builtin Commands"): ``source``/``.``, ``read``, ``mapfile``, ``printf -v``,
``getopts``, ``let``/``((...))``, ``declare -n``, ``export -n``, ``unset``, ``set``, ``shift``.
The reader does not run them: their targets are marked unevaluated, or every later read when
the target cannot be known. Pure: the marks go to a :class:`~.state.ShellState`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .state import ShellState
from .words import NAME_RE

#: ``handler(shell, base, args, why)``: True when handled, False when ``base`` is not taken as
#: an assigning builtin, None to let a function of that name decide
_Handler = Callable[[ShellState, str, list[str], str | None], bool | None]


def assigning_builtin(shell: ShellState, base: str, rest: Sequence[str], why: str | None) -> bool:
    """Handle a builtin that assigns variables or positional parameters other than by
    ``NAME=value``; True when ``base`` (the command's name, ``rest`` its words) is one, or is a
    function defined earlier (its body was walked where it was defined, its assignments marked
    there). ``why``: the reason the command's assignments are not followed, or None.

    Their targets are marked unevaluated (:meth:`~.state.ShellState.mark`), or every later read
    (:attr:`~.state.ShellState.opaque`, :attr:`~.state.ShellState.positional_unknown`) when the
    target cannot be known."""
    handler = _HANDLERS.get(base)
    if handler is None and base.startswith("(("):
        handler = _let
    if handler is not None:
        handled = handler(shell, base, list(rest[1:]), why)
        if handled is not None:
            return handled
    return base in shell.functions


def _where(why: str | None) -> str:
    """`` (why)`` to end a reason with, or nothing."""
    return f" ({why})" if why else ""


def _source(shell: ShellState, base: str, args: list[str], why: str | None) -> bool | None:
    """``source FILE``/``. FILE``: the file may assign anything, positional parameters too."""
    shell.make_opaque(f"{base} {' '.join(args)[:60]} runs a file the plugin does not read, which "
                      "may assign any variable")
    shell.positional_unknown = shell.positional_unknown or shell.opaque
    return True


def _read_targets(base: str, args: list[str]) -> list[str]:
    """The variables ``read``/``mapfile``/``readarray`` with ``args`` assign: the names among
    the operands and the array of ``read -a``; ``REPLY``/``MAPFILE`` when none is named."""
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
        if NAME_RE.fullmatch(a):
            targets.append(a)
        j += 1
    return targets or (["REPLY"] if base == "read" else ["MAPFILE"])


def _read(shell: ShellState, base: str, args: list[str], why: str | None) -> bool | None:
    """``read``, ``mapfile``, ``readarray``: their targets get input the reader does not see."""
    for name in _read_targets(base, args):
        shell.mark(name, f"{name} is set by {base}, which reads input the plugin does not see{_where(why)}")
    return True


def _printf(shell: ShellState, base: str, args: list[str], why: str | None) -> bool | None:
    """``printf -v NAME``; a ``printf`` without ``-v`` is an ordinary command (False)."""
    for j, a in enumerate(args[:-1]):
        if a == "-v":
            shell.mark(args[j + 1], f"{args[j + 1]} is set by printf -v, which the plugin does not "
                                    f"evaluate{_where(why)}")
            return True
    return False


def _getopts(shell: ShellState, base: str, args: list[str], why: str | None) -> bool | None:
    """``getopts OPTSTRING NAME``: NAME, ``OPTARG`` and ``OPTIND``."""
    for name in [*(args[1:2] if len(args) > 1 else []), "OPTARG", "OPTIND"]:
        shell.mark(name, f"{name} is set by getopts, which the plugin does not follow{_where(why)}")
    return True


def _let(shell: ShellState, base: str, args: list[str], why: str | None) -> bool | None:
    """``let EXPR``, ``((EXPR))``: every name in the expression may be assigned."""
    text = " ".join([base, *args])
    for name in dict.fromkeys(NAME_RE.findall(text.removeprefix("let"))):
        shell.mark(name, f"{name} may be assigned by the arithmetic command {text[:60]}, which the plugin "
                         f"does not follow{_where(why)}")
    return True


def _name_reference(shell: ShellState, base: str, args: list[str], why: str | None) -> bool | None:
    """``declare -n``/``typeset -n``/``local -n``: any variable may be assigned through the
    reference; without ``-n`` not handled here (None)."""
    if any(a.startswith("-") and "n" in a[1:] for a in args):
        shell.make_opaque(f"{base} {' '.join(args)[:60]} makes a name reference, through which any "
                          "variable may be assigned")
        return True
    return None


def _export_n(shell: ShellState, base: str, args: list[str], why: str | None) -> bool | None:
    """``export -n NAME``: NAME is changed; without ``-n`` not handled here (None)."""
    if not any(a.startswith("-") and "n" in a[1:] for a in args):
        return None
    for a in args:
        name = a.split("=", 1)[0]
        if not a.startswith("-") and NAME_RE.fullmatch(name):
            shell.mark(name, f"{name} is changed by export -n, which the plugin does not follow")
    return True


def _unset(shell: ShellState, base: str, args: list[str], why: str | None) -> bool | None:
    """``unset NAME...``: followed in straight-line code (not ``-f``), else the names are marked."""
    for name in [a for a in args if NAME_RE.fullmatch(a)]:
        if why is not None:
            shell.mark(name, f"{name} is unset {why}")
        elif "-f" not in args:
            shell.vars.pop(name, None)
            shell.exported.discard(name)
    return True


def _set(shell: ShellState, base: str, args: list[str], why: str | None) -> bool | None:
    """``set``: options are skipped (``-o NAME`` with its name); an operand or ``--`` resets the
    positional parameters."""
    j = 0
    while j < len(args):
        if args[j] == "--" or not args[j].startswith(("-", "+")):
            shell.positional_unknown = shell.positional_unknown or (
                "the positional parameters are reset by set, which the plugin does not follow")
            break
        j += 2 if args[j].endswith("o") else 1
    return True


def _shift(shell: ShellState, base: str, args: list[str], why: str | None) -> bool | None:
    """``shift``: the positional parameters are unknown from now on."""
    shell.positional_unknown = shell.positional_unknown or (
        "the positional parameters are shifted by shift, which the plugin does not follow")
    return True


_HANDLERS: dict[str, _Handler] = {
    "source": _source, ".": _source,
    "read": _read, "mapfile": _read, "readarray": _read,
    "printf": _printf,
    "getopts": _getopts,
    "let": _let,
    "declare": _name_reference, "typeset": _name_reference, "local": _name_reference,
    "export": _export_n,
    "unset": _unset,
    "set": _set,
    "shift": _shift,
}
