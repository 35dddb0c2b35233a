"""A store whose Service has several pods: each holds keys of its own (independent Redis pods, a
Valkey cluster's nodes, InfiniStore replicas), so the clear goes to every endpoint and the row is
``emptied`` only when every one is."""

from __future__ import annotations

from typing import Any

import pytest

from kubectl_kvreset.stores import clear as clear_mod
from kubectl_kvreset.stores.calls import StoreCall
from kubectl_kvreset.stores.clear import StoreResult, run_call
from kubectl_kvreset.stores.config import Address, StoreKind, StoreUse
from kubectl_kvreset.stores.find import FoundStore, StoreUser
from kubectl_kvreset.stores.resolve import Endpoint, Resolution


class _Pod:
    def __init__(self, name: str) -> None:
        self.namespace, self.name = "st", name


def _call(kind: StoreKind, *endpoints: Endpoint) -> StoreCall:
    use = StoreUse(kind, Address("kv", 6379), "model", model="org/m")
    store = FoundStore(kind, Address("kv", 6379, scheme="redis"),
                       Resolution("service", "st", "kv", 6379, tuple(endpoints)),
                       (StoreUser(_Pod("a"), use, True),))  # type: ignore[arg-type]
    return StoreCall(store, "model", "org/m", "SCAN MATCH 'org/m@*' + UNLINK")


def _fake(keys: dict[str, int], seen: list[str]) -> Any:
    def clearer(kube: Any, call: StoreCall, ep: Endpoint, dry_run: bool, timeout_s: float) -> StoreResult:
        seen.append(ep.name)
        before = keys[ep.name]
        if dry_run:
            return StoreResult("planned", before, before, via=f"st/{ep.name}:6379")
        left = 1 if ep.name == "kv-stuck" else 0
        keys[ep.name] = left
        return StoreResult("emptied" if not left else "left", before, left, via=f"st/{ep.name}:6379",
                           message="1 key(s) remain" if left else None)
    return clearer


@pytest.mark.parametrize("kind", [StoreKind.REDIS, StoreKind.VALKEY, StoreKind.INFINISTORE])
def test_every_ready_pod_behind_the_service_is_cleared(kind: StoreKind, monkeypatch: pytest.MonkeyPatch) -> None:
    keys, seen = {"kv-0": 3, "kv-1": 4}, []
    monkeypatch.setitem(clear_mod.CLEARERS, kind, _fake(keys, seen))
    call = _call(kind, Endpoint("st", "kv-0", 6379), Endpoint("st", "kv-1", 6379))
    planned = run_call(None, call, dry_run=True)  # type: ignore[arg-type]
    assert (planned.result, planned.before, planned.after) == ("planned", 7, 7)
    done = run_call(None, call)  # type: ignore[arg-type]
    assert (done.result, done.before, done.after) == ("emptied", 7, 0), done
    assert seen == ["kv-0", "kv-1", "kv-0", "kv-1"] and keys == {"kv-0": 0, "kv-1": 0}
    assert done.via == "st/kv-0:6379, st/kv-1:6379" and "2 pods behind the Service" in (done.message or "")


def test_one_pod_left_or_not_ready_makes_the_row_left(monkeypatch: pytest.MonkeyPatch) -> None:
    keys, seen = {"kv-0": 3, "kv-stuck": 2, "kv-2": 5}, []
    monkeypatch.setitem(clear_mod.CLEARERS, StoreKind.REDIS, _fake(keys, seen))
    call = _call(StoreKind.REDIS, Endpoint("st", "kv-0", 6379), Endpoint("st", "kv-stuck", 6379),
                 Endpoint("st", "kv-2", 6379, ready=False))
    done = run_call(None, call)  # type: ignore[arg-type]
    assert done.result == "left" and done.after is None, done
    assert "st/kv-stuck: left (1 key(s) remain)" in (done.message or "")
    assert "st/kv-2 behind the Service is not ready" in (done.message or "")
    assert seen == ["kv-0", "kv-stuck"]


def test_a_single_endpoint_is_cleared_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    keys, seen = {"kv-0": 3}, []
    monkeypatch.setitem(clear_mod.CLEARERS, StoreKind.REDIS, _fake(keys, seen))
    done = run_call(None, _call(StoreKind.REDIS, Endpoint("st", "kv-0", 6379)))  # type: ignore[arg-type]
    assert (done.result, done.before, done.after, done.message) == ("emptied", 3, 0, None)


def test_redis_remedy_has_the_same_connection_on_both_sides_and_the_escaped_pattern() -> None:
    from kubectl_kvreset.stores.config import parse_address
    from kubectl_kvreset.stores.resolve import remedy

    tls = remedy(StoreKind.REDIS, parse_address("rediss://user:pw@ext.example.com:6380/3"), model="org/model*v")
    assert "redis-cli -h ext.example.com -p 6380 -n 3 --tls --scan --pattern 'org/model\\*v@*'" in tls, tls
    assert "| xargs -r redis-cli -h ext.example.com -p 6380 -n 3 --tls UNLINK" in tls, tls
    assert "| grep -E '^org/model\\*v@-?[0-9]+@-?[0-9]+@" in tls, tls
    assert "pw" not in tls
    sock = remedy(StoreKind.REDIS, parse_address("unix:///run/redis.sock"), model="m")
    assert ("redis-cli -s /run/redis.sock --scan --pattern 'm@*' | grep -E '^m@-?[0-9]+@" in sock), sock
    assert sock.endswith("| xargs -r redis-cli -s /run/redis.sock UNLINK"), sock
    assert "None" not in sock and "-h  " not in sock


def _redis_store(url: str, *, unlisted: tuple[str, ...] = ()) -> FoundStore:
    from kubectl_kvreset.stores.config import parse_address

    addr = parse_address(url)
    use = StoreUse(StoreKind.REDIS, addr, "model", model="org/m")
    return FoundStore(StoreKind.REDIS, addr,
                      Resolution("service", "st", "kv", addr.port, (Endpoint("st", "kv-0", 6379),)),
                      (StoreUser(_Pod("a"), use, True),), unlisted)  # type: ignore[arg-type]


def test_per_model_clear_needs_consent_where_namespaces_cannot_be_listed() -> None:
    from kubectl_kvreset.stores.calls import plan_calls

    [free] = plan_calls([_redis_store("redis://kv:6379")], shared=False)
    assert free.blocked is None
    [held] = plan_calls([_redis_store("redis://kv:6379", unlisted=("other namespaces",))], shared=False)
    assert held.blocked is not None and "cannot be listed" in held.blocked and "--shared-stores" in held.blocked
    [given] = plan_calls([_redis_store("redis://kv:6379", unlisted=("other namespaces",))], shared=True)
    assert given.blocked is None


def test_a_sentinel_url_is_never_scanned() -> None:
    from kubectl_kvreset.stores.calls import plan_calls

    [call] = plan_calls([_redis_store("redis-sentinel://kv:26379")], shared=True)
    assert call.blocked is not None and "Sentinels, which hold no keys" in call.blocked, call


def test_lmcache_settings_from_a_secret_or_envfrom_are_said_not_read_in_the_tiers() -> None:
    from kubectl_kvreset.pods import describe_pod

    pod = {"metadata": {"name": "p", "namespace": "st", "uid": "u1", "labels": {"llm-d.ai/inference-serving": "true"}},
           "spec": {"containers": [{
               "name": "vllm", "image": "vllm/vllm-openai:v0.32.0",
               "command": ["vllm", "serve", "org/m"],
               "args": ["--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'],
               "env": [{"name": "LMCACHE_REMOTE_URL",
                        "valueFrom": {"secretKeyRef": {"name": "redis-url", "key": "url"}}}],
               "envFrom": [{"configMapRef": {"name": "lmc"}}]}]},
           "status": {"phase": "Running"}}
    described = describe_pod(pod)
    assert described is not None
    notes = " | ".join(described.notes)
    assert "LMCACHE_REMOTE_URL comes from Secret redis-url key url, not read here" in notes, notes
    assert "envFrom ConfigMap lmc may set LMCACHE_* settings" in notes, notes
