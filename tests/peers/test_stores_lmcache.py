"""``clear`` against real LMCache 0.5.6 (markers ``stores`` and ``peers``): vLLM pods (the
simulator's fake vLLM) configured for in-process LMCache by an ``LMCACHE_CONFIG_FILE`` ConfigMap,
each with a second container running a real standalone LMCache worker (``python -m
lmcache.v1.standalone``) from the same file, at the pod's address: the stand-in for vLLM's
in-process LMCache engine. A real controller Deployment and Service in one namespace; pods whose
workers register there (``lmt-ctl``), pods with the worker API only (``lmt-api``), and a pod that
names an instance no worker registered (``lmt-ghost``)."""

from __future__ import annotations

import json
import os
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import tests.peers as peers
from tests.e2e.test_rbac_role import LMCACHE_NEEDED, USER, full_rules, role_documents, set_rules
from tests.e2e.test_rbac_role import NS as RBAC_NS
from tests.simctl import SimCluster, sandbox_available

pytestmark = [pytest.mark.peers, pytest.mark.stores]

# the worker-API pods live in the namespace of the repository's Role (user alice)
CTL, API, GHOST = "lmt-ctl", RBAC_NS, "lmt-ghost"
CONTROLLER = f"kv-lmcache-controller.{CTL}.svc.cluster.local"
TOKENS = 1024


def _config(ns: str, *, controller: str | None, worker_api: bool) -> str:
    lines = ["chunk_size: 256", "local_cpu: true", "max_local_cpu_size: 0.25"]
    if controller is not None:
        lines += ["enable_controller: true", f"lmcache_instance_id: {controller}",
                  f"controller_pull_url: {CONTROLLER}:8300", f"controller_reply_url: {CONTROLLER}:8400",
                  "lmcache_worker_ports: [8500]"]
    if worker_api:
        lines += ["internal_api_server_enabled: true", "internal_api_server_host: 0.0.0.0",
                  "internal_api_server_port_start: 6999"]
    body = textwrap.indent("\n".join(lines), "        ")
    return f"""\
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: lmcache, namespace: {ns}}}
data:
  lmcache.yaml: |
{body}
---
"""


def _vllm(ns: str, name: str, *, worker: bool) -> str:
    text = textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}, namespace: {ns}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}, llm-d.ai/inference-serving: "true"}}}}
            spec:
              volumes: [{{name: cfg, configMap: {{name: lmcache}}}}]
              containers:
              - name: vllm
                image: vllm/vllm-openai:v0.32.0
                command: [vllm, serve, org/model-a]
                args: [--port, "8000", --kv-transfer-config,
                       '{{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}}']
                env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}},
                      {{name: LMCACHE_CONFIG_FILE, value: /config/lmcache/lmcache.yaml}}]
                ports: [{{name: http, containerPort: 8000}}]
                volumeMounts: [{{name: cfg, mountPath: /config/lmcache}}]
        """)
    if worker:
        text += textwrap.indent(textwrap.dedent("""\
            - name: lmcache
              image: lmcache/lmcache:v0.5.6
              command: [python, -m, lmcache.v1.standalone]
              args: [--config, /config/lmcache/lmcache.yaml, --model-name, org/model-a]
              ports: [{name: lmc-api, containerPort: 7000}, {name: lmc-worker, containerPort: 8500}]
              volumeMounts: [{name: cfg, mountPath: /config/lmcache}]
            """), "      ")
    return text + "---\n"


CONTROLLER_MANIFEST = textwrap.dedent(f"""\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: kv-lmcache-controller, namespace: {CTL}}}
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
    metadata: {{name: kv-lmcache-controller, namespace: {CTL}}}
    spec:
      selector: {{app: kv-lmcache-controller}}
      ports: [{{name: http, port: 9000, targetPort: http}}, {{name: pull, port: 8300, targetPort: pull}},
              {{name: reply, port: 8400, targetPort: reply}}]
    ---
    """)

MANIFEST = (_config(CTL, controller="with-ctl", worker_api=True) + CONTROLLER_MANIFEST
            + _vllm(CTL, "with-ctl", worker=True)
            + _config(API, controller=None, worker_api=True) + _vllm(API, "api-only", worker=True)
            + _config(GHOST, controller="ghost", worker_api=False) + _vllm(GHOST, "ghost", worker=False))


def _pod(sim: SimCluster, prefix: str) -> dict[str, Any]:
    return next(p for p in sim.live_pods() if p["name"].startswith(prefix))


def _http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            data = r.read()
            return r.status, json.loads(data or b"null") if data[:1] in (b"{", b"[", b"") else data
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return 0, str(e)


def _controller(sim: SimCluster) -> str:
    return f"http://{_pod(sim, 'kv-lmcache-controller')['pod_ip']}:9000"


def _worker_api(sim: SimCluster, prefix: str) -> str:
    return f"http://{_pod(sim, prefix)['pod_ip']}:7000"


def _until(what: str, check: Any, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen")
        time.sleep(0.5)


def _lookup(sim: SimCluster) -> dict[str, Any]:
    code, answer = _http("POST", _controller(sim) + "/lookup", {"tokens": list(range(TOKENS))})
    assert code == 200, answer
    return answer["layout_info"]  # type: ignore[no-any-return]


def _seed(sim: SimCluster, prefix: str) -> None:
    code, answer = _http("POST", _worker_api(sim, prefix) + f"/cache/store?tokens_mock=0,{TOKENS}")
    assert (code, answer) == (200, {"status": "success", "num_tokens": TOKENS}), answer


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    peers.require("lmcache")
    if not sandbox_available():
        msg = "bubblewrap cannot run here (apt-get install bubblewrap)"
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail(msg + " [KVRESET_REQUIRE_SANDBOX=1]")
        pytest.skip(msg)
    m = tmp_path_factory.mktemp("lmcache") / "m.yaml"
    m.write_text(MANIFEST)
    with SimCluster([m], namespace=CTL, real_servers=["lmcache"],
                    scenario={"users": [{"name": USER}], "rbac": role_documents()}) as cluster:
        cluster.wait_ready(120)
        _until("the worker registering at the controller",
               lambda: _http("GET", _controller(cluster) + "/controller/workers?instance_id=with-ctl")[0] == 200)
        _until("the worker API of api-only", lambda: _http("GET", _worker_api(cluster, "api-only") + "/metrics")[0])
        yield cluster


def _as_alice(sim: SimCluster, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    done = sim.run(*args, "-n", API, "--context", f"sim-{USER}", "-o", "json")
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else [], done.stderr


def _rows(rows: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["kind"] == kind]


def test_clear_empties_the_instance_through_the_controller(sim: SimCluster) -> None:
    _seed(sim, "with-ctl")
    # the worker reports its keys to the controller asynchronously
    assert _until("the controller seeing the keys", lambda: _lookup(sim), 20) == {
        "with-ctl": ["LocalCPUBackend", TOKENS]}
    code, rows, err = sim.run_json("clear", "-n", CTL, "--all", "--yes")
    stores = _rows(rows, "StoreClear")
    # the controller clears the pod's instance; its worker API is not called a second time
    assert [r["store"] for r in stores] == ["lmcache-controller"], (rows, err)
    [row] = stores
    pod = f"{CTL}/{_pod(sim, 'with-ctl')['name']}"
    assert row["scope"] == "instance with-ctl" and row["targeted_pods"] == [pod]
    assert row["resolved"] == f"service {CTL}/kv-lmcache-controller"
    assert row["via"] == f"{CTL}/{_pod(sim, 'kv-lmcache-controller')['name']}:9000"
    assert (row["before"], row["after"], row["unit"], row["result"]) == (4, 0, "keys", "emptied"), row
    assert row["message"].startswith(f"{TOKENS} tokens removed (POST /clear LocalCPUBackend, 1 worker(s))"), row
    assert _lookup(sim) == {}
    # the LMCache CPU tier of the pod's row is the one the controller emptied
    [reset] = _rows(rows, "CacheReset")
    assert reset["cpu"] == "emptied" and reset["result"] == "emptied", reset
    assert code == 0, (rows, err)
    # again: nothing left, 0 tokens, exit 0
    code, rows, err = sim.run_json("clear", "-n", CTL, "--all", "--yes")
    [row] = _rows(rows, "StoreClear")
    assert (row["before"], row["after"], row["result"]) == (0, 0, "emptied"), row
    assert row["message"].startswith("0 tokens removed"), row
    assert code == 0, (rows, err)


def test_dry_run_counts_and_changes_nothing(sim: SimCluster) -> None:
    _seed(sim, "with-ctl")
    _until("the controller seeing the keys", lambda: _lookup(sim), 20)
    code, rows, err = sim.run_json("clear", "-n", CTL, "--all", "--dry-run")
    [row] = _rows(rows, "StoreClear")
    assert (row["result"], row["before"], row["after"]) == ("planned", 4, 4), row
    assert row["method"] == "GET /controller/workers?instance_id=, then POST /clear per location (LocalCPUBackend)"
    assert code == 0, (rows, err)
    pod = f"{CTL}/{_pod(sim, 'with-ctl')['name']}"
    assert f"note: the LMCache CPU tier of {pod} is emptied by the store step" in err
    assert _lookup(sim) == {"with-ctl": ["LocalCPUBackend", TOKENS]}
    code, rows, err = sim.run_json("clear-store", "-n", CTL, "--all", "--yes")
    assert code == 0 and _lookup(sim) == {}, (rows, err)


def test_without_a_controller_the_worker_api_clears_the_pod(sim: SimCluster) -> None:
    _seed(sim, "api-only")
    metrics = urllib.request.urlopen(_worker_api(sim, "api-only") + "/metrics", timeout=30).read().decode()
    assert "lmcache:local_cpu_hot_cache_count{" in metrics
    code, rows, err = sim.run_json("clear", "-n", API, "--all", "--yes")
    [row] = _rows(rows, "StoreClear")
    pod = _pod(sim, "api-only")["name"]
    assert (row["store"], row["scope"], row["resolved"]) == ("lmcache-worker", "worker", f"pod {API}/{pod}"), row
    assert row["method"] == "DELETE /cache/clear on port 7000" and row["via"] == f"{API}/{pod}:7000"
    assert (row["before"], row["after"], row["result"]) == (4, 0, "emptied"), row
    assert row["message"].startswith(f"{TOKENS} tokens removed"), row
    [reset] = _rows(rows, "CacheReset")
    assert reset["cpu"] == "emptied" and reset["result"] == "emptied", reset
    assert code == 0, (rows, err)
    # the worker itself finds none of the tokens any more
    code, answer = _http("POST", _worker_api(sim, "api-only") + f"/cache/retrieve?tokens_mock=0,{TOKENS}")
    assert code == 200 and answer["num_retrieved"] == 0, answer
    code, rows, err = sim.run_json("clear", "-n", API, "--all", "--yes")
    [row] = _rows(rows, "StoreClear")
    assert (row["before"], row["after"], row["result"]) == (0, 0, "emptied") and code == 0, (rows, err)
    assert row["message"].startswith("0 tokens removed"), row


def test_an_instance_no_worker_registered_is_said_plainly(sim: SimCluster) -> None:
    code, rows, err = sim.run_json("clear", "-n", GHOST, "--all", "--yes")
    [row] = _rows(rows, "StoreClear")
    assert (row["store"], row["scope"], row["result"]) == ("lmcache-controller", "instance ghost", "left"), row
    assert row["message"].startswith("the controller knows no worker of instance ghost: "), row
    assert "should be the same" not in row["message"]
    [reset] = _rows(rows, "CacheReset")
    assert reset["cpu"] == "left"
    assert code == 1, (rows, err)


def test_the_role_lets_the_worker_api_clear_and_its_rule_is_needed(sim: SimCluster) -> None:
    _seed(sim, "api-only")
    [(index, args, named)] = LMCACHE_NEEDED
    rules = full_rules()
    set_rules(sim, rules[:index] + rules[index + 1:])
    try:
        code, rows, err = _as_alice(sim, *args)
    finally:
        set_rules(sim, rules)
    [row] = rows
    assert code == 1 and row["result"] == "failed", (rows, err)
    for word in named:
        assert word in row["message"], row
    assert "Traceback" not in err
    code, rows, err = _as_alice(sim, *args)
    [row] = rows
    assert code == 0 and (row["store"], row["before"], row["after"], row["result"]) == (
        "lmcache-worker", 4, 0, "emptied"), (rows, err)
