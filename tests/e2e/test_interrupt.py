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


def _warm_env(cluster, tmp_path) -> dict[str, str]:
    """The cluster's environment with a private SHIV_ROOT, extracted once: a run that starts by
    unpacking the zipapp (seconds) would be signalled before it began."""
    env = dict(cluster.env(), SHIV_ROOT=str(tmp_path / "shiv"))
    subprocess.run([str(zipapp_path()), "--version"], env=env, check=True, capture_output=True, timeout=120)
    return env


def _term_delay(cluster, env: dict[str, str]) -> str:
    """1 s, as the acceptance runs it, or, on a machine so loaded that discovery and planning
    (what --dry-run does) take longer, just past them, so that the TERM lands in the resets."""
    start = time.monotonic()
    subprocess.run([str(zipapp_path()), "clear", "-n", NS, "--all", "--dry-run"], env=env, capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=120)
    return f"{max(1.0, (time.monotonic() - start) * 1.5 + 0.3):.1f}"


def _timeout_term(env: dict[str, str], seconds: str, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    # --preserve-status: timeout exits with the command's own status instead of its 124
    start = time.monotonic()
    done = subprocess.run(["timeout", "--preserve-status", "-s", "TERM", seconds, str(zipapp_path()), *args],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - start


def test_sigterm_mid_run_prints_the_rows_of_what_was_done(sim, tmp_path) -> None:
    # every prefix-cache reset takes 3 s, 4 calls at a time: when the TERM lands, 4 pods are in
    # flight (they finish within the 5 s bound) and 4 have not started
    scenario = {"pods": [{"reset_delay_ms": 3000}]}
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario)
    env = _warm_env(cluster, tmp_path)
    done, _ = _timeout_term(env, _term_delay(cluster, env), "clear", "-n", NS, "--all", "--max-concurrency", "4",
                            "-o", "json")
    assert done.returncode == 143, done.stderr
    assert "terminated (SIGTERM)" in done.stderr and "Traceback" not in done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 8
    done_pods = {r["pod"] for r in rows if r["result"] == "emptied"}
    stopped = {r["pod"] for r in rows if r["result"] == "interrupted"}
    assert done_pods and stopped and done_pods | stopped == {r["pod"] for r in rows}
    time.sleep(3.5)  # any reset still running in the simulator has ended by now
    state = {p["name"]: p for p in cluster.live_pods()}
    for name in done_pods:  # reported emptied: really emptied
        assert all(st["prefix_cache_blocks"] == 0 for st in state[name]["ports"].values() if st["role"] == "vllm")
    for row in rows:
        if row["pod"] in stopped:  # reported not reset: nothing reached vLLM
            assert "not reset" in row["message"] and row["gpu"] == "not emptied", row
            assert all(st["reset_calls"] == 0 and st["prefix_cache_blocks"] > 0
                       for st in state[row["pod"]]["ports"].values() if st["role"] == "vllm")


def test_sigterm_abandons_a_call_still_in_flight_after_its_bound(sim, tmp_path) -> None:
    # one pod's reset never answers: after the TERM, the run waits 5 s for it, then prints the
    # rows without it and exits (not after the 30 s reset bound, nor the simulator's 600 s hold)
    scenario = {"pods": [{"match": {"ordinal": 0}, "hang": ["/reset_prefix_cache"]}]}
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario)
    env = _warm_env(cluster, tmp_path)
    delay = _term_delay(cluster, env)
    done, elapsed = _timeout_term(env, delay, "clear", "-n", NS, "--all", "-o", "json")
    assert done.returncode == 143, done.stderr
    assert elapsed < float(delay) + 5 + 10, elapsed
    rows = json.loads(done.stdout)
    assert len(rows) == 8
    hung = [r for r in rows if r["result"] != "emptied"]
    assert len(hung) == 1, [(r["result"], r["message"]) for r in rows]
    row = hung[0]
    # the call was sent: vLLM may have acted on it, so the row never says "not reset"
    assert row["result"] == "interrupted" and row["gpu"] == "unconfirmed", row
    assert "in flight" in row["message"] and "not reset" not in row["message"], row
    assert [u["tier"] for u in row["unconfirmed"]] == ["gpu"] or row["unconfirmed"], row
    assert cluster.state()["faults"]["pods"], "the simulator held no call"


def test_sigterm_during_a_restart_wait_says_the_restart_was_requested(sim, tmp_path) -> None:
    # new pods become ready 6 s after creation: the TERM lands while the rollout is waited on
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0", ready_delay=6)
    env = _warm_env(cluster, tmp_path)
    start = time.monotonic()
    subprocess.run([str(zipapp_path()), "detect", "-n", NS], env=env, capture_output=True, timeout=120)
    delay = f"{max(1.0, (time.monotonic() - start) * 1.5 + 0.5):.1f}"
    done, elapsed = _timeout_term(env, delay, "restart", "-n", NS, "--all", "--yes", "-o", "json")
    assert done.returncode == 143, done.stderr
    assert elapsed < float(delay) + 5, elapsed  # the wait ended with the TERM, not with the rollout
    rows = json.loads(done.stdout)
    assert [r["result"] for r in rows] == ["interrupted"], rows
    assert "restart requested" in rows[0]["message"] and "not waited for" in rows[0]["message"], rows
    dep = cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments")["items"][0]
    assert "kubectl.kubernetes.io/restartedAt" in dep["spec"]["template"]["metadata"].get("annotations", {})


def test_sigterm_during_a_devmode_rollout_says_the_patch_was_sent(sim, tmp_path) -> None:
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="off", vllm_version="0.26.0", ready_delay=6)
    env = _warm_env(cluster, tmp_path)
    start = time.monotonic()
    subprocess.run([str(zipapp_path()), "devmode", "-n", NS], env=env, capture_output=True, timeout=120)
    delay = f"{max(1.0, (time.monotonic() - start) * 1.5 + 0.5):.1f}"
    done, elapsed = _timeout_term(env, delay, "devmode", "--enable", "-n", NS, "--all", "--yes", "-o", "json")
    assert done.returncode == 143, done.stderr
    assert elapsed < float(delay) + 5, elapsed
    [row] = json.loads(done.stdout)
    assert row["result"] == "interrupted" and "set to 1" in row["message"] and "not waited for" in row["message"], row
    # the patch went out: the warning about the unauthenticated dev routes is given all the same
    assert "without authentication" in done.stderr and "devmode --disable" in done.stderr, done.stderr
    # the rollout was not waited for: the prose never says it emptied the caches
    assert "emptied their caches" not in done.stderr, done.stderr
    assert "may still be being replaced" in done.stderr and "not known to be emptied" in done.stderr, done.stderr
