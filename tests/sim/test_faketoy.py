"""The seam tests' toy server and toy store (tests/sim/faketoy.py)."""

from __future__ import annotations

import json

from tests.sim.faketoy import FakeToyServer, FakeToyStore, toy_fake


def test_chosen_by_the_command() -> None:
    server = toy_fake(["toy-serve", "--port", "8100", "--kv-store", "toykv://s:7777"], {})
    assert isinstance(server, FakeToyServer) and (server.port, server.blocks) == (8100, 512)
    store = toy_fake(["/usr/bin/toy-kv", "--port=7000"], {"toy_keys": 3})
    assert isinstance(store, FakeToyStore) and (store.port, store.keys) == (7000, 3)
    assert toy_fake(["vllm", "serve", "m", "--port", "8000"], {}) is None and toy_fake(None, {}) is None
    cold = toy_fake(["toy-serve"], {"cold": True})
    assert isinstance(cold, FakeToyServer) and (cold.port, cold.blocks) == (8000, 0)


def test_server_busy_then_reset() -> None:
    server = FakeToyServer(8000, warm_blocks=7, busy=1)
    assert server.handle("GET", "/toy/version", "")[2] == b"1.0.0"
    assert json.loads(server.handle("POST", "/toy/reset", "")[2]) == {"emptied": False, "busy": True}
    assert server.blocks == 7
    assert json.loads(server.handle("POST", "/toy/reset", "", transport="exec")[2]) == {"emptied": True}
    state = server.snapshot()
    assert (state["role"], state["reset_calls"], state["busy_answers"]) == ("toy", 2, 1)
    assert state["prefix_cache_blocks"] == 0
    assert state["last_transport"] == "exec" and state["calls"][0] == "GET /toy/version"
    assert server.handle("POST", "/reset_prefix_cache", "reset_external=true")[0] == 404


def test_store_counts_and_clears() -> None:
    store = FakeToyStore(7777, keys=4)
    assert json.loads(store.handle("GET", "/toy/count", "")[2]) == {"count": 4}
    assert json.loads(store.handle("POST", "/toy/clear", "")[2]) == {"removed": 4}
    assert json.loads(store.handle("GET", "/toy/count", "")[2]) == {"count": 0}
    assert store.handle("GET", "/toy/clear", "")[0] == 404
    assert (store.snapshot()["role"], store.snapshot()["keys"]) == ("toy-kv", 0)
