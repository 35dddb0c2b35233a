"""A real Mooncake master whose ``remove_all`` never answers (the simulator holds that pod
proxy call: scenario ``hang``), while ``/metrics`` still does: ``clear-store`` keeps the
``before`` it read and says the clear's outcome is unknown, with the count read afterwards
(markers ``stores`` and ``peers``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.peers as peers
from tests.peers.test_stores_redis_mooncake import MOONCAKE_MANIFEST, _key_count, _require_sandbox, _seed_mooncake
from tests.simctl import SimCluster

pytestmark = [pytest.mark.peers, pytest.mark.stores]


@pytest.fixture(scope="module")
def hung_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("mooncake")
    _require_sandbox()
    m = tmp_path_factory.mktemp("mooncake-hung") / "m.yaml"
    m.write_text(MOONCAKE_MANIFEST)
    scenario = {"pods": [{"match": {"owner": "deployment/kv-mooncake-master"}, "hang": ["/api/v1/remove_all"]}]}
    with SimCluster([m], namespace="st", real_servers=["mooncake"], scenario=scenario) as sim:
        sim.wait_ready(60)
        yield sim


def test_a_hung_remove_all_keeps_before_and_is_unconfirmed(hung_master: SimCluster, tmp_path: Path) -> None:
    _seed_mooncake(hung_master, 3, tmp_path)
    assert _key_count(hung_master) == 3
    code, rows, err = hung_master.run_json("clear-store", "m-one", "m-two", "--yes", "--request-timeout", "3s")
    assert code == 3, (rows, err)
    [row] = rows
    assert row["store"] == "mooncake-master" and row["result"] == "unconfirmed", row
    assert (row["before"], row["after"]) == (3, 3), row
    assert "POST /api/v1/remove_all got no answer" in row["message"], row
    assert "the clear may still be running, or did not happen" in row["message"], row
    assert _key_count(hung_master) == 3
