"""clear-fs against the simulator: deletion through pods/exec in each pod's sandbox."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.manifests import build
from tests.simctl import SimCluster

from .conftest import fixture_file

NS = "llmd"
MODEL = "Qwen/Qwen3-0.6B"
CANARY = Path("/tmp/kvreset-canary")

def clear_fs(cluster: SimCluster, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    """Run the built CLI's ``clear-fs ARGS -o json``."""
    return cluster.run_json("clear-fs", *args)


def by_owner(cluster: SimCluster) -> dict[str, dict[str, Any]]:
    """Live pods keyed by their owner's name (one pod per Deployment in these tests)."""
    return {p["owner"]["name"]: p for p in cluster.live_pods()}


def deployment(name: str, root: str | None, *, model: str = MODEL) -> dict[str, Any]:
    """A Deployment serving ``model`` with a CPU + FS tier rooted at ``root``, the PVC ``kv-cache``
    at /mnt/files-storage and a Memory emptyDir at /dev/shm (as llm-d's tiered guide mounts them).
    The command is an argv list, so no shell in the pod ever reads the root."""
    tier: dict[str, Any] = {"type": "fs"}
    if root is not None:
        tier["root_dir"] = root
    ktc = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
           "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 30,
                                         "block_size": 256, "secondary_tiers": [tier]}}
    container = {
        "name": "vllm", "image": "vllm/vllm-openai:v0.26.0",
        "command": ["vllm", "serve", model, "--port", "8000", "--kv-transfer-config", json.dumps(ktc)],
        "volumeMounts": [{"name": "kv", "mountPath": "/mnt/files-storage"},
                         {"name": "shm", "mountPath": "/dev/shm"}],
    }
    return build.deployment(name, [container], volumes=[build.pvc_volume("kv", "kv-cache"),
                                                        {"name": "shm", "emptyDir": {"medium": "Memory"}}])


def write_manifest(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_tiered_fixture_empties_the_pvc_once_and_keeps_shm(sim: Callable[..., SimCluster]) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="on")
    before = cluster.live_pods()
    assert len(before) == 2 and all(p["fs_tier_files"] for p in before) and all(p["shm_files"] for p in before)
    execs_before = sum(n for k, n in cluster.state()["api_requests"].items() if "pods/exec" in k)
    code, rows, err = clear_fs(cluster, "-n", NS, "--all")
    assert code == 0, (err, rows)
    assert len(rows) == 1, rows
    (row,) = rows
    assert row["kind"] == "FsTierClear" and row["result"] == "emptied"
    assert row["volume"] == "pvc/llm-d-kv-cache-storage" and row["root"] == "/mnt/files-storage"
    assert sorted(row["pods"]) == sorted(p["name"] for p in before)
    assert row["files_before"] == len(before[0]["fs_tier_files"]) and row["bytes_before"] > 0
    assert row["files_after"] == 0 and row["bytes_after"] == 0 and row["other_pods"] == []
    execs = sum(n for k, n in cluster.state()["api_requests"].items() if "pods/exec" in k)
    assert execs - execs_before == 1  # one deletion for the shared volume, not one per pod
    after = {p["name"]: p for p in cluster.live_pods()}
    for pod in before:
        assert after[pod["name"]]["fs_tier_files"] == []
        assert after[pod["name"]]["shm_files"] == pod["shm_files"]


def test_dry_run_changes_nothing(sim: Callable[..., SimCluster]) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="on")
    before = {p["name"]: p["fs_tier_files"] for p in cluster.live_pods()}
    code, rows, err = clear_fs(cluster, "-n", NS, "--all", "--dry-run")
    assert code == 0, err
    assert [r["result"] for r in rows] == ["planned"] and rows[0]["files_before"] is None
    assert {p["name"]: p["fs_tier_files"] for p in cluster.live_pods()} == before


def test_hostile_roots_delete_nothing_outside_the_tier(sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    refused = {"empty": "", "slash": "/", "relative": "relative/dir", "dotdot": "/mnt/../etc", "shm": "/dev/shm"}
    odd = {"canary": "/mnt/files-storage/$(touch /tmp/kvreset-canary)",
           # canaries a shell would leave on storage that outlives the exec (the pod's /dev/shm, the PVC)
           "canary-shm": "/mnt/files-storage/$(touch /dev/shm/kvreset-canary)",
           "canary-pvc": "/mnt/files-storage/x`touch /mnt/files-storage/kvreset-canary`",
           "quotes": "/mnt/files-storage/it's \"quoted\" `x`",
           "spaces": "/mnt/files-storage/with  spaces ; rm -rf /",
           "newline": "/mnt/files-storage/new\nline"}
    docs = [deployment(f"bad-{k}", v) for k, v in refused.items()]
    docs += [deployment(f"odd-{k}", v) for k, v in odd.items()]
    docs.append(deployment("keep", "/mnt/files-storage/keep"))
    if CANARY.exists():
        pytest.skip(f"{CANARY} exists before the test; remove it")
    cluster = sim([write_manifest(tmp_path, docs)], namespace=NS, dev_mode="on")
    before = by_owner(cluster)
    assert before["keep"]["fs_tier_files"] and all(before[f"odd-{k}"]["fs_tier_files"] for k in odd)
    owners = [f"deployment/bad-{k}" for k in refused] + [f"deployment/odd-{k}" for k in odd]
    code, rows, err = clear_fs(cluster, "-n", NS, *owners)
    assert code == 1, err  # refusals leave tiers full
    by_root = {r["root"]: r for r in rows}
    for name in refused:
        row = next(r for r in rows if before[f"bad-{name}"]["name"] in r["pods"])
        assert row["result"] == "refused" and row["message"], (name, row)
        assert row["files_before"] is None
    assert "empty" in next(r for r in rows if before["bad-empty"]["name"] in r["pods"])["message"]
    assert "writable layer" not in by_root["/dev/shm"]["message"] and "vllm_offload" in by_root["/dev/shm"]["message"]
    for root in odd.values():
        row = by_root[root.rstrip("/")]  # the trailing slash is normalised away
        assert row["result"] == "emptied", row
        assert row["files_before"] > 0 and row["files_after"] == 0
        assert row["other_pods"] == [before["keep"]["name"]]  # keep mounts the whole claim
    assert "outside the targets" in err
    after = by_owner(cluster)
    for name in odd:  # only vLLM's run records (config.json) are kept by the per-model deletion
        assert [f for f in after[f"odd-{name}"]["fs_tier_files"] if not f.endswith("/config.json")] == [], name
    assert after["keep"]["fs_tier_files"] == before["keep"]["fs_tier_files"]
    for owner, pod in before.items():
        assert after[owner]["shm_files"] == pod["shm_files"], owner
    for name in refused:  # a refused root deleted nothing
        assert after[f"bad-{name}"]["fs_tier_files"] == before[f"bad-{name}"]["fs_tier_files"], name
    assert not CANARY.exists()
    # every pod's /dev/shm and every PVC live under the simulator's state dir
    assert not list(cluster.tmp.rglob("kvreset-canary"))


def test_model_only_keeps_another_models_directories(sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    docs = [deployment("qwen", "/mnt/files-storage"),
            deployment("llama", "/mnt/files-storage", model="meta-llama/Llama-3.2-1B")]
    cluster = sim([write_manifest(tmp_path, docs)], namespace=NS, dev_mode="on")
    before = by_owner(cluster)
    files = before["qwen"]["fs_tier_files"]
    llama = [f for f in files if "/meta-llama_Llama-3.2-1B_" in f]
    qwen = [f for f in files if "/Qwen_Qwen3-0.6B_" in f]
    assert llama and qwen and len(llama) + len(qwen) == len(files)
    code, rows, err = clear_fs(cluster, "-n", NS, "deployment/qwen", "--model-only")
    assert code == 0, (err, rows)
    (row,) = rows
    assert row["result"] == "emptied" and row["model_only"] and row["models"] == ["Qwen/Qwen3-0.6B"]
    assert row["files_after"] == 0
    assert row["other_files"] == len(llama) and row["other_pods"] == [before["llama"]["name"]]
    records = [f for f in qwen if f.endswith("/config.json")]
    assert len(records) == 1 and row["files_before"] == len(qwen) - 1
    assert sorted(by_owner(cluster)["qwen"]["fs_tier_files"]) == sorted(llama + records)


def test_table_output_and_missing_targets(sim: Callable[..., SimCluster]) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="on")
    done = cluster.run("clear-fs", "-n", NS, "--all", "-o", "wide")
    assert done.returncode == 0, done.stderr
    header, line = done.stdout.splitlines()
    assert header.split()[:4] == ["VOLUME", "ROOT", "PODS", "POD"]
    assert "pvc/llm-d-kv-cache-storage" in line and "emptied" in line
    bare = cluster.run("clear-fs", "-n", NS)
    assert bare.returncode == 2 and "--all" in bare.stderr


MODEL_B = "org/model-b"
SHARED_ROOT = "/mnt/files-storage/kv"


def model_files(pod: dict[str, Any], model: str) -> list[str]:
    """The FS-tier files of ``model``'s directories (``<model>_<hash12>[_r<N>]``) a pod sees, but
    vLLM's run record (``config.json``), which a per-model deletion keeps."""
    prefix = SHARED_ROOT + "/" + model.replace("/", "_") + "_"
    return [f for f in pod["fs_tier_files"] if f.startswith(prefix) and not f.endswith("/config.json")]


def two_models_on_one_pvc(sim: Callable[..., SimCluster], tmp_path: Path) -> SimCluster:
    docs = [deployment("model-a", SHARED_ROOT), deployment("model-b", SHARED_ROOT, model=MODEL_B)]
    return sim([write_manifest(tmp_path, docs)], namespace=NS, dev_mode="on", vllm_version="0.26.0")


@pytest.mark.parametrize("verb", ["clear-fs", "clear"])
def test_two_models_on_one_pvc_only_the_targets_model_is_deleted(sim: Callable[..., SimCluster], tmp_path: Path,
                                                                  verb: str) -> None:
    cluster = two_models_on_one_pvc(sim, tmp_path)
    before = by_owner(cluster)
    b_files = model_files(before["model-b"], MODEL_B)
    assert b_files and model_files(before["model-a"], MODEL)
    code, rows, err = cluster.run_json(verb, "-n", NS, "deployment/model-a")
    assert code == 0, (err, rows)
    after = by_owner(cluster)
    assert model_files(after["model-a"], MODEL) == []
    assert model_files(after["model-b"], MODEL_B) == b_files  # every file of model B is still there
    (row,) = rows
    b_pod = before["model-b"]["name"]
    text = row["message"]
    assert "only the directories of Qwen/Qwen3-0.6B (Qwen_Qwen3-0.6B_* by config.json)" in text, text
    assert "were deleted" in text, text
    assert b_pod in text and "kept" in text, text
    if verb == "clear-fs":
        assert row["result"] == "emptied" and row["model_only"] and \
            row["other_files"] == len(b_files) + 1  # + its record
    else:
        assert row["result"] == "emptied" and row["fs"] == "emptied" and row["left"] == []
    assert "were deleted too" not in err and b_pod in err


@pytest.mark.parametrize("verb", ["clear-fs", "clear"])
def test_two_models_on_one_pvc_whole_tier_deletes_both(sim: Callable[..., SimCluster], tmp_path: Path,
                                                       verb: str) -> None:
    cluster = two_models_on_one_pvc(sim, tmp_path)
    b_pod = by_owner(cluster)["model-b"]["name"]
    if verb == "clear":
        code, plan_rows, err = cluster.run_json(verb, "-n", NS, "deployment/model-a", "--whole-tier", "--dry-run")
        assert code == 0 and any("--whole-tier" in s for s in plan_rows[0]["steps"]), plan_rows
    code, rows, err = cluster.run_json(verb, "-n", NS, "deployment/model-a", "--whole-tier")
    assert code == 0, (err, rows)
    after = by_owner(cluster)
    assert after["model-b"]["fs_tier_files"] == [] and after["model-a"]["fs_tier_files"] == []
    (row,) = rows
    assert "every entry under /mnt/files-storage/kv was deleted, theirs included" in row["message"], row
    assert b_pod in row["message"]


def test_whole_tier_and_model_only_together_is_a_usage_error(sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    cluster = two_models_on_one_pvc(sim, tmp_path)
    done = cluster.run("clear-fs", "-n", NS, "deployment/model-a", "--whole-tier", "--model-only")
    assert done.returncode == 2 and "give one of them" in done.stderr
    assert all(p["fs_tier_files"] for p in cluster.live_pods())
