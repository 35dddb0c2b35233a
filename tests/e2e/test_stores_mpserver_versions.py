"""``clear-store`` against the simulator's emulated LMCache MP servers of older and newer releases
(tests/sim/fakemp.py: 0.3.x none, 0.4.x ``/api/clear-cache``, 0.5.0 ``/clear-cache``, 0.5.1+
``/cache/clear``), reached through the pod proxy as the real one is
(tests/peers/test_stores_mpserver.py runs the real 0.5.6 server)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from tests.simctl import SimCluster

from .conftest import require_sandbox

pytestmark = [pytest.mark.stores]

RELEASES = {"v031": "0.3.15", "v043": "0.4.3", "v050": "0.5.0", "v053": "0.5.3", "v056": "0.5.6"}


def _manifest(ns: str, version: str, replicas: int = 1) -> str:
    ktc = json.dumps({"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                      "kv_connector_extra_config": {"lmcache.mp.host": "tcp://lmcache-server",
                                                    "lmcache.mp.port": 5555}})
    return textwrap.dedent(f"""\
        apiVersion: v1
        kind: Namespace
        metadata: {{name: {ns}}}
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: lmcache-server, namespace: {ns}}}
        spec:
          replicas: {replicas}
          selector: {{matchLabels: {{app: lmcache-server}}}}
          template:
            metadata: {{labels: {{app: lmcache-server}}}}
            spec:
              containers:
              - name: lmcache
                image: lmcache/vllm-openai:v{version}
                command: [lmcache, server, --host, 0.0.0.0, --port, "5555", --http-port, "8181"]
                ports: [{{name: zmq, containerPort: 5555}}, {{name: http, containerPort: 8181}}]
        ---
        apiVersion: v1
        kind: Service
        metadata: {{name: lmcache-server, namespace: {ns}}}
        spec:
          selector: {{app: lmcache-server}}
          ports: [{{name: zmq, port: 5555, targetPort: zmq}}]
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: vllm, namespace: {ns}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: vllm}}}}
          template:
            metadata: {{labels: {{app: vllm}}}}
            spec:
              containers:
              - name: vllm
                image: vllm/vllm-openai:v0.32.0
                command: [vllm, serve, org/model-mp]
                args: [--port, "8000", --kv-transfer-config, '{ktc}']
                env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}]
        """)


# LMCache's deployment pattern (``examples/multi_process/lmcache-daemonset.yaml``): a hostNetwork
# DaemonSet, reached by the vLLM pods at their node's address (status.hostIP)
DAEMONSET = textwrap.dedent("""\
    apiVersion: v1
    kind: Namespace
    metadata: {name: ds}
    ---
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: lmcache-server, namespace: ds}
    spec:
      selector: {matchLabels: {app: lmcache-server}}
      template:
        metadata: {labels: {app: lmcache-server}}
        spec:
          hostNetwork: true
          containers:
          - name: lmcache
            image: lmcache/vllm-openai:v0.5.6
            command: [lmcache, server, --host, 0.0.0.0, --port, "6555", --http-port, "8181"]
            ports: [{containerPort: 6555}, {containerPort: 8181}]
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: vllm, namespace: ds}
    spec:
      replicas: 1
      selector: {matchLabels: {app: vllm}}
      template:
        metadata: {labels: {app: vllm}}
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.32.0
            command: [vllm, serve, org/model-mp]
            args: [--port, "8000", --kv-transfer-config,
                   '{"kv_connector":"LMCacheMPConnector","kv_role":"kv_both","kv_connector_extra_config":{"lmcache.mp.host":"tcp://$(HOST_IP)","lmcache.mp.port":6555}}']
            env:
            - {name: VLLM_SERVER_DEV_MODE, value: "1"}
            - {name: HOST_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
    """)


def _mp(cluster: SimCluster, ns: str) -> dict[str, Any]:
    pod = next(p for p in cluster.live_pods() if p["namespace"] == ns and p["name"].startswith("lmcache-server"))
    return pod["ports"]["8181"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    """One cluster for the module: each test uses its own namespaces' servers."""
    require_sandbox()
    m = tmp_path_factory.mktemp("mp") / "m.yaml"
    m.write_text("---\n".join([*(_manifest(ns, v) for ns, v in RELEASES.items()), DAEMONSET,
                                _manifest("two", "0.5.6", replicas=2)]))
    scenario = {"pods": [{"match": {"namespace": "v056", "owner": "deployment/lmcache-server"},
                          "mp_locked": 2, "mp_l2_objects": 4}]}
    with SimCluster([m], namespace="v043", scenario=scenario, ready_delay=0.05, nodes=2) as c:
        c.wait_ready()
        yield c


@pytest.mark.parametrize(("ns", "path"), [("v043", "/api/clear-cache"), ("v050", "/clear-cache"),
                                          ("v053", "/cache/clear")])
def test_each_release_is_cleared_by_its_own_path(cluster: SimCluster, ns: str, path: str) -> None:
    assert _mp(cluster, ns)["l1_objects"] == 6
    code, rows, err = cluster.run_json("clear-store", "-n", ns, "--all", "--yes")
    assert code == 0, (rows, err)
    [row] = rows
    assert (row["store"], row["before"], row["after"], row["unit"], row["result"]) == (
        "lmcache-mp", 6, 0, "objects", "emptied"), row
    assert row["via"].endswith(":8181") and "393216 -> 0 bytes" in row["message"]
    mp = _mp(cluster, ns)
    assert mp["l1_objects"] == 0
    # the newest path first, the next only after a 404; the body always names tier and force
    assert [c[0] for c in mp["clear_calls"]] == [path]
    assert mp["clear_calls"][0][1] == {"tier": "l1", "force": False}
    if path != "/cache/clear":
        assert f"cleared with POST {path}" in row["message"]


def test_release_without_an_http_clear_is_left_with_the_restart(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear-store", "-n", "v031", "--all", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert row["result"] == "left" and "no HTTP clear" in row["message"] and "restart" in row["message"]
    assert _mp(cluster, "v031")["l1_objects"] == 6


def test_locked_objects_and_l2_are_left_until_forced(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear-store", "-n", "v056", "--all", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert (row["before"], row["after"], row["result"]) == (6, 2, "left")
    assert "--force-mp-clear" in row["message"] and "L2" in row["message"] and \
        "MockL2Adapter (4 objects)" in row["message"]
    code, rows, err = cluster.run_json("clear-store", "-n", "v056", "--all", "--force-mp-clear", "--yes")
    assert code == 1 and (rows[0]["before"], rows[0]["after"]) == (2, 0), (rows, err)
    assert rows[0]["method"] == 'POST /cache/clear {"tier":"l1","force":true}'
    assert rows[0]["result"] == "left" and "L2" in rows[0]["message"]  # L1 empty, the L2 behind it is not
    calls = _mp(cluster, "v056")["clear_calls"]
    assert [c[1]["force"] for c in calls] == [False, True]


def test_hostnetwork_daemonset_on_the_vllm_pods_node(cluster: SimCluster) -> None:
    pods = cluster.api("/api/v1/namespaces/ds/pods")["items"]
    [vllm] = [p for p in pods if p["metadata"]["name"].startswith("vllm")]
    servers = [p for p in pods if p["metadata"]["name"].startswith("lmcache-server")]
    assert len(servers) >= 2  # one per node
    [mine] = [p["metadata"]["name"] for p in servers if p["status"]["podIP"] == vllm["status"]["hostIP"]]
    local = next(p for p in cluster.live_pods() if p["name"] == mine)
    code, rows, err = cluster.run_json("clear-store", "-n", "ds", "--all", "--yes")
    assert code == 0, (rows, err)
    [row] = rows
    assert row["resolved"] == f"pod ds/{local['name']}" and row["via"] == f"ds/{local['name']}:8181", row
    assert (row["before"], row["after"], row["result"]) == (6, 0, "emptied")
    assert local["ports"]["8181"]["l1_objects"] == 6  # the snapshot taken before the clear
    after = {p["name"]: p["ports"]["8181"]["l1_objects"] for p in cluster.live_pods()
             if p["namespace"] == "ds" and p["name"].startswith("lmcache-server")}
    assert after[local["name"]] == 0
    assert all(n == 6 for name, n in after.items() if name != local["name"])  # other nodes' servers untouched


def test_every_server_pod_behind_the_service_is_cleared(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear-store", "-n", "two", "--all", "--yes")
    assert code == 0, (rows, err)
    [row] = rows
    servers = sorted(p["name"] for p in cluster.live_pods()
                     if p["namespace"] == "two" and p["name"].startswith("lmcache"))
    assert len(servers) == 2
    assert (row["before"], row["after"], row["result"]) == (12, 0, "emptied"), row
    assert sorted(row["via"].split(", ")) == [f"two/{n}:8181" for n in servers]
    assert f"L1 of two/{servers[0]}: 6 -> 0 objects" in row["message"]
    assert f"L1 of two/{servers[1]}: 6 -> 0 objects" in row["message"]
    assert [p["ports"]["8181"]["l1_objects"] for p in cluster.live_pods()
            if p["namespace"] == "two" and p["name"].startswith("lmcache")] == [0, 0]
