"""The default tables of the llm-d fixtures fit in 160 columns: steps as short codes, port runs
folded, long messages printed once under the table as numbered notes (``[1] ...``); ``-o wide``
and JSON keep every route and message."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from tests.beside import llm_d_fixtures
from tests.simctl import SimCluster

from .conftest import fixture_file

NS = "llm"
WIDTH = 160
COMMANDS = {"detect": ["detect"], "metrics": ["metrics"], "dry-run": ["clear", "--all", "--dry-run"],
            "clear": ["clear", "--all", "--yes"]}
NOTE = re.compile(r"^\[(\d+)\] ")


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not NOTE.match(line)]


@pytest.mark.parametrize("dev_mode", ["off", "on"])
@pytest.mark.parametrize("prefix", sorted({p.name[:2] for p in llm_d_fixtures()}) or ["01"])
def test_default_tables_fit_in_160_columns(sim: Callable[..., SimCluster], prefix: str, dev_mode: str) -> None:
    cluster = sim([fixture_file(prefix)], namespace=NS, dev_mode=dev_mode)
    for name, args in COMMANDS.items():
        done = cluster.run(*args, "-n", NS, timeout=300)
        assert done.stdout.strip(), (name, done.returncode, done.stderr)
        lines = _table_lines(done.stdout)
        too_wide = [line for line in lines if len(line) > WIDTH]
        assert not too_wide, (name, max(len(line) for line in lines), done.stdout)
        # every note is referred to from the table, and numbered from 1 in order
        for block in done.stdout.split("\n\n"):
            numbers = [int(m.group(1)) for m in map(NOTE.match, block.splitlines()) if m]
            assert numbers == list(range(1, len(numbers) + 1)), block
            for n in numbers:
                assert f"[{n}]" in "\n".join(_table_lines(block)), block
        if name == "dry-run":
            wide = cluster.run(*args, "-n", NS, "-o", "wide")
            rows = json.loads(cluster.run(*args, "-n", NS, "-o", "json").stdout)
            # the full routes stay in -o wide and JSON
            assert "POST /reset_prefix_cache" in wide.stdout and "POST /reset_prefix_cache" not in done.stdout
            assert all(any(s.startswith("POST /reset_prefix_cache") for s in r["steps"])
                       for r in rows if r["kind"] == "PlannedReset" and "prefix" in done.stdout), rows
