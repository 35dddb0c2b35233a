"""clear's per-pod step plan: API reset, clear-fs, and the disruptive fallback."""

from __future__ import annotations

import pytest
from packaging.version import Version

from kubectl_kvreset.engines.vllm.kvconfig import layout_from_config
from kubectl_kvreset.plan import api_reset_effects, plan_pod_steps
from kubectl_kvreset.tiers import TierKind

TIERED = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
          "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 10**9,
                                        "secondary_tiers": [{"type": "fs", "root_dir": "/mnt/files-storage"}]}}
NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
MOONCAKE = {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}
LMCACHE = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
           "kv_connector_extra_config": {"lmcache.remote_url": "lm://cache-server:65432"}}


def steps(cfg, version, *, dev_on=True, fallback="none"):
    effects = api_reset_effects(layout_from_config(cfg), Version(version) if version else None)
    return plan_pod_steps(effects, dev_mode_on=dev_on, fallback=fallback)


def kinds(tiers):
    return [t.kind for t in tiers]


def test_tiered_026_dev_on_needs_no_disruption() -> None:
    plan = steps(TIERED, "0.26.0")
    assert plan.actions() == ("api-reset", "clear-fs")
    assert kinds(plan.steps[0].empties) == [TierKind.GPU, TierKind.CPU]
    assert plan.left == () and plan.needs is None


def test_tiered_023_without_fallback_leaves_cpu_and_names_the_flag() -> None:
    plan = steps(TIERED, "0.23.0")
    assert plan.actions() == ("api-reset", "clear-fs")
    assert [(lt.tier.kind, lt.flag) for lt in plan.left] == [(TierKind.CPU, "--fallback=restart")]
    assert plan.needs == "restart"


def test_tiered_023_with_restart_is_clear_fs_then_restart() -> None:
    plan = steps(TIERED, "0.23.0", fallback="restart")
    assert plan.actions() == ("clear-fs", "restart")
    assert plan.steps[1].disruptive and kinds(plan.steps[1].empties) == [TierKind.GPU, TierKind.CPU]
    assert plan.left == ()


def test_dev_mode_off_with_devmode_fallback_rolls_and_still_clears_fs() -> None:
    plan = steps(TIERED, "0.26.0", dev_on=False, fallback="devmode")
    assert plan.actions() == ("clear-fs", "devmode") and plan.left == ()


def test_dev_mode_off_without_fallback_leaves_gpu_and_cpu() -> None:
    plan = steps(NIXL, "0.26.0", dev_on=False)
    assert plan.actions() == ()
    assert [lt.tier.kind for lt in plan.left] == [TierKind.GPU]
    assert "devmode" in (plan.left[0].flag or "") and plan.needs == "devmode"


def test_devmode_fallback_cannot_help_a_tier_the_api_never_empties() -> None:
    plan = steps(TIERED, "0.23.0", dev_on=True, fallback="devmode")
    assert plan.actions() == ("api-reset", "clear-fs")
    assert [lt.flag for lt in plan.left] == ["--fallback=restart"]


def test_unknown_dev_mode_is_planned_as_on() -> None:
    assert steps(NIXL, "0.26.0", dev_on=None).actions() == ("api-reset",)


def test_mooncake_store_is_emptied_by_the_api_reset_from_023() -> None:
    plan = steps(MOONCAKE, "0.23.0")
    assert TierKind.SHARED in kinds(plan.steps[0].empties) and plan.left == ()
    old = steps(MOONCAKE, "0.22.0")
    assert [lt.tier.kind for lt in old.left] == [TierKind.SHARED] and old.left[0].flag is None


def test_lmcache_remote_store_is_left_with_no_flag() -> None:
    plan = steps(LMCACHE, "0.26.0", fallback="restart")
    shared = [lt for lt in plan.left if lt.tier.kind is TierKind.SHARED]
    assert shared and all(lt.flag is None for lt in shared)
    assert "restart does not clear it" in shared[0].reason


def test_unknown_fallback_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fallback"):
        steps(NIXL, "0.26.0", fallback="reboot")


def test_dev_mode_as_the_spec_tells_it() -> None:
    from types import SimpleNamespace

    from kubectl_kvreset.cli.clear import dev_mode_on
    from kubectl_kvreset.discovery import read_dev_mode

    def pod(env: list[dict], script_env: dict | None = None) -> SimpleNamespace:
        return SimpleNamespace(dev_mode=read_dev_mode({"env": env}), serve=SimpleNamespace(env=script_env or {}))

    assert dev_mode_on(pod([{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}])) is True
    assert dev_mode_on(pod([{"name": "VLLM_SERVER_DEV_MODE", "value": "0"}])) is False
    assert dev_mode_on(pod([{"name": "VLLM_SERVER_DEV_MODE", "value": "true"}])) is False  # crash loop
    assert dev_mode_on(pod([])) is None  # unset: the image may set it; the API answer decides
    assert dev_mode_on(pod([], {"VLLM_SERVER_DEV_MODE": "1"})) is True  # set by the container's script
    ref = {"name": "VLLM_SERVER_DEV_MODE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
    assert dev_mode_on(pod([ref])) is None
