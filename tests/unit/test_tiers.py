"""Tests of kubectl_kvreset.tiers: kv-transfer-config -> tiers."""

from __future__ import annotations

from typing import Any

import pytest

from kubectl_kvreset.engines.vllm.kvconfig import layout_from_config, layout_from_serve
from kubectl_kvreset.engines.vllm.servecmd import parse_argv, parse_container
from kubectl_kvreset.tiers import KVLayout, Tier, TierKind

from .llmd_fixtures import vllm_container

GPU = Tier(kind=TierKind.GPU, connector=None, spec=None)


def offloading(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}
    if extra is not None:
        cfg["kv_connector_extra_config"] = extra
    return cfg


def test_no_config_only_gpu() -> None:
    layout = layout_from_config(None)
    assert layout == KVLayout(connectors=(), tiers=(GPU,), kv_role=None)


def test_nixl_has_no_tier() -> None:
    layout = layout_from_config({"kv_connector": "NixlConnector", "kv_role": "kv_producer"})
    assert layout.connectors == ("NixlConnector",)
    assert layout.tiers == (GPU,)
    assert layout.kv_role == "kv_producer"


def test_offloading_default_spec_is_cpu() -> None:
    layout = layout_from_config(offloading({"cpu_bytes_to_use": 10**9}))
    assert layout.tiers == (GPU, Tier(TierKind.CPU, "OffloadingConnector", "CPUOffloadingSpec"))


def test_offloading_without_extra_config() -> None:
    assert layout_from_config(offloading()).tiers[1].spec == "CPUOffloadingSpec"


@pytest.mark.parametrize("fs_type", ["fs", "fs_python"])
def test_tiering_cpu_and_fs(fs_type: str) -> None:
    layout = layout_from_config(offloading({
        "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1,
        "secondary_tiers": [{"type": fs_type, "root_dir": "/mnt/a"},
                            {"type": fs_type, "root_dir": "/mnt/b"}]}))
    assert layout.tiers == (
        GPU,
        Tier(TierKind.CPU, "OffloadingConnector", "TieringOffloadingSpec"),
        Tier(TierKind.FS, "OffloadingConnector", "TieringOffloadingSpec", root_dir="/mnt/a",
             tier_type=fs_type),
        Tier(TierKind.FS, "OffloadingConnector", "TieringOffloadingSpec", root_dir="/mnt/b",
             tier_type=fs_type),
    )


def test_tiering_non_fs_secondary_is_shared() -> None:
    layout = layout_from_config(offloading({
        "spec_name": "TieringOffloadingSpec", "secondary_tiers": [{"type": "obj"}]}))
    assert layout.tiers[2].kind is TierKind.SHARED
    assert layout.tiers[2].store == "tiering-obj"


def test_legacy_shared_storage_spec() -> None:
    layout = layout_from_config(offloading({
        "spec_name": "SharedStorageOffloadingSpec", "spec_module_path": "llmd_fs_backend.spec",
        "shared_storage_path": "/mnt/files-storage/kv-cache/"}))
    assert layout.tiers == (GPU, Tier(TierKind.FS, "OffloadingConnector",
                                      "SharedStorageOffloadingSpec",
                                      root_dir="/mnt/files-storage/kv-cache/",
                                      tier_type="shared_storage"))


def test_unknown_spec_is_cpu_with_note() -> None:
    layout = layout_from_config(offloading({"spec_name": "FancySpec"}))
    assert layout.tiers[1] == Tier(TierKind.CPU, "OffloadingConnector", "FancySpec")
    assert layout.notes


def test_simple_cpu_connector() -> None:
    layout = layout_from_config({"kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both"})
    assert layout.tiers == (GPU, Tier(TierKind.CPU, "SimpleCPUOffloadConnector", None))


@pytest.mark.parametrize("backend,env,connector,spec", [
    (None, {}, "OffloadingConnector", "CPUOffloadingSpec"),
    ("native", {}, "OffloadingConnector", "CPUOffloadingSpec"),
    ("native", {"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"}, "SimpleCPUOffloadConnector", None),
    ("native", {"VLLM_USE_SIMPLE_KV_OFFLOAD": "0"}, "OffloadingConnector", "CPUOffloadingSpec"),
    ("lmcache", {}, "LMCacheConnectorV1", None),
])
def test_kv_offloading_size(backend: str | None, env: dict[str, str], connector: str,
                            spec: str | None) -> None:
    layout = layout_from_config(None, kv_offloading_size_gib=80.0,
                                kv_offloading_backend=backend, env=env)
    assert layout.connectors == (connector,)
    assert layout.tiers == (GPU, Tier(TierKind.CPU, connector, spec))
    assert layout.kv_role == "kv_both"


def test_kv_offloading_size_replaces_connector_with_note() -> None:
    layout = layout_from_config({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                                kv_offloading_size_gib=4.0)
    assert layout.connectors == ("OffloadingConnector",)
    assert any("replaces" in n for n in layout.notes)


def test_multi_connector_children_flattened_in_order() -> None:
    layout = layout_from_config({
        "kv_connector": "MultiConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"connectors": [
            {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
            {"kv_connector": "MultiConnector", "kv_role": "kv_both",
             "kv_connector_extra_config": {"connectors": [
                 offloading({"spec_name": "TieringOffloadingSpec", "secondary_tiers": [
                     {"type": "fs", "root_dir": "/kv"}]}),
                 {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}]}},
        ]}})
    assert layout.connectors == ("MultiConnector", "NixlConnector", "MultiConnector",
                                 "OffloadingConnector", "MooncakeStoreConnector")
    assert [t.kind for t in layout.tiers] == [TierKind.GPU, TierKind.CPU, TierKind.FS,
                                              TierKind.SHARED]
    assert layout.tiers[2].root_dir == "/kv"
    assert layout.tiers[3].store == "mooncake-master"


def test_lmcache_in_process_default_local_cpu() -> None:
    layout = layout_from_config({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    assert layout.tiers == (GPU, Tier(TierKind.CPU, "LMCacheConnectorV1", None))


def test_lmcache_env_disk_and_remote() -> None:
    env = {"LMCACHE_LOCAL_CPU": "False", "LMCACHE_LOCAL_DISK": "file:///mnt/files-storage/kv/",
           "LMCACHE_REMOTE_URL": "redis://redis.kv.svc:6379/2"}
    layout = layout_from_config({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"},
                                env=env)
    assert layout.tiers == (
        GPU,
        Tier(TierKind.FS, "LMCacheConnectorV1", None, root_dir="/mnt/files-storage/kv/",
             tier_type="lmcache_local_disk"),
        Tier(TierKind.SHARED, "LMCacheConnectorV1", None, store="redis",
             endpoint="redis://redis.kv.svc:6379/2"),
    )


@pytest.mark.parametrize("url,store", [
    ("lm://lmcache-server:65432", "lmcache-server"), ("valkey://v:6379", "valkey"),
    ("mooncakestore://mc:50051", "mooncake-master"), ("infinistore://i:12345", "infinistore"),
    ("rediss://r:6380", "redis"), ("s3://bucket/x", "s3"), ("weird://x", "weird"),
])
def test_lmcache_remote_stores(url: str, store: str) -> None:
    layout = layout_from_config({
        "kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.remote_url": url}})
    shared = [t for t in layout.tiers if t.kind is TierKind.SHARED]
    assert [(t.store, t.endpoint) for t in shared] == [(store, url)]


def test_lmcache_config_file_noted() -> None:
    layout = layout_from_config({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"},
                                env={"LMCACHE_CONFIG_FILE": "/cfg/lmcache.yaml"})
    assert any("/cfg/lmcache.yaml" in n for n in layout.notes)


def test_lmcache_mp_connector_is_shared_server() -> None:
    layout = layout_from_config({
        "kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.mp.host": "tcp://10.0.0.1", "lmcache.mp.port": 6555}})
    assert layout.tiers == (GPU, Tier(TierKind.SHARED, "LMCacheMPConnector", None,
                                      store="lmcache-mp", endpoint="tcp://10.0.0.1:6555"))


def test_mooncake_store_endpoint_from_env() -> None:
    layout = layout_from_config({"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"},
                                env={"MOONCAKE_MASTER": "mooncake-master:50051"})
    assert layout.tiers[1] == Tier(TierKind.SHARED, "MooncakeStoreConnector", None,
                                   store="mooncake-master", endpoint="mooncake-master:50051")


def test_mooncake_p2p_connector_has_no_tier() -> None:
    assert layout_from_config({"kv_connector": "MooncakeConnector",
                               "kv_role": "kv_both"}).tiers == (GPU,)


@pytest.mark.parametrize("cfg", [
    {"kv_connector": 3}, {"kv_role": "kv_both"}, {"kv_connector": "MultiConnector"},
    {"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": "x"}},
    {"kv_connector": "OffloadingConnector", "kv_connector_extra_config": "not json"},
    {"kv_connector": "OffloadingConnector",
     "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "secondary_tiers": 5}},
])
def test_odd_configs_never_raise(cfg: dict[str, Any]) -> None:
    assert layout_from_config(cfg).tiers[0] == GPU


def test_fixture_05_layout() -> None:
    container, env = vllm_container("05-", "-decode")
    cfg = parse_container(container, env)
    assert cfg is not None
    layout = layout_from_serve(cfg, env)
    assert layout.connectors == ("OffloadingConnector",)
    assert layout.kv_role == "kv_both"
    assert layout.tiers == (
        GPU,
        Tier(TierKind.CPU, "OffloadingConnector", "TieringOffloadingSpec"),
        Tier(TierKind.FS, "OffloadingConnector", "TieringOffloadingSpec",
             root_dir="/mnt/files-storage", tier_type="fs"),
    )


@pytest.mark.parametrize("prefix,suffix", [("01-", "-decode"), ("02-", "-decode"),
                                           ("02-", "-prefill"), ("03-", "-decode"),
                                           ("06-", "-prefill")])
def test_fixture_gpu_only_layouts(prefix: str, suffix: str) -> None:
    container, env = vllm_container(prefix, suffix)
    env.update({"LWS_GROUP_SIZE": "2", "LWS_LEADER_ADDRESS": "l"})
    cfg = parse_container(container, env)
    assert cfg is not None
    layout = layout_from_serve(cfg, env)
    assert layout.tiers == (GPU,)
    expected = () if prefix == "01-" else ("NixlConnector",)
    assert layout.connectors == expected


def test_layout_from_serve_uses_script_exports() -> None:
    cfg = parse_argv(["bash", "-c",
                      "export VLLM_USE_SIMPLE_KV_OFFLOAD=1\nexec vllm serve m "
                      "--kv-offloading-size 8"], {})
    assert cfg is not None
    layout = layout_from_serve(cfg, {})
    assert layout.connectors == ("SimpleCPUOffloadConnector",)


def test_layout_from_serve_notes_config_file() -> None:
    cfg = parse_argv(["vllm", "serve", "m", "--config", "/c.yaml"], {})
    assert cfg is not None
    assert any("/c.yaml" in n for n in layout_from_serve(cfg, {}).notes)
