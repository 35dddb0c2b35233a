"""Faults during a run: the rows, the exit code and the simulator's state agree."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.simctl import SimCluster, zipapp_path

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


# ---------------------------------------------------------------------------------------------
# One test per simulator fault (tests/sim/README.md "Faults"): the rows, the exit code and the
# simulator's state agree - nothing reported emptied that was not, nothing emptied that was
# reported failed.
# ---------------------------------------------------------------------------------------------

DECODE = "deployment/optimized-baseline-nvidia-gpu-vllm-decode"


def start_cluster(sim, scenario: dict[str, Any], **kwargs: Any) -> SimCluster:
    """Fixture 01 (8 aggregated vLLM 0.26 pods, one API port each) with ``scenario``."""
    return sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario,
               **kwargs)


def clear_all(cluster: SimCluster, *args: str, timeout: float = 60.0) -> tuple[int, dict[str, dict[str, Any]], str]:
    """``clear -n NS --all -o json ARGS``: (exit code, rows by pod, stderr); no traceback ever."""
    done = cluster.run("clear", "-n", NS, "--all", "-o", "json", *args, timeout=timeout)
    assert "Traceback" not in done.stderr, done.stderr
    rows = json.loads(done.stdout) if done.stdout.strip() else []
    return done.returncode, {r["pod"]: r for r in rows}, done.stderr


def vllm_ports(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [st for st in pod["ports"].values() if st.get("role", "vllm") == "vllm"]


def check_rows_match_state(cluster: SimCluster, rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Rows and simulator agree on the GPU tier: a row whose result is ``emptied``, or whose
    ``gpu`` cell says ``emptied``, is empty in the simulator (a reset reached it); a row whose
    ``gpu`` cell says ``not emptied`` still holds its blocks. (A row may be ``failed`` with its
    GPU tier emptied when only an extra route, such as ``/reset_encoder_cache``, failed: the
    message says so.) Returns the simulator's pods by name (deleted ones included)."""
    pods = {p["name"]: p for p in cluster.state()["pods"]}
    for name, row in rows.items():
        ports = vllm_ports(pods[name])
        if row["result"] == "emptied":
            assert row["gpu"] == "emptied", row
        if row["gpu"] == "emptied":
            assert all(st["prefix_cache_blocks"] == 0 and st["reset_calls"] >= 1 for st in ports), (name, ports)
        elif row["gpu"] == "not emptied":
            assert row["result"] != "emptied", row
            assert all(st["prefix_cache_blocks"] > 0 for st in ports), (name, row, ports)
    return pods


def test_api_500_and_429_are_retried(sim) -> None:
    # the first 2 pod lists answer 500 (a GET: retried); the first 3 pod-proxy POSTs answer 429
    # with Retry-After: 1 (not processed: any method is sent again after the wait)
    scenario = {"faults": {"api": [
        {"verb": "list", "resource": "pods", "first": 2, "status": 500},
        {"verb": "create", "resource": "pods/proxy", "first": 3, "status": 429, "retry_after": 1},
    ]}}
    cluster = start_cluster(sim, scenario)
    started = time.monotonic()
    code, rows, err = clear_all(cluster)
    assert code == 0, err
    assert len(rows) == 8 and all(r["result"] == "emptied" for r in rows.values()), rows
    assert time.monotonic() - started >= 1.0  # Retry-After was honoured
    state = cluster.state()
    assert state["faults"]["api"] == [{"matched": 3, "fired": 2}, {"matched": 8 * 3 + 3, "fired": 3}]
    assert state["api_requests"]["list pods"] == 3
    check_rows_match_state(cluster, rows)
    # every reset reached vLLM exactly once: a 429 was not processed, so nothing ran twice
    assert all(st["reset_calls"] == 1 for p in cluster.live_pods() for st in vllm_ports(p))


def test_slow_answers_within_and_beyond_the_request_timeout(sim) -> None:
    scenario = {"faults": {"api": [
        {"verb": "list", "resource": "pods", "first": 3, "delay_ms": 2500},  # beyond --request-timeout 1s
        {"delay_ms": 100},  # every other request is slow but within the bound
    ]}}
    cluster = start_cluster(sim, scenario)
    started = time.monotonic()
    done = cluster.run("clear", "-n", NS, "--all", "-o", "json", "--request-timeout", "1s", timeout=60)
    assert time.monotonic() - started < 12  # 3 bounded attempts, not a hang
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "1 s" in done.stderr, done.stderr
    assert all(st["reset_calls"] == 0 for p in cluster.live_pods() for st in vllm_ports(p))
    # the same cluster, the list now slow but within the bound: everything is emptied
    code, rows, err = clear_all(cluster, "--request-timeout", "5s")
    assert code == 0, err
    assert len(rows) == 8 and all(r["result"] == "emptied" for r in rows.values()), rows
    check_rows_match_state(cluster, rows)
    assert cluster.state()["faults"]["api"][1]["fired"] >= 8 * 3


def test_dropped_connections(sim) -> None:
    # the API server closes the connection without an answer: on the first pod list (a GET,
    # retried) and on the first two pod-proxy POSTs (a reset is idempotent: retried)
    scenario = {"faults": {"api": [
        {"verb": "list", "resource": "pods", "first": 1, "drop": True},
        {"verb": "create", "resource": "pods/proxy", "first": 2, "drop": True},
    ]}}
    cluster = start_cluster(sim, scenario)
    code, rows, err = clear_all(cluster)
    assert code == 0, err
    assert len(rows) == 8 and all(r["result"] == "emptied" for r in rows.values()), rows
    assert [r["fired"] for r in cluster.state()["faults"]["api"]] == [1, 2]
    assert sum(r["calls"] for r in rows.values()) == 8 * 3 + 2  # the two lost calls were sent again
    check_rows_match_state(cluster, rows)


def test_pod_deleted_on_its_first_reset(sim) -> None:
    # discovery sees the pod; its first reset call finds it deleted (its ReplicaSet makes a cold successor)
    cluster = start_cluster(sim, {"pods": [{"match": {"owner": DECODE, "ordinal": 2}, "delete_on_first_reset": True}]})
    before = {p["name"]: p for p in cluster.live_pods()}
    victim = next(n for n, p in before.items() if p["ordinal"] == 2)
    code, rows, err = clear_all(cluster)
    assert code == 0, err
    assert set(rows) == set(before)
    row = rows[victim]
    assert row["result"] == "replaced", row
    pods = check_rows_match_state(cluster, rows)
    assert pods[victim]["deleted"] and all(st["reset_calls"] == 0 for st in vllm_ports(pods[victim]))
    successors = [p for p in cluster.live_pods() if p["name"] not in before]
    assert len(successors) == 1 and successors[0]["name"] in row["message"] and "starts cold" in row["message"]
    assert all(st["prefix_cache_blocks"] == 0 for st in vllm_ports(successors[0]))
    assert all(r["result"] == "emptied" for n, r in rows.items() if n != victim)


def test_vllm_refuses_connections_then_comes_up(sim) -> None:
    # from its first reset call, one pod's vLLM refuses connections for 3 s (Ready False), then is back
    cluster = start_cluster(sim, {"pods": [{"match": {"ordinal": 1}, "down_for": 3, "down_at": "first_reset"}]})
    victim = next(p["name"] for p in cluster.live_pods() if p["ordinal"] == 1)
    started = time.monotonic()
    code, rows, err = clear_all(cluster)
    assert code == 0, err
    assert time.monotonic() - started >= 3.0  # it waited for the pod, it did not give up
    assert len(rows) == 8 and all(r["result"] == "emptied" for r in rows.values()), rows
    pods = check_rows_match_state(cluster, rows)
    fault = next(f for f in cluster.state()["faults"]["pods"].values() if f["pod"] == victim)
    assert fault["refused_calls"] >= 1
    assert pods[victim]["ready"] and cluster.state()["api_requests"].get("get pods", 0) >= 1  # it polled Ready


def test_vllm_never_answers(sim) -> None:
    # one pod's /reset_prefix_cache never answers: the request bound (here 2 s) must end each try
    cluster = start_cluster(sim, {"pods": [{"match": {"ordinal": 1}, "hang": ["/reset_prefix_cache"]}]})
    victim = next(p["name"] for p in cluster.live_pods() if p["ordinal"] == 1)
    started = time.monotonic()
    code, rows, err = clear_all(cluster, "--request-timeout", "2s")
    assert time.monotonic() - started < 14
    assert code == 1, err
    assert rows[victim]["result"] == "unreachable", rows[victim]
    assert "did not answer POST /reset_prefix_cache within 2 s" in rows[victim]["message"], rows[victim]
    assert all(r["result"] == "emptied" for n, r in rows.items() if n != victim)
    pods = check_rows_match_state(cluster, rows)
    assert all(st["reset_calls"] == 0 and st["prefix_cache_blocks"] == 512 for st in vllm_ports(pods[victim]))


def test_metrics_answering_500(sim) -> None:
    cluster = start_cluster(sim, {"pods": [{"match": {"ordinal": 0}, "metrics_status": 500}]})
    victim = next(p["name"] for p in cluster.live_pods() if p["ordinal"] == 0)
    done = cluster.run("metrics", "-n", NS, "-o", "json")
    assert "Traceback" not in done.stderr
    assert done.returncode == 1, done.stderr
    rows = json.loads(done.stdout)
    by_pod: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_pod.setdefault(r["pod"], []).append(r)
    assert len(by_pod) == 8
    assert [r["error"] for r in by_pod[victim]] == ["unavailable: GET /metrics answered 500 (3 tries)"]
    assert all(st["metrics_calls"] == 3 for p in cluster.live_pods() if p["name"] == victim for st in vllm_ports(p))
    assert all(r["error"] is None and r["usage"] is not None for n, rs in by_pod.items() if n != victim for r in rs)
    # a read-only command: nothing was reset
    assert all(st["reset_calls"] == 0 and st["metrics_calls"] >= 1 for p in cluster.live_pods() for st in vllm_ports(p))


def _kubeconfig_with_user(cluster: SimCluster, user: dict[str, Any], path: Path) -> Path:
    cfg = yaml.safe_load(cluster.kubeconfig.read_text())
    for u in cfg["users"]:
        if u["name"] == "admin":
            u["user"] = user
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


def _mint(cluster: SimCluster, ttl: int | None) -> str:
    return str(cluster.api("/sim/v1/tokens", method="POST", body={"user": "admin", "ttl": ttl})["token"])


EXEC_PLUGIN = """\
import fcntl, json, pathlib, sys
here = pathlib.Path(sys.argv[1])
tokens = (here / "tokens").read_text().split()
with open(here / "count", "a+") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    n = int(f.read() or 0)
    f.seek(0); f.truncate(); f.write(str(n + 1))
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": tokens[min(n, len(tokens) - 1)]}}))
"""


def test_token_expires_mid_run_exec_plugin_gives_a_fresh_one(sim, tmp_path: Path) -> None:
    # the exec credential plugin first hands out a token that expires after 12 requests, then a
    # valid one: after the 401 the tool re-runs the plugin, and every pod is emptied
    cluster = start_cluster(sim, {})
    (tmp_path / "tokens").write_text(_mint(cluster, 12) + "\n" + _mint(cluster, None) + "\n")
    (tmp_path / "plugin.py").write_text(EXEC_PLUGIN)
    kubeconfig = _kubeconfig_with_user(cluster, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(tmp_path / "plugin.py"), str(tmp_path)], "interactiveMode": "Never"}},
        tmp_path / "kubeconfig")
    done = subprocess.run([str(zipapp_path()), "clear", "-n", NS, "--all", "-o", "json",
                           "--kubeconfig", str(kubeconfig)],
                          env=cluster.env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    rows = {r["pod"]: r for r in json.loads(done.stdout)}
    assert len(rows) == 8 and all(r["result"] == "emptied" for r in rows.values()), rows
    assert cluster.state()["faults"]["tokens_expired"] >= 1  # the first token did expire mid-run
    assert int((tmp_path / "count").read_text()) >= 2  # and the plugin was run again
    check_rows_match_state(cluster, rows)


def test_static_token_expires_mid_run(sim, tmp_path: Path) -> None:
    # a static token that stops working after 12 requests: rebuilding the credentials gives the
    # same token, so the rest fails - with a message, exit 1, and rows that match the cluster
    cluster = start_cluster(sim, {})
    kubeconfig = _kubeconfig_with_user(cluster, {"token": _mint(cluster, 12)}, tmp_path / "kubeconfig")
    done = subprocess.run([str(zipapp_path()), "clear", "-n", NS, "--all", "-o", "json",
                           "--kubeconfig", str(kubeconfig)],
                          env=cluster.env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    # 12 requests cover discovery (a pod list and a ReplicaSet list), so there are always rows
    rows = {r["pod"]: r for r in json.loads(done.stdout)}
    assert rows and any(r["gpu"] == "not emptied" for r in rows.values()), rows
    assert all("401" in (r["message"] or "") for r in rows.values() if r["result"] != "emptied"), rows
    check_rows_match_state(cluster, rows)
    assert cluster.state()["faults"]["tokens_expired"] >= 1


def test_exec_stream_cut_before_the_status(sim) -> None:
    # over exec, one pod's streams close right after the upgrade (nothing runs), another's after
    # the command ran and printed its answer but before the exit status: neither is reported emptied
    cluster = start_cluster(sim, {"pods": [{"match": {"ordinal": 1}, "exec_cut": "before"},
                                           {"match": {"ordinal": 2}, "exec_cut": "after"}]})
    by_ord = {p["ordinal"]: p["name"] for p in cluster.live_pods()}
    code, rows, err = clear_all(cluster, "--transport", "exec")
    assert code == 1, err
    for victim in (by_ord[1], by_ord[2]):
        assert rows[victim]["result"] not in ("emptied", "unconfirmed"), rows[victim]
        assert "stream ended early" in rows[victim]["message"], rows[victim]
    assert all(r["result"] == "emptied" for n, r in rows.items() if n not in (by_ord[1], by_ord[2]))
    pods = {p["name"]: p for p in cluster.live_pods()}
    # cut before running: untouched
    assert all(st["reset_calls"] == 0 and st["prefix_cache_blocks"] == 512 for st in vllm_ports(pods[by_ord[1]]))
    # cut after running: the reset did happen; the tool could not know, and did not claim it
    assert all(st["reset_calls"] >= 1 for st in vllm_ports(pods[by_ord[2]]))
    for n, r in rows.items():
        if r["result"] == "emptied":
            assert all(st["prefix_cache_blocks"] == 0 for st in vllm_ports(pods[n]))


def test_exec_stream_cut_message_names_no_none(sim) -> None:
    cluster = start_cluster(sim, {"pods": [{"match": {"ordinal": 1}, "exec_cut": "before"}]})
    victim = next(p["name"] for p in cluster.live_pods() if p["ordinal"] == 1)
    _code, rows, _err = clear_all(cluster, "--transport", "exec")
    assert "None" not in rows[victim]["message"], rows[victim]["message"]


@pytest.mark.parametrize("mode", ["error", "drop"])
def test_64_pods_with_flaky_vllm_and_throttled_api(sim, mode: str) -> None:
    # 64 pods; 10 % of the vLLM calls fail once (vLLM's 500, or the connection dropped by vLLM);
    # 5 % of the API requests answer 429 with Retry-After: 1. A proxy call vLLM dropped falls
    # through to exec; so that the outcome does not depend on thread timing, the first exec
    # upgrade answers 429 too, and in drop mode only the reset routes fail (every exec is then
    # a reset's). Every pod ends emptied, exit 0.
    vllm: dict[str, Any] = {"fraction": 0.1, "mode": mode}
    if mode == "drop":
        vllm["paths"] = ["/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache"]
    scenario = {"replicas": {DECODE: 64},
                "faults": {"seed": 11, "vllm": vllm,
                           "api": [{"verb": "get", "resource": "pods/exec", "first": 1, "status": 429,
                                    "retry_after": 1},
                                   {"fraction": 0.05, "status": 429, "retry_after": 1}]}}
    cluster = start_cluster(sim, scenario)
    assert len(cluster.live_pods()) == 64
    started = time.monotonic()
    code, rows, err = clear_all(cluster, timeout=120)
    assert time.monotonic() - started < 15
    assert code == 0, err
    assert len(rows) == 64 and all(r["result"] == "emptied" for r in rows.values()), \
        [r for r in rows.values() if r["result"] != "emptied"]
    faults = cluster.state()["faults"]
    assert faults["vllm_failed"] >= 10 and faults["api"][1]["fired"] >= 5  # the faults did fire
    check_rows_match_state(cluster, rows)


def test_429_on_exec_upgrade_is_retried(sim) -> None:
    # the API server throttles the first exec upgrade (429, Retry-After: 1): it was not
    # processed, so it must be sent again, as Kube.request does for every other request
    # the first 8 exec upgrades (the version probes, one per pod) pass; the 9th, a reset's, is throttled
    cluster = start_cluster(sim, {"faults": {"api": [
        {"verb": "get", "resource": "pods/exec", "first": 8, "delay_ms": 1},
        {"verb": "get", "resource": "pods/exec", "first": 1, "status": 429, "retry_after": 1}]}})
    code, rows, err = clear_all(cluster, "--transport", "exec")
    assert cluster.state()["faults"]["api"][1]["fired"] == 1
    check_rows_match_state(cluster, rows)
    assert code == 0, err
    assert len(rows) == 8 and all(r["result"] == "emptied" for r in rows.values()), rows
