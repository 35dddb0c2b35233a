"""The Role in rbac/ lets ``clear-store`` work against a real Redis, and each rule it adds is
needed (markers ``stores`` and ``peers``): with one removed, the run fails naming it."""

from __future__ import annotations

import copy
import json
import textwrap
from collections.abc import Iterator

import pytest

import tests.peers as peers
from tests.e2e.test_rbac_role import NS, STORE_NEEDED, USER, full_rules, role_documents, set_rules
from tests.peers.test_stores_redis_mooncake import wait_for_redis
from tests.simctl import SimCluster, sandbox_available

pytestmark = [pytest.mark.peers, pytest.mark.stores]

MANIFEST = textwrap.dedent(f"""\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: kv-redis, namespace: {NS}}}
    spec:
      replicas: 1
      selector: {{matchLabels: {{app: kv-redis}}}}
      template:
        metadata: {{labels: {{app: kv-redis}}}}
        spec:
          containers:
          - {{name: redis, image: "redis:7.0.15", command: [redis-server],
              ports: [{{name: redis, containerPort: 6379}}]}}
    ---
    apiVersion: v1
    kind: Service
    metadata: {{name: kv-redis, namespace: {NS}}}
    spec:
      selector: {{app: kv-redis}}
      ports: [{{name: redis, port: 6379, targetPort: redis}}]
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata: {{name: lmc, namespace: {NS}}}
    data:
      lmcache.yaml: "remote_url: redis://kv-redis:6379\\n"
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: decode, namespace: {NS}}}
    spec:
      replicas: 1
      selector: {{matchLabels: {{app: decode}}}}
      template:
        metadata: {{labels: {{app: decode, llm-d.ai/inference-serving: "true"}}}}
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.32.0
            command: [vllm, serve, org/m]
            args: [--kv-transfer-config, '{{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}}']
            env: [{{name: LMCACHE_CONFIG_FILE, value: /etc/lmcache/lmcache.yaml}}]
            volumeMounts: [{{name: cfg, mountPath: /etc/lmcache}}]
          volumes: [{{name: cfg, configMap: {{name: lmc}}}}]
    """)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("redis")
    if not sandbox_available():
        pytest.skip("bubblewrap cannot run here (apt-get install bubblewrap)")
    m = tmp_path_factory.mktemp("rbac") / "m.yaml"
    m.write_text(MANIFEST)
    with SimCluster([m], namespace=NS, real_servers=["redis"],
                    scenario={"users": [{"name": USER}], "rbac": role_documents()}) as sim:
        sim.wait_ready(60)
        wait_for_redis(sim, namespace=NS)
        yield sim


def _as_alice(sim: SimCluster, *args: str) -> tuple[int, str]:
    done = sim.run(*args, "-n", NS, "--context", f"sim-{USER}")
    return done.returncode, done.stdout + done.stderr


def test_full_role_clear_store(cluster: SimCluster) -> None:
    # a Role of one namespace cannot see who else uses the store: the clear needs the flag
    code, out = _as_alice(cluster, "clear-store", "--all", "--yes")
    assert code == 1 and "cannot be listed" in out and "--shared-stores" in out, out
    code, out = _as_alice(cluster, "clear-store", "--all", "--yes", "--shared-stores")
    assert code == 0, out
    assert "emptied" in out and "forbidden" not in out.lower(), out


@pytest.mark.parametrize("index,args,named", STORE_NEEDED, ids=[f"rule{i}" for i, *_ in STORE_NEEDED])
def test_each_store_rule_is_needed(cluster: SimCluster, index: int, args: list[str], named: list[str]) -> None:
    rules = full_rules()
    set_rules(cluster, copy.deepcopy(rules[:index] + rules[index + 1:]))
    try:
        code, out = _as_alice(cluster, *args)
    finally:
        set_rules(cluster, rules)
    assert code != 0, out
    for word in named:
        assert word in out, (word, out)
    assert "Traceback" not in out


def test_forbidden_port_forward_row_names_the_permission_and_the_remedy(cluster: SimCluster) -> None:
    rules = full_rules()
    set_rules(cluster, copy.deepcopy([r for r in rules if r["resources"] != ["pods/portforward"]]))
    try:
        done = cluster.run("clear-store", "--all", "--yes", "--shared-stores", "-o", "json", "-n", NS,
                           "--context", f"sim-{USER}")
    finally:
        set_rules(cluster, rules)
    assert done.returncode == 1, (done.stdout, done.stderr)
    [row] = json.loads(done.stdout)
    assert (row["store"], row["result"]) == ("redis", "failed"), row
    assert f"needs get on pods/portforward in namespace {NS}" in row["message"], row
    assert "what would empty it: from where redis://kv-redis:6379 is reachable: redis-cli" in row["message"], row
