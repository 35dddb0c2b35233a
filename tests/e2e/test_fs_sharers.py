"""clear-fs and clear on a PVC that another Deployment also uses, through the built CLI: a
target whose model is not known deletes nothing (the other model's files stay), and a pod that
mounts the PVC with ``subPathExpr`` is a sharer, so only the target's model's files go."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.simctl import SimCluster

from .test_clear_fs import MODEL, MODEL_B, NS, SHARED_ROOT, by_owner, deployment, model_files, write_manifest


def no_model_target() -> dict[str, Any]:
    """Deployment ``tgt``: ``vllm serve`` with no model and a ``--config`` file on an emptyDir,
    so the model cannot be read from the spec."""
    doc = deployment("tgt", SHARED_ROOT)
    spec = doc["spec"]["template"]["spec"]
    c = spec["containers"][0]
    c["command"] = [a for a in c["command"] if a != MODEL] + ["--config", "/etc/vcfg/v.yaml"]
    c["volumeMounts"].append({"name": "vcfg", "mountPath": "/etc/vcfg"})
    spec["volumes"].append({"name": "vcfg", "emptyDir": {}})
    return doc


@pytest.mark.parametrize("verb", ["clear-fs", "clear"])
def test_a_target_with_no_known_model_on_a_shared_pvc_deletes_nothing(sim: Callable[..., SimCluster],
                                                                        tmp_path: Path, verb: str) -> None:
    docs = [no_model_target(), deployment("model-b", SHARED_ROOT, model=MODEL_B)]
    # dev mode off: with it on, clear reads the model from the running server's /server_info
    # and deletes that model's directories only (test_env_shell_model.py covers that case)
    cluster = sim([write_manifest(tmp_path, docs)], namespace=NS, dev_mode="off", vllm_version="0.26.0")
    before = by_owner(cluster)
    files = sorted(before["model-b"]["fs_tier_files"])
    assert model_files(before["model-b"], MODEL_B) and files
    code, rows, err = cluster.run_json(verb, "-n", NS, "deployment/tgt")
    assert code == 1, (err, rows)
    after = by_owner(cluster)
    assert sorted(after["model-b"]["fs_tier_files"]) == files  # nothing of the shared PVC was deleted
    (row,) = rows
    text = row["message"] if verb == "clear-fs" else " ".join(str(v) for v in row.values()) + err
    assert "the model this pod serves is not known" in text and "--whole-tier" in text, (row, err)
    if verb == "clear-fs":
        assert row["result"] == "refused" and row["files_after"] is None
    else:
        assert row["fs"] != "emptied" and row["result"] != "emptied", row


@pytest.mark.parametrize("verb", ["clear-fs", "clear"])
def test_a_subpathexpr_sharer_keeps_its_files(sim: Callable[..., SimCluster], tmp_path: Path, verb: str) -> None:
    other = deployment("model-b", SHARED_ROOT, model=MODEL_B)
    c = other["spec"]["template"]["spec"]["containers"][0]
    c["env"] = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    c["volumeMounts"][0]["subPathExpr"] = "$(POD_NAME)"
    cluster = sim([write_manifest(tmp_path, [deployment("model-a", SHARED_ROOT), other])], namespace=NS,
                  dev_mode="on", vllm_version="0.26.0")
    before = by_owner(cluster)
    b_files = model_files(before["model-a"], MODEL_B)
    assert b_files and model_files(before["model-a"], MODEL), before["model-a"]["fs_tier_files"]
    code, rows, err = cluster.run_json(verb, "-n", NS, "deployment/model-a")
    assert code == 0, (err, rows)
    after = by_owner(cluster)
    assert model_files(after["model-a"], MODEL) == []
    assert model_files(after["model-a"], MODEL_B) == b_files
    (row,) = rows
    assert before["model-b"]["name"] in row["message"], row


def on_claim(doc: dict[str, Any], claim: str) -> dict[str, Any]:
    doc["spec"]["template"]["spec"]["volumes"][0] = {"name": "kv", "persistentVolumeClaim": {"claimName": claim}}
    return doc


def pv_and_claim(pv: str, claim: str, source: dict[str, Any]) -> list[dict[str, Any]]:
    """A PersistentVolume with ``source`` (``{"nfs": {...}}``) and a claim bound to it."""
    return [{"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
             "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteMany"], **source,
                      "claimRef": {"namespace": NS, "name": claim}}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": NS},
             "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Ti"}},
                      "volumeName": pv}}]


@pytest.mark.parametrize("source", [{"nfs": {"server": "10.0.0.9", "path": "/exports/kv"}},
                                    {"hostPath": {"path": "/srv/shared-kv"}}], ids=["nfs", "hostPath"])
def test_two_claims_on_one_backing_storage_are_one_volume(sim: Callable[..., SimCluster], tmp_path: Path,
                                                          source: dict[str, Any]) -> None:
    docs = [*pv_and_claim("pv-a", "kv-a", source), *pv_and_claim("pv-b", "kv-b", source),
            on_claim(deployment("model-a", SHARED_ROOT), "kv-a"),
            on_claim(deployment("model-b", SHARED_ROOT, model=MODEL_B), "kv-b")]
    cluster = sim([write_manifest(tmp_path, docs)], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    before = by_owner(cluster)
    b_files = model_files(before["model-a"], MODEL_B)
    assert b_files, before["model-a"]["fs_tier_files"]  # the simulator gives both claims one directory
    code, rows, err = cluster.run_json("clear-fs", "-n", NS, "deployment/model-a")
    assert code == 0, (err, rows)
    after = by_owner(cluster)
    assert model_files(after["model-a"], MODEL) == [] and model_files(after["model-a"], MODEL_B) == b_files
    (row,) = rows
    assert row["model_only"] and before["model-b"]["name"] in row["other_pods"][0], row


def test_an_unreadable_persistentvolume_of_a_readwritemany_claim_is_said_and_counts_as_shared(
        sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    from .test_rbac_role import USER, role_documents

    source = {"nfs": {"server": "10.0.0.9", "path": "/exports/kv"}}
    docs = [*pv_and_claim("pv-a", "kv-a", source), *pv_and_claim("pv-b", "kv-b", source),
            on_claim(deployment("model-a", SHARED_ROOT), "kv-a"),
            on_claim(deployment("model-b", SHARED_ROOT, model=MODEL_B), "kv-b")]
    # alice has the Role of rbac/: namespaced, so `get persistentvolumes` is refused (403)
    scenario = {"users": [{"name": USER}], "rbac": role_documents()}
    cluster = sim([write_manifest(tmp_path, docs)], namespace=NS, dev_mode="on", vllm_version="0.26.0",
                  scenario=scenario)
    b_files = model_files(by_owner(cluster)["model-a"], MODEL_B)
    assert b_files
    a_files = model_files(by_owner(cluster)["model-a"], MODEL)
    assert a_files
    done = cluster.run("clear-fs", "-n", NS, "deployment/model-a", "--context", f"sim-{USER}", "-o", "json")
    # pods of the other claims may serve model-a's model there: its directories need consent
    assert done.returncode == 1, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["result"] == "left" and row["held_models"] == [MODEL], row
    assert "the PersistentVolume pv-a of pvc/kv-a cannot be read" in row["message"], row
    assert "persistentvolumes" in row["message"] and row["model_only"], row
    assert "--shared-stores" in row["message"], row
    assert any("ReadWriteMany" in o for o in row["other_pods"]), row
    assert model_files(by_owner(cluster)["model-a"], MODEL_B) == b_files
    assert model_files(by_owner(cluster)["model-a"], MODEL) == a_files
    done = cluster.run("clear-fs", "-n", NS, "deployment/model-a", "--shared-stores", "--context", f"sim-{USER}",
                       "-o", "json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["result"] == "emptied" and row["models"] == [MODEL], row
    assert model_files(by_owner(cluster)["model-a"], MODEL_B) == b_files


@pytest.mark.parametrize("sources", [
    # one Service named by its FQDN and by its short name
    ({"nfs": {"server": "nfs.storage.svc.cluster.local", "path": "/exports/kv"}},
     {"nfs": {"server": "nfs.storage", "path": "/exports/kv/"}}),
    # csi-driver-nfs: a unique volumeHandle per PersistentVolume, one share
    ({"csi": {"driver": "nfs.csi.k8s.io", "volumeHandle": "kv-a-unique-id",
              "volumeAttributes": {"server": "nfs-server.default.svc.cluster.local", "share": "/exports/kv"}}},
     {"csi": {"driver": "nfs.csi.k8s.io", "volumeHandle": "kv-b-unique-id",
              "volumeAttributes": {"server": "nfs-server.default.svc.cluster.local", "share": "/exports/kv"}}}),
], ids=["nfs-server-names", "csi-driver-nfs"])
def test_claims_on_one_share_under_other_names_keep_the_other_pods_files(
        sim: Callable[..., SimCluster], tmp_path: Path, sources: tuple[dict[str, Any], dict[str, Any]]) -> None:
    docs = [*pv_and_claim("pv-kv-a", "kv-a", sources[0]), *pv_and_claim("pv-kv-b", "kv-b", sources[1]),
            on_claim(deployment("model-a", SHARED_ROOT), "kv-a"),
            on_claim(deployment("model-b", SHARED_ROOT, model=MODEL_B), "kv-b")]
    cluster = sim([write_manifest(tmp_path, docs)], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    before = by_owner(cluster)
    b_files = model_files(before["model-a"], MODEL_B)
    assert b_files, before["model-a"]["fs_tier_files"]  # the simulator gives both claims one directory
    code, rows, err = cluster.run_json("clear-fs", "-n", NS, "deployment/model-a")
    assert code == 0, (err, rows)
    after = by_owner(cluster)
    assert model_files(after["model-a"], MODEL) == [] and model_files(after["model-a"], MODEL_B) == b_files
    (row,) = rows
    assert row["model_only"] and before["model-b"]["name"] in row["other_pods"][0], row
