"""Faults during a run: the rows, the exit code and the simulator's state agree."""

from __future__ import annotations

import json
import subprocess
import time

from tests.simctl import zipapp_path

from .conftest import fixture_file

NS = "llmd"


def start_clear(cluster, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(zipapp_path()), "clear", "-n", NS, "--all", "-o", "json", *args],
                            env=cluster.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_first_reset(cluster, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(st["reset_calls"] for p in cluster.live_pods() for st in p["ports"].values()):
            return
        time.sleep(0.05)
    raise AssertionError("no reset started")


def test_pod_replaced_between_discovery_and_reset(sim) -> None:
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0",
                  scenario={"pods": [{"reset_delay_ms": 300}]})
    pods = sorted(p["name"] for p in cluster.live_pods())
    proc = start_clear(cluster, "--max-concurrency", "1")
    wait_for_first_reset(cluster)
    # one call at a time, in pod-name order, 3 routes of 0.3 s each: the last pod is reached
    # about 6 s from now, long after it is deleted
    victim = pods[-1]
    cluster.api(f"/api/v1/namespaces/{NS}/pods/{victim}", method="DELETE")
    out, err = proc.communicate(timeout=120)
    rows = {r["pod"]: r for r in json.loads(out)}
    assert set(rows) == set(pods)
    row = rows[victim]
    assert row["result"] == "replaced", row
    assert "successor" in row["message"] and "starts cold" in row["message"]
    assert proc.returncode == 0, err
    successor = [p for p in cluster.live_pods() if p["name"] not in pods]
    assert len(successor) == 1 and successor[0]["name"] in row["message"]
    assert all(st["prefix_cache_blocks"] == 0 for st in successor[0]["ports"].values())
    assert all(r["result"] == "emptied" for name, r in rows.items() if name != victim)
