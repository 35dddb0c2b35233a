"""The benchmark driver: its table states targets and verdicts from the figures, and a tiny
run end to end (4 pods, no seed procedure) measures real resets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.simctl import ROOT, zipapp_path

from .driver import PluginRun, Results, SeedRun, table


def _results(clear64: float, seed64: float, peak_kib: int) -> Results:
    r = Results(runs=5, reset_delay_ms=50, kubectl="v1.32.4", interpreter="/usr/bin/python3",
                shebang="#!/usr/bin/env python3")
    r.startup = {"--help shebang": 0.15, "--help interp": 0.09, "--version shebang": 0.14,
                 "--version interp": 0.08, "kubectl": 0.04}
    req = {"create pods/proxy": 64, "list pods": 1}
    r.plugin = {64: [PluginRun(clear64, 0, peak_kib, req, 64, 64)],
                256: [PluginRun(1.5, 0, peak_kib, {"create pods/proxy": 256, "list pods": 1},
                                256, 256)]}
    r.seed = {64: SeedRun(seed64, 0, {"get pods/exec": 64}, 64), 256: "not run: 70 s estimated"}
    r.ideal_64 = {"startup": 0.15, "list": 0.01, "reset": 0.06, "total": 0.22}
    return r


def _row(text: str, start: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {start}"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_table_verdicts_follow_the_figures() -> None:
    good = table(_results(clear64=0.40, seed64=14.0, peak_kib=80 * 1024))
    assert _row(good, "`clear --all`, 64 pods (")[3:] == ["35.0x faster", ">= 20x: met"]
    assert _row(good, "`clear --all`, 64 pods vs")[3:] == ["1.8x", "<= 2x: met"]
    assert _row(good, "start-up `--help` by the interpreter")[3:] == ["2.2x", "<= 3x: met"]
    assert _row(good, "peak memory")[1] == "80.0 MiB" and _row(good, "peak memory")[4] == \
        "< 120 MiB: met"
    assert "not run: 70 s estimated" in _row(good, "`clear --all`, 256 pods")[2]
    assert _row(good, "API requests per pod, 256 pods")[1] == \
        "1.00 (create pods/proxy 256, list pods 1)"
    bad = table(_results(clear64=1.0, seed64=14.0, peak_kib=130 * 1024))
    assert _row(bad, "`clear --all`, 64 pods (")[4] == ">= 20x: **MISSED**"
    assert _row(bad, "`clear --all`, 64 pods vs")[3:] == ["4.5x", "<= 2x: **MISSED**"]
    assert _row(bad, "peak memory")[4] == "< 120 MiB: **MISSED**"


def test_tiny_run_end_to_end(tmp_path: Path) -> None:
    if not zipapp_path().exists():
        pytest.fail(f"{zipapp_path()} is missing: run 'make build' (make test does it)")
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "tests.bench", "--sizes", "4", "--runs", "1",
                           "--clear-runs", "1", "--no-seed", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("| measure | kubectl-kvreset | baseline | ratio | target |")
    assert "Reproduce: make bench" in done.stdout
    data = json.loads(out.read_text())
    run = data["plugin"]["4"][0]
    assert run["code"] == 0 and run["pods_reset"] == 4 and run["rows"] == 4
    assert run["requests"]["list pods"] == 1 and run["maxrss_kib"] > 10_000
