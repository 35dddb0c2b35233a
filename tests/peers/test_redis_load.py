"""``clear-store`` of one model in a real Redis holding 500k of its keys (and keys of another
model that must stay), over the simulator's ``pods/portforward``, five times on one Redis
re-seeded between runs by a Lua script (markers ``stores`` and ``peers``). Each run moves tens of
megabytes of SCAN replies and UNLINK commands through one port-forward stream; a stream that
breaks shows as a ``failed`` row or keys left."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import tests.peers as peers
from tests.peers.test_stores_redis_mooncake import NS, REDIS_MANIFEST, _pod, _require_sandbox, wait_for_redis
from tests.simctl import SimCluster

pytestmark = [pytest.mark.peers, pytest.mark.stores]

#: Keys of the model cleared, and of the model that stays.
MANY = 500_000
OTHERS = 20_000
RUNS = 5


@pytest.fixture(scope="module")
def big_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("redis")
    _require_sandbox()
    m = tmp_path_factory.mktemp("redis-load") / "m.yaml"
    m.write_text(REDIS_MANIFEST)
    with SimCluster([m], namespace=NS, real_servers=["redis"]) as sim:
        sim.wait_ready(60)
        wait_for_redis(sim)
        yield sim


def _redis(sim: SimCluster) -> Any:
    import redis

    return redis.Redis(host=_pod(sim, "kv-redis")["pod_ip"], port=6379, socket_timeout=60)


#: Writes ARGV[2] LMCache-shaped keys of model ARGV[1] (``<model>@1@0@<hash>@halfkv_bytes``) inside
#: the server: a second for 500k, where a client pipeline takes tens of seconds.
SEED = """
for i = 0, tonumber(ARGV[2]) - 1 do
  redis.call('SET', string.format('%s@1@0@%016x@halfkv_bytes', ARGV[1], i), 'x')
end
return tonumber(ARGV[2])
"""


def _seed(r: Any, model: str, count: int) -> None:
    assert r.eval(SEED, 0, model, count) == count


def _count(r: Any, pattern: str) -> int:
    return sum(1 for _ in r.scan_iter(match=pattern, count=10_000))


def test_clear_store_of_500k_keys_over_port_forward_five_times(big_redis: SimCluster) -> None:
    r = _redis(big_redis)
    r.flushall()
    _seed(r, "org/model-b", OTHERS)
    times = []
    for run in range(RUNS):
        _seed(r, "org/model-a", MANY)
        assert r.dbsize() == MANY + OTHERS
        start = time.monotonic()
        code, rows, err = big_redis.run_json("clear-store", "a-one", "a-two", "--yes", "--request-timeout", "60s",
                                             timeout=600)
        times.append(time.monotonic() - start)
        assert code == 0, (run, [(x["result"], x["before"], x["message"]) for x in rows], err)
        (row,) = [x for x in rows if x["scope"] == "model org/model-a"]
        assert row["result"] == "emptied", (run, row)
        assert row["before"] == MANY and row["after"] == 0, (run, row)
        assert _count(r, "org/model-a@*") == 0
        assert _count(r, "org/model-b@*") == OTHERS, run
    print(f"clear-store of {MANY} keys: {', '.join(f'{t:.1f}' for t in times)} s")


@pytest.fixture(scope="module")
def cutting_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("redis")
    _require_sandbox()
    m = tmp_path_factory.mktemp("redis-cut") / "m.yaml"
    m.write_text(REDIS_MANIFEST)
    # every port-forward stream to the Redis pod drops after 1 MiB from the pod
    scenario = {"pods": [{"match": {"owner": "deployment/kv-redis"}, "portforward_cut": 1 << 20}]}
    with SimCluster([m], namespace=NS, real_servers=["redis"], scenario=scenario) as sim:
        sim.wait_ready(60)
        wait_for_redis(sim)
        yield sim


def test_clear_store_goes_on_over_new_streams_when_each_one_drops(cutting_redis: SimCluster) -> None:
    r = _redis(cutting_redis)
    r.flushall()
    _seed(r, "org/model-b", 5_000)
    _seed(r, "org/model-a", 100_000)
    code, rows, err = cutting_redis.run_json("clear-store", "a-one", "a-two", "--yes", timeout=600)
    assert code == 0, ([(x["result"], x["before"], x["message"]) for x in rows], err)
    (row,) = [x for x in rows if x["scope"] == "model org/model-a"]
    assert (row["result"], row["before"], row["after"]) == ("emptied", 100_000, 0), row
    assert "the port-forward stream was lost" in row["message"] and "100000 key(s) deleted" in row["message"], row
    assert _count(r, "org/model-a@*") == 0 and _count(r, "org/model-b@*") == 5_000
    pods = cutting_redis.api("/sim/v1/state")["faults"]["pods"]
    assert sum(p.get("cut_forwards", 0) for p in pods.values()) >= 3, pods  # 4.5 MB of SCAN replies
