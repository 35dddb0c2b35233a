"""``clear --verify`` on the real data-parallel pod (marker ``peers``): vLLM's CPU build 0.32.0
with ``--data-parallel-size 2`` (tests/peers/test_real_vllm_dp.py starts it; this module starts
its own, with the same fixture), each engine's canary pinned to it with ``X-data-parallel-rank``.

With engine 1 running long requests the real reset answers ``{"success": false}`` after engine 0
has reset; ``--busy-timeout 0s`` sends it once (a retry within a second found engine 1 between
two requests in all four attempts of one run on an idle machine), but engine 1 may still hold no
request at that moment. Each
attempt is checked against what the reset did (a reset that succeeded is ``cold`` on both
engines; a busy engine 1 is ``warm`` or ``busy``, never ``cold``), up to ``BUSY_ATTEMPTS`` until
the busy case is seen; with ``--preempt-running`` both engines prove cold. About 7 GB: run this module alone.
"""

from __future__ import annotations

import pytest

from tests.peers.test_real_vllm_dp import BUSY_ATTEMPTS, NS, PREEMPTED, _engines, _hits, _LongRequests, _warm, cluster
from tests.simctl import SimCluster

pytestmark = pytest.mark.peers

__all__ = ["cluster"]  # the module-scoped fixture, used by the tests below


def _states(row: dict[str, object]) -> dict[str, str]:
    proofs = row["proof"]
    assert isinstance(proofs, list)
    return {p["engine"]: p["result"] for p in proofs}


def _one_attempt(cluster: SimCluster) -> bool:
    """One ``clear --verify`` with engine 1 busy, checked against what the reset did; True when
    engine 1's reset failed (the busy case), False when the real reset succeeded."""
    p0, p1 = _warm(cluster)
    with _LongRequests(cluster):
        code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/dp", "--yes", "--verify",
                                           "--busy-timeout", "0s", timeout=300)
    [row] = rows
    states = _states(row)
    print(f"clear --verify with engine 1 busy: exit {code}, gpu {row['gpu']}, {row['result']}: {row['verify']}")
    assert set(states) == {"0", "1"}, row["proof"]
    # engine 0 held no request: its reset ran and its canary misses, whatever engine 1 did
    assert states["0"] == "cold", row["proof"]
    assert _hits(cluster, 0, p0) == 0
    if row["gpu"] in ("emptied", "warm"):
        # the real reset succeeded (engine 1 had a moment with no request): both engines cold,
        # never a warm engine on a row whose reset said emptied
        assert row["gpu"] == "emptied" and row["result"] == "emptied", row
        assert states == {"0": "cold", "1": "cold"} and row["verify"] == "cold (engines 0, 1)", row
        assert code == 0, (rows, err)
        assert _hits(cluster, 1, p1) == 0
        return False
    # engine 1's reset failed: its proof is warm (its canary still hits) or busy, never cold
    assert row["result"] in ("busy", "warm") and row["gpu"] == "not emptied", row
    assert states["1"] in ("warm", "busy"), row["proof"]
    assert code == 1, (rows, err)
    engine1 = next(p for p in row["proof"] if p["engine"] == "1")
    if states["1"] == "warm":
        last = engine1["probes"][-1]
        assert last["cached_tokens"] >= 256 and last["sources"] == {"device": last["cached_tokens"]}, last
        assert row["verify"].startswith("engine 0: cold; engine 1: warm: "), row["verify"]
    else:
        assert row["verify"].startswith("engine 0: cold; engine 1: busy: "), row["verify"]
    if not engine1["final_reset"].startswith("success"):  # the verify's last reset did not empty it either
        assert _hits(cluster, 1, p1) >= 256
    return True


def test_verify_with_one_busy_engine_agrees_with_what_the_reset_did(cluster: SimCluster) -> None:
    # every attempt is checked whichever way the real reset went; the busy case must be seen
    for _ in range(BUSY_ATTEMPTS):
        if _one_attempt(cluster):
            return
    pytest.fail(f"engine 1 was idle at the reset in all {BUSY_ATTEMPTS} attempts: the busy case was never seen")


def test_verify_with_preempt_running_proves_both_engines_cold(cluster: SimCluster) -> None:
    p0, p1 = _warm(cluster)
    preempted = _engines(cluster).get((PREEMPTED, "1"), 0.0)
    with _LongRequests(cluster):
        code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/dp", "--yes", "--verify",
                                           "--preempt-running", timeout=300)
    [row] = rows
    print(f"clear --verify --preempt-running with engine 1 busy: exit {code}, {row['result']}: {row['verify']}")
    assert code == 0 and row["result"] == "emptied" and row["verify"] == "cold (engines 0, 1)", (rows, err)
    assert _states(row) == {"0": "cold", "1": "cold"}
    for proof in row["proof"]:
        assert proof["control"]["cached_tokens"] == 256, proof
        assert [(p["point"], p["cached_tokens"]) for p in proof["probes"]] == [("api-reset", 0)], proof
    assert _engines(cluster).get((PREEMPTED, "1"), 0.0) > preempted
    assert _hits(cluster, 0, p0) == 0
    assert _hits(cluster, 1, p1) == 0
