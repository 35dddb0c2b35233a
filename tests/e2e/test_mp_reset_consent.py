"""Consent for LMCacheMPConnector's store-wide reset, end to end against the simulator.

vLLM 0.32 loads LMCache's own ``LMCacheMPConnector`` class, whose ``reset_cache`` clears the L1 of
the MP server every connected pod and model shares (the fake vLLM models it: tests/sim/mpstore.py).
Two Deployments of two models, ``a`` and ``b``, share one MP server (the simulator's fake ``lmcache
server``): ``clear deployment/a`` alone must not empty ``b``'s objects; with ``--shared-stores`` it
may, and then the store step confirms the L1 emptied.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests.simctl import SimCluster

from .conftest import require_sandbox
from .test_confirm import run_on_tty

pytestmark = [pytest.mark.stores]

NS = "mpc"
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
                args: [--port, "8000", --kv-transfer-config, '{KTC}']
                env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}]
        """)


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
            command: [lmcache, server, --host, 0.0.0.0, --port, "5555", --http-port, "8080"]
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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    require_sandbox()
    m = tmp_path_factory.mktemp("mpc") / "m.yaml"
    m.write_text(MANIFEST)
    # the pods get a hosts file, so the fake connectors reach the MP server's Service
    scenario = {"pods": [{"match": {"namespace": NS}, "cluster_dns": True}]}
    with SimCluster([m], namespace=NS, scenario=scenario, ready_delay=0.05) as c:
        c.wait_ready()
        yield c


def _pod(cluster: SimCluster, prefix: str) -> dict[str, Any]:
    return next(p for p in cluster.live_pods() if p["namespace"] == NS and p["name"].startswith(prefix + "-"))


def _l1(cluster: SimCluster) -> int:
    return int(_pod(cluster, "lmcache-server")["ports"]["8080"]["l1_objects"])


def _query(cluster: SimCluster, prefix: str) -> dict[str, list[str]]:
    return parse_qs(_pod(cluster, prefix)["ports"]["8000"]["last_reset_query"])


def test_dry_run_shows_the_hold_in_the_table_and_json(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear", "deployment/a", "--dry-run")
    assert code == 1, (rows, err)  # the plan leaves the shared store
    [plan] = [r for r in rows if r.get("pod", "").startswith("a-")]
    text = json.dumps(plan)
    assert "reset_external=false" in text and f"{NS}/b-" in text and "--shared-stores" in text, plan
    assert plan["steps"][0] == "POST /reset_prefix_cache?reset_external=false"
    assert plan["leaves"] == ["shared:lmcache-mp (--shared-stores)"]
    table = cluster.run("clear", "deployment/a", "--dry-run")
    assert table.returncode == 1, table.stderr
    assert "reset_external=false" in table.stdout and "--shared-stores" in table.stdout, table.stdout
    assert _l1(cluster) == 6 and _pod(cluster, "a")["ports"]["8000"]["reset_calls"] == 0


def test_the_confirmation_shows_the_hold_before_anything_changes(cluster: SimCluster) -> None:
    done = run_on_tty(cluster, ["clear", "deployment/a"], "n\n")
    assert done.returncode == 1, done.stderr
    assert "Run these steps on " in done.stderr and "nothing changed" in done.stderr
    assert "reset_external=false" in done.stderr and "shared:lmcache-mp (--shared-stores)" in done.stderr
    assert f"{NS}/b-" in done.stderr  # the other user, in the store row shown with the plan
    assert _l1(cluster) == 6 and _pod(cluster, "a")["ports"]["8000"]["reset_calls"] == 0


def test_without_the_flag_a_is_reset_with_reset_external_false_and_bs_objects_survive(cluster: SimCluster) -> None:
    assert _l1(cluster) == 6
    code, rows, err = cluster.run_json("clear", "deployment/a", "--yes")
    assert code == 1, (rows, err)
    assert _query(cluster, "a") == {"reset_external": ["false"]}
    assert _pod(cluster, "a")["ports"]["8000"]["mp_resets"] == []
    assert _l1(cluster) == 6  # the other model's objects are still there
    [row] = [r for r in rows if r.get("kind") == "CacheReset"]
    assert row["shared"] == "left" and row["result"] == "partial", row
    message = row["message"]
    assert "reset_external=false" in message and f"{NS}/b-" in message and "L1" in message, row
    assert "--shared-stores" in json.dumps(row["left"]), row
    # the store step is blocked by the same rule
    [store] = [r for r in rows if r.get("store") == "lmcache-mp"]
    assert store["result"] != "emptied" and "--shared-stores" in store["message"], store
    assert _pod(cluster, "b")["ports"]["8000"]["reset_calls"] == 0


def test_with_shared_stores_the_reset_and_the_store_step_empty_the_l1(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear", "deployment/a", "--shared-stores", "--yes")
    assert code == 0, (rows, err)
    assert _query(cluster, "a") == {"reset_external": ["true"]}
    [call] = _pod(cluster, "a")["ports"]["8000"]["mp_resets"]
    assert call["ok"] is True and call["server"] == "tcp://lmcache-server" and call["via"].endswith(":8080"), call
    assert _l1(cluster) == 0  # b's objects went too: the user allowed it
    [store] = [r for r in rows if r.get("store") == "lmcache-mp"]
    # counted before the resets (6), found empty by the store step, which confirms it
    assert (store["result"], store["before"], store["after"]) == ("emptied", 6, 0), store
    assert "6 objects before the targets' resets" in store["message"], store
    assert "0 objects when the store step ran" in store["message"], store
    [row] = [r for r in rows if r.get("kind") == "CacheReset"]
    assert row["result"] == "emptied" and row["left"] == [], row
