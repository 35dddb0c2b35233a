"""The inference pods this version cannot empty: recognised by what they run, never by a word
that merely mentions an engine; their plan and rows (kubectl_kvreset.otherpods, job.others)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from kubectl_kvreset.consent import User
from kubectl_kvreset.job.others import other_key, other_outcome_row, other_plan_row, plan_others
from kubectl_kvreset.otherpods import (
    DYNAMO_RUN,
    DYNAMO_SGLANG,
    DYNAMO_TRTLLM,
    DYNAMO_VLLM,
    LMCACHE_SERVER,
    SGLANG,
    TRTLLM,
    describe_other_containers,
    other_entrypoint,
    select_others,
)
from kubectl_kvreset.pods import Owner, Targets, describe_pod_containers
from kubectl_kvreset.report import ExitCode
from kubectl_kvreset.rollout import RestartResult
from tests.beside import LLM_D_FIXTURES, needs_beside


def _pod(*containers: dict[str, Any], labels: dict[str, str] | None = None,
         name: str = "p-abc12-xyz") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": "u-" + name, "labels": labels or {},
                     "ownerReferences": [{"kind": "ReplicaSet", "name": "srv-abc12", "controller": True}]},
        "spec": {"containers": list(containers)},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _c(name: str = "main", command: list[str] | None = None, args: list[str] | None = None,
       image: str = "example/engine:1", env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image}
    if command is not None:
        c["command"] = command
    if args is not None:
        c["args"] = args
    if env is not None:
        c["env"] = env
    return c


def _found(pod: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    vllm = [d.container for d in describe_pod_containers(pod)]
    return [(o.container, o.engine, o.port) for o in describe_other_containers(pod, vllm_containers=vllm)]


@pytest.mark.parametrize(("words", "engine"), [
    (["/usr/bin/python3", "-m", "dynamo.vllm", "--model", "m"], DYNAMO_VLLM),
    (["python3", "-m", "dynamo.sglang"], DYNAMO_SGLANG),
    (["python3", "-m", "dynamo.trtllm"], DYNAMO_TRTLLM),
    (["dynamo-run", "in=http", "out=vllm"], DYNAMO_RUN),
    (["trtllm-serve", "m", "--port", "8000"], TRTLLM),
    (["trtllm-serve", "serve", "m"], TRTLLM),
    (["lmcache_server", "0.0.0.0", "8100"], LMCACHE_SERVER),
    (["python3", "-m", "lmcache.v1.server", "0.0.0.0", "8100"], LMCACHE_SERVER),
])
def test_entrypoints(words: list[str], engine: str) -> None:
    got = other_entrypoint(words)
    assert got is not None and got[0] == engine


@pytest.mark.parametrize("words", [
    ["vllm", "serve", "m"],
    ["python3", "-m", "vllm.entrypoints.openai.api_server"],
    ["python3", "-m", "sglang_router.launch_router", "--worker-urls", "http://a"],
    ["python3", "-m", "dynamo.frontend"],
    ["trtllm-serve", "disaggregated", "-c", "disagg.yaml"],
    ["lmcache_server", "--hotprefix-host-capacity-bytes", "1"],  # LMCache's MP server, the store step's
    ["echo", "python3", "-m", "sglang.launch_server"],
    ["grep", "sglang.launch_server", "/etc/motd"],
    ["sglang", "version"],
    # SGLang's server is the SGLang engine's (kubectl_kvreset/engines/sglang), not an other engine
    ["python3", "-m", "sglang.launch_server", "--model-path", "m"],
    ["python", "-u", "-m", "sglang.launch_server"],
    ["sglang", "serve", "--model-path", "m"],
])
def test_not_entrypoints(words: list[str]) -> None:
    assert other_entrypoint(words) is None


def test_ports_and_scripts() -> None:
    sglang = _c(command=["/bin/bash", "-c"], args=[
        "# SGLang on the llm-d port\nset -e\nexec python3 -m sglang.launch_server \\\n"
        "  --model-path $MODEL --port $PORT"],
        env=[{"name": "PORT", "value": "8000"}, {"name": "MODEL", "value": "m"}])
    # SGLang servers are the SGLang engine's: discovery's pods, not rows of this module
    assert _found(_pod(sglang)) == []
    assert [(d.engine.name, [p.port for p in d.ports]) for d in describe_pod_containers(_pod(sglang))] == [
        ("sglang", [8000])]
    plain = _pod(_c(command=["python3", "-m", "sglang.launch_server", "--model-path", "m"]))
    assert _found(plain) == [] and [[p.port for p in d.ports] for d in describe_pod_containers(plain)] == [[30000]]
    assert _found(_pod(_c(command=["trtllm-serve", "m", "--port=$(P)"], env=[{"name": "P", "value": "8123"}]))) == [
        ("main", TRTLLM, 8123)]
    assert _found(_pod(_c(command=["python3", "-m", "dynamo.vllm", "--model", "m"]))) == [("main", DYNAMO_VLLM, None)]
    assert _found(_pod(_c(command=["lmcache_server", "0.0.0.0", "8100"]))) == [("main", LMCACHE_SERVER, 8100)]
    # a script whose command is built from a variable, as sh would run it
    launcher = _c(command=["sh", "-c", 'CMD="trtllm-serve m --port 8001"; exec $CMD'])
    assert _found(_pod(launcher)) == [("main", TRTLLM, 8001)]


def test_look_alikes_do_not_trigger() -> None:
    # a vLLM pod whose image name contains "sglang" and whose env mentions it
    vllm = _c(name="vllm", image="registry.example/sglang-compat-vllm:1", command=["vllm", "serve", "m"],
              env=[{"name": "NOTE", "value": "python3 -m sglang.launch_server"},
                   {"name": "ENGINE", "value": "sglang serve"}])
    assert _found(_pod(vllm)) == []
    # a sidecar that mentions sglang in its flags
    sidecar = _c(name="routing-proxy", image="ghcr.io/llm-d/llm-d-routing-sidecar:v0.3",
                 args=["--engine=sglang", "--port=8000", "--vllm-port=8200"])
    assert _found(_pod(vllm, sidecar)) == []
    # an SGLang label on a vLLM pod does not make it SGLang
    assert _found(_pod(vllm, sidecar, labels={"llm-d.ai/engine-type": "sglang"})) == []
    # a label on a pod whose only container is the sidecar names nothing
    assert _found(_pod(sidecar, labels={"llm-d.ai/engine-type": "sglang"})) == []
    # an env value alone, on a plain container
    assert _found(_pod(_c(command=["sleep", "infinity"], env=[{"name": "X", "value": "sglang.launch_server"}]))) == []


def test_labels_name_sglang() -> None:
    server = _c(name="modelserver", image="lmsysorg/sglang:v0.5", command=["/opt/start.sh"])
    sidecar = _c(name="routing-proxy", image="ghcr.io/llm-d/llm-d-routing-sidecar:v0.3", args=["--port=8000"])
    pod = _pod(server, sidecar, labels={"llm-d.ai/engine-type": "sglang", "llm-d.ai/role": "decode"})
    (found,) = describe_other_containers(pod)
    assert (found.container, found.engine, found.matched_by, found.role) == (
        "modelserver", SGLANG, "llm-d.ai/engine-type=sglang", "decode")
    kserve = _pod(_c(name="main", command=["/bin/start"]), labels={"serving.kserve.io/runtime": "kserve-llm-sglang"})
    assert [o.engine for o in describe_other_containers(kserve)] == [SGLANG]


@needs_beside(LLM_D_FIXTURES)
def test_llmd_fixtures_give_no_other_engine() -> None:
    """Every vLLM pod of the llm-d fixtures is still found as vLLM, and nothing else is found there."""
    import yaml

    files = sorted(Path(LLM_D_FIXTURES).glob("*.yaml"))
    assert files
    seen = 0
    for path in files:
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(doc, dict):
                continue
            spec = doc.get("spec") or {}
            template = spec.get("template") or (spec.get("leaderWorkerTemplate") or {}).get("workerTemplate")
            if not template:
                continue
            pod = {"metadata": {"name": "x", "namespace": "ns", **(template.get("metadata") or {})},
                   "spec": template["spec"], "status": {}}
            vllm = [d.container for d in describe_pod_containers(pod)]
            seen += bool(vllm)
            assert describe_other_containers(pod, vllm_containers=vllm) == [], (path.name, doc["metadata"]["name"])
    assert seen


_RS = {"srv-abc12": Owner("Deployment", "srv")}


def _others() -> list[Any]:
    """An SGLang pod found by its label (its command names no engine the plugin reads)."""
    server = _c(command=["/opt/start.sh"])
    server["ports"] = [{"containerPort": 8000}]
    return describe_other_containers(_pod(server, labels={"llm-d.ai/engine-type": "sglang"}), _RS)


def test_plan_and_rows_left_without_fallback() -> None:
    (plan,) = plan_others(_others(), "none", shared=False, users={})
    assert not plan.restart
    assert plan.reason == "SGLang is not supported by this version: its cache was not emptied"
    assert plan.remedy == "--fallback restart, or kubectl rollout restart deployment/srv"
    row, code = other_outcome_row(plan, None, interrupted=False)
    assert code is ExitCode.FAILED
    assert (row["result"], row["engine"], row["port"], row["gpu"]) == ("left", "sglang", 8000, "left")
    assert row["left"] == [{"tier": "every tier", "reason": plan.reason, "remedy": plan.remedy}]
    planned = other_plan_row(plan)
    assert planned["steps"] == [] and "--fallback restart" in planned["leaves"][0] and planned["result"] == "left"


def test_restart_rows() -> None:
    (plan,) = plan_others(_others(), "restart", shared=False, users={})
    assert plan.restart and other_plan_row(plan)["steps"] == ["restart deployment/srv"]
    ok = RestartResult("ns", plan.pod.owner, None, "restarted", "rolled out")
    row, code = other_outcome_row(plan, ok, interrupted=False)
    assert (row["result"], code, row["left"]) == ("replaced", ExitCode.OK, [])
    failed = RestartResult("ns", plan.pod.owner, None, "timeout", "pod not ready")
    row, code = other_outcome_row(plan, failed, interrupted=False)
    assert (row["result"], code) == ("failed", ExitCode.FAILED)
    assert "timeout: pod not ready" in row["message"]


def test_lmcache_server_restart_needs_consent() -> None:
    (server,) = describe_other_containers(_pod(_c(command=["lmcache_server", "0.0.0.0", "8100"]), name="cache-1"), _RS)
    users = {other_key(server): (User("ns/engine-0", "m"),)}
    (held,) = plan_others([server], "restart", shared=False, users=users)
    assert not held.restart and held.held is not None and "--shared-stores" in held.held and "ns/engine-0" in held.held
    assert held.remedy.startswith("--fallback restart --shared-stores")
    row, code = other_outcome_row(held, None, interrupted=False)
    assert code is ExitCode.FAILED and row["shared"] == "left" and row["gpu"] is None
    assert "the lm:// protocol has no delete; restarting deployment/srv empties it" in row["message"]
    (given,) = plan_others([server], "restart", shared=True, users=users)
    assert given.restart
    (alone,) = plan_others([server], "restart", shared=False, users={})
    assert alone.restart


def test_lmcache_server_restart_needs_consent_when_targeted_engines_use_it() -> None:
    """Every engine using it is a target: its restart still empties the store for each of them and
    cuts their connections, so it waits for --shared-stores, naming them."""
    (server,) = describe_other_containers(_pod(_c(command=["lmcache_server", "0.0.0.0", "8100"]), name="cache-1"), _RS)
    mine = {other_key(server): ("ns/engine-0", "ns/engine-1")}
    (held,) = plan_others([server], "restart", shared=False, users={}, targeted=mine)
    assert not held.restart and held.held is not None
    assert "(ns/engine-0, ns/engine-1)" in held.held and held.held.endswith("give --shared-stores to restart it")
    assert held.remedy.startswith("--fallback restart --shared-stores")
    (given,) = plan_others([server], "restart", shared=True, users={}, targeted=mine)
    assert given.restart and given.held is None
    (other,) = describe_other_containers(_pod(_c(command=["trtllm-serve", "m"]), name="t-1"), _RS)
    (plain,) = plan_others([other], "restart", shared=False, users={}, targeted={other_key(other): ("ns/x",)})
    assert plain.restart  # only the LMCache server is a store


def test_select_others() -> None:
    others = _others()
    assert select_others(others, Targets(all=True)) == (others, set())
    assert select_others(others, Targets(owners=("deployment/srv",))) == (others, {"deployment/srv"})
    assert select_others(others, Targets(owners=("deployment/other",))) == ([], set())
    assert others[0].owner == Owner("Deployment", "srv")


def test_remedy_per_owner_kind() -> None:
    pod = _others()[0]
    lws = dataclasses.replace(pod, owner=Owner("LeaderWorkerSet", "wide"))
    bare = dataclasses.replace(pod, owner=Owner("Pod", pod.name))
    (a, b) = plan_others([lws, bare], "none", shared=False, users={})
    assert a.remedy == "--fallback restart"
    assert b.remedy.startswith("delete and recreate pod/")  # --fallback restart refuses a bare pod
