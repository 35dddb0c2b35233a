"""Attacks on the recognition, plan and rows of inference pods this version cannot empty
(kubectl_kvreset.otherpods, job.others, job.scope.narrow_containers): look-alike commands,
mixed pods, secrets in their arguments, the LMCache server's consent, restartable owner kinds,
the rows after a restart and under ``--container``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubectl_kvreset.consent import User
from kubectl_kvreset.job.others import (
    other_key,
    other_outcome_row,
    other_plan_row,
    other_skipped_row,
    other_users,
    plan_others,
)
from kubectl_kvreset.job.reads import other_detect_row
from kubectl_kvreset.job.scope import Scope, narrow_containers
from kubectl_kvreset.otherpods import describe_other_containers, other_entrypoint
from kubectl_kvreset.pods import Owner, TargetError, describe_pod_containers
from kubectl_kvreset.report import ExitCode
from kubectl_kvreset.rollout import RestartResult

_RS = {"srv-abc12": Owner("Deployment", "srv")}


def _pod(*containers: dict[str, Any], labels: dict[str, str] | None = None, name: str = "srv-abc12-xyz",
         ns: str = "ns") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": "u-" + name, "labels": labels or {},
                     "ownerReferences": [{"kind": "ReplicaSet", "name": "srv-abc12", "controller": True}]},
        "spec": {"containers": list(containers)},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _c(name: str = "main", command: list[str] | None = None, image: str = "example/engine:1",
       env: list[dict[str, Any]] | None = None, args: list[str] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image}
    if command is not None:
        c["command"] = command
    if args is not None:
        c["args"] = args
    if env is not None:
        c["env"] = env
    return c


def _found(pod: dict[str, Any]) -> tuple[list[str], list[tuple[str, str, int | None]]]:
    vllm = [d.container for d in describe_pod_containers(pod)]
    return vllm, [(o.container, o.engine, o.port) for o in describe_other_containers(pod, _RS, vllm_containers=vllm)]


SH = ["bash", "-c"]


@pytest.mark.parametrize(("container", "vllm"), [
    (_c(command=[*SH, "# was: python3 -m sglang.launch_server --port 30000\nexec vllm serve m --port 8000"]), True),
    (_c(command=[*SH, "echo 'python -m sglang.launch_server'; exec vllm serve m"]), True),
    (_c(command=[*SH, "printf '%s\\n' 'sglang serve'; vllm serve m"]), True),
    (_c(command=[*SH, "cat <<EOF\npython -m sglang.launch_server\nEOF\nvllm serve m"]), True),
    (_c(command=[*SH, "if false; then python -m sglang.launch_server; fi; vllm serve m"]), True),
    (_c(command=[*SH, "exec vllm serve m"], image="lmsysorg/sglang:latest",
        env=[{"name": "SGLANG_CMD", "value": "python3 -m sglang.launch_server"}, {"name": "SGLANG_X", "value": "1"}]),
     True),
    (_c(command=["python3", "-m", "dynamo.frontend", "--http-port", "8000"]), False),
    (_c(command=["trtllm-serve", "disaggregated", "-c", "/etc/disagg.yaml"]), False),
    (_c(command=[*SH, "sleep infinity # python -m sglang.launch_server"]), False),
    (_c(command=[*SH, "pgrep -f 'python -m sglang.launch_server' || exit 1"]), False),
    (_c(command=["sglang", "--version"]), False),
    (_c(command=["lmcache_server", "--host", "0.0.0.0", "--port", "8100"]), False),  # the MP server: the store step's
    (_c(command=["python3", "-c", "import runpy; runpy.run_module('sglang.launch_server')"]), False),
    (_c(image="lmsysorg/sglang:latest", command=["/bin/sh", "-c", "sleep 1d"]), False),
])
def test_look_alikes_are_never_other_engines(container: dict[str, Any], vllm: bool) -> None:
    found, others = _found(_pod(container))
    assert others == []
    assert bool(found) is vllm


@pytest.mark.parametrize(("container", "engine", "port"), [
    (_c(command=[*SH, "echo starting vllm; exec python3 -m dynamo.vllm --model m"]), "dynamo-vllm", None),
    (_c(command=["trtllm-serve", "serve", "m", "--port=8200"]), "trtllm-serve", 8200),
    (_c(command=["trtllm-serve", "disaggregated_mpi_worker", "-c", "x"]), "trtllm-serve", 8000),
    (_c(command=["python3", "-m", "lmcache.v1.server", "0.0.0.0", "8100"]), "lmcache-server", 8100),
])
def test_real_ones_inside_scripts(container: dict[str, Any], engine: str, port: int | None) -> None:
    assert _found(_pod(container)) == ([], [("main", engine, port)])


@pytest.mark.parametrize(("container", "port"), [
    (_c(command=["/bin/sh", "-c", "exec python3 -m sglang.launch_server --port $(PORT)"],
        env=[{"name": "PORT", "value": "31000"}]), 31000),
    (_c(command=[*SH, "P=32000; python3 -m sglang.launch_server --port $P"]), 32000),
    (_c(command=["/usr/bin/env", "python3", "-m", "sglang.launch_server"]), 30000),
])
def test_sglang_inside_scripts_is_the_sglang_engines(container: dict[str, Any], port: int) -> None:
    """SGLang servers are discovered by the SGLang engine (kubectl_kvreset/engines/sglang)."""
    assert _found(_pod(container)) == (["main"], [])
    (pod,) = describe_pod_containers(_pod(container))
    assert pod.engine.name == "sglang" and [p.port for p in pod.ports] == [port]


def test_router_forms_are_not_engines() -> None:
    assert other_entrypoint(["python3", "-m", "dynamo.frontend"]) is None
    assert other_entrypoint(["trtllm-serve", "disaggregated"]) is None
    assert other_entrypoint(["trtllm-serve", "disaggregated", "-c", "x"]) is None


def test_mixed_pod_gives_one_of_each() -> None:
    pod = _pod(_c("vllm", ["vllm", "serve", "m"]), _c("sglang", ["python3", "-m", "sglang.launch_server"]),
               _c("trt", ["trtllm-serve", "m"]))
    assert _found(pod) == (["vllm", "sglang"], [("trt", "trtllm-serve", 8000)])
    # an SGLang label never turns the vLLM container into SGLang
    labelled = _pod(_c("modelserver", ["vllm", "serve", "m"]), labels={"llm-d.ai/engine-type": "sglang"})
    assert _found(labelled) == (["modelserver"], [])


SECRET_ARGS = ["--api-key", "sk-unit-secret-1", "--admin-api-key=sk-unit-secret-2", "--hf-token", "hf_unitSecret3"]


def test_secrets_in_arguments_never_reach_rows() -> None:
    pod = _pod(_c(command=["python3", "-m", "dynamo.sglang", "--port", "8000", *SECRET_ARGS],
                  env=[{"name": "HF_TOKEN", "value": "hf_unitSecret3"}]))
    (other,) = describe_other_containers(pod, _RS)
    (plan,) = plan_others([other], "restart", shared=False, users={})
    ok = RestartResult("ns", other.owner, None, "restarted", "rolled out")
    rows = [other_detect_row(other), other_plan_row(plan), other_outcome_row(plan, ok, interrupted=False)[0],
            other_outcome_row(plan, None, interrupted=False)[0], other_skipped_row(other, "vllm")[0]]
    text = json.dumps(rows) + repr(other)
    for secret in ("sk-unit-secret-1", "sk-unit-secret-2", "hf_unitSecret3"):
        assert secret not in text


def _server(name: str = "cache-1") -> Any:
    (server,) = describe_other_containers(_pod(_c(command=["lmcache_server", "0.0.0.0", "8100"]), name=name), _RS)
    return server


def test_lmcache_server_unlisted_namespaces_hold_the_restart() -> None:
    server = _server()
    users = other_users(server, [], [], [], ["other namespaces"])
    assert users and not users[0].listed
    (held,) = plan_others([server], "restart", shared=False, users={other_key(server): users})
    assert not held.restart and held.held is not None and "--shared-stores" in held.held
    row, code = other_outcome_row(held, None, interrupted=False)
    assert code is ExitCode.FAILED and row["result"] == "left"
    (given,) = plan_others([server], "restart", shared=True, users={other_key(server): users})
    assert given.restart


def test_lmcache_server_users_of_another_namespace_count() -> None:
    server = _server()
    engine_pod = _pod(_c("vllm", ["vllm", "serve", "m", "--kv-transfer-config",
                                  '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'],
                         env=[{"name": "LMCACHE_REMOTE_URL", "value": "lm://cache.ns.svc:8100"}]),
                      name="engine-abc12-q", ns="elsewhere")
    (engine,) = describe_pod_containers(engine_pod)
    users = other_users(server, [engine], [], [])
    assert [u.shown() for u in users] and "elsewhere/engine-abc12-q" in users[0].shown()


def test_yes_alone_never_restarts_a_used_lmcache_server() -> None:
    server = _server()
    users = {other_key(server): (User("ns/engine-0", "m"),)}
    for fallback in ("restart", "none", "devmode"):
        (plan,) = plan_others([server], fallback, shared=False, users=users)
        assert not plan.restart


@pytest.mark.parametrize(("kind", "remedy"), [
    ("StatefulSet", "kubectl rollout restart statefulset/x"),
    ("DaemonSet", "kubectl rollout restart daemonset/x"),
    ("Pod", "delete and recreate pod/x (a bare pod has no owner that replaces it)"),
])
def test_owner_kinds_fallback_restart_refuses_are_left_with_the_restart_by_hand(kind: str, remedy: str) -> None:
    import dataclasses

    other = dataclasses.replace(_server(), owner=Owner(kind, "x"), engine="sglang")
    (plan,) = plan_others([other], "restart", shared=False, users={})
    assert not plan.restart and plan.remedy == remedy
    assert other_plan_row(plan)["result"] == "left"
    row, code = other_outcome_row(plan, None, interrupted=False)
    assert (row["result"], code) == ("left", ExitCode.FAILED)


def test_replaced_row_names_its_successor() -> None:
    (other,) = describe_other_containers(_pod(_c(command=["python3", "-m", "dynamo.sglang", "--model-path", "m"])), _RS)
    (plan,) = plan_others([other], "restart", shared=False, users={})
    ok = RestartResult("ns", other.owner, None, "restarted", "rolled out")
    row, code = other_outcome_row(plan, ok, interrupted=False, successor="srv-def34-new")
    assert code is ExitCode.OK and row["pod"] == "srv-def34-new" and row["message"].startswith("replaces srv-abc12-xyz")
    # a restart that timed out names no successor and keeps the old pod, exit 1
    late = RestartResult("ns", other.owner, None, "timeout",
                         "0/1 ready: 0/3 nodes are available: Insufficient nvidia.com/gpu")
    row, code = other_outcome_row(plan, late, interrupted=False, successor="srv-def34-new")
    assert code is ExitCode.FAILED and row["pod"] == "srv-abc12-xyz" and "Insufficient nvidia.com/gpu" in row["message"]


def _scope(vllm: list[Any], others: list[Any]) -> Scope:
    return Scope(None, "ns", tuple(vllm), tuple(vllm), None, others=tuple(others), other_universe=tuple(others))  # type: ignore[arg-type]


def test_container_flag_with_mixed_pods() -> None:
    pod = _pod(_c("vllm", ["vllm", "serve", "m"]), _c("sglang", ["python3", "-m", "dynamo.sglang"]))
    vllm = describe_pod_containers(pod)
    others = describe_other_containers(pod, _RS, vllm_containers=[v.container for v in vllm])
    narrowed = narrow_containers(_scope(vllm, others), "vllm")
    assert [p.container for p in narrowed.pods] == ["vllm"] and narrowed.others == ()
    assert [o.container for o in narrowed.skipped_others] == ["sglang"]
    row, code = other_skipped_row(narrowed.skipped_others[0], "vllm")
    assert row["result"] == "skipped" and code is ExitCode.OK and "not emptied" in str(row["message"])
    only = narrow_containers(_scope(vllm, others), "sglang")
    assert only.pods == () and [o.container for o in only.others] == ["sglang"]
    assert [p.container for p in only.skipped] == ["vllm"]
    with pytest.raises(TargetError, match="sglang"):
        narrow_containers(_scope(vllm, others), "nope")
