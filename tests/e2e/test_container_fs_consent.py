"""``clear --container a`` on a pod whose two vLLM containers write FS tiers on one PVC: the
container left out uses the volume like any other pod, so without ``--shared-stores`` the model
it also serves keeps its directories, and another model it serves there is kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.simctl import SimCluster

from .test_clear_fs import MODEL, MODEL_B, NS, SHARED_ROOT, deployment, model_files, write_manifest


def two_container_deployment(second_model: str) -> dict[str, Any]:
    """Deployment ``pair``: container ``a`` serves MODEL on 8000, ``b`` ``second_model`` on 8001,
    both with an FS tier at SHARED_ROOT on the PVC."""
    doc = deployment("pair", SHARED_ROOT)
    spec = doc["spec"]["template"]["spec"]
    first = spec["containers"][0]
    first["name"] = "a"
    second = {**first, "name": "b",
              "command": [second_model if x == MODEL else ("8001" if x == "8000" else x) for x in first["command"]]}
    spec["containers"].append(second)
    return doc


def start(sim: Callable[..., SimCluster], tmp_path: Path, second_model: str) -> SimCluster:
    return sim([write_manifest(tmp_path, [two_container_deployment(second_model)])], namespace=NS,
               dev_mode="on", vllm_version="0.26.0")


def test_the_left_out_container_serving_the_same_model_keeps_its_directories(
        sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, MODEL)
    (before,) = cluster.live_pods()
    files = model_files(before, MODEL)
    assert files, before["fs_tier_files"]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--container", "a")
    assert code != 0, (err, rows)
    (after,) = cluster.live_pods()
    assert model_files(after, MODEL) == files  # container b still serves them
    row = next(r for r in rows if r["container"] == "a")
    assert row["fs"] != "emptied" and row["result"] != "emptied", row
    text = " ".join(str(v) for v in row.values()) + err
    assert "container b" in text and "--shared-stores" in text, (row, err)
    # the dry run says it too
    done = cluster.run("clear", "-n", NS, "--all", "--container", "a", "--dry-run")
    assert "container b" in done.stdout + done.stderr, (done.stdout, done.stderr)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--container", "a", "--shared-stores")
    (after,) = cluster.live_pods()
    assert model_files(after, MODEL) == [], (err, rows)


@pytest.mark.parametrize("verb_args", [(), ("--whole-tier",)], ids=["scoped", "whole-tier"])
def test_the_left_out_container_serving_another_model_keeps_it_without_whole_tier(
        sim: Callable[..., SimCluster], tmp_path: Path, verb_args: tuple[str, ...]) -> None:
    cluster = start(sim, tmp_path, MODEL_B)
    (before,) = cluster.live_pods()
    b_files = model_files(before, MODEL_B)
    assert b_files and model_files(before, MODEL), before["fs_tier_files"]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--container", "a", *verb_args)
    assert code == 0, (err, rows)
    (after,) = cluster.live_pods()
    assert model_files(after, MODEL) == []
    assert model_files(after, MODEL_B) == ([] if verb_args else b_files)
