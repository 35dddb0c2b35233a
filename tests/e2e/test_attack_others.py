"""Attacks on the rows of inference pods this version cannot empty (Dynamo SGLang workers, Dynamo,
``trtllm-serve``, the LMCache server): look-alike commands that are vLLM or routers, a pod with a
vLLM and a Dynamo SGLang worker container, every output format, ``--container``, owner arguments, exit codes,
secrets in their arguments, the LMCache server's restart consent across namespaces, and the rows
after a restart."""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.manifests import build
from tests.simctl import DEMO_MANIFEST, ROOT, SimCluster, zipapp_path

from .conftest import require_sandbox
from .test_fallback_rows import REASON
from .test_pipeline_job import NS as JOB_NS
from .test_pipeline_job import apply, finished, kubectl_logs, manifest
from .test_pod_states import NS as STATES_NS
from .test_pod_states import write

NS = "attack"
SECRETS = ("sk-attack-sglang-key", "sk-attack-admin-key", "hf_attackTokenValue", "sk-attack-trt-key")


def _deployment(name: str, container: str, ns: str = NS, replicas: int = 1) -> str:
    return build.deployment_yaml(name, container, ns, replicas)


MANIFEST = "".join([
    # vLLM whose script mentions SGLang in a comment, an echo and an env var, in an sglang-named image
    _deployment("lookalike", """\
        - name: vllm
          image: example/sglang-compat-vllm:1
          command: [bash, -c]
          args:
          - |
            # was: python3 -m sglang.launch_server --port 30000
            echo "not sglang serve; starting vllm"
            exec vllm serve org/model --port 8000
          env: [{name: VLLM_SERVER_DEV_MODE, value: "1"}, {name: SGLANG_ENABLE_TORCH_COMPILE, value: "1"}]
        """),
    _deployment("frontend", """\
        - name: frontend
          image: nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.6.0
          command: [python3, -m, dynamo.frontend, --http-port, "8000"]
        """),
    _deployment("trt-router", """\
        - name: router
          image: nvcr.io/nvidia/tensorrt-llm/release:1.0.0
          command: [trtllm-serve, disaggregated, -c, /etc/disagg.yaml]
        """),
    # one pod, a vLLM container and an SGLang container (with secrets in its arguments)
    _deployment("both", """\
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          command: [vllm, serve, org/model]
          args: [--port, "8000"]
          env: [{name: VLLM_SERVER_DEV_MODE, value: "1"}]
        - name: sglang
          image: lmsysorg/sglang:v0.5.14
          command: [python3, -m, dynamo.sglang, --model-path, org/model, --port, "30000",
                    --api-key, sk-attack-sglang-key, --admin-api-key, sk-attack-admin-key]
          env: [{name: HF_TOKEN, value: hf_attackTokenValue}]
        """),
    _deployment("sg-only", """\
        - name: sglang
          image: lmsysorg/sglang:v0.5.14
          command: [python3, -m, dynamo.sglang, --model-path, org/model, --port, "30001",
                    --api-key=sk-attack-sglang-key]
        """),
    _deployment("trt", """\
        - name: trtllm
          image: nvcr.io/nvidia/tensorrt-llm/release:1.0.0
          command: [trtllm-serve, org/model, --port, "8123", --api_key, sk-attack-trt-key]
        """),
])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: Any) -> Iterator[SimCluster]:
    require_sandbox()
    path = tmp_path_factory.mktemp("attack") / "attack.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    with SimCluster([path], namespace=NS, ready_delay=0.05) as c:
        c.wait_ready()
        yield c


def _rows(rows: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["kind"] == kind]


def _key(r: dict[str, Any]) -> tuple[str, str]:
    return r["owner"].split("/", 1)[1], r["container"]


def _no_secret(*texts: str) -> None:
    for text in texts:
        for s in SECRETS:
            assert s not in text, (s, text[:2000])


def test_detect_lookalikes_and_routers_are_not_other_engines(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    got = {_key(r): r["engine"] for r in _rows(rows, "VllmPod")}
    assert got[("lookalike", "vllm")] == "vllm"
    assert ("frontend", "frontend") not in got and ("trt-router", "router") not in got
    assert got[("both", "vllm")] == "vllm" and got[("both", "sglang")] == "dynamo-sglang"
    assert got[("sg-only", "sglang")] == "dynamo-sglang" and got[("trt", "trtllm")] == "trtllm-serve"


def test_secrets_never_printed(cluster: SimCluster) -> None:
    outs: list[str] = []
    for args in (("detect", "-o", "json"), ("detect", "-o", "yaml"), ("detect", "-o", "wide"), ("detect", "-v", "9"),
                 ("detect", "-o", "jsonpath={.items[*]}"),
                 ("clear", "--all", "--dry-run", "-o", "json", "-v", "9"),
                 ("clear", "--all", "--dry-run", "--fallback", "restart", "-o", "yaml"),
                 ("clear", "deployment/sg-only", "-o", "json", "-v", "9"),
                 ("clear", "deployment/trt", "-v", "9")):
        res = cluster.run(*args, "-n", NS)
        outs += [res.stdout, res.stderr]
    _no_secret(*outs)


def test_clear_rows_and_exit_codes(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 1, err
    got = {_key(r): r for r in _rows(rows, "CacheReset")}
    assert got[("lookalike", "vllm")]["result"] == "emptied"
    assert got[("both", "vllm")]["result"] == "emptied"
    assert got[("both", "sglang")]["result"] == "left"
    assert not any(k[0] in ("frontend", "trt-router") for k in got)
    # a dry run: a plan earns no failure (as for vLLM pods), but every other engine is planned "left"
    code, planned, err = cluster.run_json("clear", "-n", NS, "--all", "--dry-run")
    assert code == 0, err
    plans = {_key(r): r for r in _rows(planned, "PlannedReset")}
    assert plans[("both", "sglang")]["result"] == "left" and plans[("sg-only", "sglang")]["result"] == "left"


@pytest.mark.parametrize("owner", ["deployment/sg-only", "deploy/sg-only", "deployments.apps/sg-only"])
def test_owner_naming_only_an_other_engine(cluster: SimCluster, owner: str) -> None:
    code, rows, err = cluster.run_json("clear", "-n", NS, owner)
    assert code == 1, err
    got = [_key(r) for r in _rows(rows, "CacheReset")]
    assert got == [("sg-only", "sglang")], rows


def test_pod_argument_naming_only_an_other_engine(cluster: SimCluster) -> None:
    name = next(p["name"] for p in cluster.live_pods() if p["name"].startswith("sg-only-"))
    code, rows, err = cluster.run_json("clear", "-n", NS, f"pod/{name}")
    assert code == 1, err
    assert [_key(r) for r in _rows(rows, "CacheReset")] == [("sg-only", "sglang")]


def test_output_name_and_jsonpath(cluster: SimCluster) -> None:
    res = cluster.run("clear", "-n", NS, "deployment/both", "-o", "name")
    assert res.returncode == 1, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]  # one name per pod, as kubectl's -o name
    assert len(lines) == 1 and lines[0].startswith("pod/both-"), res.stdout
    res = cluster.run("clear", "-n", NS, "deployment/both", "-o",
                      "jsonpath={range .items[*]}{.container}={.result}{\"\\n\"}{end}")
    assert res.returncode == 1, res.stderr
    assert sorted(res.stdout.split()) == ["sglang=left", "vllm=emptied"], res.stdout
    res = cluster.run("clear", "-n", NS, "deployment/both", "-o", "yaml")
    assert res.returncode == 1 and "result: left" in res.stdout


def test_selector_with_an_owner_and_unknown_owners(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear", "-n", NS, "-l", "app=sg-only", "deployment/sg-only")
    assert code == 1 and [_key(r) for r in _rows(rows, "CacheReset")] == [("sg-only", "sglang")], (err, rows)
    res = cluster.run("clear", "-n", NS, "deployment/frontend")  # a router: neither vLLM nor another engine
    assert res.returncode != 0 and "deployment/frontend has no vLLM server pods" in res.stderr, res.stderr
    res = cluster.run("clear", "-n", NS, "deployment/sg-only", "deployment/nope")
    assert res.returncode != 0 and "deployment/nope" in res.stderr, res.stderr


def test_dry_run_name_output_and_code(cluster: SimCluster) -> None:
    res = cluster.run("clear", "-n", NS, "deployment/sg-only", "--dry-run", "-o", "name")
    assert res.returncode == 0 and res.stdout.split() == [
        f"pod/{p['name']}" for p in cluster.live_pods() if p["name"].startswith("sg-only-")], res.stdout
    res = cluster.run("detect", "-n", NS, "-o", "name")
    assert res.returncode == 0 and any(line.startswith("pod/sg-only-") for line in res.stdout.split()), res.stdout


def test_container_flag_does_not_hide_a_warm_sglang_container(cluster: SimCluster) -> None:
    """``--container vllm`` on a pod that also runs SGLang: the vLLM container is emptied; the
    SGLang container of the same targeted pod stays warm, and must not vanish without a row."""
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/both", "--container", "vllm")
    assert code == 0, (err, rows)  # as a vLLM container --container leaves out: it was not a target
    got = {_key(r): r for r in _rows(rows, "CacheReset")}
    assert got[("both", "vllm")]["result"] == "emptied"
    row = got[("both", "sglang")]
    assert row["result"] == "skipped" and "not targeted (--container vllm)" in row["message"], row
    assert "NVIDIA Dynamo (SGLang worker) is not supported by this version: its cache was not emptied" in row["message"]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--container", "vllm")
    got = {_key(r): r for r in _rows(rows, "CacheReset")}
    assert got[("sg-only", "sglang")]["result"] == "skipped" and got[("trt", "trtllm")]["result"] == "skipped", rows
    table = cluster.run("clear", "-n", NS, "deployment/both", "--container", "vllm")
    assert "skipped" in table.stdout and "sglang" in table.stdout, table.stdout


def test_container_flag_naming_the_sglang_container(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/both", "--container", "sglang")
    assert code == 1, (err, rows)
    got = {_key(r): r for r in _rows(rows, "CacheReset")}
    assert got[("both", "sglang")]["result"] == "left", rows


def test_restart_of_mixed_pod_names_the_new_pod(cluster: SimCluster) -> None:
    before = {p["name"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/both", "--fallback", "restart", "--yes",
                                       timeout=180)
    assert code == 0, (err, rows)
    after = {p["name"] for p in cluster.live_pods()}
    new = sorted(n for n in after - before if n.startswith("both-"))
    assert len(new) == 1, (before, after)
    got = {_key(r): r for r in _rows(rows, "CacheReset")}
    assert got[("both", "sglang")]["result"] == "replaced"
    # the SGLang row names the pod that now serves, as the vLLM rows of a restart do
    for container in ("vllm", "sglang"):
        row = got[("both", container)]
        assert row["pod"] == new[0] and row["message"].startswith("replaces both-"), row


@pytest.mark.parametrize("owner", ["sg-only", "trt"])
def test_restart_of_an_sglang_only_owner_names_the_new_pod(cluster: SimCluster, owner: str) -> None:
    """An owner whose pods run no vLLM: its successors are found too (not only vLLM pods)."""
    before = {p["name"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("clear", "-n", NS, f"deployment/{owner}", "--fallback", "restart", "--yes",
                                       "-v", "9", timeout=180)
    assert code == 0, (err, rows)
    _no_secret(err)  # -v 9 logs the Deployment's GET and PATCH: the template's --api-key is not among them
    new = sorted(n for n in {p["name"] for p in cluster.live_pods()} - before if n.startswith(owner + "-"))
    (row,) = _rows(rows, "CacheReset")
    assert row["result"] == "replaced" and [row["pod"]] == new, (row, new)
    assert row["message"].startswith(f"replaces {owner}-") and json.dumps(row).count("sk-attack") == 0


CACHE_NS, ENGINE_NS = "attack-cache", "attack-eng"


def _cache_and_engines(engine_ns: str) -> str:
    return "".join([
        _deployment("engine", """\
            - name: vllm
              image: vllm/vllm-openai:v0.32.0
              command: [vllm, serve, org/model]
              args: [--port, "8000", --kv-transfer-config, '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}']
              env: [{name: VLLM_SERVER_DEV_MODE, value: "1"},
                    {name: LMCACHE_REMOTE_URL, value: "lm://cache.attack-cache.svc.cluster.local:8100"}]
            """, ns=engine_ns),
        _deployment("cache", """\
            - name: lmcache-server
              image: lmcache/vllm-openai:latest
              command: [lmcache_server, 0.0.0.0, "8100"]
              ports: [{name: data, containerPort: 8100}]
            """, ns=CACHE_NS),
        textwrap.dedent(f"""\
            apiVersion: v1
            kind: Service
            metadata: {{name: cache, namespace: {CACHE_NS}}}
            spec:
              selector: {{app: cache}}
              ports: [{{name: data, port: 8100, targetPort: data}}]
            """),
    ])


# (CACHE_NS, --all) is left out: --all then targets the engine too, so its restart is consented
# (tests/e2e/test_other_engines.py runs that case)
@pytest.mark.parametrize(("engine_ns", "how"), [
    (ns, how) for ns in (ENGINE_NS, CACHE_NS) for how in (("--all",), ("deployment/cache",), ("-l", "app=cache"))
    if (ns, how) != (CACHE_NS, ("--all",))])
def test_lmcache_server_used_by_untargeted_engines_is_never_restarted_with_yes_alone(
        tmp_path: Any, engine_ns: str, how: tuple[str, ...]) -> None:
    """The engines that use the LMCache server are not targeted (another namespace, another
    owner, outside the selector): ``--fallback restart --yes`` without ``--shared-stores``
    restarts nothing and the row is ``left`` (exit 1)."""
    require_sandbox()
    path = tmp_path / "cache.yaml"
    path.write_text(_cache_and_engines(engine_ns), encoding="utf-8")
    with SimCluster([path], namespace=CACHE_NS, ready_delay=0.05) as cluster:
        cluster.wait_ready()
        before = {p["name"] for p in cluster.live_pods()}
        code, rows, err = cluster.run_json("clear", "-n", CACHE_NS, *how, "--fallback", "restart", "--yes",
                                           timeout=180)
        assert {p["name"] for p in cluster.live_pods()} == before, (err, rows)  # nothing restarted
        assert code == 1, (err, rows)
        (row,) = [r for r in _rows(rows, "CacheReset") if r["engine"] == "lmcache-server"]
        assert row["result"] == "left" and "--shared-stores" in row["message"], row


def test_lmcache_server_of_another_namespace_names_its_users_and_restarts_with_consent(tmp_path: Any) -> None:
    require_sandbox()
    path = tmp_path / "cache.yaml"
    path.write_text(_cache_and_engines(ENGINE_NS), encoding="utf-8")
    with SimCluster([path], namespace=CACHE_NS, ready_delay=0.05) as cluster:
        cluster.wait_ready()
        code, rows, err = cluster.run_json("clear", "-n", CACHE_NS, "--all", "--fallback", "restart", "--yes")
        (row,) = _rows(rows, "CacheReset")
        assert code == 1 and row["result"] == "left" and f"{ENGINE_NS}/engine-" in row["message"], row
        code, planned, err = cluster.run_json("clear", "-n", CACHE_NS, "--all", "--fallback", "restart", "--dry-run")
        (plan,) = _rows(planned, "PlannedReset")
        assert plan["result"] == "left" and plan["steps"] == [], plan
        before = {p["name"] for p in cluster.live_pods()}
        code, rows, err = cluster.run_json("clear", "-n", CACHE_NS, "--all", "--fallback", "restart", "--yes",
                                           "--shared-stores", timeout=180)
        (row,) = _rows(rows, "CacheReset")
        new = sorted(n for n in {p["name"] for p in cluster.live_pods()} - before if n.startswith("cache-"))
        assert code == 0 and row["result"] == "replaced" and [row["pod"]] == new, (err, row)


BY_HAND = textwrap.dedent(f"""\
    apiVersion: apps/v1
    kind: StatefulSet
    metadata: {{name: sg-sts, namespace: {NS}}}
    spec:
      replicas: 1
      serviceName: sg-sts
      selector: {{matchLabels: {{app: sg-sts}}}}
      template:
        metadata: {{labels: {{app: sg-sts}}}}
        spec:
          containers:
          - name: sglang
            image: lmsysorg/sglang:v0.5.14
            command: [python3, -m, dynamo.sglang, --model-path, org/model]
    ---
    apiVersion: v1
    kind: Pod
    metadata:
      name: sg-sts-0
      namespace: {NS}
      labels: {{app: sg-sts}}
      ownerReferences: [{{apiVersion: apps/v1, kind: StatefulSet, name: sg-sts, uid: sts-uid-1, controller: true}}]
    spec:
      containers:
      - name: sglang
        image: lmsysorg/sglang:v0.5.14
        command: [python3, -m, dynamo.sglang, --model-path, org/model]
    ---
    apiVersion: v1
    kind: Pod
    metadata: {{name: sg-bare, namespace: {NS}, labels: {{app: sg-bare}}}}
    spec:
      containers:
      - name: sglang
        image: lmsysorg/sglang:v0.5.14
        command: [python3, -m, dynamo.sglang, --model-path, org/model]
    """)


def test_owners_fallback_restart_cannot_restart_are_never_planned_as_restarted(tmp_path: Any) -> None:
    """A StatefulSet's pod (the simulator stores StatefulSets only: its pod is given with the
    ownerReference) or a bare pod: ``--fallback restart`` refuses these kinds, so neither the
    plan nor the remedy may promise it; the rows are ``left`` with the restart by hand."""
    require_sandbox()
    path = tmp_path / "byhand.yaml"
    path.write_text(BY_HAND, encoding="utf-8")
    with SimCluster([path], namespace=NS, ready_delay=0.05) as cluster:
        cluster.wait_ready()
        code, planned, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback", "restart", "--dry-run")
        plans = {r["owner"]: r for r in _rows(planned, "PlannedReset")}
        assert plans["statefulset/sg-sts"]["result"] == "left" and plans["statefulset/sg-sts"]["steps"] == [], plans
        assert plans["pod/sg-bare"]["result"] == "left", plans
        before = {p["name"]: p["uid"] for p in cluster.live_pods()} if "uid" in cluster.live_pods()[0] else None
        code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback", "restart", "--yes", timeout=180)
        assert code == 1, (err, rows)
        got = {r["owner"]: r for r in _rows(rows, "CacheReset")}
        sts = got["statefulset/sg-sts"]
        assert sts["result"] == "left" and sts["left"][0]["remedy"] == "kubectl rollout restart statefulset/sg-sts", sts
        bare = got["pod/sg-bare"]
        assert bare["result"] == "left" and bare["left"][0]["remedy"].startswith("delete and recreate pod/sg-bare")
        if before is not None:
            assert {p["name"]: p["uid"] for p in cluster.live_pods()} == before


def _sglang_deployment(name: str, *, replicas: int = 1, gpus: int = 0) -> dict[str, Any]:

    container: dict[str, Any] = {"name": "sglang", "image": "lmsysorg/sglang:v0.5.14",
                                 "command": ["python3", "-m", "dynamo.sglang", "--model-path", "org/model",
                                             "--api-key", "sk-attack-sglang-key"]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    return build.deployment(name, [container], namespace=STATES_NS, replicas=replicas)


def test_sglang_restart_that_never_comes_up_names_the_schedulers_reason(sim: Any, tmp_path: Any) -> None:

    cluster = sim([write(tmp_path, [_sglang_deployment("sgbig", replicas=2, gpus=1)])], namespace=STATES_NS,
                  scenario={"gpus_per_node": 1})
    before = {p["name"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("clear", "-n", STATES_NS, "--all", "--fallback", "restart", "--yes",
                                       "--timeout", "3s", timeout=120)
    assert code == 1, (err, rows)
    got = _rows(rows, "CacheReset")
    assert len(got) == 2, got
    for row in got:  # one pod never fits on the node: the rollout times out
        assert row["result"] == "failed" and row["pod"] in before, row  # the old pod: no successor came up
        assert REASON in row["message"], row["message"]
        assert row["left"] and row["left"][0]["tier"] == "every tier", row
    _no_secret(err, json.dumps(rows))


def test_sglang_restart_of_two_replicas_names_each_new_pod(sim: Any, tmp_path: Any) -> None:

    cluster = sim([write(tmp_path, [_sglang_deployment("sgtwo", replicas=2)])], namespace=STATES_NS)
    before = {p["name"] for p in cluster.live_pods() if p["name"].startswith("sgtwo-")}
    code, rows, err = cluster.run_json("clear", "-n", STATES_NS, "--all", "--fallback", "restart", "--yes",
                                       timeout=180)
    assert code == 0, (err, rows)
    after = {p["name"] for p in cluster.live_pods() if p["name"].startswith("sgtwo-")}
    got = _rows(rows, "CacheReset")
    assert {r["pod"] for r in got} == after and not after & before, (got, before, after)
    assert {r["message"].split(";")[0] for r in got} == {f"replaces {p}" for p in before}


def _log_rows(log: str) -> list[dict[str, Any]]:
    """The JSON document of a Job's log (stderr lines come before and after it)."""
    lines = log.splitlines()
    rows, _end = json.JSONDecoder().raw_decode("\n".join(lines[lines.index("["):]))
    return rows  # type: ignore[no-any-return]


def test_job_with_the_shipped_role_fails_while_sglang_is_warm_then_restarts_it(sim: Any, tmp_path: Any) -> None:
    """deploy/kvreset-job.yaml in a namespace that also runs SGLang: the Job fails (exit 1, the
    row ``left``, no secret in its log); with ``--fallback restart`` in its args the shipped
    Role's patch rule restarts it and the row names the new pod."""



    archive = tmp_path / "kubectl-kvreset.tar.gz"
    subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "archive", "--zipapp", str(zipapp_path()),
                    "--license", str(ROOT / "LICENSE"), "--completion", str(ROOT / "krew" / "kubectl_complete-kvreset"),
                    "--output", str(archive)], check=True, capture_output=True)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/{archive.name}"
        sha = hashlib.sha256(archive.read_bytes()).hexdigest()
        extra = tmp_path / "sg.yaml"
        extra.write_text(_deployment("sg", """\
            - name: sglang
              image: lmsysorg/sglang:v0.5.14
              command: [python3, -m, dynamo.sglang, --model-path, org/model, --api-key, sk-attack-sglang-key]
            """, ns=JOB_NS), encoding="utf-8")
        cluster = sim([DEMO_MANIFEST, extra], namespace=JOB_NS, dev_mode="on")
        before = {p["name"] for p in cluster.live_pods() if p["name"].startswith("sg-")}
        apply(cluster, manifest(url, sha))
        job = finished(cluster, "kvreset-clear")
        log = kubectl_logs(cluster, "job/kvreset-clear", "-c", "clear")
        assert job["status"].get("failed") == 1, (job["status"], log)
        rows = _log_rows(log)
        (sg,) = [r for r in rows if r.get("engine") == "dynamo-sglang"]
        assert sg["result"] == "left" and sg["pod"] in before, sg
        assert {r["result"] for r in rows if r.get("engine") == "vllm"} == {"emptied"}, log
        _no_secret(log)

        docs = manifest(url, sha)
        job_doc = next(d for d in docs if d["kind"] == "Job")
        job_doc["metadata"]["name"] = "kvreset-clear-restart"
        job_doc["spec"]["template"]["spec"]["containers"][0]["args"] += ["--fallback", "restart"]
        apply(cluster, [job_doc])
        job = finished(cluster, "kvreset-clear-restart", timeout=240)
        log = kubectl_logs(cluster, "job/kvreset-clear-restart", "-c", "clear")
        rows = _log_rows(log)
        (sg,) = [r for r in rows if r.get("engine") == "dynamo-sglang"]
        after = {p["name"] for p in cluster.live_pods() if p["name"].startswith("sg-")}
        assert sg["result"] == "replaced" and sg["pod"] in after - before, (sg, before, after)
        _no_secret(log)
    finally:
        httpd.shutdown()
        httpd.server_close()
