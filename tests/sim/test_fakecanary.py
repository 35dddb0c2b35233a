"""Unit tests for the fake vLLM's prefix cache per engine and tier (tests/sim/kvtiers.py): the
salted canary as the real 0.32.0 CPU build answered it (``tests/referee/data/real-0.32.0-canary.json``,
recorded by ``tests/referee/test_canary_referee.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.sim.connectorinfo import ConnectorInfo
from tests.sim.fakevllm import FakeVLLM

CPU = ConnectorInfo("OffloadingConnector", "CPUOffloadingSpec", True)
EXAMPLE = ConnectorInfo("ExampleConnector")


def fake(connectors: tuple[ConnectorInfo, ...] = (), engines: int = 1, fs: tuple[Path, ...] = (),
         **ov: Any) -> FakeVLLM:
    return FakeVLLM(port=8000, version="0.32.0", dev_mode=True, model="m", connectors=connectors, engines=engines,
                    fs_block_dirs=fs, overrides={"warm_blocks": 0, "block_size": 128, **ov})


def complete(f: FakeVLLM, n: int, salt: Any = None, rank: str | None = None) -> tuple[int, Any]:
    body: dict[str, Any] = {"model": "m", "prompt": list(range(10, 10 + n)), "max_tokens": 1}
    if salt is not None:
        body["cache_salt"] = salt
    status, _h, out = f.handle("POST", "/v1/completions", "", {"X-data-parallel-rank": rank} if rank else {},
                               json.dumps(body).encode())
    return status, json.loads(out)


def cached(f: FakeVLLM, n: int, salt: Any = None, rank: str | None = None) -> int:
    status, doc = complete(f, n, salt, rank)
    assert status == 200, doc
    return int(doc["usage"]["prompt_tokens_details"]["cached_tokens"])


def samples(f: FakeVLLM) -> dict[tuple[str, str, str], float]:
    text = f.handle("GET", "/metrics", "", {}, b"")[2].decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.endswith("_created"):
                out[(s.name, s.labels.get("engine", ""), s.labels.get("source", ""))] = s.value
    return out


@pytest.mark.parametrize(("n", "hit"), [(128, 0), (129, 128), (256, 128), (257, 256), (380, 256)])
def test_the_block_holding_the_last_token_never_counts(n: int, hit: int) -> None:
    f = fake(prompt_tokens_details=True)
    assert cached(f, n, "s1") == 0
    assert cached(f, n, "s1") == hit


def test_salts_isolate_and_a_reset_empties_salted_and_unsalted() -> None:
    f = fake(prompt_tokens_details=True)
    cached(f, 380, "kvreset:a")
    cached(f, 380)
    assert cached(f, 380, "kvreset:b") == 0
    assert cached(f, 380, "kvreset:a") == 256 and cached(f, 380) == 256
    assert json.loads(f.handle("POST", "/reset_prefix_cache", "", {}, b"")[2]) == {"success": True}
    assert cached(f, 380, "kvreset:a") == 0 and cached(f, 380) == 0
    assert cached(f, 380, "kvreset:a") == 256  # the probe caches the canary again


@pytest.mark.parametrize("salt", ["a/b", "a@b", "a\\b", "a\x00b", "x" * 129, "", 7])
def test_a_salt_vllm_refuses_is_its_400(salt: Any) -> None:
    status, doc = complete(fake(), 300, salt)
    assert status == 400 and doc["error"]["param"] == "cache_salt" and doc["error"]["type"] == "BadRequestError"
    assert doc["error"]["message"].startswith("Parameter 'cache_salt' must be")


def test_details_null_without_the_flag_and_counters_match_cached_tokens() -> None:
    f = fake()
    status, doc = complete(f, 300, "s")
    assert status == 200 and doc["usage"]["prompt_tokens_details"] is None
    before = samples(f)
    complete(f, 300, "s")
    after = samples(f)
    for name in ("vllm:prefix_cache_hits_total", "vllm:prompt_tokens_cached_total"):
        assert after[(name, "0", "")] - before[(name, "0", "")] == 256
    key = ("vllm:prompt_tokens_cached_by_source_total", "0", "device")
    assert after[key] - before[key] == 256
    queries = ("vllm:prefix_cache_queries_total", "0", "")
    assert after[queries] - before[queries] == 300
    assert after[("vllm:cache_config_info", "0", "")] == 1.0


def test_block_size_label_of_cache_config_info() -> None:
    text = fake().handle("GET", "/metrics", "", {}, b"")[2].decode()
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "vllm:cache_config_info")
    assert fam.samples[0].labels["block_size"] == "128"


def test_the_rank_header_pins_an_engine_with_its_own_cache_and_counters() -> None:
    f = fake(engines=2, prompt_tokens_details=True)
    cached(f, 300, "s", "0")
    assert cached(f, 300, "s", "1") == 0  # engine 1 has its own cache
    assert cached(f, 300, "s", "1") == 256
    m = samples(f)
    assert m[("vllm:prefix_cache_hits_total", "1", "")] == 256 and m[("vllm:prefix_cache_hits_total", "0", "")] == 0
    assert f.completions_by_engine == [1, 2]


def test_a_busy_engine_keeps_its_blocks_and_a_forced_reset_empties_both() -> None:
    f = fake(engines=2, prompt_tokens_details=True, busy_engines={"1": 1})
    for rank in ("0", "1", "0", "1"):
        cached(f, 300, "s", rank)
    assert json.loads(f.handle("POST", "/reset_prefix_cache", "", {}, b"")[2]) == {"success": False}
    assert cached(f, 300, "s", "0") == 0 and cached(f, 300, "s", "1") == 256  # a partial reset
    assert json.loads(f.handle("POST", "/reset_prefix_cache", "reset_running_requests=true", {}, b"")[2]) == \
        {"success": True}
    assert cached(f, 300, "t", "0") == 0 and cached(f, 300, "s", "1") == 0


def test_cpu_tier_hits_after_a_device_reset_come_from_host() -> None:
    f = FakeVLLM(port=8000, version="0.21.0", dev_mode=True, model="m", connectors=(CPU,),
                 overrides={"warm_blocks": 0, "block_size": 16, "prompt_tokens_details": True})
    cached(f, 40, "s")
    f.handle("POST", "/reset_prefix_cache", "reset_external=true", {}, b"")  # 0.21: the CPU tier stays
    before = samples(f)
    assert cached(f, 40, "s") == 32
    after = samples(f)
    assert after[("vllm:prefix_cache_hits_total", "0", "")] == before[("vllm:prefix_cache_hits_total", "0", "")]
    assert after[("vllm:external_prefix_cache_hits_total", "0", "")] - \
        before[("vllm:external_prefix_cache_hits_total", "0", "")] == 32
    f2 = FakeVLLM(port=8000, version="0.22.0", dev_mode=True, model="m", connectors=(CPU,),
                  overrides={"warm_blocks": 0, "prompt_tokens_details": True})
    cached(f2, 40, "s")
    f2.handle("POST", "/reset_prefix_cache", "reset_external=true", {}, b"")
    assert cached(f2, 40, "s") == 0  # from 0.22 reset_external empties it


def test_fs_tier_hits_until_its_files_are_deleted(tmp_path: Path) -> None:
    d = tmp_path / "m_abc_r0"
    f = fake(connectors=(ConnectorInfo("OffloadingConnector", "TieringOffloadingSpec", True, ("/fs",)),),
             fs=(d,), prompt_tokens_details=True)
    cached(f, 300, "s")
    f.handle("POST", "/reset_prefix_cache", "reset_external=true", {}, b"")
    before = samples(f)
    assert cached(f, 300, "s") == 256
    after = samples(f)
    key = ("vllm:prompt_tokens_cached_by_source_total", "0", "disk")
    assert after[key] - before[key] == 256
    f.handle("POST", "/reset_prefix_cache", "reset_external=true", {}, b"")
    for p in sorted(d.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    assert cached(f, 300, "s") == 0


def test_the_example_connector_survives_reset_external() -> None:
    f = fake(connectors=(EXAMPLE,), prompt_tokens_details=True)
    cached(f, 300, "s")
    f.handle("POST", "/reset_prefix_cache", "reset_external=true", {}, b"")
    before = samples(f)
    assert cached(f, 300, "s") == 256
    key = ("vllm:prompt_tokens_cached_by_source_total", "0", "external_unspecified")
    assert samples(f)[key] - before[key] == 256
