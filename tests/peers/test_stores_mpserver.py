"""``clear-store`` and ``clear`` against a real LMCache MP server (``lmcache server``, LMCache
0.5.6) running as a pod behind a Service, as LMCache's Kubernetes deployment runs it
(``examples/multi_process/`` of LMCache), used by fake vLLM pods whose ``LMCacheMPConnector`` names it
(markers ``stores`` and ``peers``). The server's L1 is seeded with ``lmcache bench server``
against the pod's loopback address and read back from its own
``GET /status``. A second real server keeps an L2 (LMCache's mock adapter) behind its L1; a
third pod runs the ZMQ-only server command (not run: it has no HTTP port to reach anyway)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import tests.peers as peers
from tests.simctl import SimCluster, sandbox_available

pytestmark = [pytest.mark.peers, pytest.mark.stores]

NS = "mp"
ZNS = "mpz"
ZMQ_PORT, HTTP_PORT = 5555, 8080


def _vllm(name: str, ns: str, host: str) -> str:
    ktc = json.dumps({"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                      "kv_connector_extra_config": {"lmcache.mp.host": f"tcp://{host}",
                                                    "lmcache.mp.port": ZMQ_PORT}})
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}, namespace: {ns}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}, llm-d.ai/inference-serving: "true"}}}}
            spec:
              containers:
              - name: vllm
                image: vllm/vllm-openai:v0.32.0
                command: [vllm, serve, org/model-mp]
                args: [--port, "8000", --kv-transfer-config, '{ktc}']
                env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}, {{name: PYTHONHASHSEED, value: "0"}}]
                ports: [{{name: http, containerPort: 8000}}]
        """)


def _server(name: str, ns: str, command: list[str]) -> str:
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}, namespace: {ns}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}}}}}
            spec:
              containers:
              - name: lmcache
                image: lmcache/vllm-openai:v0.5.6
                command: {json.dumps(command)}
                ports: [{{name: zmq, containerPort: {ZMQ_PORT}}}, {{name: http, containerPort: {HTTP_PORT}}}]
        ---
        apiVersion: v1
        kind: Service
        metadata: {{name: {name}, namespace: {ns}}}
        spec:
          selector: {{app: {name}}}
          ports: [{{name: zmq, port: {ZMQ_PORT}, targetPort: zmq}}, {{name: http, port: {HTTP_PORT}, targetPort: http}}]
        """)


SERVER_CMD = ["lmcache", "server", "--host", "0.0.0.0", "--port", str(ZMQ_PORT), "--http-host", "0.0.0.0",
              "--http-port", str(HTTP_PORT), "--prometheus-port", "9090", "--l1-size-gb", "0.25",
              "--eviction-policy", "LRU"]
# the operator's and LMCache's example DaemonSet's command: ZMQ only, no HTTP API (not run for real)
ZMQ_CMD = ["/opt/venv/bin/python3", "-m", "lmcache.v1.multiprocess.server", "--host", "0.0.0.0",
           "--port", str(ZMQ_PORT)]

# a second real server with an L2 behind its L1 (LMCache's in-memory mock adapter)
L2NS = "mpl2"
L2_CMD = [*SERVER_CMD, "--l2-adapter", json.dumps({"type": "mock", "max_size_gb": 0.1, "mock_bandwidth_gb": 10})]

MANIFEST = "---\n".join([
    f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n",
    f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ZNS}}}\n",
    f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {L2NS}}}\n",
    _server("lmcache-l2", L2NS, L2_CMD),
    _vllm("v-l2", L2NS, "lmcache-l2"),
    _server("lmcache-server", NS, SERVER_CMD),
    _vllm("v-one", NS, f"lmcache-server.{NS}.svc.cluster.local"),
    _vllm("v-two", NS, "lmcache-server"),
    _server("lmcache-zmq", ZNS, ZMQ_CMD),
    _vllm("v-zmq", ZNS, "lmcache-zmq"),
])


def _require_sandbox() -> None:
    if not sandbox_available():
        msg = "bubblewrap cannot run here (apt-get install bubblewrap)"
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail(msg + " [KVRESET_REQUIRE_SANDBOX=1]")
        pytest.skip(msg)


def _pod(sim: SimCluster, prefix: str) -> dict[str, Any]:
    return next(p for p in sim.live_pods() if p["name"].startswith(prefix))


def _name(sim: SimCluster, prefix: str, ns: str = NS) -> str:
    return f"{ns}/{_pod(sim, prefix)['name']}"


def _full_status(sim: SimCluster, server: str = "lmcache-server") -> dict[str, Any]:
    ip = _pod(sim, server)["pod_ip"]
    with urllib.request.urlopen(f"http://{ip}:{HTTP_PORT}/status", timeout=10) as resp:
        return json.loads(resp.read())["storage_manager"]  # type: ignore[no-any-return]


def _status(sim: SimCluster, server: str = "lmcache-server") -> tuple[int, int]:
    """(L1 objects, L1 bytes) from the real server's own ``GET /status``."""
    l1 = _full_status(sim, server)["l1_managers"]
    return (sum(m["total_object_count"] for m in l1.values()), sum(m["memory_used_bytes"] for m in l1.values()))


def _seed(sim: SimCluster, start: int = 0, end: int = 3, server_name: str = "lmcache-server", ns: str = NS) -> int:
    """Store ``end - start`` requests of 512 tokens with ``lmcache bench server``; returns the L1
    object count after."""
    exe = peers.lmcache()
    assert exe is not None
    server = _pod(sim, server_name)
    ip = server["pod_ip"]
    # lmcache_driven hands the KV tensors over as POSIX shared memory: the bench runs with the
    # server pod's /dev/shm (its shm dir in the simulator's state), as a client in that pod would
    [shm] = (sim.tmp / "state" / "pods").glob(f"{ns}_{server['name']}_*/shm")
    done = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--bind", str(shm), "/dev/shm",
                           exe, "bench", "server", "--rpc-url", f"tcp://{ip}:{ZMQ_PORT}",
                           "--url", f"http://{ip}:{HTTP_PORT}",
                           "--mode", "cpu", "--transfer-mode", "lmcache_driven",
                           "--kvcache-shape-spec", "(2,64,16,2,16):float16:2", "--num-blocks", "64",
                           "--block-size", "16",
                           "--num-tokens", "512", "--start", str(start), "--end", str(end), "-q"],
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONHASHSEED": "0", "LMCACHE_DISABLE_BANNER": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    deadline = time.monotonic() + 10
    while _status(sim, server_name)[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    return _status(sim, server_name)[0]


@pytest.fixture(scope="module")
def mp_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("lmcache")
    _require_sandbox()
    m = tmp_path_factory.mktemp("mp") / "m.yaml"
    m.write_text(MANIFEST)
    with SimCluster([m], namespace=NS, real_servers=["lmcache"]) as sim:
        sim.wait_ready(90)
        yield sim


def test_dry_run_then_clear_all_empties_the_l1(mp_sim: SimCluster) -> None:
    objects = _seed(mp_sim)
    assert objects > 0
    before = _status(mp_sim)
    # dry run: the call is listed with the server's count, nothing changes
    code, rows, err = mp_sim.run_json("clear-store", "--all", "--dry-run")
    assert code == 0, (rows, err)
    [row] = rows
    assert (row["store"], row["scope"], row["result"], row["before"], row["unit"]) == (
        "lmcache-mp", "store", "planned", objects, "objects")
    assert row["method"] == 'POST /cache/clear {"tier":"l1","force":false}'
    assert row["resolved"] == f"service {NS}/lmcache-server"
    assert row["via"] == f"{_name(mp_sim, 'lmcache-server')}:{HTTP_PORT}"
    assert _status(mp_sim) == before
    # clear --all: pod resets, then the store; the StoreClear row says emptied
    code, rows, err = mp_sim.run_json("clear", "--all", "--yes")
    stores = [r for r in rows if r["kind"] == "StoreClear"]
    assert [r["kind"] for r in rows][-1] == "StoreClear" and len(stores) == 1, (rows, err)
    [row] = stores
    assert (row["before"], row["after"], row["result"]) == (objects, 0, "emptied"), (row, err)
    # the fake vLLMs' LMCacheMPConnector (LMCache's class, as vLLM 0.32 loads it) already cleared
    # the L1 on reset_external=true: the count read before the resets is the row's, the store
    # step confirms the L1 empty
    assert f"{objects} objects before the targets' resets" in row["message"], row
    assert "0 objects when the store step ran" in row["message"] and "0 -> 0 bytes" in row["message"], row
    assert sorted(row["targeted_pods"]) == sorted([_name(mp_sim, "v-one"), _name(mp_sim, "v-two")])
    assert _status(mp_sim) == (0, 0)
    # a second run: 0 objects, exit 0
    # (clear's own exit code also counts the CacheReset rows, whose shared:lmcache-server tier
    # the API reset leaves; the store step's row is what this checks)
    code, rows, err = mp_sim.run_json("clear", "--all", "--yes")
    assert (rows[-1]["kind"], rows[-1]["before"], rows[-1]["after"], rows[-1]["result"]) == (
        "StoreClear", 0, 0, "emptied"), (rows, err)
    code, rows, err = mp_sim.run_json("clear-store", "--all", "--yes")
    assert code == 0 and (rows[0]["before"], rows[0]["after"], rows[0]["result"]) == (0, 0, "emptied"), (rows, err)


def test_untargeted_user_of_the_server_needs_the_flag(mp_sim: SimCluster) -> None:
    objects = _seed(mp_sim, 3, 5)
    before = _status(mp_sim)
    other = _name(mp_sim, "v-two")
    code, rows, err = mp_sim.run_json("clear-store", "v-one", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert row["result"] == "left" and row["other_pods"] == [other]
    assert "--shared-stores" in row["message"] and other in row["message"]
    assert _status(mp_sim) == before
    # the forced clear: shown in the dry run's METHOD, then sent
    code, rows, err = mp_sim.run_json("clear-store", "v-one", "--shared-stores", "--force-mp-clear", "--dry-run")
    assert code == 0 and rows[0]["method"] == 'POST /cache/clear {"tier":"l1","force":true}', (rows, err)
    assert "force: true (--force-mp-clear)" in rows[0]["message"] and "--force-mp-clear" in err
    assert _status(mp_sim) == before
    code, rows, err = mp_sim.run_json("clear-store", "v-one", "--shared-stores", "--force-mp-clear", "--yes")
    assert code == 0 and (rows[0]["before"], rows[0]["after"]) == (objects, 0), (rows, err)
    assert _status(mp_sim) == (0, 0)


def test_zmq_only_server_is_left_with_the_remedy(mp_sim: SimCluster) -> None:
    code, rows, err = mp_sim.run_json("clear-store", "-n", ZNS, "--all", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert row["store"] == "lmcache-mp" and row["result"] == "left" and row["resolved"] == f"service {ZNS}/lmcache-zmq"
    server = _name(mp_sim, "lmcache-zmq", ZNS)
    assert "ZMQ-only" in row["message"] and server in row["message"]
    assert "restart" in row["message"] and "--http-port" in row["message"]


def test_l2_behind_the_server_is_left_with_the_reason(mp_sim: SimCluster) -> None:
    objects = _seed(mp_sim, server_name="lmcache-l2", ns=L2NS)
    [l2] = _full_status(mp_sim, "lmcache-l2")["l2_adapters"]
    assert l2["type"] == "MockL2Adapter" and l2["stored_object_count"] == objects
    code, rows, err = mp_sim.run_json("clear-store", "-n", L2NS, "--all", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert (row["before"], row["after"], row["result"]) == (objects, 0, "left"), row
    assert f"MockL2Adapter ({objects} objects)" in row["message"] and "L1 only" in row["message"]
    # the real server: L1 empty, its L2 untouched
    assert _status(mp_sim, "lmcache-l2") == (0, 0)
    assert _full_status(mp_sim, "lmcache-l2")["l2_adapters"][0]["stored_object_count"] == objects
