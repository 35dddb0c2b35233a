"""A container's environment as the kubelet builds it when a name appears twice, and what the
command line then holds: the last ``env`` entry of a name wins
(``pkg/kubelet/kubelet_pods.go::makeEnvironmentVariables``), so a later ``valueFrom`` the
plugin does not read leaves the variable unevaluated, never the earlier literal."""

from __future__ import annotations

import json
from typing import Any

from kubectl_kvreset.discovery import VllmPod, describe_pod, pod_env
from kubectl_kvreset.engines.vllm.servecmd import parse_container, unevaluated_in
from kubectl_kvreset.stores.config import resolve_env
from kubectl_kvreset.tiers import TierKind

_CM = {"name": "ROOT", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "root"}}}


def _ktc(root: str) -> str:
    return json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
                                                     "secondary_tiers": [{"type": "fs", "root_dir": root}]}})


def _pod_obj(container: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p0", "namespace": "llm", "uid": "u0"},
            "spec": {"nodeName": "n", "containers": [container],
                     "volumes": [{"name": "kv", "persistentVolumeClaim": {"claimName": "kv"}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def _container(env: list[dict[str, Any]], command: list[str]) -> dict[str, Any]:
    return {"name": "vllm", "image": "vllm/vllm-openai:v0.26.0", "command": command, "env": env,
            "volumeMounts": [{"name": "kv", "mountPath": "/mnt/kv"}]}


def _describe(container: dict[str, Any]) -> VllmPod:
    found = describe_pod(_pod_obj(container))
    assert found is not None
    return found


def test_a_later_literal_replaces_an_earlier_one() -> None:
    c = _container([{"name": "ROOT", "value": "/mnt/kv/a"}, {"name": "ROOT", "value": "/mnt/kv/b"}], [])
    assert pod_env(_pod_obj(c), c)["ROOT"] == "/mnt/kv/b"


def test_a_later_valuefrom_not_read_unsets_the_earlier_literal() -> None:
    c = _container([{"name": "ROOT", "value": "/mnt/kv/a"}, _CM], [])
    assert "ROOT" not in pod_env(_pod_obj(c), c)
    # a later fieldRef is read and wins too
    c = _container([{"name": "ROOT", "value": "/mnt/kv/a"},
                    {"name": "ROOT", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}], [])
    assert pod_env(_pod_obj(c), c)["ROOT"] == "p0"
    # a literal after the valueFrom wins again
    c = _container([_CM, {"name": "ROOT", "value": "/mnt/kv/c"}], [])
    assert pod_env(_pod_obj(c), c)["ROOT"] == "/mnt/kv/c"


def test_an_fs_root_from_a_duplicated_name_is_left_unevaluated() -> None:
    c = _container([{"name": "ROOT", "value": "/mnt/kv/a"}, _CM],
                   ["vllm", "serve", "org/m", "--kv-transfer-config", _ktc("$(ROOT)")])
    pod = _describe(c)
    (tier,) = [t for t in pod.layout.tiers if t.kind is TierKind.FS]
    assert tier.root_dir == "$(ROOT)"
    assert tier.unevaluated is not None and "ConfigMap cfg key root" in tier.unevaluated


def test_a_shell_variable_from_a_duplicated_name_is_unevaluated() -> None:
    c = _container([{"name": "MODEL", "value": "org/b"},
                    {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "model"}}}],
                   ["bash", "-c", 'exec vllm serve "${MODEL:-org/default}"'])
    cfg = parse_container(c, pod_env(_pod_obj(c), c))
    assert cfg is not None and cfg.model == "${MODEL:-org/default}"
    assert unevaluated_in(cfg.model, cfg.unevaluated)


def test_a_literal_after_a_valuefrom_is_not_named_as_coming_from_the_source() -> None:
    c = _container([_CM, {"name": "ROOT", "value": "/mnt/kv/c"}],
                   ["vllm", "serve", "org/m", "--kv-transfer-config", _ktc("$(ROOT)/x")])
    pod = _describe(c)
    (tier,) = [t for t in pod.layout.tiers if t.kind is TierKind.FS]
    assert tier.root_dir == "/mnt/kv/c/x" and tier.unevaluated is None


def test_resolve_env_takes_the_last_entry_and_unsets_on_an_unreadable_source() -> None:
    c = _container([{"name": "MODEL", "value": "org/b"},
                    {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "model"}}}], [])

    def lookup(kind: str, name: str) -> dict[str, str]:
        return {"model": "org/a"}

    env, _ = resolve_env(_pod_obj(c), c, lookup)
    assert env["MODEL"] == "org/a"

    def refused(kind: str, name: str) -> dict[str, str]:
        raise PermissionError("forbidden")

    env, notes = resolve_env(_pod_obj(c), c, refused)
    assert "MODEL" not in env and any("not permitted" in n for n in notes)

    def absent(kind: str, name: str) -> dict[str, str]:
        raise KeyError(name)

    # an optional reference to a ConfigMap that does not exist keeps the earlier value (the kubelet
    # skips it); a required one does not start the container, so the value is not the earlier one
    opt = _container([{"name": "MODEL", "value": "org/b"},
                      {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "model",
                                                                          "optional": True}}}], [])
    assert resolve_env(_pod_obj(opt), opt, absent)[0]["MODEL"] == "org/b"
    assert resolve_env(_pod_obj(opt), opt, lambda k, n: {"other": "x"})[0]["MODEL"] == "org/b"
    assert "MODEL" not in resolve_env(_pod_obj(c), c, absent)[0]
