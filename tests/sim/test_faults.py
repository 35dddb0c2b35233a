"""The simulator's fault switches (tests/sim/faults.py): parsing, selection, and the API server
answering 429/500, dropping connections, and expiring tokens."""

from __future__ import annotations

import http.client
import json
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .__main__ import Simulator
from .faults import FaultError, parse_faults
from .scenario import ScenarioError, parse_scenario


def test_parse_rejects_bad_keys() -> None:
    with pytest.raises(FaultError, match="unknown keys"):
        parse_faults({"apis": []})
    with pytest.raises(FaultError, match="needs status, drop or delay_ms"):
        parse_faults({"api": [{"verb": "get"}]})
    with pytest.raises(FaultError, match="fraction"):
        parse_faults({"api": [{"status": 500, "fraction": 2}]})
    with pytest.raises(FaultError, match="mode"):
        parse_faults({"vllm": {"fraction": 0.1, "mode": "explode"}})
    with pytest.raises(ScenarioError, match="exec_cut"):
        parse_scenario({"pods": [{"exec_cut": "sometimes"}]})
    with pytest.raises(ScenarioError, match="token_ttl"):
        parse_scenario({"users": [{"name": "a", "token_ttl": -1}]})


def test_first_n_then_fraction() -> None:
    f = parse_faults({"seed": 1, "api": [
        {"verb": "list", "resource": "pods", "first": 2, "status": 500},
        {"fraction": 0.5, "status": 429, "retry_after": 2}]})
    got = [f.api_action("list", "pods", "ns", "", "admin") for _ in range(4)]
    assert [a.status if a else None for a in got[:2]] == [500, 500]
    assert all(a is None or a.status == 429 for a in got[2:])
    many = [f.api_action("get", "pods", "ns", "p", "admin") for _ in range(400)]
    fired = [a for a in many if a is not None]
    assert 120 < len(fired) < 280
    assert fired[0].headers == (("Retry-After", "2"),)
    assert fired[0].body is not None and fired[0].body["reason"] == "TooManyRequests"
    assert fired[0].body["details"] == {"retryAfterSeconds": 2}
    assert f.state()["api"][0] == {"matched": 4, "fired": 2}


def test_vllm_faults_fail_a_seeded_share_once() -> None:
    f = parse_faults({"seed": 5, "vllm": {"fraction": 0.1, "mode": "drop"}})
    picked = [i for i in range(2000) if f.vllm_action("ns", f"pod-{i}", 8000, "/reset_prefix_cache")]
    assert 140 < len(picked) < 260
    # the same call again succeeds: each picked call fails once
    assert all(f.vllm_action("ns", f"pod-{i}", 8000, "/reset_prefix_cache") is None for i in picked)
    again = parse_faults({"seed": 5, "vllm": {"fraction": 0.1, "mode": "drop"}})
    assert [i for i in range(2000) if again.vllm_action("ns", f"pod-{i}", 8000, "/reset_prefix_cache")] == picked
    only = parse_faults({"vllm": {"fraction": 1.0, "paths": ["/reset_prefix_cache"]}})
    assert only.vllm_action("ns", "p", 8000, "/version") is None
    assert only.vllm_action("ns", "p", 8000, "/reset_prefix_cache") == "error"


def test_pod_fault_keys_are_not_passed_to_the_runtime() -> None:
    sc = parse_scenario({"pods": [{"match": {"ordinal": 1}, "delete_on_first_reset": True, "busy": 2,
                                   "hang": ["/reset_prefix_cache"]}]})
    assert sc.pods[0].overrides == {"busy": 2}
    assert sc.pod_faults(("deployment", "d"), 1, "ns", "p") == {"delete_on_first_reset": True,
                                                                "hang": ["/reset_prefix_cache"]}
    assert sc.pod_faults(("deployment", "d"), 0, "ns", "p") == {}


@pytest.fixture
def bare_sim() -> Iterator[Simulator]:
    sc = parse_scenario({"users": [{"name": "alice", "token_ttl": 2}], "faults": {"api": [
        {"verb": "list", "resource": "configmaps", "first": 1, "status": 429, "retry_after": 1},
        {"verb": "list", "resource": "secrets", "first": 1, "drop": True}]}})
    with tempfile.TemporaryDirectory() as d:
        sim = Simulator([], namespace="ns", scenario=sc, state_dir=Path(d), use_default_backend=False)
        sim.start()
        try:
            yield sim
        finally:
            sim.stop()


def _get(sim: Simulator, path: str, token: str, method: str = "GET",
         body: Any = None) -> tuple[int, dict[str, str], Any]:
    ctx = ssl.create_default_context(cadata=sim.server.ca_pem().decode())
    conn = http.client.HTTPSConnection("127.0.0.1", sim.server.port, context=ctx, timeout=10)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(data or b"null")
    finally:
        conn.close()


def test_server_answers_429_drops_and_expires_tokens(bare_sim: Simulator) -> None:
    admin = bare_sim.server.admin_token
    code, headers, body = _get(bare_sim, "/api/v1/namespaces/ns/configmaps", admin)
    assert (code, headers.get("retry-after"), body["reason"]) == (429, "1", "TooManyRequests")
    assert _get(bare_sim, "/api/v1/namespaces/ns/configmaps", admin)[0] == 200
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        _get(bare_sim, "/api/v1/namespaces/ns/secrets", admin)
    assert _get(bare_sim, "/api/v1/namespaces/ns/secrets", admin)[0] == 200
    # alice's token serves 2 requests, then 401 (403 before that: she has no RBAC grants)
    alice = bare_sim.server.user_tokens["alice"]
    assert [_get(bare_sim, "/api/v1/namespaces/ns/pods", alice)[0] for _ in range(3)] == [403, 403, 401]
    # a minted token with a ttl of 1
    code, _, minted = _get(bare_sim, "/sim/v1/tokens", admin, "POST", {"user": "admin", "ttl": 1})
    assert code == 201
    assert [_get(bare_sim, "/version", minted["token"])[0] for _ in range(2)] == [200, 401]
    state = _get(bare_sim, "/sim/v1/state", admin)[2]
    assert state["faults"]["api"] == [{"matched": 2, "fired": 1}, {"matched": 2, "fired": 1}]
    assert state["faults"]["tokens_expired"] == 2
    assert state["api_requests"]["list configmaps"] == 2
