"""A model name the pod spec does not tell (a construct not evaluated, ``VLLM_MODEL_REDIRECT_PATH``,
a remote URI): every per-model step is left with the reason, an unknown model of another pod
counts as possibly the same model, and the running server's ``model_config.model`` wins."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubectl_kvreset.discovery import VllmPod, describe_pod
from kubectl_kvreset.engines.vllm.liveconfig import LiveConfig, read_server_info
from kubectl_kvreset.engines.vllm.servecmd import known_model, model_unknown_reason, parse_container
from kubectl_kvreset.fs import model_dir_prefixes, plan_fs_clear, run_fs_clear
from kubectl_kvreset.job.fsclear import fs_row
from kubectl_kvreset.job.probes import Probe, apply_probe
from kubectl_kvreset.stores.config import StoreKind, StoreUse
from kubectl_kvreset.stores.find import FoundStore, StoreUser

KTC = json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                  "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
                                                "secondary_tiers": [{"type": "fs", "root_dir": "/mnt/kv"}]}})
FROM_CM = {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "model"}}}


def _container(model: str, env: list[dict[str, Any]] | None = None, shell: str | None = None) -> dict[str, Any]:
    command = (["bash", "-c", shell] if shell is not None else
               ["vllm", "serve", model, "--port", "8000", "--kv-transfer-config", KTC])
    return {"name": "vllm", "image": "vllm/vllm-openai:v0.26.0", "command": command, "env": env or [],
            "volumeMounts": [{"name": "kv", "mountPath": "/mnt/kv"}]}


def _pod(name: str, container: dict[str, Any]) -> VllmPod:
    obj = {"kind": "Pod", "metadata": {"name": name, "namespace": "llm", "uid": "u-" + name},
           "spec": {"nodeName": "n", "containers": [container],
                    "volumes": [{"name": "kv", "persistentVolumeClaim": {"claimName": "kv-cache"}}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    found = describe_pod(obj)
    assert found is not None
    return found


UNKNOWN = {
    "configmap": (_container("$(MODEL)", [FROM_CM]), "MODEL comes from ConfigMap cfg key model"),
    "shell-if": (_container("", shell='M=org/a; if [ -n "$X" ]; then M=org/b; fi; exec vllm serve "$M" '
                            "--kv-transfer-config '" + KTC + "'"), "inside a if command"),
    "redirect": (_container("org/a", [{"name": "VLLM_MODEL_REDIRECT_PATH", "value": "/etc/redirect.json"}]),
                 "maybe_model_redirect"),
    "redirect-valuefrom": (_container("org/a", [{"name": "VLLM_MODEL_REDIRECT_PATH",
                                                 "valueFrom": {"configMapKeyRef": {"name": "r", "key": "p"}}}]),
                           "ConfigMap r key p"),
    "s3": (_container("s3://bucket/models/org-a"), "remote URI"),
    "gs": (_container("gs://bucket/org-a"), "remote URI"),
}


@pytest.mark.parametrize("case", sorted(UNKNOWN))
def test_the_model_vllm_uses_is_unknown(case: str) -> None:
    container, reason = UNKNOWN[case]
    pod = _pod("t", container)
    assert pod.serve.model_unknown is not None and reason in pod.serve.model_unknown
    assert known_model(pod.serve) is None and model_dir_prefixes(pod) == ()


def test_a_literal_model_is_known() -> None:
    pod = _pod("t", _container("org/a"))
    assert pod.serve.model_unknown is None and known_model(pod.serve) == "org/a"
    assert model_unknown_reason("org/a", (), {}) is None


class NoExec:
    def exec_command(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no deletion may run for an unknown model")


@pytest.mark.parametrize("case", sorted(UNKNOWN))
def test_a_per_model_fs_deletion_of_an_unknown_model_is_left(case: str) -> None:
    target_pod = _pod("t", UNKNOWN[case][0])
    other = _pod("other", _container("org/b"))
    (target,) = plan_fs_clear([target_pod], [target_pod, other])
    assert target.model_only and target.other_pods == ("other",)
    assert target.model_unknown is not None
    row = fs_row(target)
    assert row["result"] == "left" and "nothing was deleted" in row["message"]
    result = run_fs_clear(NoExec(), target)  # type: ignore[arg-type]
    assert result.result == "left" and UNKNOWN[case][1] in (result.message or "")


def test_a_volume_only_targets_mount_is_still_emptied_whole() -> None:
    target_pod = _pod("t", UNKNOWN["configmap"][0])
    (target,) = plan_fs_clear([target_pod], [target_pod])
    assert not target.model_only and target.model_unknown is None and fs_row(target)["result"] == "planned"


def test_another_users_unknown_model_counts_as_possibly_the_same() -> None:
    tgt, oth = _pod("t", _container("org/a")), _pod("o", UNKNOWN["configmap"][0])
    store = FoundStore(StoreKind.REDIS, None, None,  # type: ignore[arg-type]
                       (StoreUser(tgt, StoreUse(StoreKind.REDIS, None, "model", model="org/a"), True),
                        StoreUser(oth, StoreUse(StoreKind.REDIS, None, "model", model=None), False)))
    assert store.others("org/a") == [oth]


def test_the_live_model_wins_over_an_unknown_spec_model() -> None:
    body = json.dumps({"vllm_config": {"model_config": {"model": "/tmp/redirected/org-a"},
                                       "kv_transfer_config": None}}).encode()
    live = read_server_info(body)
    assert live == LiveConfig(True, None, "/tmp/redirected/org-a")
    pod = _pod("t", UNKNOWN["redirect"][0])
    probe = Probe(version="0.26.0", failure=None, live=live, live_failure=None, routes=None, engines=None,
                  engines_failure=None)
    seen = apply_probe(pod, probe)
    assert seen.serve.model == "/tmp/redirected/org-a" and seen.serve.model_unknown is None and seen.serve.model_live
    assert model_dir_prefixes(seen) == ("/tmp/redirected/org-a",)


def test_parse_container_names_the_redirect_from_the_spec_env() -> None:
    cfg = parse_container(UNKNOWN["redirect"][0], {"VLLM_MODEL_REDIRECT_PATH": "/etc/redirect.json"})
    assert cfg is not None and "VLLM_MODEL_REDIRECT_PATH" in (cfg.model_unknown or "")


class CmKube:
    """Answers ConfigMap reads with ``data``."""

    def __init__(self, data: dict[str, str]) -> None:
        self.data = data

    def get_object(self, group_version: str, plural: str, namespace: str, name: str) -> dict[str, Any]:
        return {"data": self.data}


def _redis_container(model: str, env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"name": "vllm", "image": "vllm/vllm-openai:v0.32.0",
            "command": ["vllm", "serve", model, "--kv-transfer-config",
                        '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'],
            "env": [{"name": "LMCACHE_REMOTE_URL", "value": "redis://kv-redis:6379"}, *(env or [])],
            "envFrom": [{"configMapRef": {"name": "extra"}}]}


def test_a_redirect_from_an_envfrom_source_makes_the_store_model_unknown_unless_live() -> None:
    from kubectl_kvreset.stores.find import pod_stores

    pod = _pod("t", _redis_container("org/a"))
    assert pod.serve.model_unknown is None  # the spec alone does not say
    kube = CmKube({"VLLM_MODEL_REDIRECT_PATH": "/etc/redirect.json"})
    uses, notes = pod_stores(kube, pod, {})  # type: ignore[arg-type]
    assert [u.model for u in uses] == [None] and any("maybe_model_redirect" in n for n in notes)
    live = LiveConfig(True, {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}, "/models/org-a")
    seen = apply_probe(pod, Probe(version="0.32.0", failure=None, live=live))
    uses, notes = pod_stores(kube, seen, {})  # type: ignore[arg-type]
    assert [u.model for u in uses] == ["/models/org-a"]
    # a literal model without a redirect keeps its name
    uses, _ = pod_stores(CmKube({}), pod, {})  # type: ignore[arg-type]
    assert [u.model for u in uses] == ["org/a"]
