"""restart against the simulated cluster: prefill then decode, a LeaderWorkerSet, a rollout
that never becomes ready, a paused Deployment."""

from __future__ import annotations

import time
from typing import Any

from .conftest import fixture_file

NS = "llmd"
PREFILL = "deployment/pd-disaggregation-nvidia-gpu-vllm-prefill"
DECODE = "deployment/pd-disaggregation-nvidia-gpu-vllm-decode"
SMALL = {"replicas": {PREFILL: 2}}


def vllm_pods(cluster: Any) -> list[dict[str, Any]]:
    """Every pod record in creation order (replaced ones included)."""
    return [p for p in cluster.state()["pods"] if p.get("owner")]


def test_restart_pd_prefill_first_then_decode(sim: Any) -> None:
    cluster = sim([fixture_file("02")], namespace=NS, scenario=SMALL, ready_delay=0.8)
    before = {p["name"] for p in vllm_pods(cluster)}
    started = time.monotonic()
    code, rows, err = cluster.run_json("restart", "-n", NS, "--all")
    took = time.monotonic() - started
    assert code == 0, err
    assert [(r["owner"], r["role"], r["result"]) for r in rows] == [
        (PREFILL, "prefill", "restarted"), (DECODE, "decode", "restarted")]
    records = vllm_pods(cluster)
    new = [p for p in records if p["name"] not in before]
    roles = ["prefill" if "prefill" in p["owner"]["name"] else "decode" for p in new]
    # every new prefill pod was created before any new decode pod
    assert roles == sorted(roles, key=lambda r: r != "prefill") and roles.count("prefill") == 2 and \
        roles.count("decode") == 2
    assert all(p["deleted"] for p in records if p["name"] in before)
    assert all(p["ready"] for p in new)
    assert took >= 1.6  # two waits of at least one ready delay each, one after the other
    deps = cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments")["items"]
    assert all("kubectl.kubernetes.io/restartedAt" in d["spec"]["template"]["metadata"]["annotations"] for d in deps)


def test_restart_lws(sim: Any) -> None:
    cluster = sim([fixture_file("06")], namespace=NS)
    before = {p["name"]: p["uid"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("restart", "-n", NS, "leaderworkerset/wide-ep-llm-d-decode")
    assert code == 0, err
    assert [(r["owner"], r["result"]) for r in rows] == [("leaderworkerset/wide-ep-llm-d-decode", "restarted")]
    after = {p["name"]: p for p in cluster.live_pods()}
    decode = [n for n in after if "decode" in n]
    assert decode and all(after[n]["uid"] != before.get(n) and after[n]["ready"] for n in decode)
    prefill = [n for n in after if "prefill" in n]
    assert all(after[n]["uid"] == before[n] for n in prefill)  # not targeted, not touched
    lws = cluster.api(f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets/wide-ep-llm-d-decode")
    assert "leaderTemplate" not in lws["spec"]["leaderWorkerTemplate"]


def test_never_ready_times_out_with_the_cause(sim: Any) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="invalid")
    code, rows, err = cluster.run_json("restart", "-n", NS, "--all", "--timeout", "3s", timeout=60)
    assert code == 1
    (row,) = rows
    assert row["result"] == "timeout"
    assert "not rolled out within 3 s" in row["message"] and "CrashLoopBackOff" in row["message"]


def test_paused_deployment_is_refused(sim: Any) -> None:
    cluster = sim([fixture_file("05")], namespace=NS)
    name = "gpu-vllm-decode"
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/{name}"
    obj = cluster.api(path)
    obj["spec"]["paused"] = True
    cluster.api(path, method="PUT", body=obj)
    gen = cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")["metadata"]["generation"]
    code, rows, err = cluster.run_json("restart", "-n", NS, "--all")
    assert code == 1
    assert rows[0]["result"] == "refused" and "paused" in rows[0]["message"]
    assert cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")["metadata"]["generation"] == gen


def test_scheduler_in_namespace_is_mentioned(sim: Any) -> None:
    cluster = sim([fixture_file("03")], namespace="default")
    code, rows, err = cluster.run_json("restart", "-n", "default", "--all")
    assert code == 0, err
    assert [r["role"] for r in rows] == ["prefill", "decode"]
    assert "#2853" in err and "deployment/pd-llm-d-modelservice-epp" in err
