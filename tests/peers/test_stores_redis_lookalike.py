"""``clear-store`` of model ``org/m`` against a real Redis (markers ``stores`` and ``peers``) that
also holds the keys of ``org/m@v2`` and ``org/m2``, each served by an untargeted pod. The keys are
made by the real LMCache 0.5.6 (``lmcache/utils.py::CacheEngineKey.to_string``, plain and
layerwise) with the ``RedisConnector``'s ``kv_bytes``/``metadata`` suffixes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

import tests.peers as peers
from tests.peers.test_stores_redis_mooncake import NS, REDIS, _redis, _require_sandbox, _vllm, wait_for_redis
from tests.simctl import SimCluster

pytestmark = [pytest.mark.peers, pytest.mark.stores]

MODELS = ("org/m", "org/m@v2", "org/m2")
URL = ", {name: LMCACHE_REMOTE_URL, value: 'redis://kv-redis:6379'}"
MANIFEST = REDIS + "---\n".join([_vllm("m-one", "org/m", env=URL), _vllm("m-v2", "org/m@v2", env=URL),
                                 _vllm("m-two", "org/m2", env=URL)])

KEYS_PY = """
import json, sys, torch
from lmcache.utils import CacheEngineKey
out = {}
for model in sys.argv[1:]:
    keys = []
    for i in range(3):
        k = CacheEngineKey(model, 1, 0, 0x33f9bce42327706c + i, torch.half)
        keys.append(k.to_string())
        keys.append(k.split_layers(2)[1].to_string())
    keys.append(CacheEngineKey(model, 2, 1, -5, torch.bfloat16, {"lmcache.tag.user": "u1"}).to_string())
    # tag values written verbatim: '@', '%', spaces (and a tag name with a space)
    tagged = CacheEngineKey(model, 1, 0, 0x77, torch.half, {"lmcache.tag.user": "user%alice@example.com",
                                                            "lmcache.tag.a b": "x y@1@0@zz"})
    keys.append(tagged.to_string())
    keys.append(tagged.split_layers(3)[2].to_string())
    out[model] = keys
print(json.dumps(out))
"""


def lmcache_keys(models: tuple[str, ...] = MODELS) -> dict[str, list[str]]:
    """Per model of ``models``, key strings as LMCache 0.5.6 writes them."""
    python = peers.lmcache_python()
    assert python is not None
    done = subprocess.run([python, "-c", KEYS_PY, *models], capture_output=True, text=True, timeout=120, check=True)
    return {m: list(v) for m, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("redis", "lmcache")
    _require_sandbox()
    m = tmp_path_factory.mktemp("lookalike") / "m.yaml"
    m.write_text(MANIFEST)
    with SimCluster([m], namespace=NS, real_servers=["redis"]) as cluster:
        cluster.wait_ready(60)
        wait_for_redis(cluster)
        yield cluster


def _seed(sim: SimCluster, keys: dict[str, list[str]]) -> dict[str, set[bytes]]:
    r = _redis(sim)
    r.flushall()
    stored: dict[str, set[bytes]] = {}
    for model, names in keys.items():
        for name in names:
            for suffix in ("kv_bytes", "metadata"):
                r.set(name + suffix, b"x")
                stored.setdefault(model, set()).add((name + suffix).encode())
    return stored


def test_clearing_org_m_leaves_org_m_at_v2_and_org_m2(sim: SimCluster) -> None:
    keys = lmcache_keys()
    assert keys["org/m@v2"][0].startswith("org/m@v2@1@0@")  # what the glob 'org/m@*' also matches
    stored = _seed(sim, keys)
    code, rows, err = sim.run_json("clear-store", "m-one", "--dry-run")
    assert code == 0, (rows, err)
    [row] = rows
    # org/m@v2 is another model: no untargeted pod serves org/m, so no consent is needed
    assert (row["result"], row["before"], row["scope"]) == ("planned", len(stored["org/m"]), "model org/m"), row
    assert "kept" in (row["message"] or "") and "org/m@*" in row["message"], row
    code, rows, err = sim.run_json("clear-store", "m-one", "--yes")
    assert code == 0, (rows, err)
    [row] = rows
    assert (row["result"], row["before"], row["after"]) == ("emptied", len(stored["org/m"]), 0), row
    assert row["other_pods"] == [], row
    left = set(_redis(sim).keys("*"))
    assert left == stored["org/m@v2"] | stored["org/m2"]


def test_clearing_org_m_at_v2_leaves_org_m(sim: SimCluster) -> None:
    stored = _seed(sim, lmcache_keys())
    code, rows, err = sim.run_json("clear-store", "m-v2", "--yes")
    assert code == 0 and rows[0]["before"] == len(stored["org/m@v2"]), (rows, err)
    assert set(_redis(sim).keys("*")) == stored["org/m"] | stored["org/m2"]


def test_tagged_keys_with_at_and_percent_are_the_models(sim: SimCluster) -> None:
    keys = lmcache_keys()
    assert any("%user%alice@example.com@a b%x y@1@0@zz" in k for k in keys["org/m"]), keys["org/m"]
    stored = _seed(sim, keys)
    code, rows, err = sim.run_json("clear-store", "m-one", "--yes")
    assert code == 0, (rows, err)
    assert (rows[0]["result"], rows[0]["before"], rows[0]["after"]) == ("emptied", len(stored["org/m"]), 0), rows
    assert set(_redis(sim).keys("*")) == stored["org/m@v2"] | stored["org/m2"]


def test_keys_two_models_write_alike_are_kept_and_the_row_is_left(sim: SimCluster) -> None:
    # a model named like org/m's key fields: its tagged keys are strings org/m writes too
    keys = lmcache_keys(("org/m", "org/m@1@0@ab@half"))
    stored = _seed(sim, keys)
    both = {k for k in stored["org/m@1@0@ab@half"] if b"%" in k}
    assert both
    code, rows, err = sim.run_json("clear-store", "m-one", "--yes")
    [row] = rows
    assert code == 1 and (row["result"], row["before"], row["after"]) == ("left", len(stored["org/m"]), 0), (rows, err)
    assert f"{len(both)} key(s)" in row["message"] and "kept" in row["message"], row
    assert set(_redis(sim).keys("*")) == stored["org/m@1@0@ab@half"]
