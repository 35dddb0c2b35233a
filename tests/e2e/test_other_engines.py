"""Inference pods beside an ordinary vLLM pod: an SGLang Deployment (emptied by its own engine), and
those this version cannot empty: a Dynamo vLLM worker (``python -m dynamo.vllm``, not ``vllm
serve``), a ``trtllm-serve`` pod and the LMCache server of vLLM production-stack. ``detect`` lists
them; ``clear`` empties the vLLM and SGLang pods and gives each of the others a row ``left`` (exit
1); with ``--fallback restart --yes`` their owners are restarted and the run exits 0."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from tests.manifests import build
from tests.simctl import SimCluster

from .conftest import require_sandbox

NS = "mixed"


def _deployment(name: str, container: str) -> str:
    return build.deployment_yaml(name, container, NS)


MANIFEST = "".join([
    _deployment("plain-vllm", """\
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          command: [vllm, serve, org/model]
          args: [--port, "8000"]
          env: [{name: VLLM_SERVER_DEV_MODE, value: "1"}, {name: NOTE, value: "not python3 -m sglang.launch_server"}]
        """),
    _deployment("sglang", """\
        - name: sglang
          image: lmsysorg/sglang:v0.5.14
          command: [/bin/sh, -c]
          args: ["exec python3 -m sglang.launch_server --model-path org/model --host 0.0.0.0 --port $(PORT)"]
          env: [{name: PORT, value: "8000"}]
        """),
    _deployment("dynamo-worker", """\
        - name: worker
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.0
          command: [python3, -m, dynamo.vllm]
          args: [--model, org/model]
        """),
    _deployment("trtllm", """\
        - name: trtllm
          image: nvcr.io/nvidia/tensorrt-llm/release:1.0.0
          command: [trtllm-serve, org/model, --host, 0.0.0.0, --port, "8123"]
        """),
    _deployment("vllm-cache-server", """\
        - name: lmcache-server
          image: lmcache/vllm-openai:latest
          command: [lmcache_server, 0.0.0.0, "8100"]
        """),
])

OTHERS = {"sglang": ("sglang", 8000), "dynamo-worker": ("dynamo-vllm", None), "trtllm": ("trtllm-serve", 8123),
          "vllm-cache-server": ("lmcache-server", 8100)}
#: Those still emptied by a restart only (SGLang has an engine of its own: its /flush_cache empties it).
LEFT = {k: v for k, v in OTHERS.items() if k != "sglang"}


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[SimCluster]:
    require_sandbox()
    path = tmp_path / "mixed.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    with SimCluster([path], namespace=NS, ready_delay=0.05) as c:
        c.wait_ready()
        yield c


def _by_owner(rows: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {r["owner"].split("/", 1)[1]: r for r in rows if r["kind"] == kind}


def test_detect_lists_them(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    got = _by_owner(rows, "VllmPod")
    assert got["plain-vllm"]["engine"] == "vllm"
    for owner, (engine, port) in OTHERS.items():
        assert (got[owner]["engine"], got[owner]["ports"]) == (engine, [port] if port else []), got[owner]
    table = cluster.run("detect", "-n", NS)
    assert "ENGINE" in table.stdout and "dynamo-vllm" in table.stdout


def test_clear_leaves_them_then_restart_empties_them(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 1, err
    got = _by_owner(rows, "CacheReset")
    assert got["plain-vllm"]["result"] == "emptied"
    assert (got["sglang"]["result"], got["sglang"]["engine"], got["sglang"]["port"]) == ("emptied", "sglang", 8000)
    for owner, (engine, port) in LEFT.items():
        row = got[owner]
        assert (row["result"], row["engine"], row["port"]) == ("left", engine, port), row
        assert row["left"] and row["left"][0]["remedy"].startswith("--fallback restart")
        assert f"kubectl rollout restart deployment/{owner}" in row["left"][0]["remedy"]
    assert ("the lm:// protocol has no delete; restarting deployment/vllm-cache-server empties it"
            in got["vllm-cache-server"]["message"])

    code, planned, err = cluster.run_json("clear", "-n", NS, "--all", "--dry-run")
    assert code == 0, err  # a plan earns no failure, as for vLLM pods
    plans = _by_owner(planned, "PlannedReset")
    assert all(plans[o]["result"] == "left" and plans[o]["steps"] == [] for o in LEFT)
    assert plans["sglang"]["steps"] == ["POST /flush_cache"] and plans["sglang"]["engine"] == "sglang", plans["sglang"]
    code, planned, err = cluster.run_json("clear", "-n", NS, "--all", "--dry-run", "--fallback", "restart")
    assert code == 0, err
    plans = _by_owner(planned, "PlannedReset")
    assert all(plans[o]["steps"] == [f"restart deployment/{o}"] and plans[o]["result"] == "planned" for o in LEFT)

    before = {p["name"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback", "restart", "--yes", timeout=180)
    assert code == 0, (err, rows)
    got = _by_owner(rows, "CacheReset")
    assert got["plain-vllm"]["result"] == "emptied"
    assert all(got[o]["result"] == "replaced" and got[o]["steps"] == ["restart"] for o in LEFT)
    assert got["sglang"]["result"] == "emptied"  # its reset worked: nothing to restart
    after = {p["name"]: p for p in cluster.live_pods()}
    for owner in LEFT:
        new = [n for n in after if n.startswith(owner + "-") and n not in before]
        assert new and all(after[n]["ready"] for n in new), owner
    assert any(n.startswith("plain-vllm-") for n in after if n in before)  # the vLLM pod was not replaced


SHARED = "".join([
    _deployment("engine", """\
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          command: [vllm, serve, org/model]
          args: [--port, "8000", --kv-transfer-config, '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}']
          env: [{name: VLLM_SERVER_DEV_MODE, value: "1"}, {name: LMCACHE_REMOTE_URL, value: "lm://cache:8100"}]
        """),
    _deployment("cache", """\
        - name: lmcache-server
          image: lmcache/vllm-openai:latest
          command: [lmcache_server, 0.0.0.0, "8100"]
          ports: [{name: data, containerPort: 8100}]
        """),
    textwrap.dedent(f"""\
        apiVersion: v1
        kind: Service
        metadata: {{name: cache, namespace: {NS}}}
        spec:
          selector: {{app: cache}}
          ports: [{{name: data, port: 8100, targetPort: data}}]
        """),
])


def test_lmcache_server_restart_needs_consent(tmp_path: Any) -> None:
    """The LMCache server is a store its engines share: restarting it needs --shared-stores while
    an engine uses it, whether the run targets that engine or not; with it, the restart goes ahead
    and the store's row says the restart emptied it."""
    require_sandbox()
    path = tmp_path / "shared.yaml"
    path.write_text(SHARED, encoding="utf-8")
    with SimCluster([path], namespace=NS, ready_delay=0.05) as cluster:
        cluster.wait_ready()
        before = {p["name"] for p in cluster.live_pods()}
        code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/cache", "--fallback", "restart", "--yes")
        assert code == 1, err
        row = _by_owner(rows, "CacheReset")["cache"]
        assert row["result"] == "left" and "--shared-stores" in row["message"] and f"{NS}/engine-" in row["message"]
        assert row["left"][0]["remedy"].startswith("--fallback restart --shared-stores")
        assert {p["name"] for p in cluster.live_pods()} == before  # nothing restarted

        code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback", "restart", "--shared-stores",
                                           "--yes", timeout=180)
        got = _by_owner(rows, "CacheReset")
        assert got["cache"]["result"] == "replaced", (err, rows)
        (store,) = [r for r in rows if r["kind"] == "StoreClear" and r["store"] == "lmcache-server"]
        assert store["result"] == "replaced" and "restarted by this run" in store["message"]
        assert got["engine"]["shared"] != "left", got["engine"]
        new = [p for p in cluster.live_pods() if p["name"].startswith("cache-") and p["name"] not in before]
        assert new and all(p["ready"] for p in new)
