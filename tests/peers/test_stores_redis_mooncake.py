"""``clear-store`` against real stores as pods (markers ``stores`` and ``peers``): a real Redis
behind a Service holding LMCache keys of two models, and a real Mooncake master (with a
segment-holding client) named by a ``MOONCAKE_CONFIG_PATH`` ConfigMap. The vLLM pods are the
simulator's fakes; their configuration is what the plugin reads."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.peers as peers
from tests.simctl import SimCluster, sandbox_available

pytestmark = [pytest.mark.peers, pytest.mark.stores]

NS = "st"


def _vllm(name: str, model: str, *, env: str = "", volumes: str = "", mounts: str = "",
          connector: str = "LMCacheConnectorV1") -> str:
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
                args: [--port, "8000", --kv-transfer-config, '{{"kv_connector":"{connector}","kv_role":"kv_both"}}']
                env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}{env}]
                ports: [{{name: http, containerPort: 8000}}]{mounts}{volumes}
        """)


REDIS = textwrap.dedent(f"""\
    apiVersion: v1
    kind: Namespace
    metadata: {{name: {NS}}}
    ---
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
          - name: redis
            image: redis:7.0.15
            command: [redis-server]
            args: [--port, "6379"]
            ports: [{{name: redis, containerPort: 6379}}]
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
    metadata: {{name: lmc-b, namespace: {NS}}}
    data:
      lmcache.yaml: |
        chunk_size: 256
        remote_url: redis://kv-redis:6379
    ---
    """)

# model A: two Deployments (a-one, a-two) naming Redis by env (full DNS name, and a ConfigMap
# key through valueFrom); model B: the LMCACHE_CONFIG_FILE YAML in a ConfigMap volume
REDIS_MANIFEST = REDIS + "---\n".join([
    _vllm("a-one", "org/model-a",
          env=", {name: LMCACHE_REMOTE_URL, value: 'redis://kv-redis.st.svc.cluster.local:6379'}"),
    _vllm("a-two", "org/model-a",
          env=", {name: LMCACHE_REMOTE_URL, valueFrom: {configMapKeyRef: {name: redis-url, key: url}}}"),
    _vllm("b-one", "org/model-b", env=", {name: LMCACHE_CONFIG_FILE, value: /etc/lmcache/lmcache.yaml}",
          mounts="\n                volumeMounts: [{name: cfg, mountPath: /etc/lmcache}]",
          volumes="\n              volumes: [{name: cfg, configMap: {name: lmc-b}}]"),
    _vllm("c-out", "org/model-c", env=", {name: LMCACHE_REMOTE_URL, value: 'redis://redis.example.com:6379'}"),
    _vllm("d-lm", "org/model-d", env=", {name: LMCACHE_REMOTE_URL, value: 'lm://kv-redis:65432'}"),
    textwrap.dedent(f"""\
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: redis-url, namespace: {NS}}}
        data: {{url: "redis://kv-redis.{NS}:6379"}}
        """),
])


def _require_sandbox() -> None:
    if not sandbox_available():
        msg = "bubblewrap cannot run here (apt-get install bubblewrap)"
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail(msg + " [KVRESET_REQUIRE_SANDBOX=1]")
        pytest.skip(msg)


def _pod(sim: SimCluster, prefix: str) -> dict[str, Any]:
    return next(p for p in sim.live_pods() if p["name"].startswith(prefix))


@pytest.fixture(scope="module")
def redis_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("redis")
    _require_sandbox()
    m = tmp_path_factory.mktemp("redis") / "m.yaml"
    m.write_text(REDIS_MANIFEST)
    with SimCluster([m], namespace=NS, real_servers=["redis"]) as sim:
        sim.wait_ready(60)
        wait_for_redis(sim)
        yield sim


def wait_for_redis(sim: SimCluster, timeout: float = 30.0, namespace: str = NS) -> None:
    """Until the real Redis answers PING and its Service lists it as a ready endpoint."""
    import redis

    deadline = time.monotonic() + timeout
    while True:
        try:
            slices = sim.api(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
                             "?labelSelector=kubernetes.io%2Fservice-name%3Dkv-redis")["items"]
            ready = any((e.get("conditions") or {}).get("ready") for sl in slices for e in sl.get("endpoints") or [])
            if ready and redis.Redis(host=_pod(sim, "kv-redis")["pod_ip"], port=6379, socket_timeout=2).ping():
                return
        except (OSError, redis.RedisError, StopIteration):
            pass
        if time.monotonic() > deadline:
            raise AssertionError("the real Redis did not come up")
        time.sleep(0.2)


def _redis(sim: SimCluster) -> Any:
    import redis

    return redis.Redis(host=_pod(sim, "kv-redis")["pod_ip"], port=6379, socket_timeout=5)


def _seed(sim: SimCluster) -> None:
    r = _redis(sim)
    r.flushall()
    for model in ("org/model-a", "org/model-b"):
        for i in range(4):
            r.set(f"{model}@1@0@{i:016x}@halfkv_bytes", b"x" * 64)
            r.set(f"{model}@1@0@{i:016x}@halfmetadata", b"m")
    r.set("org/model-a-other@1@0@0@half", b"not model A's")  # shares the prefix without the @


def _count(sim: SimCluster, model: str) -> int:
    return len(list(_redis(sim).scan_iter(match=f"{model}@*")))


def test_redis_per_model_clear_removes_exactly_model_a_keys(redis_sim: SimCluster) -> None:
    _seed(redis_sim)
    code, rows, err = redis_sim.run_json("clear-store", "a-one", "a-two", "--yes")
    assert code == 0, (rows, err)
    [row] = rows
    assert row["kind"] == "StoreClear" and row["store"] == "redis" and row["scope"] == "model org/model-a"
    assert row["resolved"] == f"service {NS}/kv-redis"
    assert (row["before"], row["after"], row["result"]) == (8, 0, "emptied")
    assert sorted(row["targeted_pods"]) == sorted(f"{NS}/{_pod(redis_sim, p)['name']}" for p in ("a-one", "a-two"))
    assert _count(redis_sim, "org/model-a") == 0
    assert _count(redis_sim, "org/model-b") == 8
    assert _redis(redis_sim).get("org/model-a-other@1@0@0@half") == b"not model A's"
    # a second run removes nothing and still exits 0
    code, rows, err = redis_sim.run_json("clear-store", "a-one", "a-two", "--yes")
    assert code == 0 and (rows[0]["before"], rows[0]["after"], rows[0]["result"]) == (0, 0, "emptied"), (rows, err)


def test_redis_untargeted_pod_of_the_same_model_needs_the_flag(redis_sim: SimCluster) -> None:
    _seed(redis_sim)
    other = f"{NS}/{_pod(redis_sim, 'a-two')['name']}"
    code, rows, err = redis_sim.run_json("clear-store", "a-one", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert row["result"] == "left" and row["other_pods"] == [other]
    assert "--shared-stores" in row["message"] and other in row["message"]
    assert _count(redis_sim, "org/model-a") == 8
    # B's pod is named as another user of the store only where it matters: its model's keys stay
    code, rows, err = redis_sim.run_json("clear-store", "a-one", "--shared-stores", "--yes")
    assert code == 0 and rows[0]["after"] == 0, (rows, err)
    assert _count(redis_sim, "org/model-a") == 0 and _count(redis_sim, "org/model-b") == 8


def test_redis_config_file_in_a_configmap_and_dry_run(redis_sim: SimCluster) -> None:
    _seed(redis_sim)
    code, rows, err = redis_sim.run_json("clear-store", "b-one", "--dry-run")
    assert code == 0, (rows, err)
    [row] = rows
    assert row["address"] == "redis://kv-redis:6379" and row["resolved"] == f"service {NS}/kv-redis"
    assert (row["result"], row["before"], row["after"]) == ("planned", 8, 8)
    assert row["method"] == "SCAN MATCH 'org/model-b@*' + UNLINK"
    assert _count(redis_sim, "org/model-b") == 8 and _count(redis_sim, "org/model-a") == 8


def test_clear_chains_the_store_step_in_one_list(redis_sim: SimCluster) -> None:
    _seed(redis_sim)
    code, rows, err = redis_sim.run_json("clear", "a-one", "a-two", "--yes")
    # 1: LMCache's in-process CPU tier is left by the API reset (the CacheReset rows say so)
    assert code == 1 and all(r["result"] == "partial" for r in rows[:2]), (rows, err)
    kinds = [r["kind"] for r in rows]
    assert kinds == ["CacheReset", "CacheReset", "StoreClear"], rows
    assert rows[-1]["result"] == "emptied" and rows[-1]["before"] == 8
    assert _count(redis_sim, "org/model-a") == 0 and _count(redis_sim, "org/model-b") == 8
    # dry run of clear: the store call is listed with its count, nothing changes
    _seed(redis_sim)
    code, rows, err = redis_sim.run_json("clear", "a-one", "a-two", "--dry-run")
    assert [r["kind"] for r in rows][-1] == "StoreClear" and rows[-1]["result"] == "planned", (rows, err)
    assert _count(redis_sim, "org/model-a") == 8


def test_outside_address_and_lm_server_say_what_would_clear_them(redis_sim: SimCluster) -> None:
    code, rows, err = redis_sim.run_json("clear-store", "c-out", "d-lm", "--yes")
    assert code == 1, (rows, err)
    by = {r["store"]: r for r in rows}
    out = by["redis"]
    assert out["resolved"] == "outside the cluster" and out["result"] == "left"
    assert "not a cluster Service name" in out["message"] and "--scan --pattern 'org/model-c@*'" in out["message"]
    lm = by["lmcache-server"]
    assert lm["result"] == "left" and "restart" in lm["message"], lm


# --- Mooncake -------------------------------------------------------------------------------

MOONCAKE_JSON = json.dumps({"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
                            "protocol": "tcp",
                            "master_server_address": f"kv-mooncake-master.{NS}.svc.cluster.local:50051"})

MOONCAKE_MANIFEST = textwrap.dedent(f"""\
    apiVersion: v1
    kind: Namespace
    metadata: {{name: {NS}}}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: kv-mooncake-master, namespace: {NS}}}
    spec:
      replicas: 1
      selector: {{matchLabels: {{app: kv-mooncake-master}}}}
      template:
        metadata: {{labels: {{app: kv-mooncake-master}}}}
        spec:
          containers:
          - name: master
            image: mooncake/mooncake-master:0.3.13
            command: [mooncake_master]
            args: [--rpc_port=50051, --metrics_port=9003, --enable_http_metadata_server=true,
                   --http_metadata_server_port=8080, --default_kv_lease_ttl=5000]
            ports:
            - {{name: rpc, containerPort: 50051}}
            - {{name: metrics, containerPort: 9003}}
            - {{name: metadata, containerPort: 8080}}
    ---
    apiVersion: v1
    kind: Service
    metadata: {{name: kv-mooncake-master, namespace: {NS}}}
    spec:
      selector: {{app: kv-mooncake-master}}
      ports:
      - {{name: rpc, port: 50051, targetPort: rpc}}
      - {{name: metrics, port: 9003, targetPort: metrics}}
      - {{name: metadata, port: 8080, targetPort: metadata}}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: kv-mooncake-client, namespace: {NS}}}
    spec:
      replicas: 1
      selector: {{matchLabels: {{app: kv-mooncake-client}}}}
      template:
        metadata: {{labels: {{app: kv-mooncake-client}}}}
        spec:
          containers:
          - name: client
            image: mooncake/mooncake-client:0.3.13
            command: [mooncake_client]
            args: [--port=50052, --master_server_address=kv-mooncake-master.{NS}.svc.cluster.local:50051,
                   --metadata_server=http://kv-mooncake-master.{NS}.svc.cluster.local:8080/metadata,
                   --protocol=tcp, --global_segment_size=256MB]
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata: {{name: mooncake, namespace: {NS}}}
    data:
      mooncake.json: '{MOONCAKE_JSON}'
    ---
    """) + "---\n".join(
    _vllm(name, "org/model-m", connector="MooncakeStoreConnector",
          env=", {name: MOONCAKE_CONFIG_PATH, value: /etc/mooncake/mooncake.json}",
          mounts="\n                volumeMounts: [{name: mc, mountPath: /etc/mooncake}]",
          volumes="\n              volumes: [{name: mc, configMap: {name: mooncake}}]")
    for name in ("m-one", "m-two"))


@pytest.fixture(scope="module")
def mooncake_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("mooncake")
    _require_sandbox()
    m = tmp_path_factory.mktemp("mooncake") / "m.yaml"
    m.write_text(MOONCAKE_MANIFEST)
    with SimCluster([m], namespace=NS, real_servers=["mooncake"]) as sim:
        sim.wait_ready(60)
        yield sim


def _key_count(sim: SimCluster) -> int:
    ip = _pod(sim, "kv-mooncake-master")["pod_ip"]
    with urllib.request.urlopen(f"http://{ip}:9003/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("master_key_count "):
                return int(float(line.split()[1]))
    raise AssertionError("no master_key_count")


# The segment-holding client pod may still be mounting its segment when the pods are Ready: a
# put is tried again (a key that exists already counts as written), for up to 10 s per key.
SEED = textwrap.dedent("""\
    import sys
    import time
    from mooncake.store import MooncakeDistributedStore
    master = sys.argv[1]
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", f"http://{master}:8080/metadata", 0, 16 << 20, "tcp", "", f"{master}:50051")
    assert rc == 0, rc
    for i in range(int(sys.argv[2])):
        key = f"org/model-m@tp_rank:0@pcp0@dcp0@pp_rank:0@{i:08x}"
        for attempt in range(20):
            if s.put(key, b"x" * 4096) == 0 or s.is_exist(key) == 1:
                break
            time.sleep(0.5)
        else:
            raise SystemExit(f"put {key} failed 20 times")
    """)


def _seed_mooncake(sim: SimCluster, keys: int, tmp: Path) -> None:
    python = peers.mooncake_python()
    assert python is not None
    script = tmp / "seed.py"
    script.write_text(SEED)
    ip = _pod(sim, "kv-mooncake-master")["pod_ip"]
    before = _key_count(sim)
    done = subprocess.run([python, str(script), ip, str(keys)], timeout=180, capture_output=True, text=True)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    deadline = time.monotonic() + 10
    while _key_count(sim) < before + keys and time.monotonic() < deadline:
        time.sleep(0.2)


def test_mooncake_store_wide_clear_needs_every_user_targeted(mooncake_sim: SimCluster, tmp_path: Path) -> None:
    _seed_mooncake(mooncake_sim, 8, tmp_path)
    assert _key_count(mooncake_sim) == 8
    other = f"{NS}/{_pod(mooncake_sim, 'm-two')['name']}"
    # dry run: the call is listed, the counter unchanged
    code, rows, err = mooncake_sim.run_json("clear-store", "m-one", "m-two", "--dry-run")
    assert code == 0 and rows[0]["result"] == "planned" and rows[0]["before"] == 8, (rows, err)
    assert rows[0]["method"] == "POST /api/v1/remove_all?force=true" and _key_count(mooncake_sim) == 8
    # one untargeted user: left, naming the flag and that user
    code, rows, err = mooncake_sim.run_json("clear-store", "m-one", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert row["store"] == "mooncake-master" and row["scope"] == "store" and row["result"] == "left"
    assert "--shared-stores" in row["message"] and other in row["message"]
    assert row["resolved"] == f"service {NS}/kv-mooncake-master"
    assert _key_count(mooncake_sim) == 8
    # with the flag: emptied
    code, rows, err = mooncake_sim.run_json("clear-store", "m-one", "--shared-stores", "--yes")
    assert code == 0 and (rows[0]["before"], rows[0]["after"], rows[0]["result"]) == (8, 0, "emptied"), (rows, err)
    assert _key_count(mooncake_sim) == 0
    # every user targeted: no flag needed
    _seed_mooncake(mooncake_sim, 3, tmp_path)
    code, rows, err = mooncake_sim.run_json("clear-store", "m-one", "m-two", "--yes")
    assert code == 0 and (rows[0]["before"], rows[0]["after"]) == (3, 0), (rows, err)
    assert _key_count(mooncake_sim) == 0
