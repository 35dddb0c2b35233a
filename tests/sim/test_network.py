"""Loopback addressing, Services, EndpointSlices, the service proxy, ClusterIP relays, hosts
files, DaemonSets and hostNetwork pods (tests/sim/network.py), against fake vLLM pods."""

from __future__ import annotations

import ipaddress
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.sim.__main__ import Simulator
from tests.sim.network import AddressBlock, HostsFiles

MANIFEST = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: net}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.26.0
        command: [vllm, serve, org/model, --port, "8000"]
        ports: [{name: http, containerPort: 8000}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: net}
spec:
  selector: {app: web}
  ports: [{name: api, port: 80, targetPort: http}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: net}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      hostNetwork: true
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.26.0
        command: [vllm, serve, org/agent, --port, "8100"]
"""


def _wait(cond: Any, timeout: float = 10.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


class _Api:
    def __init__(self, sim: Simulator, tmp: Path) -> None:
        self.sim = sim
        self.ca = tmp / "ca.pem"
        self.ca.write_bytes(sim.server.ca_pem())
        self.ctx = ssl.create_default_context(cafile=str(self.ca))

    def get(self, path: str) -> tuple[int, Any]:
        req = urllib.request.Request(self.sim.server.url + path, headers={
            "Authorization": f"Bearer {self.sim.server.admin_token}"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    tmp = tmp_path_factory.mktemp("net")
    (tmp / "m.yaml").write_text(MANIFEST)
    s = Simulator([str(tmp / "m.yaml")], namespace="net", ready_delay=0.05, sandbox=False,
                  state_dir=tmp / "state", nodes=2)
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def api(sim: Simulator, tmp_path_factory: pytest.TempPathFactory) -> _Api:
    return _Api(sim, tmp_path_factory.mktemp("api"))


def _slices(api: _Api) -> list[dict[str, Any]]:
    code, body = api.get("/apis/discovery.k8s.io/v1/namespaces/net/endpointslices")
    assert code == 200
    return body["items"]


def test_every_address_is_loopback_and_unique(api: _Api) -> None:
    _code, pods = api.get("/api/v1/namespaces/net/pods")
    ips = [p["status"]["podIP"] for p in pods["items"] if "agent" not in p["metadata"]["name"]]
    assert len(ips) == 2 and len(set(ips)) == 2
    for p in pods["items"]:
        for ip in (p["status"]["podIP"], p["status"]["hostIP"]):
            assert ipaddress.ip_address(ip).is_loopback
    _code, svc = api.get("/api/v1/namespaces/net/services/web")
    assert ipaddress.ip_address(svc["spec"]["clusterIP"]).is_loopback
    assert svc["spec"]["clusterIP"] not in ips
    assert svc["spec"]["ports"][0]["protocol"] == "TCP"


def test_two_simulators_get_different_blocks() -> None:
    a, b = AddressBlock(), AddressBlock()
    try:
        assert a.block != b.block
        assert a.pod_ip().split(".")[1] != b.pod_ip().split(".")[1]
    finally:
        a.release()
        b.release()


def test_endpointslice_lists_ready_pods_and_an_unready_pod_leaves(api: _Api,
                                                                   sim: Simulator) -> None:
    sl = _wait(lambda: [s for s in _slices(api)
                        if s["metadata"]["labels"]["kubernetes.io/service-name"] == "web"
                        and len(s["endpoints"]) == 2])[0]
    assert sl["addressType"] == "IPv4" and sl["ports"] == [{"name": "api", "protocol": "TCP",
                                                            "port": 8000}]
    assert all(e["conditions"]["ready"] for e in sl["endpoints"])
    name = sl["endpoints"][0]["targetRef"]["name"]
    rec = sim.cluster.record_for("net", name)
    sim.cluster.set_pod_ready(rec, False)
    try:
        def gone() -> bool:
            eps = [s for s in _slices(api) if s["metadata"]["name"] == sl["metadata"]["name"]]
            ready = [e["targetRef"]["name"] for e in eps[0]["endpoints"]
                     if e["conditions"]["ready"]]
            return name not in ready and len(ready) == 1
        _wait(gone)
        # the service proxy and the ClusterIP never choose the unready pod
        for _ in range(4):
            code, _body = api.get("/api/v1/namespaces/net/services/web:api/proxy/version")
            assert code == 200
        calls = sim.server.api_requests()
        assert calls.get("get services/proxy", 0) >= 4
    finally:
        sim.cluster.set_pod_ready(rec, True)


def test_service_proxy_and_cluster_ip_reach_the_pods(api: _Api) -> None:
    code, body = api.get("/api/v1/namespaces/net/services/web:80/proxy/version")
    assert code == 200 and body == {"version": "0.26.0"}
    code, body = api.get("/api/v1/namespaces/net/services/http:web:api/proxy/version")
    assert code == 200
    code, body = api.get("/api/v1/namespaces/net/services/nope:80/proxy/version")
    assert code == 404
    _code, svc = api.get("/api/v1/namespaces/net/services/web")
    ip = svc["spec"]["clusterIP"]

    def through_cluster_ip() -> Any:
        try:
            with urllib.request.urlopen(f"http://{ip}:80/version", timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            return None
    assert _wait(through_cluster_ip) == {"version": "0.26.0"}


def test_daemonset_pod_per_node_on_host_network(api: _Api) -> None:
    def pods() -> list[dict[str, Any]]:
        _c, body = api.get("/api/v1/namespaces/net/pods?labelSelector=app%3Dagent")
        items = body["items"]
        return items if len(items) == 2 and all(
            p["status"].get("phase") == "Running" for p in items) else []
    items = _wait(pods)
    assert sorted(p["spec"]["nodeName"] for p in items) == ["sim-node-0", "sim-node-1"]
    assert all(p["status"]["podIP"] == p["status"]["hostIP"] for p in items)
    assert len({p["status"]["hostIP"] for p in items}) == 2
    _c, ds = api.get("/apis/apps/v1/namespaces/net/daemonsets/agent")
    _wait(lambda: api.get("/apis/apps/v1/namespaces/net/daemonsets/agent")[1]["status"]
          .get("numberReady") == 2)
    assert ds["status"]["desiredNumberScheduled"] == 2
    code, body = api.get(f"/api/v1/namespaces/net/pods/{items[0]['metadata']['name']}:8100"
                         "/proxy/version")
    assert code == 200


def test_hosts_file_names(tmp_path: Path) -> None:
    hosts = HostsFiles(tmp_path)
    path = hosts.add("uid1", "lmc", [("127.9.1.1", "pod-a")])
    hosts.set_services([("lmc", "kv-redis", ["127.9.128.1"]), ("other", "db", ["127.9.128.2"])])
    text = path.read_text()
    assert "127.9.1.1\tpod-a" in text
    assert ("127.9.128.1\tkv-redis kv-redis.lmc kv-redis.lmc.svc "
            "kv-redis.lmc.svc.cluster.local") in text
    assert "127.9.128.2\tdb.other db.other.svc db.other.svc.cluster.local" in text
    inode = path.stat().st_ino
    hosts.set_services([])
    assert path.stat().st_ino == inode and "kv-redis" not in path.read_text()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_get_svc_and_endpointslices(sim: Simulator, tmp_path: Path) -> None:
    kc = tmp_path / "kc.yaml"
    sim.server.write_kubeconfig(kc)
    out = subprocess.run(["kubectl", "--kubeconfig", str(kc), "-n", "net", "get",
                          "svc,endpointslices", "-o", "wide"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    _code, svc = _Api(sim, tmp_path).get("/api/v1/namespaces/net/services/web")
    assert "service/web" in out.stdout and svc["spec"]["clusterIP"] in out.stdout
    assert "80/TCP" in out.stdout
    assert "endpointslice.discovery.k8s.io/web-" in out.stdout and "8000" in out.stdout
    got = yaml.safe_load(subprocess.run(
        ["kubectl", "--kubeconfig", str(kc), "-n", "net", "get", "endpointslices", "-o", "yaml"],
        capture_output=True, text=True, timeout=60).stdout)
    assert any(e["addresses"][0].startswith("127.") for i in got["items"]
               for e in i.get("endpoints") or [])


def test_deleting_a_service_removes_its_slice_and_relay(sim: Simulator, api: _Api) -> None:
    t_svc = sim.cluster.t_svc
    svc = sim.cluster.create_object(t_svc, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "tmp", "namespace": "net"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 81, "targetPort": 8000}]}}, "net")
    ip = svc["spec"]["clusterIP"]
    _wait(lambda: [s for s in _slices(api) if s["metadata"]["name"].startswith("tmp-")])

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://{ip}:81/version", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False
    _wait(answers)
    sim.cluster.store.delete(t_svc, "net", "tmp")
    _wait(lambda: not [s for s in _slices(api) if s["metadata"]["name"].startswith("tmp-")])
    _wait(lambda: not answers())
    code, _body = api.get("/api/v1/namespaces/net/services/web:80/proxy/version")
    assert code == 200
