"""Pure pod facts: which pods have no running vLLM container and why, the /metrics 500 hint,
the version an image tag claims, and what devmode says it replaces."""

from __future__ import annotations

from typing import Any

import pytest

from kubectl_kvreset.devmode import describe_replacements, owner_templates, read_template_dev_mode
from kubectl_kvreset.engines.vllm.imagever import image_claimed_version, version_mismatch
from kubectl_kvreset.pods import read_dev_mode
from kubectl_kvreset.podstate import metrics_500_hint, not_running


def pod(status: dict[str, Any], env: list[dict[str, Any]] | None = None, **container: Any) -> dict[str, Any]:
    c = {"name": "vllm", "image": "vllm/vllm-openai:v0.26.0", "command": ["vllm", "serve", "m"], "env": env or [],
         **container}
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [c]}, "status": status}


def test_unschedulable_names_the_scheduler_message() -> None:
    msg = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    got = not_running(pod({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}]}), "vllm")
    assert got is not None and (got.state, got.cause) == ("Unschedulable", msg)
    assert got.describe() == f"pod not running: Unschedulable: {msg}"


def test_container_creating_and_image_pull() -> None:
    creating = not_running(pod({"phase": "Pending", "containerStatuses": [
        {"name": "vllm", "state": {"waiting": {"reason": "ContainerCreating"}}}]}), "vllm")
    assert creating is not None and creating.state == "ContainerCreating"
    pull = not_running(pod({"phase": "Pending", "containerStatuses": [
        {"name": "vllm", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling"}}}]}),
        "vllm")
    assert pull is not None and (pull.state, pull.cause) == ("ImagePullBackOff", "Back-off pulling")


def test_crash_loop_on_an_invalid_dev_mode_names_the_value_and_the_fix() -> None:
    p = pod({"phase": "Running", "containerStatuses": [{
        "name": "vllm", "restartCount": 7, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]},
        env=[{"name": "VLLM_SERVER_DEV_MODE", "value": "true"}])
    dm = read_dev_mode(p["spec"]["containers"][0])
    got = not_running(p, "vllm", dev_mode=dm, owner_ref="deployment/d")
    assert got is not None and got.state == "CrashLoopBackOff"
    assert got.cause.startswith("last exit code 1 (Error), 7 restarts, ")
    assert 'VLLM_SERVER_DEV_MODE="true" is not an integer' in got.cause
    assert "kubectl kvreset devmode --enable deployment/d -n ns" in got.cause
    plain = not_running(p, "vllm")
    assert plain is not None and "VLLM_SERVER_DEV_MODE" not in plain.cause


CRASHING = {"phase": "Running", "containerStatuses": [{
    "name": "vllm", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}


def _resolved(p: dict[str, Any], data: dict[tuple[str, str], dict[str, str] | None] | None = None,
              denied: frozenset[str] = frozenset()) -> Any:
    """The pod's dev-mode value as devmode resolves it, ConfigMaps and Secrets from ``data``."""
    def lookup(kind: str, name: str) -> dict[str, str] | None:
        if name in denied:
            raise PermissionError(f"{kind}/{name}")
        return (data or {}).get((kind, name))

    tmpl = {"kind": "Deployment", "spec": {"template": {"metadata": p["metadata"], "spec": p["spec"]}}}
    return read_template_dev_mode(owner_templates(tmpl)[0], lookup)


@pytest.mark.parametrize(("env", "env_from", "data", "said"), [
    ([{"name": "VLLM_SERVER_DEV_MODE", "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "dev"}}}], None,
     {("ConfigMap", "flags"): {"dev": "true"}},
     'VLLM_SERVER_DEV_MODE="true" from ConfigMap flags key dev is not an integer'),
    ([{"name": "VLLM_SERVER_DEV_MODE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "mode"}}}], None,
     {("Secret", "s"): {"mode": ""}}, 'VLLM_SERVER_DEV_MODE="" from Secret s key mode is not an integer'),
    ([], [{"configMapRef": {"name": "vllm-env"}}], {("ConfigMap", "vllm-env"): {"VLLM_SERVER_DEV_MODE": "yes"}},
     'VLLM_SERVER_DEV_MODE="yes" from envFrom ConfigMap vllm-env key VLLM_SERVER_DEV_MODE is not an integer'),
    ([], [{"configMapRef": {"name": "e"}, "prefix": "VLLM_"}], {("ConfigMap", "e"): {"SERVER_DEV_MODE": "on"}},
     'VLLM_SERVER_DEV_MODE="on" from envFrom ConfigMap e key SERVER_DEV_MODE is not an integer'),
])
def test_crash_loop_names_a_referenced_invalid_value(env: list[dict[str, Any]], env_from: Any,
                                                     data: dict[tuple[str, str], dict[str, str]], said: str) -> None:
    p = pod(CRASHING, env=env, **({"envFrom": env_from} if env_from else {}))
    dm = read_dev_mode(p["spec"]["containers"][0])
    assert dm.source in ("valueFrom", "envFrom")
    got = not_running(p, "vllm", dev_mode=dm, owner_ref="deployment/d", resolved=_resolved(p, data))
    assert got is not None and got.state == "CrashLoopBackOff"
    assert said in got.cause and "(vllm/envs.py reads it with int())" in got.cause, got.cause
    assert "kubectl kvreset devmode --enable deployment/d -n ns" in got.cause


@pytest.mark.parametrize("value", ["1", "0", " 2", "+1"])
def test_a_referenced_value_vllm_accepts_is_not_blamed(value: str) -> None:
    # vllm/envs.py: bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0"))): int() parses these
    p = pod(CRASHING, env=[{"name": "VLLM_SERVER_DEV_MODE",
                            "valueFrom": {"configMapKeyRef": {"name": "f", "key": "k"}}}])
    got = not_running(p, "vllm", dev_mode=read_dev_mode(p["spec"]["containers"][0]),
                      resolved=_resolved(p, {("ConfigMap", "f"): {"k": value}}))
    assert got is not None and "VLLM_SERVER_DEV_MODE" not in got.cause


def test_an_unreadable_source_is_said_never_guessed() -> None:
    env = [{"name": "VLLM_SERVER_DEV_MODE", "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "dev"}}}]
    p = pod(CRASHING, env=env)
    dm = read_dev_mode(p["spec"]["containers"][0])
    got = not_running(p, "vllm", dev_mode=dm, resolved=_resolved(p, denied=frozenset({"flags"})))
    assert got is not None
    assert "VLLM_SERVER_DEV_MODE: value from ConfigMap flags key dev unread: not permitted to read ConfigMap/flags" \
        in got.cause
    from_env = pod(CRASHING, envFrom=[{"configMapRef": {"name": "vllm-env"}}])
    got = not_running(from_env, "vllm", dev_mode=read_dev_mode(from_env["spec"]["containers"][0]),
                      resolved=_resolved(from_env, denied=frozenset({"vllm-env"})))
    assert got is not None
    assert ("VLLM_SERVER_DEV_MODE: value from an envFrom source unread: not permitted to read ConfigMap/vllm-env"
            in got.cause), got.cause
    # a pod that is not crash-looping gets no dev-mode cause at all
    pending = pod({"phase": "Pending", "containerStatuses": [
        {"name": "vllm", "state": {"waiting": {"reason": "ContainerCreating"}}}]}, env=env)
    down = not_running(pending, "vllm", resolved=_resolved(pending, {("ConfigMap", "flags"): {"dev": "true"}}))
    assert down is not None and "VLLM_SERVER_DEV_MODE" not in down.cause


@pytest.mark.parametrize("status", [
    {"phase": "Running", "containerStatuses": [{"name": "vllm", "ready": False, "state": {"running": {}}}]},
    {"phase": "Running", "containerStatuses": [{"name": "vllm", "ready": True, "state": {"running": {}}}]},
    # another container crash-loops: the vLLM one still runs
    {"phase": "Running", "containerStatuses": [
        {"name": "vllm", "state": {"running": {}}},
        {"name": "side", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
])
def test_running_pods_are_left_to_the_ready_wait(status: dict[str, Any]) -> None:
    assert not_running(pod(status), "vllm") is None


def test_metrics_hint_only_for_tmp_mounts_and_the_multiproc_variable() -> None:
    assert metrics_500_hint(pod({}), "vllm") is None
    assert metrics_500_hint(pod({}, volumeMounts=[{"name": "cache", "mountPath": "/root/.cache"}]), "vllm") is None
    hint = metrics_500_hint(pod({}, volumeMounts=[{"name": "scratch", "mountPath": "/tmp/"}]), "vllm")
    assert hint is not None and "/tmp is the volume scratch" in hint and "#49983" in hint
    env = [{"name": "PROMETHEUS_MULTIPROC_DIR", "value": "/data/prom"}]
    hint = metrics_500_hint(pod({}, env=env), "vllm")
    assert hint is not None and "PROMETHEUS_MULTIPROC_DIR is set to /data/prom" in hint


@pytest.mark.parametrize("image,claimed", [
    ("vllm/vllm-openai:v0.23.0", "0.23.0"), ("docker.io/vllm/vllm-openai:v0.20.0-cu130", "0.20.0"),
    ("localhost:5000/vllm/vllm-openai:v0.26.0", "0.26.0"), ("vllm/vllm-openai:latest", None),
    ("ghcr.io/llm-d/llm-d-cuda:v0.8.1", "0.23.0"), ("ghcr.io/llm-d/llm-d:v0.9.0", "0.26.0"),
    ("ghcr.io/llm-d/llm-d-cuda:v0.7.0", "0.19.1"), ("ghcr.io/llm-d/llm-d:v0.2.0", None),
    ("ghcr.io/llm-d/llm-d-cuda-dev:sha-a1bcf21", None), ("ghcr.io/llm-d/llm-d-inference-scheduler:v0.9.0", None),
    ("vllm/vllm-openai@sha256:abc", None),
])
def test_image_claimed_version(image: str, claimed: str | None) -> None:
    assert image_claimed_version(image) == claimed


def test_version_mismatch() -> None:
    assert version_mismatch("vllm/vllm-openai:v0.23.0", "0.23.0") is None
    assert version_mismatch("vllm/vllm-openai:v0.23.0", "0.23") is None
    assert version_mismatch("vllm/vllm-openai:latest", "0.26.0") is None
    assert version_mismatch("vllm/vllm-openai:v0.23.0", "dev") is None
    note = version_mismatch("vllm/vllm-openai:v0.23.0", "0.26.0")
    assert note is not None and "says vLLM 0.23.0, but GET /version answers 0.26.0" in note


def deployment(env: list[dict[str, Any]], env_from: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "vllm", "image": "vllm/vllm-openai:v0.26.0", "command": ["vllm", "serve", "m"],
                         "env": env}
    if env_from:
        c["envFrom"] = env_from
    return {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [c]}}}}


def test_describe_replacements() -> None:
    data = {("ConfigMap", "flags"): {"dev": "0", "VLLM_SERVER_DEV_MODE": "1"}}

    def lookup(kind: str, name: str) -> dict[str, str] | None:
        return data.get((kind, name))

    def said(obj: dict[str, Any], enable: bool) -> list[str]:
        readings = [read_template_dev_mode(ref, lookup) for ref in owner_templates(obj)]
        return describe_replacements(obj, readings, enable=enable)

    assert said(deployment([{"name": "VLLM_SERVER_DEV_MODE", "value": "0"}]), True) == []
    vf = deployment([{"name": "VLLM_SERVER_DEV_MODE",
                      "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "dev"}}}])
    (line,) = said(vf, True)
    assert "read from configMapKeyRef ConfigMap/flags key 'dev' (now \"0\")" in line
    assert 'replaces that entry with the literal "1"' in line
    (line,) = said(vf, False)
    assert "is removed" in line
    ef = deployment([], [{"configMapRef": {"name": "flags"}}])
    (line,) = said(ef, True)
    assert 'comes from envFrom ConfigMap/flags (now "1"); --enable adds the literal "1"' in line
    (line,) = said(ef, False)
    assert "stays set through envFrom ConfigMap/flags" in line
