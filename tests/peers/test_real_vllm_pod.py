"""A real vLLM (the CPU build 0.32.0 from ``make peers``) as a pod, end to end through the
simulated API server (tests/manifests/real-vllm.yaml, marker ``peers``).

``tiny-dev`` (dev mode on, its port 8100 set by a ``--config`` file in a ConfigMap) and
``tiny-nodev`` (no dev mode) start once for the module. Checked from the real server's own
answers: ``detect`` shows the version the server reports (the image tags say 0.30.0); a prompt
sent twice through the pod proxy hits the prefix cache (``vllm:prefix_cache_hits_total``); ``clear``
says emptied; the same prompt then misses (hits unchanged, queries up); ``metrics`` shows the
real families; the pod without dev mode gives the ``dev mode off`` row with its fix.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import tests.peers as peers
from tests.simctl import ROOT, SimCluster, sandbox_available, zipapp_path

pytestmark = pytest.mark.peers

MANIFEST = ROOT / "tests" / "manifests" / "real-vllm.yaml"
NS = "rv"
# 27-46 s each on an idle 2-core machine (two start at once here); room for a loaded one
READY_TIMEOUT = 480.0
PROMPT = [4 + (900 + i) % 1000 for i in range(300)]  # 300 token ids: two whole 128-token blocks


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    peers.require("vllm")
    if not sandbox_available():
        msg = "bubblewrap cannot run here (apt-get install bubblewrap)"
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail(msg + " [KVRESET_REQUIRE_SANDBOX=1]")
        pytest.skip(msg)
    if not zipapp_path().exists():
        pytest.fail(f"{zipapp_path()} is missing: run 'make build' (make test does it)")
    sim = SimCluster([MANIFEST], namespace=NS, real_servers=["vllm"])
    try:
        sim.wait_ready(READY_TIMEOUT)
    except TimeoutError:
        logs = []
        for p in sim.live_pods():
            for s in p.get("real_servers") or []:
                try:
                    tail = open(s["log"]).read()[-1500:]
                except OSError:
                    tail = ""
                logs.append(f"{p['name']} ready={p['ready']}: {tail}")
        sim.stop()
        pytest.fail("real vLLM pods did not become ready:\n" + "\n".join(logs))
    yield sim
    sim.stop()


def _call(sim: SimCluster, path: str, method: str = "GET", body: Any = None) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(sim.ca))
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(sim.server + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {sim.admin_token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _pod(sim: SimCluster, owner: str) -> str:
    return next(p["name"] for p in sim.live_pods() if p["name"].startswith(owner + "-"))


def _proxy(sim: SimCluster, owner: str, port: int, path: str) -> str:
    return f"/api/v1/namespaces/{NS}/pods/{_pod(sim, owner)}:{port}/proxy{path}"


def _counters(sim: SimCluster) -> dict[str, float]:
    """The real server's prefix-cache counters (summed over engines) from GET /metrics."""
    code, body = _call(sim, _proxy(sim, "tiny-dev", 8100, "/metrics"))
    assert code == 200, body[:300]
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if s.name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def _complete(sim: SimCluster) -> None:
    code, body = _call(sim, _proxy(sim, "tiny-dev", 8100, "/v1/completions"), "POST",
                       {"model": "tiny", "prompt": PROMPT, "max_tokens": 1})
    assert code == 200, body[:300]


def _by_owner(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["pod"].rsplit("-", 2)[0]: r for r in rows}


def test_detect_shows_the_version_the_server_answers_and_the_port_of_the_config_file(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    found = _by_owner(rows)
    assert found["tiny-dev"]["version"] == "0.32.0" == found["tiny-nodev"]["version"]
    assert found["tiny-dev"]["image"].endswith(":v0.30.0")
    assert found["tiny-dev"]["ports"] == [8100] and found["tiny-nodev"]["ports"] == [8000]
    assert found["tiny-dev"]["config_source"] == "ConfigMap tiny-serve key serve.yaml"
    assert found["tiny-dev"]["dev_mode"] == "on" and found["tiny-nodev"]["dev_mode"].startswith("off")


def test_prefix_hit_then_clear_then_miss_from_the_real_counters(cluster: SimCluster) -> None:
    c0 = _counters(cluster)
    _complete(cluster)
    c1 = _counters(cluster)
    _complete(cluster)
    c2 = _counters(cluster)
    hits, queries = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
    assert c1[queries] > c0[queries]
    assert c2[hits] - c1[hits] >= 256, (c1, c2)  # the two whole blocks of the repeated prompt

    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/tiny-dev", "--yes")
    assert code == 0, (rows, err)
    assert [(r["port"], r["gpu"], r["result"]) for r in rows] == [(8100, "emptied", "emptied")]

    _complete(cluster)
    c3 = _counters(cluster)
    assert c3[hits] == c2[hits], (c2, c3)      # the same prompt now misses
    assert c3[queries] > c2[queries]

    code, rows, err = cluster.run_json("metrics", "-n", NS, "deployment/tiny-dev")
    assert code == 0, err
    assert len(rows) == 1 and rows[0]["port"] == 8100
    assert rows[0]["usage_metric"] == "vllm:kv_cache_usage_perc"
    assert rows[0]["prefix_hits"] == int(c3[hits]) and rows[0]["prefix_queries"] == int(c3[queries])
    assert rows[0]["model"] == "tiny"


def test_a_pod_without_dev_mode_gives_the_dev_mode_off_row(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/tiny-nodev", "--yes")
    assert code == 1, (rows, err)
    assert len(rows) == 1 and rows[0]["result"] == "dev mode off", rows
    assert rows[0]["gpu"] != "emptied"
    assert "kvreset devmode --enable deployment/tiny-nodev" in (rows[0]["message"] or "")


def test_verify_proves_the_real_server_cold_from_its_counters(cluster: SimCluster) -> None:
    """``clear --verify`` on the real 0.32.0 server (no ``--enable-prompt-tokens-details``: the
    counters measure): the control hits two 128-token blocks, the probe after the reset none."""
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/tiny-dev", "--yes", "--verify")
    assert code == 0, (rows, err)
    (row,) = rows
    assert row["result"] == "emptied" and row["verify"] == "cold", row
    (proof,) = row["proof"]
    assert proof["block_size"] == 128 and proof["canary_tokens"] == 257, proof
    control = proof["control"]
    assert control["method"] == "counters" and control["cached_tokens"] == 256, control
    assert control["counters"]["prefix_cache_hits"] == 256 and control["sources"] == {"device": 256}, control
    assert [(p["point"], p["cached_tokens"], p["counters"]["prefix_cache_hits"]) for p in proof["probes"]] == \
        [("api-reset", 0, 0.0)], proof["probes"]
    assert proof["final_reset"] == "success"


def test_verify_finds_the_real_server_warm_when_the_reset_is_404(cluster: SimCluster) -> None:
    """The same run on the real server without dev mode (the reset answers 404): the probe hits
    the canary's two blocks, the row says warm from device, exit code 1."""
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/tiny-nodev", "--yes", "--verify")
    assert code == 1, (rows, err)
    (row,) = rows
    assert row["result"] == "dev mode off" and row["verify"] == "warm: 256 cached tokens from device", row
    (proof,) = row["proof"]
    assert [(p["point"], p["cached_tokens"], p["sources"]) for p in proof["probes"]] == \
        [("api-reset", 256, {"device": 256})], proof
    assert row["gpu"] != "emptied" and any(lt["tier"] == "gpu" for lt in row["left"]), row
