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

The modules: :mod:`.words` (patterns, quoting, ``bash -c`` arguments), :mod:`.splitting` (a
script into commands and separators), :mod:`.state` (variables and findings), :mod:`.expansion`
with :mod:`.arith` (``$...`` expansion), :mod:`.compound` (the regions assignments are not
followed in), :mod:`.builtins` (the builtins that assign otherwise); :class:`Shell` runs them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from . import splitting
from .builtins import assigning_builtin
from .compound import enter, mark_words
from .expansion import expand
from .state import ShellState, Wanted
from .words import (
    ASSIGN_RE,
    EXPORT_WORDS,
    FUNC_HEADER_RE,
    SHELLS,
    SKIP_WORDS,
    ShellScriptError,
    ansi_c_decode,
    drop_redirections,
    shell_c_script,
)

__all__ = ["Shell", "ShellScriptError", "Wanted", "ansi_c_decode", "shell_c_script"]

#: what :meth:`Shell.run_script` and :meth:`Shell.run_words` find: the wanted command's words
#: and the environment it runs with
Found = tuple[list[str], dict[str, str]]


class Shell(ShellState):
    """State of the tiny shell reader: variables, positional parameters, findings.

    ``env``: the process environment; ``wanted``: which simple command to stop at (its words
    and environment are what :meth:`run_words` and :meth:`run_script` return); ``external``:
    names set in the process from a source not in ``env`` (a ``valueFrom`` ConfigMap or Secret
    key): while not set by the script, ``${NAME:-word}`` is not taken as ``word`` but left as
    written (the source's value wins over the default in the real process).

    Raises (from its methods):
        ShellScriptError: unbalanced quotes, an unreadable arithmetic expansion.
    """

    def child(self, positional: Sequence[str]) -> Shell:
        """A nested shell (``bash -c`` inside a script) that sees the exported variables."""
        sub = Shell({k: v for k, v in self.vars.items() if k in self.exported}, positional, wanted=self.wanted,
                    external=self.external)
        sub.unresolved = self.unresolved
        sub.notes = self.notes
        sub.unevaluated = self.unevaluated
        sub.opaque = self.opaque
        return sub

    split_commands = staticmethod(splitting.split_commands)
    split_list = staticmethod(splitting.split_list)

    def expand(self, text: str, raw: bool = False) -> str:
        """Expand ``$VAR``, ``${...}``, ``$((...))`` in ``text`` outside single quotes.

        With ``raw`` the values are inserted as they are (used inside arithmetic and for
        ``${VAR:-word}`` words); otherwise they are escaped so that :func:`shlex.split` reads
        them as bash would (word splitting of unquoted values only). Unresolvable references
        stay literal and are recorded.
        """
        return expand(self, text, raw)

    # ---- running a script ---------------------------------------------------------------

    def run_script(self, script: str) -> Found | None:
        """Walk the commands of ``script``; return the first wanted command (its words) and the
        environment it runs with, or None when the script never starts one."""
        for cmd, before, after in splitting.split_list(script):
            cmd = self._function_header(cmd)
            words, why, pops = enter(self, drop_redirections(self._words(cmd)), before, after)
            try:
                found = self.run_words(words, why)
                if found is not None:
                    return found
                if why is not None:
                    mark_words(self, words, why)
            finally:
                for _ in range(pops):
                    if self.regions:
                        self.regions.pop()
        return None

    def _function_header(self, cmd: str) -> str:
        """A command starting with a function header (``name() {``, ``function name {``) opens
        the function's body before it is expanded, so its ``$1``... are the call's; returns the
        text after the header."""
        header = FUNC_HEADER_RE.match(cmd)
        if header is None:
            return cmd
        name = header.group(1) or header.group(2)
        self.functions.add(name)
        self.regions.append(("}", f"inside the body of function {name}, which the plugin does not follow"))
        return cmd[header.end():]

    def _words(self, cmd: str) -> list[str]:
        """The words of one command's text after expansion and quote removal."""
        expanded = self.expand(cmd)
        try:
            return shlex.split(expanded, comments=False, posix=True)
        except ValueError as exc:
            raise ShellScriptError(f"shell script: {exc}: {cmd[:80]!r}") from exc

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

    def run_words(self, words: list[str], why: str | None = None) -> Found | None:
        """Interpret one simple command (already split into words); ``why``: the reason its
        assignments are not followed as straight-line code (see :func:`.compound.enter`), or None."""
        temp, rest = self._prefix_assignments(words)
        if not rest:
            self.vars.update(temp)
            self.fresh.update(temp)
            return None
        base = rest[0].rsplit("/", 1)[-1]
        if assigning_builtin(self, base, rest, why):
            return None
        if base in EXPORT_WORDS:
            self._export(base, rest[1:])
            return None
        if base == "exec":
            return self._with_env(temp, _exec_command(rest))
        if base == "env":
            return self._with_env(temp, _env_command(rest, temp))
        if base == "eval":
            return self._eval(temp, rest)
        if base in SHELLS:
            return self._nested_shell(temp, rest)
        if self.wanted(rest):
            return rest, self.command_env(temp)
        return None

    def _prefix_assignments(self, words: list[str]) -> tuple[dict[str, str], list[str]]:
        """The ``NAME=value`` words before the command (skipping ``then``, ``time``, ``nohup``
        ...) as the assignments they make, and the command's words after them."""
        temp: dict[str, str] = {}
        i = 0
        while i < len(words):
            w = words[i]
            if w in SKIP_WORDS:
                i += 1
                continue
            m = ASSIGN_RE.match(w)
            if m is None:
                break
            temp[m.group(1)] = self._assigned(w, m, temp)
            i += 1
        return temp, words[i:]

    def _export(self, base: str, args: Sequence[str]) -> None:
        """``export``, ``declare``, ``typeset``, ``readonly``, ``local`` with ``args``: assign
        each ``NAME=value`` (exported by ``export``, ``declare``, ``typeset``); ``export NAME``
        exports NAME. Options are skipped."""
        for arg in args:
            if arg.startswith(("-", "+")):
                continue
            m = ASSIGN_RE.match(arg)
            if m is not None:
                self.vars[m.group(1)] = self._assigned(arg, m, {})
                self.fresh.add(m.group(1))
                if base in ("export", "declare", "typeset"):
                    self.exported.add(m.group(1))
            elif base == "export":
                self.exported.add(arg)

    def _eval(self, temp: dict[str, str], rest: list[str]) -> Found | None:
        """``eval WORDS``: the words are read again as a script; what that script assigns is
        not followed (every later read is unevaluated unless the wanted command is found)."""
        found = self._with_env(temp, None, script=" ".join(rest[1:]))
        if found is None:
            self.make_opaque("eval may assign any variable, and the plugin does not follow what "
                             f"it assigns (eval {' '.join(rest[1:])[:60]})")
        return found

    def _nested_shell(self, temp: dict[str, str], rest: list[str]) -> Found | None:
        """``bash -c SCRIPT ...`` (any of the known shells): SCRIPT read by a :meth:`child` that
        sees the exported variables and ``temp``; a shell running a file is not followed."""
        script, positional = shell_c_script(rest)
        if script is None:
            return None
        sub = self.child(positional)
        sub.vars.update(temp)
        sub.exported.update(temp)
        return sub.run_script(script)

    def _with_env(self, temp: dict[str, str], words: list[str] | None, script: str | None = None) -> Found | None:
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


def _exec_command(rest: Sequence[str]) -> list[str]:
    """The command ``exec [-cl] [-a NAME] COMMAND...`` replaces the shell with."""
    j = 1
    while j < len(rest) and rest[j].startswith("-"):
        j += 2 if rest[j] == "-a" else 1
    return list(rest[j:])


def _env_command(rest: Sequence[str], temp: dict[str, str]) -> list[str]:
    """The command ``env [-u NAME] [NAME=value...] COMMAND...`` runs; its ``NAME=value`` words
    are added to ``temp`` (as given: env does not expand ``+=``)."""
    j = 1
    while j < len(rest):
        arg = rest[j]
        m = ASSIGN_RE.match(arg)
        if m is not None:
            temp[m.group(1)] = m.group(2)
        elif arg in ("-u", "--unset"):
            j += 1
        elif not arg.startswith("-"):
            break
        j += 1
    return list(rest[j:])
