"""A reset that is itself store-wide, against a real Mooncake master (markers ``peers`` and
``stores``).

vLLM 0.32.0's ``MooncakeStoreConnector`` empties the whole Mooncake store on
``reset_external=true`` (``.../kv_connector/v1/mooncake/store/connector.py::reset_cache`` ->
``remove_all(force=True)``). The vLLM pods are the simulator's fakes, whose connector empties
the real master their ``MOONCAKE_CONFIG_PATH`` names (tests/sim/mooncakestore.py), so the
master's ``master_key_count`` shows what was really removed. The master, its segment-holding
client and the ConfigMap are those of tests/peers/test_stores_redis_mooncake.py; ``m-one`` and
``m-two`` are the targets, ``m-three`` uses the same master and is not targeted, ``m-old`` runs
vLLM 0.22.0 (no reset hook yet) against the same master.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

import tests.peers as peers
from tests.peers.test_stores_redis_mooncake import (
    MOONCAKE_MANIFEST,
    NS,
    _key_count,
    _pod,
    _require_sandbox,
    _seed_mooncake,
    _vllm,
)
from tests.simctl import SimCluster

pytestmark = [pytest.mark.peers, pytest.mark.stores]

_MC = dict(connector="MooncakeStoreConnector",
           env=", {name: MOONCAKE_CONFIG_PATH, value: /etc/mooncake/mooncake.json}",
           mounts="\n                volumeMounts: [{name: mc, mountPath: /etc/mooncake}]",
           volumes="\n              volumes: [{name: mc, configMap: {name: mooncake}}]")

MANIFEST = (MOONCAKE_MANIFEST + "---\n" + _vllm("m-three", "org/model-m", **_MC) + "---\n"
            + _vllm("m-old", "org/model-m", **_MC).replace("vllm-openai:v0.32.0", "vllm-openai:v0.22.0"))


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("mooncake")
    _require_sandbox()
    m = tmp_path_factory.mktemp("mooncake-reset") / "m.yaml"
    m.write_text(MANIFEST)
    with SimCluster([m], namespace=NS, real_servers=["mooncake"]) as cluster:
        cluster.wait_ready(60)
        yield cluster


def _state(sim: SimCluster, prefix: str) -> dict[str, Any]:
    return _pod(sim, prefix)["ports"]["8000"]  # type: ignore[no-any-return]


def _name(sim: SimCluster, prefix: str) -> str:
    return f"{NS}/{_pod(sim, prefix)['name']}"


def _refill(sim: SimCluster, keys: int, tmp: Path) -> None:
    """Empty the master through its admin port, then seed ``keys`` objects."""
    ip = _pod(sim, "kv-mooncake-master")["pod_ip"]
    req = urllib.request.Request(f"http://{ip}:9003/api/v1/remove_all?force=true", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert json.loads(resp.read())["success"] is True
    _seed_mooncake(sim, keys, tmp)
    assert _key_count(sim) == keys


def test_without_the_flag_the_targets_reset_with_reset_external_false(sim: SimCluster, tmp_path: Path) -> None:
    _refill(sim, 8, tmp_path)
    code, rows, err = sim.run_json("clear", "m-one", "m-two", "--yes")
    assert code == 1, (rows, err)
    resets = [r for r in rows if r["kind"] == "CacheReset"]
    [store] = [r for r in rows if r["kind"] == "StoreClear"]
    assert len(resets) == 2, rows
    for prefix in ("m-one", "m-two"):
        st = _state(sim, prefix)
        assert parse_qs(st["last_reset_query"]) == {"reset_external": ["false"]}, st
        assert st["mooncake_resets"] == [], st
    assert _key_count(sim) == 8
    others = {_name(sim, "m-three"), _name(sim, "m-old")}
    for row in resets:
        assert row["result"] == "partial" and row["gpu"] == "emptied" and row["shared"] == "left", row
        [left] = row["left"]
        assert left["tier"] == "shared:mooncake-master" and left["remedy"] == "--shared-stores", left
        assert "reset_external=false" in left["reason"] and all(o in left["reason"] for o in others), left
        assert "--shared-stores" in row["message"], row
    assert store["result"] == "left" and set(store["other_pods"]) == others, store
    assert "--shared-stores" in store["message"] and all(o in store["message"] for o in others), store


def test_with_the_flag_vllm_empties_the_master(sim: SimCluster, tmp_path: Path) -> None:
    _refill(sim, 8, tmp_path)
    code, rows, err = sim.run_json("clear", "m-one", "m-two", "--shared-stores", "--yes")
    assert code == 0, (rows, err)
    assert _key_count(sim) == 0
    for prefix in ("m-one", "m-two"):
        st = _state(sim, prefix)
        assert parse_qs(st["last_reset_query"]) == {"reset_external": ["true"]}, st
        assert st["mooncake_resets"] and st["mooncake_resets"][-1]["ok"] is True, st
    removed = sum(c["removed"] or 0 for p in ("m-one", "m-two") for c in _state(sim, p)["mooncake_resets"][-1:])
    assert removed == 8
    resets = [r for r in rows if r["kind"] == "CacheReset"]
    assert all(r["result"] == "emptied" and r["shared"] == "emptied" and r["left"] == [] for r in resets), rows
    [store] = [r for r in rows if r["kind"] == "StoreClear"]
    assert (store["result"], store["after"]) == ("emptied", 0), store


def test_dry_run_shows_the_query_and_changes_nothing(sim: SimCluster, tmp_path: Path) -> None:
    _refill(sim, 5, tmp_path)
    calls = {p: _state(sim, p)["reset_calls"] for p in ("m-one", "m-two")}
    code, rows, err = sim.run_json("clear", "m-one", "m-two", "--dry-run")
    planned = [r for r in rows if r["kind"] == "PlannedReset"]
    assert len(planned) == 2, (rows, err)
    for row in planned:
        assert "POST /reset_prefix_cache?reset_external=false" in row["steps"], row
        assert "shared:mooncake-master (--shared-stores)" in row["leaves"], row
        assert any("reset_external=false" in n and "--shared-stores" in n for n in row["notes"]), row
    [store] = [r for r in rows if r["kind"] == "StoreClear"]
    assert store["result"] == "left" and _name(sim, "m-three") in store["message"], store
    code, rows, err = sim.run_json("clear", "m-one", "m-two", "--dry-run", "--shared-stores")
    planned = [r for r in rows if r["kind"] == "PlannedReset"]
    assert all("POST /reset_prefix_cache?reset_external=true" in r["steps"] for r in planned), (rows, err)
    assert _key_count(sim) == 5
    assert {p: _state(sim, p)["reset_calls"] for p in ("m-one", "m-two")} == calls


def test_every_user_targeted_needs_no_flag_and_the_rows_agree(sim: SimCluster, tmp_path: Path) -> None:
    _refill(sim, 6, tmp_path)
    code, rows, err = sim.run_json("clear", "--all", "--yes")
    # 3: vLLM 0.22 answers the reset with an empty 200 (m-old's GPU tier is unconfirmed)
    assert code == 3, (rows, err)
    assert _key_count(sim) == 0
    by = {r["pod"].rsplit("-", 2)[0]: r for r in rows if r["kind"] == "CacheReset"}
    for prefix in ("m-one", "m-two", "m-three"):
        assert parse_qs(_state(sim, prefix)["last_reset_query"]) == {"reset_external": ["true"]}
        assert by[prefix]["shared"] == "emptied" and by[prefix]["result"] == "emptied", by[prefix]
    # vLLM 0.22 has no reset hook: its API reset leaves the store, and clear-store emptied it in
    # the same run, which its row says instead of "left"
    old = by["m-old"]
    assert _state(sim, "m-old")["mooncake_resets"] == []
    assert old["shared"] == "emptied by clear-store" and old["left"] == [], old
    assert old["gpu"] == "unconfirmed" and old["result"] == "unconfirmed", old
    assert "StoreClear mooncake-master" in old["message"], old
    [store] = [r for r in rows if r["kind"] == "StoreClear"]
    assert store["result"] == "emptied" and store["after"] == 0, store


def test_the_confirmation_shows_it_and_a_no_changes_nothing(sim: SimCluster, tmp_path: Path) -> None:
    import os
    import pty
    import subprocess

    from tests.simctl import zipapp_path

    _refill(sim, 3, tmp_path)
    calls = {p: _state(sim, p)["reset_calls"] for p in ("m-one", "m-two")}
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([str(zipapp_path()), "clear", "m-one", "m-two"], env=sim.env(), stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.write(master, b"n\n")
        _out, err = proc.communicate(timeout=120)
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 1 and "nothing changed" in err, err
    assert "prefix?reset_external=false" in err and "(--shared-stores)" in err, err  # the short step code
    assert _name(sim, "m-three") in err and "Run these steps on " in err, err
    assert {p: _state(sim, p)["reset_calls"] for p in ("m-one", "m-two")} == calls
    assert _key_count(sim) == 3
