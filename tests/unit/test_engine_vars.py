"""A data-parallel size the serve flags take from the container's environment: the flags say
when they do not establish the engine count (servecmd), and the job reads the ConfigMap, or a
Secret where permitted, to settle it, never writing a Secret's value."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from kubectl_kvreset.engines.vllm.servecmd import engines_unknown_reason, parse_container
from kubectl_kvreset.job.engines import resolve_engine_counts
from kubectl_kvreset.kube import KubeApiError
from kubectl_kvreset.pods import describe_pod_containers


def container(*args: str, env: list[dict[str, Any]] | None = None, env_from: list[dict[str, Any]] | None = None,
              command: list[str] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "vllm", "image": "vllm/vllm-openai:v0.26.0",
                         "command": command or ["vllm", "serve", "m", *args]}
    if env is not None:
        c["env"] = env
    if env_from is not None:
        c["envFrom"] = env_from
    return c


def cm_ref(var: str, name: str, key: str) -> dict[str, Any]:
    return {"name": var, "valueFrom": {"configMapKeyRef": {"name": name, "key": key}}}


def secret_ref(var: str, name: str, key: str) -> dict[str, Any]:
    return {"name": var, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}


def test_literal_flags_establish_the_count() -> None:
    cfg = parse_container(container("--data-parallel-size", "4"), {})
    assert cfg is not None and cfg.engines_per_port == 4
    assert cfg.engines_flags == ("--data-parallel-size 4",) and cfg.engines_unknown is None
    none = parse_container(container(), {})
    assert none is not None and none.engines_flags == () and none.engines_unknown is None


def test_a_variable_from_a_config_map_does_not_establish_it() -> None:
    c = container("--data-parallel-size", "$(DP)", env=[cm_ref("DP", "dp-env", "size")])
    cfg = parse_container(c, {})
    assert cfg is not None and cfg.engines_per_port == 1
    assert cfg.engines_flags == ("--data-parallel-size $(DP)",)
    assert cfg.engines_unknown is not None and cfg.engines_unknown.startswith("--data-parallel-size $(DP): ")
    assert "ConfigMap dp-env key size" in cfg.engines_unknown
    # a shell script reading it from the environment
    script = container(command=["/bin/bash", "-c", "exec vllm serve m --data-parallel-size ${DP}"],
                       env_from=[{"configMapRef": {"name": "dp-env"}}])
    sh = parse_container(script, {})
    assert sh is not None and sh.engines_unknown is not None and "--data-parallel-size" in sh.engines_unknown


def test_external_load_balancing_is_one_engine_whatever_the_size() -> None:
    c = container("--data-parallel-size", "$(DP)", "--data-parallel-external-lb", env=[cm_ref("DP", "d", "k")])
    cfg = parse_container(c, {})
    assert cfg is not None and cfg.engines_per_port == 1 and cfg.engines_unknown is None


def test_the_reason_names_an_unread_config_file() -> None:
    assert engines_unknown_reason((), (), "no permission to get configmaps") == (
        "the --config file, which may set the data-parallel size, was not read (no permission to get configmaps)")
    assert engines_unknown_reason(("--data-parallel-size 2",), (), None) is None
    assert engines_unknown_reason(("--data-parallel-size x",), (), None) == \
        "--data-parallel-size x: not an integer here"


class FakeKube:
    """``get_object`` over a dict of ConfigMaps and Secrets; ``forbidden`` kinds answer 403.
    Records each GET."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]], forbidden: tuple[str, ...] = ()) -> None:
        self.objects = objects
        self.forbidden = forbidden
        self.gets: list[tuple[str, str]] = []

    def get_object(self, group_version: str, plural: str, namespace: str | None, name: str) -> dict[str, Any]:
        self.gets.append((plural, name))
        if plural in self.forbidden:
            raise KubeApiError(403, "Forbidden", f'{plural} "{name}" is forbidden')
        obj = self.objects.get((plural, name))
        if obj is None:
            raise KubeApiError(404, "NotFound", f'{plural} "{name}" not found')
        return obj


def pod_of(c: dict[str, Any]) -> Any:
    raw = {"metadata": {"name": "p-0", "namespace": "ns", "uid": "u1"}, "spec": {"containers": [c]},
           "status": {"phase": "Running"}}
    (pod,) = describe_pod_containers(raw)
    return pod


def config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"kind": "Secret", "metadata": {"name": name},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


@pytest.mark.parametrize("how", ["valueFrom", "envFrom"])
def test_a_readable_config_map_settles_the_count(how: str) -> None:
    if how == "valueFrom":
        c = container("--data-parallel-size", "$(DP)", env=[cm_ref("DP", "dp-env", "size")])
        kube = FakeKube({("configmaps", "dp-env"): config_map("dp-env", {"size": "4"})})
    else:
        c = container("--data-parallel-size", "$(DP)", env_from=[{"configMapRef": {"name": "dp-env"}}])
        kube = FakeKube({("configmaps", "dp-env"): config_map("dp-env", {"DP": "4"})})
    (pod,) = resolve_engine_counts(kube, [pod_of(c)])  # type: ignore[arg-type]
    assert pod.serve.engines_per_port == 4 and pod.serve.engines_unknown is None and not pod.serve.engines_secret
    assert "data-parallel size read from the container's ConfigMap env: --data-parallel-size 4" in pod.notes
    assert pod.serve.argv[-1] == "$(DP)"  # only the count changes: the command stays as the spec writes it
    assert [g for g in kube.gets if g[0] == "secrets"] == []


def test_a_readable_secret_gives_the_count_but_never_its_value() -> None:
    c = container("--data-parallel-size", "$(DP)", env=[secret_ref("DP", "dp-secret", "size")])
    kube = FakeKube({("secrets", "dp-secret"): secret("dp-secret", {"size": "6"})})
    (pod,) = resolve_engine_counts(kube, [pod_of(c)])  # type: ignore[arg-type]
    assert pod.serve.engines_per_port == 6 and pod.serve.engines_unknown is None and pod.serve.engines_secret
    assert not any("6" in n for n in pod.notes), pod.notes
    assert "data-parallel size read from a Secret of the container's env (not shown)" in pod.notes
    assert "6" not in " ".join(pod.serve.argv) and pod.serve.env.get("DP") is None


def test_an_unreadable_source_leaves_the_count_unknown_and_says_why() -> None:
    c = container("--data-parallel-size", "$(DP)", env=[secret_ref("DP", "dp-secret", "size")])
    kube = FakeKube({("secrets", "dp-secret"): secret("dp-secret", {"size": "6"})}, forbidden=("secrets",))
    (pod,) = resolve_engine_counts(kube, [pod_of(c)])  # type: ignore[arg-type]
    assert pod.serve.engines_per_port == 1
    assert pod.serve.engines_unknown is not None
    assert pod.serve.engines_unknown.startswith(
        "--data-parallel-size $(DP): DP: not permitted to read Secret/dp-secret")
    missing = container("--data-parallel-size", "$(DP)", env=[cm_ref("DP", "gone", "size")])
    (pod,) = resolve_engine_counts(FakeKube({}), [pod_of(missing)])  # type: ignore[arg-type]
    assert pod.serve.engines_unknown is not None and "ConfigMap/gone does not exist" in pod.serve.engines_unknown


def test_nothing_is_read_for_flags_that_need_nothing() -> None:
    kube = FakeKube({})
    pods = [pod_of(container("--data-parallel-size", "2")), pod_of(container())]
    assert resolve_engine_counts(kube, pods) == pods  # type: ignore[arg-type]
    assert kube.gets == []
