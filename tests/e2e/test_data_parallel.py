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


def hidden_dp_deployment(name: str, version: str) -> dict[str, Any]:
    """Four engines whose count the spec does not show: ``--data-parallel-size $(DP_SIZE)`` with
    ``DP_SIZE`` from a ConfigMap (``envFrom``), which the kubelet expands and the pod spec does not."""
    dep = dp_deployment(name, 4)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["image"] = f"vllm/vllm-openai:v{version}"
    container["command"][-1] = "$(DP_SIZE)"
    container["envFrom"] = [{"configMapRef": {"name": "dp-env"}}]
    return dep


DP_ENV = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dp-env", "namespace": NS},
          "data": {"DP_SIZE": "4"}}


def metrics_calls(cluster: SimCluster) -> int:
    (pod,) = cluster.live_pods()
    return sum(st.get("metrics_calls", 0) for st in pod["ports"].values())


def test_engines_the_flags_hide_are_counted_from_the_metrics_engine_labels(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, "0.26.0", [DP_ENV, hidden_dp_deployment("hidden", "0.26.0")],
                    busy_engines={2: 1000})
    assert len(engines(cluster)) == 4  # what the server runs: the ConfigMap's four engines
    code, det, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    note = ("data-parallel engines behind port 8000: the serve flags give 1, the engine labels of GET /metrics "
            "show 4 (engines 0-3); the /metrics count is used")
    assert note in det[0]["notes"], det[0]["notes"]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 3, (err, rows)
    (row,) = rows
    assert row["result"] == "unconfirmed" and row["gpu"] == "unconfirmed", row
    assert ("vLLM 0.26.0 answers the reset for engine 0 only: engines 1-3 of the 4 data-parallel engines behind "
            "port 8000 (the engine labels of GET /metrics) are not confirmed") in row["message"], row["message"]
    assert note in row["message"]
    assert [u["tier"] for u in row["unconfirmed"]] == ["gpu"] and "engines 1-3" in row["unconfirmed"][0]["reason"]
    blocks = [e["prefix_cache_blocks"] for e in engines(cluster)]
    assert blocks[2] > 0 and blocks[0] == blocks[1] == blocks[3] == 0, blocks
    assert metrics_calls(cluster) == 2  # one /metrics read per command (detect, clear), for the template


def test_an_aggregating_version_needs_no_metrics_read(sim, tmp_path: Path) -> None:
    # 0.32.0 ANDs every engine's answer: the count does not change the row, so /metrics is not read
    cluster = start(sim, tmp_path, "0.32.0", [DP_ENV, hidden_dp_deployment("hidden", "0.32.0")],
                    busy_engines={2: 1000})
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 1, (err, rows)
    assert rows[0]["result"] == "busy" and rows[0]["gpu"] == "not emptied", rows[0]
    assert metrics_calls(cluster) == 0


def test_hybrid_load_balancing_names_the_node_local_ranks(sim, tmp_path: Path) -> None:
    # the second node of a hybrid deployment: ranks 2 and 3 behind this API server
    dep = dp_deployment("hybrid", 4, "--data-parallel-size-local", "2", "--data-parallel-start-rank", "2",
                        "--data-parallel-hybrid-lb")
    cluster = start(sim, tmp_path, "0.26.0", [dep])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 3, (err, rows)
    (row,) = rows
    assert row["result"] == "unconfirmed", row
    assert ("answers the reset for engine 2 only: engine 3 of the 2 data-parallel engines behind port 8000 "
            "(the engine labels of GET /metrics) are not confirmed") in row["message"], row["message"]
    assert "the serve flags give" not in row["message"]  # flags and labels agree
