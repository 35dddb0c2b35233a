"""No shell command string is ever built from data: every exec and subprocess call in the
package passes an argv list, and no list passed to exec starts a shell with ``-c`` followed by
anything but a constant."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kubectl_kvreset"
SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "zsh", "ash", "dash"}
EXEC_CALLS = {"exec_command", "system", "popen", "Popen", "run", "call", "check_call", "check_output",
              "getoutput", "getstatusoutput", "spawnl", "execv", "execvp"}


def calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in EXEC_CALLS:
                yield name, node


def is_string_built_from_data(node: ast.AST) -> bool:
    """An f-string, a concatenation, a %-format or .format() involving a non-constant."""
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        sides = (node.left, node.right)
        stringy = any(isinstance(x, ast.JoinedStr) or (isinstance(x, ast.Constant) and isinstance(x.value, str))
                      for x in sides)
        return stringy and not all(isinstance(x, ast.Constant) for x in sides)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "join"):
        return True
    return False


def test_no_exec_or_subprocess_takes_a_built_string() -> None:
    offenders: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for name, node in calls(tree):
            for arg in list(node.args) + [k.value for k in node.keywords
                                          if k.arg in ("args", "command", "argv", "cmd")]:
                if is_string_built_from_data(arg):
                    offenders.append(f"{path.name}:{node.lineno} {name}() gets a string built from data")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    offenders.append(f"{path.name}:{node.lineno} {name}(shell=...)")
            for arg in node.args:
                if isinstance(arg, (ast.List, ast.Tuple)) and arg.elts:
                    first = arg.elts[0]
                    if isinstance(first, ast.Constant) and first.value in SHELLS:
                        rest = arg.elts[1:]
                        if any(not isinstance(e, ast.Constant) for e in rest):
                            offenders.append(f"{path.name}:{node.lineno} {name}() runs a shell with data")
    assert offenders == []


def test_the_checker_catches_what_it_should() -> None:
    bad = ast.parse('kube.exec_command(ns, pod, c, f"rm -rf {root}")\n'
                    'subprocess.run("ls " + path, shell=True)\n'
                    'kube.exec_command(ns, pod, c, ["sh", "-c", cmd])\n')
    found = []
    for name, node in calls(bad):
        found.append(name)
        args = list(node.args)
        assert any(is_string_built_from_data(a) for a in args) or any(
            isinstance(a, ast.List) and not isinstance(a.elts[-1], ast.Constant) for a in args)
    assert found == ["exec_command", "run", "exec_command"]


def test_every_exec_argv_is_a_list() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for name, node in calls(tree):
            if name == "exec_command" and len(node.args) >= 4:
                assert not isinstance(node.args[3], (ast.Constant, ast.JoinedStr, ast.BinOp)), \
                    f"{path.name}:{node.lineno}"
