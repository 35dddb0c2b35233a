"""One namespace with a Dynamo vLLM worker, a ``trtllm-serve`` pod and a vLLM production-stack
release (two engines and the LMCache server they reach by ``lm://``), as
``tests/manifests/production-stack.yaml`` renders the chart: ``detect`` names each; ``clear --all``
empties the engines' GPU tier, leaves the others with their reason and remedy, and the store row
of the cache server says that only its restart empties it (exit 1); ``--fallback restart``
restarts the Dynamo and TensorRT-LLM owners but holds the cache server's restart until
``--shared-stores`` (its restart empties it for every engine of the release); with that consent
every row is emptied or replaced and the run exits 0."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.simctl import SimCluster

from .conftest import require_sandbox

NS = "stack"
MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "production-stack.yaml"
ENGINES = "vllm-llama3-deployment-vllm"
SERVER = "vllm-deployment-cache-server"
SERVICE = "lm://vllm-cache-server-service:80"
STORE_LEFT = f"the lm:// protocol has no delete; restart deployment/{SERVER} empties it"


@pytest.fixture
def cluster() -> Iterator[SimCluster]:
    require_sandbox()
    with SimCluster([MANIFEST], namespace=NS, ready_delay=0.05) as c:
        c.wait_ready()
        yield c


def _rows(rows: list[dict[str, Any]], kind: str) -> dict[str, list[dict[str, Any]]]:
    """Rows of ``kind`` by the owner's name."""
    got: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["kind"] == kind:
            got.setdefault(r["owner"].split("/", 1)[1], []).append(r)
    return got


def _store(rows: list[dict[str, Any]]) -> dict[str, Any]:
    (store,) = [r for r in rows if r["kind"] == "StoreClear" and r["store"] == "lmcache-server"]
    assert store["address"] == SERVICE and store["resolved"] == f"service {NS}/vllm-cache-server-service", store
    return store


def _started(cluster: SimCluster, before: set[str], owner: str) -> list[dict[str, Any]]:
    return [p for p in cluster.live_pods() if p["name"].startswith(owner + "-") and p["name"] not in before]


def test_detect_names_each(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    got = _rows(rows, "VllmPod")
    assert [(r["engine"], r["ports"]) for r in got[ENGINES]] == [("vllm", [8000])] * 2
    assert [(r["engine"], r["ports"]) for r in got["dynamo-worker"]] == [("dynamo-vllm", [])]
    assert [(r["engine"], r["ports"]) for r in got["trtllm"]] == [("trtllm-serve", [8000])]
    assert [(r["engine"], r["ports"]) for r in got[SERVER]] == [("lmcache-server", [8000])]


def test_clear_leaves_them_and_names_the_cache_server(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 1, err
    got = _rows(rows, "CacheReset")
    for row in got[ENGINES]:  # cleared as vLLM's: the GPU tier by the API reset, lm:// by the store row
        assert (row["engine"], row["gpu"], row["shared"], row["result"]) == ("vllm", "emptied", "left", "partial"), row
    (dynamo,) = got["dynamo-worker"]
    assert (dynamo["result"], dynamo["port"]) == ("left", None)
    assert dynamo["left"] == [{"tier": "every tier",
                               "reason": "NVIDIA Dynamo (vLLM worker) is not supported by this version: its cache "
                                         "was not emptied",
                               "remedy": "--fallback restart, or kubectl rollout restart deployment/dynamo-worker"}]
    (trt,) = got["trtllm"]
    assert (trt["result"], trt["port"]) == ("left", 8000)
    assert "TensorRT-LLM (trtllm-serve) is not supported by this version" in trt["left"][0]["reason"]
    assert trt["left"][0]["remedy"] == "--fallback restart, or kubectl rollout restart deployment/trtllm"
    (server,) = got[SERVER]
    assert server["result"] == "left" and server["shared"] == "left"
    assert server["left"][0]["remedy"].startswith("--fallback restart --shared-stores")
    store = _store(rows)
    assert store["result"] == "left" and store["message"].startswith(STORE_LEFT), store
    assert "--fallback restart --shared-stores" in store["message"]
    assert sorted(store["targeted_pods"]) == sorted(f"{NS}/{r['pod']}" for r in got[ENGINES])


def test_restart_needs_consent_for_the_cache_server(cluster: SimCluster) -> None:
    before = {p["name"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback", "restart", "--yes", timeout=180)
    assert code == 1, (err, rows)
    got = _rows(rows, "CacheReset")
    assert [r["result"] for r in got["dynamo-worker"] + got["trtllm"]] == ["replaced", "replaced"]
    (server,) = got[SERVER]
    assert server["result"] == "left" and "give --shared-stores to restart it" in server["message"], server
    assert all(f"{NS}/{ENGINES}-" in server["message"] for _ in got[ENGINES])
    store = _store(rows)
    assert store["result"] == "left" and store["message"].startswith(STORE_LEFT), store
    assert "--shared-stores" in store["message"]
    assert not _started(cluster, before, SERVER)  # not restarted
    assert all(r["shared"] == "left" and r["result"] == "partial" for r in got[ENGINES])

    before = {p["name"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback", "restart", "--shared-stores", "--yes",
                                       timeout=180)
    assert code == 0, (err, rows)
    got = _rows(rows, "CacheReset")
    assert [r["result"] for r in got[SERVER] + got["dynamo-worker"] + got["trtllm"]] == ["replaced"] * 3
    assert all(r["result"] == "emptied" and r["shared"] == "emptied by clear-store" for r in got[ENGINES]), got
    store = _store(rows)
    assert store["result"] == "replaced" and "restarted by this run" in store["message"], store
    new = _started(cluster, before, SERVER)
    assert new and all(p["ready"] for p in new)
