"""``--dry-run`` against a real Redis and a real Mooncake master in one cluster (markers
``stores`` and ``peers``): every store call is listed with its scope and method, counted, and
nothing changes: the keys of every model, Redis's own command counters (no ``UNLINK`` was ever
run) and the master's ``master_key_count`` are the same before and after, for ``clear-store``
and for ``clear``'s chained store step. The dry run goes through each kind's ``CLEARERS`` entry
with ``dry_run=True``, so a kind added there is listed the same way."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.peers as peers
from tests.peers.test_stores_redis_mooncake import (
    MOONCAKE_MANIFEST,
    NS,
    REDIS_MANIFEST,
    _key_count,
    _pod,
    _redis,
    _seed,
    _seed_mooncake,
    wait_for_redis,
)
from tests.simctl import SimCluster, sandbox_available

pytestmark = [pytest.mark.peers, pytest.mark.stores]

TARGETS = ("a-one", "a-two", "b-one", "m-one", "m-two")


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("redis")
    peers.require("mooncake")
    if not sandbox_available():
        msg = "bubblewrap cannot run here (apt-get install bubblewrap)"
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail(msg + " [KVRESET_REQUIRE_SANDBOX=1]")
        pytest.skip(msg)
    m = tmp_path_factory.mktemp("dry") / "m.yaml"
    # one namespace document: the Mooncake manifest's own is dropped
    m.write_text(REDIS_MANIFEST + "---\n" + MOONCAKE_MANIFEST.split("---\n", 1)[1])
    with SimCluster([m], namespace=NS, real_servers=["redis", "mooncake"]) as sim:
        sim.wait_ready(90)
        wait_for_redis(sim)
        yield sim


def _counters(sim: SimCluster) -> dict[str, Any]:
    r = _redis(sim)
    stats = r.info("commandstats")
    return {
        "model-a": len(list(r.scan_iter(match="org/model-a@*"))),
        "model-b": len(list(r.scan_iter(match="org/model-b@*"))),
        "dbsize": r.dbsize(),
        "unlink_calls": int((stats.get("cmdstat_unlink") or {}).get("calls", 0)),
        "del_calls": int((stats.get("cmdstat_del") or {}).get("calls", 0)),
        "master_key_count": _key_count(sim),
    }


def test_dry_run_lists_every_call_and_changes_nothing(both: SimCluster, tmp_path: Path) -> None:
    _seed(both)
    _seed_mooncake(both, 6, tmp_path)
    before = _counters(both)
    assert (before["model-a"], before["model-b"], before["master_key_count"]) == (8, 8, 6), before
    code, rows, err = both.run_json("clear-store", *TARGETS, "--dry-run")
    assert code == 0, (rows, err)
    calls = {(r["store"], r["scope"]): r for r in rows}
    assert set(calls) == {("redis", "model org/model-a"), ("redis", "model org/model-b"),
                          ("mooncake-master", "store")}, rows
    assert calls[("redis", "model org/model-a")]["method"] == "SCAN MATCH 'org/model-a@*' + UNLINK"
    assert calls[("redis", "model org/model-b")]["method"] == "SCAN MATCH 'org/model-b@*' + UNLINK"
    assert calls[("mooncake-master", "store")]["method"] == "POST /api/v1/remove_all?force=true"
    for row in rows:
        assert row["result"] == "planned" and row["kind"] == "StoreClear", row
        assert row["before"] == row["after"] and row["before"] is not None, row
        assert row["via"], row
    assert calls[("redis", "model org/model-a")]["before"] == 8
    assert calls[("mooncake-master", "store")]["before"] == 6
    assert _counters(both) == before
    # the table lists the same calls (METHOD shows with -o wide)
    done = both.run("clear-store", *TARGETS, "--dry-run", "-o", "wide")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.count("planned") == 3 and "POST /api/v1/remove_all?force=true" in done.stdout
    # clear --dry-run: the pods' plan, then the same store calls; still nothing changed
    code, rows, err = both.run_json("clear", *TARGETS, "--dry-run")
    stores = [r for r in rows if r["kind"] == "StoreClear"]
    assert {(r["store"], r["scope"], r["result"]) for r in stores} == {
        ("redis", "model org/model-a", "planned"), ("redis", "model org/model-b", "planned"),
        ("mooncake-master", "store", "planned")}, (rows, err)
    kinds = [r["kind"] for r in rows]
    assert len(rows) > len(stores) and kinds[-len(stores):] == ["StoreClear"] * len(stores), kinds
    assert _counters(both) == before
    # and the real run then empties exactly what the dry run listed
    code, rows, err = both.run_json("clear-store", *TARGETS, "--yes")
    assert code == 0 and all(r["result"] == "emptied" for r in rows), (rows, err)
    after = _counters(both)
    assert (after["model-a"], after["model-b"], after["master_key_count"]) == (0, 0, 0), after
    assert after["unlink_calls"] > before["unlink_calls"]
    assert _pod(both, "kv-redis")
