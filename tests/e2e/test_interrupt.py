"""Ctrl-C stops new work, waits for the calls in flight, prints what was done, exits 130."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from tests.simctl import zipapp_path

from .conftest import fixture_file

NS = "llmd"


def test_ctrl_c_mid_run(sim) -> None:
    # 8 pods, each reset takes 1.5 s, 2 in flight at a time: Ctrl-C after ~2 s
    scenario = {"pods": [{"reset_delay_ms": 1500}]}
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario)
    proc = subprocess.Popen([str(zipapp_path()), "clear", "-n", NS, "--all", "--max-concurrency", "2", "-o", "json"],
                            env=cluster.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until the resets have begun
        if any(st["reset_calls"] for p in cluster.live_pods() for st in p["ports"].values()):
            break
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    rows = json.loads(out)
    assert len(rows) == 8
    done = {r["pod"] for r in rows if r["result"] == "emptied"}
    stopped = {r["pod"] for r in rows if r["result"] == "interrupted"}
    assert done and stopped and done | stopped == {r["pod"] for r in rows}
    state = {p["name"]: p for p in cluster.live_pods()}
    for name in done:  # reported emptied: really emptied
        assert all(st["prefix_cache_blocks"] == 0 for st in state[name]["ports"].values() if st["role"] == "vllm")
    for name in stopped:  # reported not done: really untouched
        assert all(st["reset_calls"] == 0 and st["prefix_cache_blocks"] > 0
                   for st in state[name]["ports"].values() if st["role"] == "vllm")
