"""A pod with two vLLM containers (two models side by side): each is found and reset, a row
per container and port; ``--container`` narrows the targets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.simctl import SimCluster

NS = "llm"


def two_model_pod() -> dict[str, Any]:
    """A Deployment whose pods run vLLM twice: ``model-a`` on 8000 and ``model-b`` on 8001."""
    labels = {"app": "pair"}

    def server(name: str, model: str, port: int) -> dict[str, Any]:
        return {"name": name, "image": "vllm/vllm-openai:v0.26.0",
                "command": ["vllm", "serve", model, "--port", str(port)]}

    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "pair"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels,
                         "annotations": {"kubectl.kubernetes.io/default-container": "model-b"}},
            "spec": {"containers": [server("model-a", "org/model-a", 8000),
                                    server("model-b", "org/model-b", 8001)]}}},
    }


def start(sim: Callable[..., SimCluster], tmp_path: Path, scenario: dict[str, Any] | None = None) -> SimCluster:
    path = tmp_path / "pair.yaml"
    path.write_text(yaml.safe_dump_all([two_model_pod()]))
    return sim([path], namespace=NS, dev_mode="on", scenario=scenario)


def blocks(cluster: SimCluster) -> dict[str, int]:
    (pod,) = cluster.live_pods()
    return {port: st["prefix_cache_blocks"] for port, st in pod["ports"].items() if st.get("role") == "vllm"}


def test_both_containers_reset_two_rows(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path)
    assert all(n > 0 for n in blocks(cluster).values()) and set(blocks(cluster)) == {"8000", "8001"}
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, (err, rows)
    assert sorted((r["container"], r["port"], r["result"]) for r in rows) == [
        ("model-a", 8000, "emptied"), ("model-b", 8001, "emptied")]
    assert blocks(cluster) == {"8000": 0, "8001": 0}
    done = cluster.run("clear", "-n", NS, "--all", "-o", "wide")
    assert done.returncode == 0 and "CONTAINER" in done.stdout and "model-b" in done.stdout


def test_one_failing_container_fails_the_run_and_its_row_names_it(sim, tmp_path: Path) -> None:
    scenario = {"pods": [{"match": {"container": "model-b"}, "busy": 1000}]}
    cluster = start(sim, tmp_path, scenario)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 1, (err, rows)
    by_container = {r["container"]: r for r in rows}
    assert by_container["model-a"]["result"] == "emptied"
    assert by_container["model-b"]["result"] == "busy" and by_container["model-b"]["port"] == 8001
    assert [lt["tier"] for lt in by_container["model-b"]["left"]] == ["gpu"]
    assert blocks(cluster)["8000"] == 0 and blocks(cluster)["8001"] > 0


def test_container_flag_narrows_and_the_other_row_says_skipped(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--container", "model-a")
    assert code == 0, (err, rows)
    by_container = {r["container"]: r for r in rows}
    assert by_container["model-a"]["result"] == "emptied"
    skipped = by_container["model-b"]
    assert skipped["result"] == "skipped" and "--container model-a" in skipped["message"] and skipped["steps"] == []
    assert blocks(cluster)["8000"] == 0 and blocks(cluster)["8001"] > 0


def test_unknown_container_is_refused_naming_the_ones_there(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path)
    done = cluster.run("clear", "-n", NS, "--all", "--container", "nope")
    assert done.returncode == 1, done.stderr
    assert "--container nope" in done.stderr and "model-a, model-b" in done.stderr
    assert all(n > 0 for n in blocks(cluster).values())
