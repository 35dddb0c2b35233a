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
    r.plugin = {64: [PluginRun(clear64, 0, peak_kib, req, 64, 64, cpu_s=0.5, handshakes=3)],
                256: [PluginRun(1.5, 0, peak_kib, {"create pods/proxy": 256, "list pods": 1},
                                256, 256, cpu_s=0.7, handshakes=60)],
                1024: [PluginRun(3.0, 0, peak_kib, {"create pods/proxy": 1024, "list pods": 1},
                                 1024, 1024, cpu_s=1.3, handshakes=64)]}
    r.floor = 0.22
    r.cold = 1.2
    r.zipapp_bytes = 7 * 2**20
    r.imports = {"parts": 0.06, "whole": 0.33}
    r.seed = {64: SeedRun(seed64, 0, {"get pods/exec": 64}, 64), 256: "not run: 70 s estimated"}
    r.ideal_64 = {"startup": 0.15, "list": 0.01, "reset": 0.06, "total": 0.22}
    return r


def _row(text: str, start: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {start}"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_table_verdicts_follow_the_figures() -> None:
    good = table(_results(clear64=0.30, seed64=14.0, peak_kib=60 * 1024))
    assert _row(good, "`clear --all`, 64 pods (")[3:] == ["46.7x faster", ">= 40x: met"]
    assert _row(good, "`clear --all`, 64 pods vs")[3:] == ["1.4x", "<= 2x: met"]
    assert _row(good, "start-up `--help` by the interpreter")[3:] == ["2.2x", "<= 2x: **MISSED**"]
    assert _row(good, "peak memory")[1] == "60.0 MiB" and _row(good, "peak memory")[4] == \
        "<= 64 MiB: met"
    assert "not run: 70 s estimated" in _row(good, "`clear --all`, 256 pods")[2]
    assert _row(good, "API requests per pod, 1024 pods")[1] == \
        "1.00 (create pods/proxy 1024, list pods 1)"
    bad = table(_results(clear64=1.0, seed64=14.0, peak_kib=130 * 1024))
    assert _row(bad, "`clear --all`, 64 pods (")[4] == ">= 40x: **MISSED**"
    assert _row(bad, "`clear --all`, 64 pods vs")[3:] == ["4.5x", "<= 2x: **MISSED**"]
    assert _row(bad, "peak memory")[4] == "<= 64 MiB: **MISSED**"


def test_goals_table_has_every_goal_with_a_verdict() -> None:
    from .driver import goals

    text = goals(_results(clear64=0.30, seed64=14.0, peak_kib=60 * 1024))
    assert _row(text, "`clear --all`, 64 pods, vs the floor")[1:] == ["0.300 s vs 0.220 s = 1.4x", "<= 2x", "met"]
    assert _row(text, "`clear --all`, 64 pods, vs the manual")[1:] == ["14.0 s / 0.300 s = 46.7x", ">= 40x", "met"]
    cpu = _row(text, "plugin CPU per pod")
    assert cpu[1] == "2.73 ms at 256; 1.27 ms at 1024; 0.78 ms per added pod (256 -> 1024)" and cpu[3] == "met"
    assert _row(text, "API requests per pod beyond")[1].startswith("0.00 ") and \
        _row(text, "API requests per pod beyond")[3] == "met"
    assert _row(text, "TLS handshakes per run")[1:] == [
        "at most 64 (64 pods: 3, 256 pods: 60, 1024 pods: 64)", "<= the pool size (64)", "met"]
    assert _row(text, "peak memory at 1024 pods")[1:] == ["60.0 MiB", "<= 64 MiB", "met"]
    assert _row(text, "`--help` by the interpreter")[3] == "**MISSED**"
    assert _row(text, "first run after install")[1:] == ["1.200 s", "<= 1.5 s", "met"]
    assert _row(text, "zipapp size")[1] == "7.0 MiB"
    assert _row(text, "import of the `kubernetes` client")[1] == \
        "60 ms for the parts used vs 330 ms for the whole package"


def test_tiny_run_end_to_end(tmp_path: Path) -> None:
    if not zipapp_path().exists():
        pytest.fail(f"{zipapp_path()} is missing: run 'make build' (make test does it)")
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "tests.bench", "--sizes", "4", "--runs", "1",
                           "--clear-runs", "1", "--no-seed", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("| goal | measured | target | verdict |")
    assert "| measure | kubectl-kvreset | baseline | ratio | target |" in done.stdout
    assert "Reproduce: make bench" in done.stdout
    data = json.loads(out.read_text())
    run = data["plugin"]["4"][0]
    assert run["code"] == 0 and run["pods_reset"] == 4 and run["rows"] == 4
    assert run["requests"]["list pods"] == 1 and run["maxrss_kib"] > 10_000
