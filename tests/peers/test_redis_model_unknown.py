"""``clear-store`` against a real Redis (markers ``stores`` and ``peers``) when the model name in
LMCache's keys is not what the pod spec says literally: a name given twice in ``env`` (the
kubelet takes the last, a ConfigMap key), a model from a ConfigMap, an ``s3://`` URI. The
per-model clear is ``left`` with the reason and no key is removed (never ``SCAN MATCH
'$(MODEL)@*'`` nor the earlier literal's keys); an untargeted pod whose model is unknown counts
as possibly serving the target's model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tests.peers as peers
from tests.peers.test_stores_redis_mooncake import NS, REDIS, _pod, _redis, _require_sandbox, _vllm, wait_for_redis
from tests.simctl import SimCluster

pytestmark = [pytest.mark.peers, pytest.mark.stores]

URL = ", {name: LMCACHE_REMOTE_URL, value: 'redis://kv-redis:6379'}"
FROM_CM = ", {name: MODEL, valueFrom: {configMapKeyRef: {name: cfg, key: model}}}"
MANIFEST = REDIS + "---\n".join([
    f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: {NS}}}\ndata: {{model: org/a}}\n",
    _vllm("dup", "'$(MODEL)'", env=URL + ", {name: MODEL, value: org/b}" + FROM_CM),
    _vllm("unev", "'$(MODEL)'", env=URL + FROM_CM),
    _vllm("remote", "s3://bucket/org/a", env=URL),
    _vllm("lit", "org/a", env=URL),
])


@pytest.fixture(scope="module")
def sim() -> Iterator[SimCluster]:
    peers.require("redis")
    _require_sandbox()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        m = Path(tmp) / "m.yaml"
        m.write_text(MANIFEST)
        with SimCluster([m], namespace=NS, real_servers=["redis"]) as cluster:
            cluster.wait_ready(60)
            wait_for_redis(cluster)
            yield cluster


def _seed(sim: SimCluster) -> list[bytes]:
    r = _redis(sim)
    r.flushall()
    for model in ("org/a", "org/b", "$(MODEL)"):
        for i in range(2):
            r.set(f"{model}@1@0@{i:016x}@halfkv_bytes", b"x")
            r.set(f"{model}@1@0@{i:016x}@halfmetadata", b"m")
    return sorted(r.keys())


@pytest.mark.parametrize("target, why", [
    ("dup", "MODEL comes from ConfigMap cfg key model"),
    ("unev", "MODEL comes from ConfigMap cfg key model"),
    ("remote", "remote URI"),
])
def test_an_unknown_model_is_left_and_no_key_is_removed(sim: SimCluster, target: str, why: str) -> None:
    keys = _seed(sim)
    code, rows, err = sim.run_json("clear-store", target, "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert row["store"] == "redis" and row["result"] == "left", row
    assert "the model name is unknown" in row["message"] and why in row["message"], row
    assert sorted(_redis(sim).keys()) == keys


def test_an_untargeted_pod_whose_model_is_unknown_may_serve_the_same_model(sim: SimCluster) -> None:
    keys = _seed(sim)
    code, rows, err = sim.run_json("clear-store", "lit", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    others = {f"{NS}/{_pod(sim, p)['name']}" for p in ("dup", "unev", "remote")}
    assert row["result"] == "left" and others <= set(row["other_pods"]), row
    assert "--shared-stores" in row["message"], row
    assert sorted(_redis(sim).keys()) == keys
