"""Acceptance of the real servers as pods (marker ``peers``): tests/manifests/real-peers.yaml
with ``--real-servers all``: vLLM's CPU build, Redis, LMCache's controller, a standalone worker
and an MP server DaemonSet, a Mooncake master and client, all reached through the API server
(pod proxy, service proxy, exec, port-forward) and real ``kubectl``; then stopping the
simulator leaves none of their processes."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import tests.peers as peers
from tests.simctl import ROOT, SimCluster, sandbox_available

pytestmark = pytest.mark.peers

MANIFEST = ROOT / "tests" / "manifests" / "real-peers.yaml"
NS = "lmc"
# vLLM's CPU build needs 27-46 s to become ready on an idle 2-core machine; the bound leaves
# room for a loaded one
READY_TIMEOUT = 420.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    peers.require("vllm", "redis", "lmcache", "mooncake")
    if not sandbox_available():
        msg = "bubblewrap cannot run here (apt-get install bubblewrap)"
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail(msg + " [KVRESET_REQUIRE_SANDBOX=1]")
        pytest.skip(msg)
    sim = SimCluster([MANIFEST], namespace=NS, real_servers=["all"])
    try:
        sim.wait_ready(READY_TIMEOUT)
    except TimeoutError:
        state = sim.state()
        logs = []
        for p in state["pods"]:
            for s in p.get("real_servers") or []:
                try:
                    tail = open(s["log"]).read()[-1500:]
                except OSError:
                    tail = ""
                logs.append(f"{p['name']} ready={p['ready']} {s['kind']}: {tail}")
        sim.stop()
        pytest.fail("real-server pods did not become ready:\n" + "\n".join(logs))
    yield sim
    sim.stop()


def _get(sim: SimCluster, path: str, method: str = "GET", body: bytes | None = None
         ) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(sim.ca))
    req = urllib.request.Request(sim.server + path, data=body, method=method,
                                 headers={"Authorization": f"Bearer {sim.admin_token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _pod(sim: SimCluster, prefix: str) -> dict[str, Any]:
    return next(p for p in sim.live_pods() if p["name"].startswith(prefix))


def _kubectl(sim: SimCluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    return subprocess.run(["kubectl", "-n", NS, *args], env=sim.env(), capture_output=True,
                          text=True, timeout=timeout)


def test_every_pod_is_ready_at_its_own_loopback_address(cluster: SimCluster) -> None:
    pods = cluster.live_pods()
    names = sorted(p["name"].rsplit("-", 2)[0] if p["owner"]["kind"] == "Deployment"
                   else p["name"].rsplit("-", 1)[0] for p in pods)
    assert names == ["kv-lmcache-controller", "kv-lmcache-mp", "kv-lmcache-worker",
                     "kv-mooncake-client", "kv-mooncake-master", "kv-redis", "kv-vllm"]
    assert all(p["ready"] for p in pods)
    ips = [p["pod_ip"] for p in pods]
    assert len(set(ips)) == len(ips) and all(ip.startswith("127.") for ip in ips)
    # the state names each real server, its address and its log
    for p in pods:
        servers = p["real_servers"]
        assert servers and all(s["running"] for s in servers)
        assert all(os.path.isfile(s["log"]) for s in servers)


def test_vllm_answers_as_0_32_0_under_the_manifest_model_name(cluster: SimCluster) -> None:
    pod = _pod(cluster, "kv-vllm")
    code, body = _get(cluster, f"/api/v1/namespaces/{NS}/pods/{pod['name']}:8000/proxy/version")
    assert code == 200 and json.loads(body) == {"version": "0.32.0"}
    code, body = _get(cluster, f"/api/v1/namespaces/{NS}/services/kv-vllm:http/proxy/v1/models")
    assert code == 200
    assert [m["id"] for m in json.loads(body)["data"]] == ["qwen3-0-6b"]
    # dev mode from the pod's env: the reset route exists and answers the real way
    code, body = _get(cluster, f"/api/v1/namespaces/{NS}/pods/{pod['name']}:8000/proxy/"
                      "reset_prefix_cache", method="POST", body=b"")
    assert code == 200 and json.loads(body) == {"success": True}
    code, body = _get(cluster, f"/api/v1/namespaces/{NS}/pods/{pod['name']}:8000/proxy/"
                      "reset_prefix_cache?reset_external=bogus", method="POST", body=b"")
    assert code == 400


def test_lmcache_controller_lists_the_worker_registered_by_service_name(
        cluster: SimCluster) -> None:
    path = (f"/api/v1/namespaces/{NS}/services/kv-lmcache-controller:http/proxy/controller/"
            "workers?instance_id=kv-worker")
    deadline = time.monotonic() + 60
    while True:
        code, body = _get(cluster, path)
        if code == 200 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert code == 200, body
    workers = json.loads(body)["workers"]
    worker_pod = _pod(cluster, "kv-lmcache-worker")
    assert [(w["instance_id"], w["ip"]) for w in workers] == [("kv-worker", worker_pod["pod_ip"])]


def test_mp_server_and_mooncake_master_answer(cluster: SimCluster) -> None:
    mp = _pod(cluster, "kv-lmcache-mp")
    assert mp["owner"]["kind"] == "DaemonSet"
    code, body = _get(cluster, f"/api/v1/namespaces/{NS}/pods/{mp['name']}:8080/proxy/healthcheck")
    assert code == 200 and json.loads(body) == {"status": "healthy"}
    code, body = _get(cluster, f"/api/v1/namespaces/{NS}/services/kv-mooncake-master:metrics/"
                      "proxy/metrics")
    assert code == 200 and b"\nmaster_key_count " in body


def test_kubectl_exec_redis_cli_ping(cluster: SimCluster) -> None:
    redis = _pod(cluster, "kv-redis")
    out = _kubectl(cluster, "exec", redis["name"], "--", "redis-cli", "PING")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "PONG"


def test_python_client_port_forward_reaches_redis(cluster: SimCluster) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    from kubernetes.stream import portforward

    api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core = kubernetes.client.CoreV1Api(api)
    redis = _pod(cluster, "kv-redis")
    pf = portforward(core.connect_get_namespaced_pod_portforward, redis["name"], NS,
                     ports="6379")
    try:
        sock = pf.socket(6379)
        sock.settimeout(10)
        sock.sendall(b"*3\r\n$3\r\nSET\r\n$2\r\npf\r\n$2\r\nok\r\n*2\r\n$3\r\nGET\r\n$2\r\npf\r\n")
        got = b""
        while b"$2\r\nok\r\n" not in got:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
        assert got == b"+OK\r\n$2\r\nok\r\n"
        sock.close()
    finally:
        pf.close()


def test_kubectl_get_svc_and_endpointslices(cluster: SimCluster) -> None:
    out = _kubectl(cluster, "get", "svc,endpointslices")
    assert out.returncode == 0, out.stderr
    for name in ("kv-vllm", "kv-redis", "kv-lmcache-controller", "kv-lmcache-mp",
                 "kv-mooncake-master"):
        assert f"service/{name} " in out.stdout
        assert f"endpointslice.discovery.k8s.io/{name}-" in out.stdout
    for prefix in ("kv-vllm", "kv-redis", "kv-lmcache-controller", "kv-mooncake-master"):
        assert _pod(cluster, prefix)["pod_ip"] in out.stdout


def _redis_endpoints(cluster: SimCluster) -> list[tuple[str, bool]]:
    code, body = _get(cluster, f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
                      "?labelSelector=kubernetes.io%2Fservice-name%3Dkv-redis")
    assert code == 200
    return [(e["addresses"][0], e["conditions"]["ready"])
            for s in json.loads(body)["items"] for e in s["endpoints"]]


def _pod_ready(cluster: SimCluster, name: str) -> bool:
    code, body = _get(cluster, f"/api/v1/namespaces/{NS}/pods/{name}")
    assert code == 200
    conds = json.loads(body).get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def test_a_redis_that_goes_down_leaves_its_endpoints_and_comes_back(cluster: SimCluster) -> None:
    redis = _pod(cluster, "kv-redis")
    assert _redis_endpoints(cluster) == [(redis["pod_ip"], True)]
    out = _kubectl(cluster, "exec", redis["name"], "--", "redis-cli", "SHUTDOWN", "NOSAVE")
    seen_unready = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        eps = _redis_endpoints(cluster)
        if eps == [(redis["pod_ip"], False)]:
            seen_unready = True
            # The service proxy reads the pod's Ready condition; the EndpointSlice follows it
            # a moment later, so the answer is only checked when the pod was not Ready both
            # before and after the call.
            before = _pod_ready(cluster, redis["name"])
            code, body = _get(cluster, f"/api/v1/namespaces/{NS}/services/kv-redis:redis/proxy/")
            if not before and not _pod_ready(cluster, redis["name"]) \
                    and _redis_endpoints(cluster) == eps:     # still down after the call
                assert code == 503 and b"no endpoints available" in body, body
        if seen_unready and eps == [(redis["pod_ip"], True)]:
            break
        time.sleep(0.1)
    assert seen_unready, out.stderr
    assert _redis_endpoints(cluster) == [(redis["pod_ip"], True)]
    server = _pod(cluster, "kv-redis")["real_servers"][0]
    assert server["restarts"] >= 1 and server["exit_codes"]


def _running(pid: int) -> bool:
    """Process ``pid`` exists and is not a zombie (a dead process its reaper has not
    collected yet)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _sandbox_processes(pgids: set[int]) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) in pgids and _running(int(entry)):
                    out.append(int(entry))
            except OSError:
                pass
    return out


def test_stopping_the_simulator_leaves_no_server_process(cluster: SimCluster) -> None:
    state_pods = cluster.live_pods()
    pgids = {s["pid"] for p in state_pods for s in p.get("real_servers") or [] if s["pid"]}
    assert len(pgids) == 7
    before = _sandbox_processes(pgids)
    assert len(before) > len(pgids)       # the servers themselves, not only their sandboxes
    cluster.stop()
    left = [pid for pid in before if _running(pid)]
    assert not left, f"processes left: {left}"
    assert not _sandbox_processes(pgids)
    # no process anywhere still names one of this simulator's pod addresses
    ips = {p["pod_ip"] for p in state_pods}
    for entry in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if not entry.isdigit() or not _running(int(entry)):
            continue
        words = set(cmd.replace("=", "\0").split("\0"))
        assert not (words & ips), f"process {entry} still runs: {cmd!r}"
