"""``clear-store`` rows that say why a store is left and what would empty it, and InfiniStore's
purge, through the built CLI against the simulator (no real peer: the InfiniStore server is the
simulator's fake of its control plane, tests/sim/fakeinfinistore.py).

* a Redis address outside the cluster and an ``lm://`` LMCache server: ``left``, with the
  command or restart that would empty them, exit 1;
* InfiniStore (``remote_url: infinistore://...``): ``POST /purge`` on the manage port through
  the pod proxy, store-wide consent, ``/kvmap_len`` before and after; ``--dry-run`` leaves the
  map as it is;
* the pod proxy forbidden to the user (the Role of rbac/ without its pods/proxy rules): the row
  names the permission and what would empty the store, exit 1, nothing purged.
"""

from __future__ import annotations

import copy
import json
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.simctl import SimCluster

from .conftest import require_sandbox
from .test_rbac_role import NS, USER, as_alice, full_rules, role_documents, set_rules

pytestmark = pytest.mark.stores

KEYS = 12


def _vllm(name: str, model: str, url: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}, llm-d.ai/inference-serving: "true"}}}}
            spec:
              containers:
              - name: vllm
                image: vllm/vllm-openai:v0.32.0
                command: [vllm, serve, {model}]
                args: [--port, "8000", --kv-transfer-config,
                       '{{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}}']
                env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}, {{name: LMCACHE_REMOTE_URL, value: '{url}'}}]
                ports: [{{name: http, containerPort: 8000}}]
        """)


def _server(name: str, image: str, command: list[str], port: int) -> str:
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
              - name: server
                image: {image}
                command: {command}
                ports: [{{name: data, containerPort: {port}}}]
        ---
        apiVersion: v1
        kind: Service
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          selector: {{app: {name}}}
          ports: [{{name: data, port: {port}, targetPort: data}}]
        """)


MANIFEST = "---\n".join([
    f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n",
    _server("kv-infinistore", "infinistore:0.2.33",
            ["infinistore", "--service-port", "12345", "--manage-port", "18080", "--link-type", "Ethernet"], 12345),
    _server("kv-lm", "lmcache/vllm-openai:v0.5.6", ["python3", "-m", "lmcache.v1.server", "0.0.0.0", "65432"], 65432),
    _server("kv-infini-old", "infinistore:0.2.0", ["infinistore", "--service-port", "12345"], 12345),
    _vllm("i-old", "org/model-o", "infinistore://kv-infini-old:12345"),
    _vllm("i-one", "org/model-i", "infinistore://kv-infinistore:12345"),
    _vllm("i-two", "org/model-j", f"infinistore://kv-infinistore.{NS}.svc.cluster.local:12345"),
    _vllm("c-out", "org/model-c", "redis://redis.example.com:6379"),
    _vllm("d-lm", "org/model-d", "lm://kv-lm:65432"),
])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    require_sandbox()
    path = tmp_path_factory.mktemp("rows") / "m.yaml"
    path.write_text(MANIFEST)
    scenario = {"users": [{"name": USER}], "rbac": role_documents(),
                "pods": [{"match": {"owner": "deployment/kv-infinistore"}, "infinistore_keys": KEYS},
                         {"match": {"owner": "deployment/kv-infini-old"}, "infinistore_keys": 5,
                          "infinistore_no_kvmap_len": True}]}
    with SimCluster([path], namespace=NS, scenario=scenario, ready_delay=0.05) as sim:
        sim.wait_ready()
        yield sim


def _pod(sim: SimCluster, prefix: str) -> dict[str, Any]:
    return next(p for p in sim.live_pods() if p["name"].startswith(prefix))


def _store(sim: SimCluster) -> dict[str, Any]:
    """The fake InfiniStore's counters (``keys``, ``purge_calls``, ``kvmap_len_calls``)."""
    return _pod(sim, "kv-infinistore")["ports"]["18080"]  # type: ignore[no-any-return]


def _fresh_store(sim: SimCluster) -> None:
    """A new InfiniStore pod holding KEYS keys (its Deployment replaces the deleted one)."""
    if _store(sim)["keys"] == KEYS:
        return
    old = _pod(sim, "kv-infinistore")["name"]
    sim.api(f"/api/v1/namespaces/{NS}/pods/{old}", "DELETE")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pods = [p for p in sim.live_pods() if p["name"].startswith("kv-infinistore") and p["name"] != old]
        if pods and pods[0].get("ready"):
            break
        time.sleep(0.1)
    sim.wait_ready()
    assert _store(sim)["keys"] == KEYS


def _name(sim: SimCluster, prefix: str) -> str:
    return f"{NS}/{_pod(sim, prefix)['name']}"


def test_outside_address_and_lm_server_rows(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear-store", "c-out", "d-lm", "--yes")
    assert code == 1, (rows, err)
    by = {r["store"]: r for r in rows}
    assert set(by) == {"redis", "lmcache-server"}, rows
    out = by["redis"]
    assert (out["resolved"], out["result"], out["before"], out["after"]) == ("outside the cluster", "left", None, None)
    assert out["targeted_pods"] == [_name(cluster, "c-out")] and out["address"] == "redis://redis.example.com:6379"
    # why: the name is no Service of the cluster; what would empty it: the per-model command
    assert "redis.example.com is not a cluster Service name" in out["message"], out
    assert "redis-cli -h redis.example.com -p 6379 --scan --pattern 'org/model-c@*'" in out["message"], out
    lm = by["lmcache-server"]
    assert lm["resolved"] == f"service {NS}/kv-lm" and lm["result"] == "left", lm
    assert "restart the LMCache server at lm://kv-lm:65432 (its protocol has no delete" in lm["message"], lm
    assert "a restart of its pod empties it" in lm["message"], lm
    # the table says the same (the MESSAGE column is always shown)
    done = cluster.run("clear-store", "c-out", "d-lm", "--yes")
    assert done.returncode == 1 and "restart the LMCache server" in done.stdout and "outside the cluster" in done.stdout


def test_infinistore_purge_dry_run_consent_and_confirmation(cluster: SimCluster) -> None:
    _fresh_store(cluster)
    before = _store(cluster)
    # dry run: the call with its scope and method, the count, nothing changed
    code, rows, err = cluster.run_json("clear-store", "i-one", "i-two", "--dry-run")
    assert code == 0, (rows, err)
    [row] = rows
    assert (row["store"], row["scope"], row["method"], row["result"]) == \
        ("infinistore", "store", "POST /purge", "planned")
    assert (row["before"], row["after"]) == (KEYS, KEYS) and row["resolved"] == f"service {NS}/kv-infinistore"
    assert row["via"] == f"{_name(cluster, 'kv-infinistore')}:18080"
    after = _store(cluster)
    assert after["keys"] == KEYS and after["purge_calls"] == before["purge_calls"] == 0
    # one user outside the targets: store-wide consent refused without the flag
    other = _name(cluster, "i-two")
    code, rows, err = cluster.run_json("clear-store", "i-one", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert row["result"] == "left" and row["other_pods"] == [other]
    assert "--shared-stores" in row["message"] and other in row["message"]
    assert _store(cluster)["keys"] == KEYS and _store(cluster)["purge_calls"] == 0
    # every user targeted: purged, counted before and after
    code, rows, err = cluster.run_json("clear-store", "i-one", "i-two", "--yes")
    assert code == 0, (rows, err)
    [row] = rows
    assert (row["before"], row["after"], row["result"], row["unit"]) == (KEYS, 0, "emptied", "keys"), row
    assert _store(cluster)["keys"] == 0 and _store(cluster)["purge_calls"] == 1
    # a second run: nothing there, still exit 0
    code, rows, err = cluster.run_json("clear-store", "i-one", "i-two", "--yes")
    assert code == 0 and (rows[0]["before"], rows[0]["after"], rows[0]["result"]) == (0, 0, "emptied"), (rows, err)


def test_forbidden_pod_proxy_names_the_permission(cluster: SimCluster) -> None:
    _fresh_store(cluster)
    rules = full_rules()
    without = copy.deepcopy([r for r in rules if r["resources"] != ["pods/proxy"]])
    assert len(without) == len(rules) - 3  # get, create (and delete, for LMCache's worker API)
    set_rules(cluster, without)
    try:
        # alice cannot list other namespaces, so the store-wide purge needs the flag (consent)
        done = cluster.run("clear-store", "i-one", "i-two", "--shared-stores", "--yes", "-o", "json", "-n", NS,
                           "--context", f"sim-{USER}")
    finally:
        set_rules(cluster, rules)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    [row] = json.loads(done.stdout)
    assert row["result"] == "failed" and row["store"] == "infinistore", row["message"]
    msg = row["message"]
    assert 'cannot get resource "pods/proxy"' in msg, msg
    assert f"needs get on pods/proxy in namespace {NS}" in msg and "the Role in rbac/ grants it" in msg, msg
    assert "what would empty it: POST http://kv-infinistore:18080/purge on the InfiniStore server" in msg, msg
    assert _store(cluster)["keys"] == KEYS and _store(cluster)["purge_calls"] == 0
    # with the Role whole again, alice empties it
    code, out = as_alice(cluster, "clear-store", "i-one", "i-two", "--shared-stores", "--yes")
    assert code == 0 and "emptied" in out, out


def test_infinistore_without_kvmap_len_is_unconfirmed(cluster: SimCluster) -> None:
    # a server that does not answer /kvmap_len: the purge's own num is the count before, and
    # nothing proves the map empty after: unconfirmed, exit 3
    code, rows, err = cluster.run_json("clear-store", "i-old", "--yes")
    assert code == 3, (rows, err)
    [row] = rows
    assert (row["result"], row["before"], row["after"]) == ("unconfirmed", 5, None), row
    assert row["via"] == f"{_name(cluster, 'kv-infini-old')}:18080"
    assert "does not answer GET /kvmap_len" in row["message"], row
    assert _pod(cluster, "kv-infini-old")["ports"]["18080"]["purge_calls"] == 1


def test_terminal_prompt_shows_the_counts_and_where_and_eof_changes_nothing(cluster: SimCluster) -> None:
    from .test_confirm import run_on_tty

    _fresh_store(cluster)
    args = ["clear-store", "-n", NS, "i-one", "i-two"]
    # the prompt shows what --dry-run shows (method, count now) and names the context
    done = run_on_tty(cluster, args, "n\n")
    assert done.returncode == 1 and "nothing changed" in done.stderr, done.stderr
    assert "POST /purge" in done.stderr and str(KEYS) in done.stderr, done.stderr
    assert 'Clear these stores, found from context "' in done.stderr and f'namespace "{NS}"' in done.stderr
    assert _store(cluster)["keys"] == KEYS and _store(cluster)["purge_calls"] == 0
    # end of input at the prompt: a plain "nothing changed", no internal error
    done = run_on_tty(cluster, args, "\x04")
    assert done.returncode == 130 and "no answer (end of input): nothing changed" in done.stderr, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert _store(cluster)["keys"] == KEYS
