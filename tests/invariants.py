"""A pytest plugin (``-p tests.invariants`` in setup.cfg) that checks what the CLI prints
across the whole end-to-end suite, on every test worker.

Every run of the built CLI through :meth:`tests.simctl.SimCluster.run` appends one JSON line
(arguments, exit code, stdout, stderr) to a file per process under ``$KVRESET_INVARIANTS_DIR``
(:func:`record`). At the end of the session the controlling process (the only one under
pytest-xdist, or the single process without it) reads every file and checks:

- no row with ``result`` ``emptied`` has a non-empty ``left`` or ``unconfirmed`` list;
- no row whose ``verify`` found an engine warm (``clear --verify``) is ``emptied``, or shows
  ``emptied`` for a tier it names warm, or came with exit code 0;
- no printed text (stdout, stderr, every row's message) matches :data:`FORBIDDEN`: a Python
  ``None``, a repr (``object at 0x``, ``{'``) or ``exited ?``;
- when the whole suite ran (no paths other than ``tests``/``tests/e2e``, no ``-k``, no marker
  expression other than ``not peers``): at least :data:`MIN_ROWS` rows were seen, and every
  result kind of :data:`REQUIRED_RESULTS` among them.

A violation fails the session (exit status 1) with the offending lines printed.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

ENV = "KVRESET_INVARIANTS_DIR"
#: Text the CLI must never print.
FORBIDDEN = re.compile(r"\bNone\b|object at 0x|exited \?|\{'")
#: Fewest rows the whole suite must show for the check to count.
MIN_ROWS = 200
#: ``(kind, result)`` pairs the whole suite must show at least once.
REQUIRED_RESULTS = frozenset({
    ("CacheReset", "emptied"), ("CacheReset", "unconfirmed"), ("CacheReset", "partial"),
    ("CacheReset", "busy"), ("CacheReset", "dev mode off"), ("CacheReset", "failed"),
    ("FsTierClear", "emptied"), ("FsTierClear", "refused"),
})


def record(args: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
    """Append one CLI run to this process's file under ``$KVRESET_INVARIANTS_DIR`` (nothing
    when it is unset, e.g. the demo or the benchmarks)."""
    where = os.environ.get(ENV)
    if not where:
        return
    line = json.dumps({"args": list(args), "rc": returncode, "stdout": stdout, "stderr": stderr})
    with open(Path(where) / f"{os.getpid()}.jsonl", "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def runs(where: Path) -> Iterator[dict[str, Any]]:
    """Every recorded run under ``where``."""
    for path in sorted(where.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield json.loads(line)


def rows_of(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows a run printed with ``-o json`` (none for other formats or non-JSON output)."""
    if "json" not in run["args"]:
        return []
    try:
        doc = json.loads(run["stdout"])
    except ValueError:
        return []
    items = doc if isinstance(doc, list) else [doc]
    return [r for r in items if isinstance(r, dict) and "kind" in r]


def check(where: Path) -> tuple[list[str], int, set[tuple[str, str]]]:
    """``(violations, rows seen, (kind, result) pairs seen)`` over every run under ``where``."""
    problems: list[str] = []
    count = 0
    seen: set[tuple[str, str]] = set()
    for run in runs(where):
        cmd = " ".join(run["args"])
        for stream in ("stdout", "stderr"):
            for line in run[stream].splitlines():
                if FORBIDDEN.search(line):
                    problems.append(f"kvreset {cmd}: {stream} prints {line.strip()[:300]!r}")
        for row in rows_of(run):
            count += 1
            result = row.get("result")
            if isinstance(result, str):
                seen.add((str(row["kind"]), result))
            if result == "emptied" and (row.get("left") or row.get("unconfirmed")):
                problems.append(f"kvreset {cmd}: row {row.get('pod') or row.get('volume')} is emptied with "
                                f"left={row.get('left')} unconfirmed={row.get('unconfirmed')}")
            verify = row.get("verify")
            if isinstance(verify, str) and "warm:" in verify:
                kinds = [lt.get("tier") for lt in row.get("left") or [] if "canary" in str(lt.get("reason"))]
                if result == "emptied" or run["rc"] == 0 or any(row.get(k) == "emptied" for k in kinds):
                    problems.append(f"kvreset {cmd}: row {row.get('pod')} is verified warm ({verify}) but says "
                                    f"result={result} exit={run['rc']} " + " ".join(f"{k}={row.get(k)}" for k in kinds))
            message = row.get("message")
            if isinstance(message, str) and FORBIDDEN.search(message):
                problems.append(f"kvreset {cmd}: message {message[:300]!r}")
    return problems, count, seen


def whole_suite(config: pytest.Config) -> bool:
    """True when this session runs the whole parallel suite (``make test``'s first phase or a
    plain ``pytest``), so the coverage figures mean something."""
    args = [a.rstrip("/") for a in config.args]
    plain = all(a in ("tests", "tests/e2e", str(config.rootpath), str(config.rootpath / "tests")) for a in args)
    opt = config.option
    markexpr = (getattr(opt, "markexpr", "") or "").strip()
    return (plain and not getattr(opt, "keyword", "") and markexpr in ("", "not peers")
            and not getattr(opt, "lf", False) and not getattr(opt, "maxfail", 0)
            and not getattr(opt, "deselect", None))


def pytest_configure(config: pytest.Config) -> None:
    """The controlling process makes the directory; workers inherit it through the environment."""
    if hasattr(config, "workerinput"):
        return
    if not os.environ.get(ENV):
        os.environ[ENV] = tempfile.mkdtemp(prefix="kvreset-invariants-")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Check every recorded run; a violation fails the session."""
    config = session.config
    if hasattr(config, "workerinput"):
        return
    where = Path(os.environ[ENV])
    problems, count, seen = check(where)
    if whole_suite(config) and count:
        if count < MIN_ROWS:
            problems.append(f"the suite printed {count} rows, fewer than {MIN_ROWS}: the check saw too little")
        missing = sorted(REQUIRED_RESULTS - seen)
        if missing:
            problems.append("no row showed " + ", ".join(f"{k} {r}" for k, r in missing))
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"invariants: {count} rows, {len(seen)} result kinds checked, "
                            f"{len(problems)} violations")
        for line in problems[:50]:
            reporter.write_line(f"invariants: {line}")
    if problems:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
