"""devmode.py: vLLM container, dev-mode reading, JSON patch builder, managing controllers."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from kubectl_kvreset.devmode import (
    DEV_MODE_ENV,
    DevModeReading,
    TemplateRef,
    blocking,
    dev_mode_patch,
    find_vllm_container,
    managing_controllers,
    owner_templates,
    read_template_dev_mode,
    read_template_dev_modes,
    vllm_accepts,
)
from tests.sim.store import ApiError, json_patch

from .llmd_fixtures import fixture_path

SIDECAR = {"name": "routing-proxy", "image": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.2.0",
           "args": ["--port=8000", "--vllm-port=8200"]}


def vllm(env: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "vllm", "image": "vllm/vllm-openai:v0.26.0",
                         "command": ["vllm", "serve", "Qwen/Qwen3-0.6B", "--port", "8200"]}
    if env is not None:
        c["env"] = env
    c.update(extra)
    return c


def deployment(container: dict[str, Any], *, sidecar_first: bool = True, **meta: Any) -> dict[str, Any]:
    containers = [copy.deepcopy(SIDECAR), container] if sidecar_first else [container]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", **meta},
            "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": containers}}}}


def lws(worker: dict[str, Any], leader: dict[str, Any] | None = None) -> dict[str, Any]:
    lwt: dict[str, Any] = {"size": 2, "workerTemplate": {"spec": {"containers": [worker]}}}
    if leader is not None:
        lwt["leaderTemplate"] = {"spec": {"containers": [leader]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "w"},
            "spec": {"replicas": 1, "leaderWorkerTemplate": lwt}}


def dev_entries(obj: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
    """Per template, the env entries of the vLLM container that name the variable."""
    out = []
    for ref in owner_templates(obj):
        vc = find_vllm_container(ref.template)
        assert vc is not None
        out.append([e for e in vc.spec.get("env") or [] if e.get("name") == DEV_MODE_ENV])
    return out


def enable_twice(obj: dict[str, Any]) -> dict[str, Any]:
    ops = dev_mode_patch(obj, enable=True)
    assert ops, "a change was expected"
    after = json_patch(obj, ops)
    assert dev_mode_patch(after, enable=True) == []
    return after


# ---- vLLM's parse rule ----

@pytest.mark.parametrize("value, ok", [("1", True), ("2", True), (" 1", True), ("0", True), ("true", False),
                                       ("yes", False), ("", False), ("1.0", False)])
def test_vllm_accepts_follows_int(value: str, ok: bool) -> None:
    assert vllm_accepts(value) is ok


# ---- finding the container ----

def test_vllm_container_is_found_by_its_command_not_position() -> None:
    obj = deployment(vllm([]))
    vc = find_vllm_container(owner_templates(obj)[0].template)
    assert vc is not None and vc.index == 1 and vc.name == "vllm"


def test_no_vllm_container_makes_the_patch_refuse() -> None:
    obj = deployment({"name": "app", "image": "nginx", "command": ["nginx"]}, sidecar_first=False)
    with pytest.raises(ValueError, match="no container that runs a vLLM API server"):
        dev_mode_patch(obj, enable=True)


def test_lws_templates_leader_before_worker() -> None:
    obj = lws(vllm(), leader=vllm())
    assert [(r.label, r.path) for r in owner_templates(obj)] == [
        ("leader", "/spec/leaderWorkerTemplate/leaderTemplate"),
        ("worker", "/spec/leaderWorkerTemplate/workerTemplate")]


# ---- enable ----

def test_enable_without_env_adds_the_list() -> None:
    obj = deployment(vllm())
    ops = dev_mode_patch(obj, enable=True)
    assert {"op": "add", "path": "/spec/template/spec/containers/1/env",
            "value": [{"name": DEV_MODE_ENV, "value": "1"}]} in ops
    after = enable_twice(obj)
    assert dev_entries(after) == [[{"name": DEV_MODE_ENV, "value": "1"}]]
    assert after["spec"]["template"]["spec"]["containers"][0] == SIDECAR


def test_enable_with_other_env_appends() -> None:
    obj = deployment(vllm([{"name": "HF_TOKEN", "value": "x"}]))
    after = enable_twice(obj)
    env = after["spec"]["template"]["spec"]["containers"][1]["env"]
    assert env == [{"name": "HF_TOKEN", "value": "x"}, {"name": DEV_MODE_ENV, "value": "1"}]


@pytest.mark.parametrize("entry", [
    {"name": DEV_MODE_ENV, "value": "true"},
    {"name": DEV_MODE_ENV, "value": ""},
    {"name": DEV_MODE_ENV},
    {"name": DEV_MODE_ENV, "value": "0"},
    {"name": DEV_MODE_ENV, "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "dev"}}},
])
def test_enable_replaces_a_wrong_value_in_place(entry: dict[str, Any]) -> None:
    obj = deployment(vllm([{"name": "A", "value": "1"}, entry, {"name": "B", "value": "2"}]))
    after = enable_twice(obj)
    env = after["spec"]["template"]["spec"]["containers"][1]["env"]
    assert env == [{"name": "A", "value": "1"}, {"name": DEV_MODE_ENV, "value": "1"}, {"name": "B", "value": "2"}]


def test_enable_leaves_exactly_one_entry_when_several_name_it() -> None:
    obj = deployment(vllm([{"name": DEV_MODE_ENV, "value": "true"}, {"name": "X", "value": "x"},
                           {"name": DEV_MODE_ENV, "value": "1"}, {"name": DEV_MODE_ENV, "value": "yes"}]))
    after = enable_twice(obj)
    env = after["spec"]["template"]["spec"]["containers"][1]["env"]
    assert env == [{"name": DEV_MODE_ENV, "value": "1"}, {"name": "X", "value": "x"}]


def test_enable_already_on_sends_nothing() -> None:
    obj = deployment(vllm([{"name": DEV_MODE_ENV, "value": "1"}]))
    assert dev_mode_patch(obj, enable=True) == []


def test_patch_carries_tests_so_a_stale_read_fails() -> None:
    obj = deployment(vllm([{"name": DEV_MODE_ENV, "value": "true"}]))
    ops = dev_mode_patch(obj, enable=True)
    moved = copy.deepcopy(obj)
    moved["spec"]["template"]["spec"]["containers"][1]["env"].insert(0, {"name": "NEW", "value": "v"})
    with pytest.raises(ApiError) as err:
        json_patch(moved, ops)
    assert err.value.code == 422


def test_enable_lws_patches_both_templates() -> None:
    obj = lws(vllm([{"name": DEV_MODE_ENV, "value": "true"}]), leader=vllm())
    after = enable_twice(obj)
    assert dev_entries(after) == [[{"name": DEV_MODE_ENV, "value": "1"}]] * 2


def test_enable_lws_without_leader_template_does_not_create_one() -> None:
    obj = lws(vllm())
    after = enable_twice(obj)
    assert "leaderTemplate" not in after["spec"]["leaderWorkerTemplate"]


# ---- disable ----

def test_disable_removes_every_entry() -> None:
    obj = deployment(vllm([{"name": DEV_MODE_ENV, "value": "1"}, {"name": "K", "value": "v"},
                           {"name": DEV_MODE_ENV, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]))
    ops = dev_mode_patch(obj, enable=False)
    after = json_patch(obj, ops)
    assert after["spec"]["template"]["spec"]["containers"][1]["env"] == [{"name": "K", "value": "v"}]
    assert dev_mode_patch(after, enable=False) == []


def test_disable_when_absent_sends_nothing() -> None:
    assert dev_mode_patch(deployment(vllm()), enable=False) == []


# ---- reading ----

def reading(container: dict[str, Any], sources: dict[tuple[str, str], Any] | None = None) -> DevModeReading:
    ref = owner_templates(deployment(container))[0]

    def lookup(kind: str, name: str) -> Mapping[str, str] | None:
        value = (sources or {}).get((kind, name))
        if value == "forbidden":
            raise PermissionError("403")
        return value  # type: ignore[no-any-return, unused-ignore]

    return read_template_dev_mode(ref, lookup)


def test_read_literal_values() -> None:
    r = reading(vllm([{"name": DEV_MODE_ENV, "value": "true"}]))
    assert (r.state, r.value, r.source, r.accepted, r.enabled) == ("invalid", "true", "env", False, False)
    assert "vLLM will not start" in r.describe()
    r = reading(vllm([{"name": DEV_MODE_ENV, "value": "1"}]))
    assert (r.state, r.enabled, r.entries) == ("on", True, 1)
    r = reading(vllm([{"name": DEV_MODE_ENV, "value": "0"}]))
    assert (r.state, r.accepted) == ("off", True)
    r = reading(vllm([{"name": DEV_MODE_ENV, "value": ""}]))
    assert r.state == "invalid"
    assert reading(vllm()).state == "off"


def test_read_last_env_entry_wins_over_envfrom() -> None:
    c = vllm([{"name": DEV_MODE_ENV, "value": "true"}, {"name": DEV_MODE_ENV, "value": "0"}],
             envFrom=[{"configMapRef": {"name": "cm"}}])
    r = reading(c, {("ConfigMap", "cm"): {DEV_MODE_ENV: "1"}})
    assert (r.value, r.source, r.entries) == ("0", "env", 2)


def test_read_envfrom_configmap_and_secret_with_prefix() -> None:
    c = vllm(envFrom=[{"configMapRef": {"name": "cm"}}, {"secretRef": {"name": "sec"}, "prefix": "VLLM_"}])
    r = reading(c, {("ConfigMap", "cm"): {DEV_MODE_ENV: "true"}, ("Secret", "sec"): {"SERVER_DEV_MODE": "1"}})
    assert (r.value, r.source, r.state) == ("1", "envFrom Secret/sec", "on")
    r = reading(c, {("ConfigMap", "cm"): {DEV_MODE_ENV: "true"}})
    assert (r.value, r.source, r.state) == ("true", "envFrom ConfigMap/cm", "invalid")


def test_read_value_from_key_refs() -> None:
    c = vllm([{"name": DEV_MODE_ENV, "valueFrom": {"secretKeyRef": {"name": "s", "key": "dev"}}}])
    r = reading(c, {("Secret", "s"): {"dev": "2"}})
    assert (r.value, r.source, r.state) == ("2", "secretKeyRef Secret/s", "on")
    r = reading(c, {("Secret", "s"): "forbidden"})
    assert r.state == "unknown" and r.detail == "not permitted to read Secret/s"
    r = reading(c, {("Secret", "s"): {"other": "1"}})
    assert r.state == "unknown" and "absent" in str(r.detail)


def test_read_forbidden_envfrom_is_unknown_not_off() -> None:
    r = reading(vllm(envFrom=[{"secretRef": {"name": "s"}}]), {("Secret", "s"): "forbidden"})
    assert r.state == "unknown" and "not permitted" in r.describe()


def test_no_vllm_container_reading() -> None:
    ref = TemplateRef("template", "/spec/template", {"spec": {"containers": [SIDECAR]}})
    assert read_template_dev_mode(ref).state == "none"


# ---- managing controllers ----

def test_owner_references_block() -> None:
    obj = deployment(vllm(), ownerReferences=[{"apiVersion": "serving.kserve.io/v1alpha1",
                                               "kind": "LLMInferenceService", "name": "qwen", "controller": True}])
    managers = managing_controllers(obj)
    assert [(m.kind, m.name, m.reverts) for m in managers] == [("LLMInferenceService", "qwen", True)]
    assert "LLMInferenceService/qwen (controller ownerReference)" == managers[0].describe()


def test_gitops_markers_block() -> None:
    argo = deployment(vllm(), annotations={"argocd.argoproj.io/tracking-id": "bench:apps/Deployment:llmd/d"})
    assert [(m.kind, m.name) for m in blocking(managing_controllers(argo))] == [("Argo CD", "bench")]
    flux = deployment(vllm(), labels={"kustomize.toolkit.fluxcd.io/namespace": "flux-system",
                                      "kustomize.toolkit.fluxcd.io/name": "apps"})
    assert [(m.kind, m.name) for m in blocking(managing_controllers(flux))] == [
        ("Flux Kustomization", "flux-system/apps")]
    other = deployment(vllm(), labels={"app.kubernetes.io/managed-by": "kserve-controller"})
    assert [m.kind for m in blocking(managing_controllers(other))] == ["kserve-controller"]


def test_helm_is_reported_but_does_not_block() -> None:
    obj = deployment(vllm(), labels={"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": "ms"})
    managers = managing_controllers(obj)
    assert [(m.kind, m.name, m.reverts) for m in managers] == [("Helm", "ms", False)]
    assert blocking(managers) == []


def test_plain_owner_has_no_manager() -> None:
    assert managing_controllers(deployment(vllm())) == []


# ---- the fixtures ----

@pytest.mark.parametrize("prefix", ["01", "02", "03", "05", "06"])
def test_every_fixture_owner_enables_once_and_disables(prefix: str) -> None:
    with fixture_path(prefix).open(encoding="utf-8") as fh:
        docs = [d for d in yaml.safe_load_all(fh) if isinstance(d, dict)]
    owners = [d for d in docs if d.get("kind") in ("Deployment", "LeaderWorkerSet")]
    patched = 0
    for obj in owners:
        try:
            after = enable_twice(obj)
        except ValueError:
            assert "epp" in obj["metadata"]["name"]  # the scheduler runs no vLLM
            continue
        patched += 1
        assert all(entries == [{"name": DEV_MODE_ENV, "value": "1"}] for entries in dev_entries(after))
        off = json_patch(after, dev_mode_patch(after, enable=False))
        assert all(entries == [] for entries in dev_entries(off))
        assert all(read_template_dev_mode(r).state == "off" for r in owner_templates(off))
    assert patched >= 1


def two_models(second_env: list[dict[str, Any]]) -> dict[str, Any]:
    """A Deployment whose pods run vLLM twice (model-a on 8000 with dev mode on, model-b on
    8001 with ``second_env``), behind a sidecar."""
    a = vllm([{"name": DEV_MODE_ENV, "value": "1"}], name="model-a", command=["vllm", "serve", "a", "--port", "8000"])
    b = vllm(second_env, name="model-b", command=["vllm", "serve", "b", "--port", "8001"])
    obj = deployment(a)
    obj["spec"]["template"]["spec"]["containers"].append(b)
    return obj


@pytest.mark.parametrize("second", [[{"name": DEV_MODE_ENV, "value": "true"}], [{"name": DEV_MODE_ENV, "value": "0"}],
                                    [], None])
def test_every_vllm_container_is_read_and_patched(second: list[dict[str, Any]] | None) -> None:
    obj = two_models(second or [])
    if second is None:
        del obj["spec"]["template"]["spec"]["containers"][2]["env"]
    (ref,) = owner_templates(obj)
    readings = read_template_dev_modes(ref)
    assert [(r.container, r.state) for r in readings] == [
        ("model-a", "on"), ("model-b", "invalid" if second and second[0]["value"] == "true" else "off")]
    assert read_template_dev_mode(ref, container="model-b") == readings[1]
    after = json_patch(obj, dev_mode_patch(obj, enable=True))
    containers = after["spec"]["template"]["spec"]["containers"]
    assert containers[0] == SIDECAR
    for c in containers[1:]:
        assert [e for e in c["env"] if e["name"] == DEV_MODE_ENV] == [{"name": DEV_MODE_ENV, "value": "1"}], c
    assert dev_mode_patch(after, enable=True) == []
    off = json_patch(after, dev_mode_patch(after, enable=False))
    assert all(r.state == "off" for r in read_template_dev_modes(owner_templates(off)[0]))


def test_patch_carries_the_resource_version_it_was_built_from() -> None:
    obj = deployment(vllm([{"name": "A", "value": "a"}]), resourceVersion="41")
    ops = dev_mode_patch(obj, enable=True)
    assert ops[0] == {"op": "replace", "path": "/metadata/resourceVersion", "value": "41"}
    assert json_patch(obj, ops)["metadata"]["resourceVersion"] == "41"  # the server compares it, then bumps it
    done = json_patch(obj, ops)
    assert dev_mode_patch(done, enable=True) == []  # nothing to send: no precondition alone
