"""Sizes a reader can hold: every module of the package and of the simulator under
:data:`MODULE_LINES` lines, every function under :data:`FUNCTION_LINES` (from its ``def``,
docstring included). A module or function over them is split where a reader gains, not
exempted here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE_LINES = 600
FUNCTION_LINES = 100
TREES = ("kubectl_kvreset", "tests/sim")


def sources() -> list[Path]:
    """The Python files of :data:`TREES`, sorted."""
    return sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py") if "__pycache__" not in p.parts)


def oversized(path: Path, root: Path = ROOT) -> list[str]:
    """What in ``path`` is over the limits, as ``"file: N lines"`` and ``"file:line name: N lines"``
    (``file`` relative to ``root``)."""
    text = path.read_text(encoding="utf-8")
    rel = path.relative_to(root).as_posix()
    found = []
    lines = len(text.splitlines())
    if lines > MODULE_LINES:
        found.append(f"{rel}: {lines} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > FUNCTION_LINES:
                found.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    return found


def test_every_module_and_function_under_the_limits() -> None:
    over = [item for path in sources() for item in oversized(path)]
    assert over == [], "split these where a reader gains:\n" + "\n".join(over)


@pytest.mark.parametrize(("body", "expected"), [
    ("x = 1\n" * (MODULE_LINES + 1), ": 601 lines"),
    ("def f():\n" + "    x = 1\n" * FUNCTION_LINES, "f: 101 lines"),
])
def test_the_finder_sees_an_oversized_module_and_function(tmp_path: Path, body: str, expected: str) -> None:
    path = tmp_path / "probe.py"
    path.write_text(body)
    assert any(item.endswith(expected) for item in oversized(path, tmp_path))
