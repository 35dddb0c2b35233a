"""Tests of kubectl_kvreset.plan: the reset-effect table, every rule at its version boundary."""

from __future__ import annotations

from typing import Any

import pytest
from packaging.version import Version

from kubectl_kvreset.engines.vllm.kvconfig import layout_from_config, layout_from_serve
from kubectl_kvreset.engines.vllm.servecmd import parse_container
from kubectl_kvreset.plan import (
    REMEDY_CLEAR_FS,
    REMEDY_RESTART,
    RESET_RULES,
    ResetRule,
    TierEffect,
    api_reset_effects,
)
from kubectl_kvreset.tiers import KVLayout, Tier, TierKind

from .llmd_fixtures import vllm_container

GPU = Tier(TierKind.GPU, None, None)
CPU_SPEC = Tier(TierKind.CPU, "OffloadingConnector", "CPUOffloadingSpec")
TIER_CPU = Tier(TierKind.CPU, "OffloadingConnector", "TieringOffloadingSpec")
TIER_FS = Tier(TierKind.FS, "OffloadingConnector", "TieringOffloadingSpec", root_dir="/kv",
               tier_type="fs")
LEGACY_FS = Tier(TierKind.FS, "OffloadingConnector", "SharedStorageOffloadingSpec",
                 root_dir="/kv", tier_type="shared_storage")
SIMPLE = Tier(TierKind.CPU, "SimpleCPUOffloadConnector", None)
MOONCAKE = Tier(TierKind.SHARED, "MooncakeStoreConnector", None, store="mooncake-master")
LMCACHE_CPU = Tier(TierKind.CPU, "LMCacheConnectorV1", None)
LMCACHE_DISK = Tier(TierKind.FS, "LMCacheConnectorV1", None, root_dir="/d",
                    tier_type="lmcache_local_disk")
LMCACHE_REDIS = Tier(TierKind.SHARED, "LMCacheConnectorV1", None, store="redis",
                     endpoint="redis://r:6379")
LMCACHE_MP = Tier(TierKind.SHARED, "LMCacheMPConnector", None, store="lmcache-mp")
UNKNOWN_CPU = Tier(TierKind.CPU, "SomeVendorConnector", None)


def effect(tier: Tier, version: str | None, **kw: Any) -> TierEffect:
    layout = KVLayout(connectors=(), tiers=(tier,), kv_role="kv_both")
    (eff,) = api_reset_effects(layout, Version(version) if version else None, **kw)
    assert eff.tier == tier
    return eff


@pytest.mark.parametrize("tier,version,emptied,remedy", [
    # GPU: always the local reset
    (GPU, None, True, None), (GPU, "0.7.3", True, None), (GPU, "0.33.0", True, None),
    # OffloadingConnector CPU spec: from 0.22 (and reset_external needs 0.13)
    (CPU_SPEC, None, False, REMEDY_RESTART), (CPU_SPEC, "0.12.0", False, REMEDY_RESTART),
    (CPU_SPEC, "0.13.0", False, REMEDY_RESTART), (CPU_SPEC, "0.21.9", False, REMEDY_RESTART),
    (CPU_SPEC, "0.22.0", True, None), (CPU_SPEC, "0.33.0", True, None),
    # Tiering: CPU from 0.24, FS never
    (TIER_CPU, "0.22.0", False, REMEDY_RESTART), (TIER_CPU, "0.23.9", False, REMEDY_RESTART),
    (TIER_CPU, "0.24.0", True, None), (TIER_CPU, "0.33.0", True, None),
    (TIER_FS, "0.23.0", False, REMEDY_CLEAR_FS), (TIER_FS, "0.24.0", False, REMEDY_CLEAR_FS),
    (TIER_FS, "0.33.0", False, REMEDY_CLEAR_FS), (TIER_FS, None, False, REMEDY_CLEAR_FS),
    (LEGACY_FS, "0.33.0", False, REMEDY_CLEAR_FS),
    # SimpleCPUOffloadConnector: from 0.20
    (SIMPLE, "0.19.1", False, REMEDY_RESTART), (SIMPLE, "0.20.0", True, None),
    (SIMPLE, "0.26.0", True, None),
    # MooncakeStoreConnector: the shared store from 0.23
    (MOONCAKE, "0.22.9", False, None), (MOONCAKE, "0.23.0", True, None),
    (MOONCAKE, "0.33.0", True, None), (MOONCAKE, None, False, None),
    # LMCache: nothing
    (LMCACHE_CPU, "0.33.0", False, REMEDY_RESTART), (LMCACHE_DISK, "0.33.0", False, REMEDY_CLEAR_FS),
    (LMCACHE_REDIS, "0.33.0", False, None), (LMCACHE_MP, "0.33.0", False, None),
    # anything unknown: not emptied, conservative remedy
    (UNKNOWN_CPU, "0.33.0", False, REMEDY_RESTART),
])
def test_rule_table(tier: Tier, version: str | None, emptied: bool, remedy: str | None) -> None:
    eff = effect(tier, version)
    assert eff.emptied_by_api_reset is emptied
    assert eff.remedy == remedy
    assert eff.reason


def test_before_0_13_reason_names_reset_external() -> None:
    eff = effect(CPU_SPEC, "0.12.0")
    assert "0.13" in eff.reason and "#27170" in eff.reason
    assert "0.13" in effect(CPU_SPEC, None).reason


def test_reset_external_false_leaves_connector_tiers() -> None:
    for tier in (CPU_SPEC, TIER_CPU, SIMPLE, MOONCAKE):
        eff = effect(tier, "0.33.0", reset_external=False)
        assert not eff.emptied_by_api_reset
        assert "reset_external" in eff.reason
    assert effect(GPU, "0.33.0", reset_external=False).emptied_by_api_reset


def test_reasons_cite_sources() -> None:
    assert "#44541" in effect(TIER_CPU, "0.24.0").reason
    assert "0.24" in effect(TIER_CPU, "0.23.0").reason
    moon = effect(MOONCAKE, "0.23.0").reason
    assert "#42694" in moon and "every instance" in moon.lower()
    shared = effect(LMCACHE_REDIS, "0.33.0").reason
    assert "outside the pods" in shared and "restart does not clear" in shared
    assert "never deletes" in effect(TIER_FS, "0.33.0").reason


def test_dev_and_prerelease_versions_are_strict() -> None:
    # 0.24.0rc1 sorts before 0.24.0: the Tiering CPU reset is not assumed on a pre-release.
    assert not effect(TIER_CPU, "0.24.0rc1").emptied_by_api_reset
    assert effect(TIER_CPU, "0.24.1.dev42+gabc").emptied_by_api_reset
    assert effect(CPU_SPEC, "0.23.1.dev42+gabc").emptied_by_api_reset


def test_effects_follow_layout_order() -> None:
    layout = layout_from_config({
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
                                      "secondary_tiers": [{"type": "fs", "root_dir": "/a"}]}})
    effects = api_reset_effects(layout, Version("0.26.0"))
    assert [(e.tier.kind, e.emptied_by_api_reset, e.remedy) for e in effects] == [
        (TierKind.GPU, True, None), (TierKind.CPU, True, None),
        (TierKind.FS, False, REMEDY_CLEAR_FS)]


def test_fixture_05_on_its_image_version() -> None:
    container, env = vllm_container("05-", "-decode")
    cfg = parse_container(container, env)
    assert cfg is not None
    assert container["image"].endswith("v0.23.0")
    effects = api_reset_effects(layout_from_serve(cfg, env), Version("0.23.0"))
    assert [(e.tier.kind, e.emptied_by_api_reset, e.remedy) for e in effects] == [
        (TierKind.GPU, True, None), (TierKind.CPU, False, REMEDY_RESTART),
        (TierKind.FS, False, REMEDY_CLEAR_FS)]


def test_table_is_data_and_extensible() -> None:
    assert all(isinstance(r, ResetRule) for r in RESET_RULES)
    extra = ResetRule(TierKind.CPU, "SomeVendorConnector", None, Version("1.0"), True,
                      REMEDY_RESTART, "vendor hook from 1.0")
    rules = (*RESET_RULES, extra)
    layout = KVLayout(connectors=(), tiers=(UNKNOWN_CPU,), kv_role=None)
    (old,) = api_reset_effects(layout, Version("0.99"), rules=rules)
    (new,) = api_reset_effects(layout, Version("1.0"), rules=rules)
    assert not old.emptied_by_api_reset
    assert new.emptied_by_api_reset and new.reason == "vendor hook from 1.0"


def test_every_kind_has_a_default_rule() -> None:
    defaults = {r.kind for r in RESET_RULES if r.connector is None and r.spec is None
                and r.min_version is None}
    assert defaults == set(TierKind)
