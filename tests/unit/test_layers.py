"""The package's shape: the import-linter layers contract (run on a temporary copy of the tree,
where a lower module is made to import a higher one), no import circle, thin command modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kubectl_kvreset"
CLI_LIMIT = 250


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """Run ``lint-imports`` with the repository's contract on the package copied under ``tree``."""
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: import-linter is pinned in requirements-dev.txt (make lint installs it)")
    return subprocess.run([str(exe), "--config", str(tree / "setup.cfg"), "--no-cache"], cwd=tree,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the package and of setup.cfg (which holds the contract)."""
    shutil.copytree(PACKAGE, tmp_path / "kubectl_kvreset", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    return tmp_path


def test_contract_holds_on_the_tree(tree: Path) -> None:
    done = lint_imports(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" in done.stdout and "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "broken"), [
    # a pure-core module reaching up to an I/O step
    ("plan.py", "from . import discovery  # noqa", "Layers"),
    # a pure-core module doing I/O through the adapter
    ("tiers.py", "from . import kube  # noqa", "pure core"),
    # an I/O step importing the command line
    ("rollout/restart.py", "from ..cli import options  # noqa", "Layers"),
    # the adapter importing anything above it
    ("kube/api.py", "from .. import report  # noqa", "Layers"),
    # the job importing click's command line
    ("job/__init__.py", "from .. import cli  # noqa", "Layers"),
])
def test_contract_fails_on_an_upward_import(tree: Path, module: str, line: str, broken: str) -> None:
    path = tree / "kubectl_kvreset" / module
    path.write_text(path.read_text() + "\n" + line + "\n")
    done = lint_imports(tree)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout
    broken_lines = [ln for ln in done.stdout.splitlines() if ln.endswith("BROKEN")]
    assert any(broken in ln for ln in broken_lines), done.stdout


def import_circles(top: str, within: str) -> list[list[str]]:
    """The import circles among the modules of ``within`` (a package under the top-level package
    ``top``): each strongly connected component of two or more modules of the graph of direct
    imports (function-local imports included), sorted; found by Tarjan's algorithm."""
    graph = grimp.build_graph(top, cache_dir=None)
    modules = sorted(m for m in graph.modules if m == within or m.startswith(within + "."))
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(modules)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    return sorted(circles)


def test_no_import_circle_in_the_package() -> None:
    assert import_circles("kubectl_kvreset", "kubectl_kvreset") == []


def test_no_import_circle_in_the_simulator() -> None:
    assert import_circles("tests", "tests.sim") == []


def test_a_circle_is_found(tmp_path: Path) -> None:
    # the finder itself: two modules importing each other, one of them inside a function
    pkg = tmp_path / "circled"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("from . import a\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert import_circles("circled", "circled") == [["circled.a", "circled.b"]]
    finally:
        sys.path.remove(str(tmp_path))


def test_command_modules_are_thin() -> None:
    lengths = {p.name: len(p.read_text().splitlines()) for p in sorted((PACKAGE / "cli").glob("*.py"))}
    assert lengths, "no command modules found"
    too_long = {name: n for name, n in lengths.items() if n > CLI_LIMIT}
    assert too_long == {}, f"command modules over {CLI_LIMIT} lines (move the logic below cli/): {too_long}"
