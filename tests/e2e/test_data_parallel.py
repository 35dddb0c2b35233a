"""Data parallel inside one vLLM server (internal load balancing: several engines behind one
API port): the reset answer is engine 0's alone before vLLM 0.32.0, the AND of every engine's
from 0.32.0 (kubectl_kvreset.vllm_api.RESET_ALL_ENGINES_SINCE)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.simctl import SimCluster

NS = "llm"


def dp_deployment(name: str, dp: int, *flags: str) -> dict[str, Any]:
    """A Deployment whose one vLLM server runs ``dp`` data-parallel engines behind port 8000."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{
                "name": "vllm", "image": "vllm/vllm-openai:v0.26.0",
                "command": ["vllm", "serve", "Qwen/Qwen3-0.6B", "--port", "8000",
                            "--data-parallel-size", str(dp), *flags],
            }]}}},
    }


def start(sim: Callable[..., SimCluster], tmp_path: Path, version: str, docs: list[dict[str, Any]],
          busy_engines: dict[int, int] | None = None) -> SimCluster:
    path = tmp_path / "dp.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    scenario = {"pods": [{"busy_engines": busy_engines}]} if busy_engines else None
    return sim([path], namespace=NS, dev_mode="on", vllm_version=version, scenario=scenario)


def engines(cluster: SimCluster) -> list[dict[str, Any]]:
    (pod,) = cluster.live_pods()
    return pod["ports"]["8000"]["engines"]


@pytest.mark.parametrize("version", ["0.26.0", "0.31.0"])
def test_engine_zero_only_answer_is_unconfirmed_and_names_the_others(sim, tmp_path: Path, version: str) -> None:
    cluster = start(sim, tmp_path, version, [dp_deployment("dp", 4)], busy_engines={2: 1000})
    assert [e["prefix_cache_blocks"] > 0 for e in engines(cluster)] == [True] * 4
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 3, (err, rows)
    (row,) = rows
    assert row["result"] == "unconfirmed" and row["gpu"] == "unconfirmed", row
    assert "engines 1-3 of the 4" in row["message"] and version in row["message"], row["message"]
    assert row["left"] == [] and [u["tier"] for u in row["unconfirmed"]] == ["gpu"], row
    assert "engines 1-3" in row["unconfirmed"][0]["reason"]
    # engine 2 was busy: vLLM said success (engine 0's answer) while engine 2 stays warm
    blocks = [e["prefix_cache_blocks"] for e in engines(cluster)]
    assert blocks[0] == 0 and blocks[1] == 0 and blocks[3] == 0 and blocks[2] > 0, blocks


def test_aggregating_version_reports_the_busy_engine(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, "0.32.0", [dp_deployment("dp", 4)], busy_engines={2: 1000})
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 1, (err, rows)
    (row,) = rows
    assert row["result"] == "busy" and row["gpu"] == "not emptied", row
    assert [lt["tier"] for lt in row["left"]] == ["gpu"] and "--preempt-running" in row["left"][0]["remedy"]
    assert engines(cluster)[2]["prefix_cache_blocks"] > 0


def test_aggregating_version_with_every_engine_free_is_emptied(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, "0.32.0", [dp_deployment("dp", 4)])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, (err, rows)
    assert [r["result"] for r in rows] == ["emptied"] and rows[0]["unconfirmed"] == []
    assert [e["prefix_cache_blocks"] for e in engines(cluster)] == [0, 0, 0, 0]


def test_external_load_balancing_is_one_engine_per_server(sim, tmp_path: Path) -> None:
    # a server per DP rank (--data-parallel-external-lb): its answer is its own engine's
    cluster = start(sim, tmp_path, "0.26.0", [dp_deployment("ext", 4, "--data-parallel-external-lb")])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, (err, rows)
    assert [r["result"] for r in rows] == ["emptied"]
