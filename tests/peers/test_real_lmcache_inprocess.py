"""In-process LMCache against the real servers (marker ``peers``): a real vLLM CPU pod (0.32.0)
whose ``LMCacheConnectorV1`` runs LMCache 0.5.6's engine in the vLLM process, configured by an
``LMCACHE_CONFIG_FILE`` ConfigMap (CPU tier, a real ``lmcache_controller`` behind a Service, the
internal API), as LMCache documents it for vLLM.

LMCache has no CPU connector for vLLM's paged memory, so the simulator gives the pod LMCache's own
``MockGPUConnector`` (tests/sim/realservers.py): LMCache's keys, lookups, hits and clears are real,
the KV bytes are not copied. Everything is read from the real servers' own counters: vLLM's
``vllm:prefix_cache_hits_total`` (its GPU prefix cache) and ``vllm:external_prefix_cache_hits_total``
(tokens LMCache supplied), the controller's ``key_count``.

The plugin's rule for this connector (kubectl_kvreset/plan.py ``RESET_RULES``: vLLM's
LMCacheConnectorV1 has no ``reset_cache``, so ``reset_external=true`` leaves LMCache's CPU tier)
is checked against the real server, then ``clear`` empties LMCache through the controller and the
same prompt misses. One vLLM (about 3.4 GB) and a controller; start it alone.
"""

from __future__ import annotations

import itertools
import json
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.peers.realpods import call, counters, direct, pod, pod_ip, proxy, server_logs, start_cluster, stop_cluster
from tests.simctl import SimCluster

pytestmark = pytest.mark.peers

NS = "lmi"
INSTANCE = "lmi-a"
CONTROLLER = f"kv-lmcache-controller.{NS}.svc.cluster.local"
READY_TIMEOUT = 480.0
HITS, EXTERNAL = "vllm:prefix_cache_hits_total", "vllm:external_prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"

MANIFEST = textwrap.dedent(f"""\
    apiVersion: v1
    kind: Namespace
    metadata: {{name: {NS}}}
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata: {{name: lmcache, namespace: {NS}}}
    data:
      lmcache.yaml: |
        chunk_size: 64
        local_cpu: true
        max_local_cpu_size: 0.25
        enable_controller: true
        lmcache_instance_id: {INSTANCE}
        controller_pull_url: {CONTROLLER}:8300
        controller_reply_url: {CONTROLLER}:8400
        lmcache_worker_ports: [8500]
        internal_api_server_enabled: true
        internal_api_server_host: 0.0.0.0
        internal_api_server_port_start: 6999
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: kv-lmcache-controller, namespace: {NS}}}
    spec:
      replicas: 1
      selector: {{matchLabels: {{app: kv-lmcache-controller}}}}
      template:
        metadata: {{labels: {{app: kv-lmcache-controller}}}}
        spec:
          containers:
          - name: controller
            image: lmcache/lmcache:v0.5.6
            command: [lmcache_controller]
            args: [--host, 0.0.0.0, --port, "9000", --monitor-ports, '{{"pull": 8300, "reply": 8400}}']
            ports: [{{name: http, containerPort: 9000}}, {{name: pull, containerPort: 8300}},
                    {{name: reply, containerPort: 8400}}]
    ---
    apiVersion: v1
    kind: Service
    metadata: {{name: kv-lmcache-controller, namespace: {NS}}}
    spec:
      selector: {{app: kv-lmcache-controller}}
      ports: [{{name: http, port: 9000, targetPort: http}}, {{name: pull, port: 8300, targetPort: pull}},
              {{name: reply, port: 8400, targetPort: reply}}]
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: a, namespace: {NS}}}
    spec:
      replicas: 1
      selector: {{matchLabels: {{app: a}}}}
      template:
        metadata: {{labels: {{app: a}}}}
        spec:
          volumes: [{{name: cfg, configMap: {{name: lmcache}}}}]
          containers:
          - name: vllm
            image: lmcache/vllm-openai:v0.5.6
            command: [vllm, serve, org/model-a]
            args: [--served-model-name, model-a, --port, "8000", --enable-prefix-caching,
                   --kv-transfer-config, '{{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}}']
            env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}},
                  {{name: LMCACHE_CONFIG_FILE, value: /config/lmcache/lmcache.yaml}}]
            ports: [{{name: http, containerPort: 8000}}, {{name: lmc-api, containerPort: 7000}}]
            volumeMounts: [{{name: cfg, mountPath: /config/lmcache}}]
    """)

_ROUNDS = itertools.count()


def _prompt(round_: int) -> list[int]:
    """300 token ids (two whole 128-token blocks), new in each round."""
    return [4 + (200 + 37 * round_ + i) % 1000 for i in range(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    m = tmp_path_factory.mktemp("lmi") / "m.yaml"
    m.write_text(MANIFEST)
    started = time.monotonic()
    sim, shm = start_cluster(m, NS, ["vllm", "lmcache"], peer_names=["vllm", "lmcache"], ready_timeout=READY_TIMEOUT)
    try:
        _until("vLLM's LMCache worker registering at the controller", lambda: _workers(sim) is not None, 120, sim)
        print(f"real vLLM with in-process LMCache and its controller ready in {time.monotonic() - started:.0f} s")
        yield sim
    finally:
        stop_cluster(sim, shm)


def _until(what: str, check: Any, timeout: float, sim: SimCluster) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen in {timeout:.0f} s\n" + server_logs(sim))
        time.sleep(0.5)


def _workers(sim: SimCluster) -> list[dict[str, Any]] | None:
    code, body = direct(f"http://{pod_ip(sim, NS, 'kv-lmcache-controller')}:9000/controller/workers"
                        f"?instance_id={INSTANCE}", timeout=10)
    return json.loads(body)["workers"] if code == 200 else None


def _key_count(sim: SimCluster) -> int:
    """The chunks the controller knows in the instance's workers (its ``key_count``)."""
    return sum(int(w.get("key_count") or 0) for w in _workers(sim) or [])


def _counters(sim: SimCluster) -> dict[str, float]:
    code, body = call(sim, proxy(sim, NS, "a", 8000, "/metrics"))
    assert code == 200, body[:300]
    return {k[0]: v for k, v in counters(body.decode(), (HITS, EXTERNAL, QUERIES)).items()}


def _complete(sim: SimCluster, prompt: list[int]) -> dict[str, float]:
    """Send ``prompt``; the counters' increase it caused."""
    before = _counters(sim)
    code, body = call(sim, proxy(sim, NS, "a", 8000, "/v1/completions"), "POST",
                      {"model": "model-a", "prompt": prompt, "max_tokens": 1})
    assert code == 200, body[:300]
    after = _counters(sim)
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in (HITS, EXTERNAL, QUERIES)}


def _reset(sim: SimCluster, query: str) -> None:
    code, body = call(sim, proxy(sim, NS, "a", 8000, f"/reset_prefix_cache{query}"), "POST")
    assert code == 200 and json.loads(body) == {"success": True}, body[:300]


def _stored(sim: SimCluster) -> list[int]:
    """A new prompt sent once and in LMCache (the controller counts its chunks); the prompt."""
    prompt = _prompt(next(_ROUNDS))
    keys = _key_count(sim)
    first = _complete(sim, prompt)
    assert first[HITS] == 0 and first[EXTERNAL] == 0, first
    _until("the prompt's chunks reaching the controller", lambda: _key_count(sim) > keys, 30, sim)
    return prompt


def test_the_real_reset_leaves_in_process_lmcache_as_the_rule_says(cluster: SimCluster) -> None:
    """A GPU-only reset, and also ``reset_external=true``, leave LMCache's copy: the same prompt is
    an external hit each time (vLLM's LMCacheConnectorV1 has no reset_cache)."""
    prompt = _stored(cluster)
    again = _complete(cluster, prompt)
    assert again[HITS] >= 256, again          # the GPU prefix cache hits first

    _reset(cluster, "")
    gpu_only = _complete(cluster, prompt)
    assert gpu_only[HITS] == 0 and gpu_only[EXTERNAL] >= 256, gpu_only

    keys = _key_count(cluster)
    _reset(cluster, "?reset_external=true")
    assert _key_count(cluster) == keys > 0
    external = _complete(cluster, prompt)
    assert external[HITS] == 0 and external[EXTERNAL] >= 256, external
    print(f"after a GPU-only reset: {gpu_only}; after reset_external=true: {external} "
          f"({keys} LMCache keys kept)")

    # the plugin plans it so: the API reset for the GPU cache, LMCache's CPU tier for the store step
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/a", "--dry-run")
    assert code == 0, (rows, err)
    [plan] = [r for r in rows if r.get("kind") == "PlannedReset"]
    assert plan["steps"][0] == "POST /reset_prefix_cache?reset_external=true", plan
    name = pod(cluster, NS, "a")["name"]
    assert f"note: the LMCache CPU tier of {NS}/{name} is emptied by the store step" in err, err
    [store] = [r for r in rows if r.get("kind") == "StoreClear"]
    assert (store["store"], store["result"], store["before"]) == ("lmcache-controller", "planned", keys), store


def test_clear_empties_lmcache_through_the_controller_and_the_prompt_misses(cluster: SimCluster) -> None:
    prompt = _stored(cluster)
    assert _complete(cluster, prompt)[HITS] >= 256
    keys = _key_count(cluster)

    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/a", "--yes")
    assert code == 0, (rows, err)
    [reset] = [r for r in rows if r.get("kind") == "CacheReset"]
    assert (reset["gpu"], reset["cpu"], reset["result"]) == ("emptied", "emptied", "emptied"), reset
    [store] = [r for r in rows if r.get("kind") == "StoreClear"]
    assert store["store"] == "lmcache-controller" and store["scope"] == f"instance {INSTANCE}", store
    assert (store["before"], store["after"], store["unit"], store["result"]) == (keys, 0, "keys", "emptied"), store
    assert _key_count(cluster) == 0

    missed = _complete(cluster, prompt)
    assert missed[HITS] == 0 and missed[EXTERNAL] == 0 and missed[QUERIES] >= 300, missed
    print(f"clear: {keys} LMCache keys -> 0 ({store['message']}); the prompt then: {missed}")


def test_verify_finds_lmcache_warm_after_the_gpu_reset_and_cold_after_the_store_step(cluster: SimCluster) -> None:
    """``clear --verify`` on the real pod: the canary's probe after the API reset (GPU only for
    this connector) is an external hit that LMCache supplied, and the probe after the store step
    (the controller's clear) misses: the run is cold, the proof shows both."""
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/a", "--yes", "--verify", timeout=300)
    [reset] = [r for r in rows if r.get("kind") == "CacheReset"]
    [store] = [r for r in rows if r.get("kind") == "StoreClear"]
    print(f"clear --verify: exit {code}; {reset['verify']}; probes "
          f"{[(p['point'], p['found'], p['counters']) for p in reset['proof'][0]['probes']]}; store {store['result']}")
    assert code == 0 and reset["verify"] == "cold" and reset["result"] == "emptied", (rows, err)
    assert store["store"] == "lmcache-controller" and store["result"] == "emptied", store
    (proof,) = reset["proof"]
    assert proof["control"]["cached_tokens"] == 256 and proof["control"]["sources"] == {"device": 256}, proof
    gpu_reset, after_store = proof["probes"]
    assert (gpu_reset["point"], after_store["point"]) == ("api-reset", "store"), proof["probes"]
    # the GPU prefix cache is empty, LMCache still holds the canary: an external hit
    assert gpu_reset["counters"]["prefix_cache_hits"] == 0, gpu_reset
    assert gpu_reset["cached_tokens"] == gpu_reset["counters"]["external_prefix_cache_hits"] >= 256, gpu_reset
    assert gpu_reset["sources"] and "device" not in gpu_reset["sources"], gpu_reset
    assert all(src.startswith("external") for src in gpu_reset["sources"]), gpu_reset
    assert gpu_reset["found"].startswith(f"warm: {gpu_reset['cached_tokens']} cached tokens from external"), gpu_reset
    assert after_store["cached_tokens"] == 0 and after_store["found"] == "cold", after_store
    assert after_store["counters"]["external_prefix_cache_hits"] == 0, after_store
