"""Consent for LMCacheMPConnector's store-wide reset against real servers (marker ``peers``): two
real vLLM CPU pods (0.32.0, models ``model-a`` and ``model-b``) whose ``LMCacheMPConnector`` is
LMCache 0.5.6's own class (vLLM's ``_resolve_lmcache_mp_connector`` picks it: lmcache is
importable after vLLM's packages, tests/sim/realservers.py) share one real ``lmcache server``.

Each model's prompt stores its chunks in the server's L1 (``GET /status``:
``storage_manager.l1_managers._default.memory_used_bytes``). ``clear deployment/a`` without
``--shared-stores`` must send ``reset_external=false`` to a's pod and leave the L1 as it was (b's
objects survive); with ``--shared-stores`` a's ``reset_external=true`` empties the L1 and the store
step confirms it. About 7 GB: run this module alone.
"""

from __future__ import annotations

import itertools
import json
import os
import ssl
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.peers as peers
from tests.simctl import SimCluster, sandbox_available, zipapp_path

pytestmark = pytest.mark.peers

NS = "mpr"
READY_TIMEOUT = 600.0
KTC = json.dumps({"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                  "kv_connector_extra_config": {"lmcache.mp.host": "tcp://lmcache-server", "lmcache.mp.port": 5555}})


def _vllm(name: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}}}}}
            spec:
              containers:
              - name: vllm
                image: vllm/vllm-openai:v0.32.0
                command: [vllm, serve, org/model-{name}]
                args: [--served-model-name, model-{name}, --enable-prefix-caching, --kv-transfer-config, '{KTC}']
                env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}]
                ports: [{{name: http, containerPort: 8000}}]
        """)


# Without --supported-transfer-mode auto a CPU
# worker asks for engine_driven, which the server does not register, and vLLM never gets ready
MANIFEST = textwrap.dedent(f"""\
    apiVersion: v1
    kind: Namespace
    metadata: {{name: {NS}}}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: lmcache-server, namespace: {NS}}}
    spec:
      replicas: 1
      selector: {{matchLabels: {{app: lmcache-server}}}}
      template:
        metadata: {{labels: {{app: lmcache-server}}}}
        spec:
          containers:
          - name: lmcache
            image: lmcache/vllm-openai:v0.5.6
            command: [lmcache, server, --host, 0.0.0.0, --port, "5555", --http-host, 0.0.0.0, --http-port, "8080",
                      --prometheus-port, "9090", --l1-size-gb, "0.25", --eviction-policy, LRU, --chunk-size, "256",
                      --supported-transfer-mode, auto]
            ports: [{{name: zmq, containerPort: 5555}}, {{name: http, containerPort: 8080}}]
    ---
    apiVersion: v1
    kind: Service
    metadata: {{name: lmcache-server, namespace: {NS}}}
    spec:
      selector: {{app: lmcache-server}}
      ports: [{{name: zmq, port: 5555, targetPort: zmq}}, {{name: http, port: 8080, targetPort: http}}]
    ---
    """) + _vllm("a") + "---\n" + _vllm("b")

_ROUNDS = itertools.count()


def _prompt(model: str, round_: int) -> list[int]:
    """300 token ids (two whole 128-token blocks, one 256-token LMCache chunk), new for each model
    and round, so that each fill stores new chunks."""
    base = (100 if model == "a" else 600) + 41 * round_
    return [4 + (base + i) % 1000 for i in range(300)]


def _logs(sim: SimCluster) -> str:
    out = []
    for p in sim.live_pods():
        for s in p.get("real_servers") or []:
            try:
                tail = Path(s["log"]).read_text()[-2000:]
            except OSError:
                tail = ""
            out.append(f"{p['name']} ready={p['ready']} notes={p.get('notes')}: {tail}")
    return "\n".join(out)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("vllm", "lmcache")
    if not sandbox_available():
        msg = "bubblewrap cannot run here (apt-get install bubblewrap)"
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail(msg + " [KVRESET_REQUIRE_SANDBOX=1]")
        pytest.skip(msg)
    if not zipapp_path().exists():
        pytest.fail(f"{zipapp_path()} is missing: run 'make build' (make test does it)")
    m = tmp_path_factory.mktemp("mpr") / "m.yaml"
    m.write_text(MANIFEST)
    sim = SimCluster([m], namespace=NS, real_servers=["vllm", "lmcache"])
    try:
        sim.wait_ready(READY_TIMEOUT)
    except TimeoutError:
        logs = _logs(sim)
        sim.stop()
        pytest.fail("the real pods did not become ready:\n" + logs)
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
    return next(p["name"] for p in sim.live_pods() if p["namespace"] == NS and p["name"].startswith(owner + "-"))


def _proxy(sim: SimCluster, owner: str, port: int, path: str) -> str:
    return f"/api/v1/namespaces/{NS}/pods/{_pod(sim, owner)}:{port}/proxy{path}"


def _l1_bytes(sim: SimCluster) -> int:
    code, body = _call(sim, _proxy(sim, "lmcache-server", 8080, "/status"))
    assert code == 200, body[:300]
    managers = json.loads(body)["storage_manager"]["l1_managers"]
    return sum(int(m["memory_used_bytes"]) for m in managers.values())


def _store(sim: SimCluster, model: str, round_: int) -> int:
    """Send ``model`` a new prompt and wait until its chunk is in the L1 (the store is
    asynchronous); the L1 bytes after."""
    before = _l1_bytes(sim)
    code, body = _call(sim, _proxy(sim, model, 8000, "/v1/completions"), "POST",
                       {"model": f"model-{model}", "prompt": _prompt(model, round_), "max_tokens": 1})
    assert code == 200, body[:300]
    deadline = time.monotonic() + 30
    while (after := _l1_bytes(sim)) <= before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert after > before, f"model-{model}'s prompt stored nothing in the L1 ({before} bytes)\n" + _logs(sim)
    return after


def _fill(sim: SimCluster) -> int:
    """A new prompt of each model stored in the L1 (each adds bytes); the L1 bytes after."""
    round_ = next(_ROUNDS)
    before = _l1_bytes(sim)
    after_a = _store(sim, "a", round_)
    after_b = _store(sim, "b", round_)
    print(f"L1 bytes: {before} -> {after_a} (model-a) -> {after_b} (model-b)")
    return after_b


def test_without_the_flag_as_reset_keeps_the_servers_l1(cluster: SimCluster) -> None:
    filled = _fill(cluster)  # model-b's chunk is in the L1 beside model-a's
    code, rows, err = cluster.run_json("clear", "deployment/a", "--dry-run")
    [plan] = [r for r in rows if r.get("kind") == "PlannedReset"]
    assert plan["steps"][0] == "POST /reset_prefix_cache?reset_external=false", plan
    assert plan["leaves"] == ["shared:lmcache-mp (--shared-stores)"], plan

    code, rows, err = cluster.run_json("clear", "deployment/a", "--yes")
    assert code == 1, (rows, err)
    [row] = [r for r in rows if r.get("kind") == "CacheReset"]
    assert row["gpu"] == "emptied" and row["shared"] == "left", row
    assert f"{NS}/b-" in row["message"] and "reset_external=false" in row["message"], row
    [store] = [r for r in rows if r.get("store") == "lmcache-mp"]
    assert store["result"] == "left" and "--shared-stores" in store["message"], store
    assert _l1_bytes(cluster) == filled  # b's objects (and a's) are still in the L1
    print(f"clear deployment/a without --shared-stores: L1 {filled} -> {_l1_bytes(cluster)} bytes")


def test_with_shared_stores_the_reset_empties_the_l1_and_the_store_step_confirms_it(cluster: SimCluster) -> None:
    filled = _fill(cluster)
    code, rows, err = cluster.run_json("clear", "deployment/a", "--shared-stores", "--yes")
    assert code == 0, (rows, err)
    [store] = [r for r in rows if r.get("store") == "lmcache-mp"]
    # a's real reset_external=true emptied the L1 itself: the row counts what was there before
    # the resets, the store step found it empty and confirms it
    assert store["result"] == "emptied" and store["before"] > 0 and store["after"] == 0, store
    assert "before the targets' resets" in store["message"] and "0 objects when the store step ran" in store["message"]
    [row] = [r for r in rows if r.get("kind") == "CacheReset"]
    assert row["result"] == "emptied", row
    assert _l1_bytes(cluster) == 0
    print(f"clear deployment/a --shared-stores: L1 {filled} -> 0 bytes; store row {store['message']}")


def test_the_real_connectors_reset_alone_empties_the_shared_l1(cluster: SimCluster) -> None:
    """What makes the rule necessary, read from the real servers: one pod's reset_external=true
    (sent here directly, without the plugin's store step) empties the L1 b's prompt filled."""
    filled = _fill(cluster)
    start = time.monotonic()
    code, body = _call(cluster, _proxy(cluster, "a", 8000, "/reset_prefix_cache?reset_external=true"), "POST")
    took = time.monotonic() - start
    assert code == 200 and json.loads(body).get("success") is True, body[:300]
    assert _l1_bytes(cluster) == 0
    print(f"a's reset_external=true alone: L1 {filled} -> 0 bytes, answered in {took * 1000:.0f} ms")


def _verify_rows(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The CacheReset row, its one engine's proof and that proof's probes, printed."""
    [row] = [r for r in rows if r.get("kind") == "CacheReset"]
    (proof,) = row["proof"]
    print(f"verify: {row['verify']}; probes {[(p['point'], p['found'], p['counters']) for p in proof['probes']]}")
    return row, proof, proof["probes"]


def test_verify_finds_the_kept_l1_warm_from_the_connector_without_the_flag(cluster: SimCluster) -> None:
    """``clear deployment/a --verify`` without ``--shared-stores``: a's reset keeps the shared L1
    (``reset_external=false``) and the store step leaves it, so each probe after them is an
    external hit the real server supplied: ``warm`` from the connector's source, exit 1."""
    _fill(cluster)
    code, rows, err = cluster.run_json("clear", "deployment/a", "--yes", "--verify", timeout=300)
    row, proof, probes = _verify_rows(rows)
    assert code == 1, (rows, err)
    assert proof["control"]["cached_tokens"] == 256 and proof["control"]["sources"] == {"device": 256}, proof
    assert [p["point"] for p in probes] == ["api-reset", "store"], probes
    for probe in probes:
        assert probe["counters"]["prefix_cache_hits"] == 0, probe           # the GPU cache was emptied
        assert probe["cached_tokens"] == probe["counters"]["external_prefix_cache_hits"] >= 256, probe
        assert probe["sources"] and "device" not in probe["sources"], probe
    last = probes[-1]
    (source,) = last["sources"]
    assert row["verify"] == f"warm: {last['cached_tokens']} cached tokens from {source}", row
    assert row["result"] == "warm" and row["shared"] == "left" and row["gpu"] == "emptied", row
    assert any(lt["tier"] == "shared" and "--shared-stores" in (lt["remedy"] or "") for lt in row["left"]), row["left"]
    [store] = [r for r in rows if r.get("store") == "lmcache-mp"]
    assert store["result"] == "left", store
    assert _l1_bytes(cluster) > 0


def test_verify_with_shared_stores_proves_a_cold_after_the_l1_is_emptied(cluster: SimCluster) -> None:
    _fill(cluster)
    code, rows, err = cluster.run_json("clear", "deployment/a", "--yes", "--verify", "--shared-stores", timeout=300)
    row, proof, probes = _verify_rows(rows)
    assert code == 0 and row["verify"] == "cold" and row["result"] == "emptied", (rows, err)
    assert [(p["point"], p["cached_tokens"], p["counters"]["external_prefix_cache_hits"]) for p in probes] == \
        [("api-reset", 0, 0.0), ("store", 0, 0.0)], probes
    assert proof["final_reset"] == "success", proof
