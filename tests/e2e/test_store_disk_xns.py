"""A hostPath volume shared by pods of two namespaces on one node: its identity is the node's
directory, so pods of other namespaces count as other users of an LMCache local disk
(``clear-store``) and of an FS tier (``clear-fs``, ``clear``): only the targets' models' files
are deleted; a pod of another namespace that serves the same model there keeps its files
without ``--shared-stores``, and so do the pods of namespaces a user cannot list (they may).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.simctl import SimCluster

from .test_clear_fs import deployment as fs_deployment
from .test_rbac_role import ROLE_FILE
from .test_store_disk import _plant, _pt, _vllm

pytestmark = pytest.mark.stores

USER = "alice"
DISK_ENV = ", {name: LMCACHE_LOCAL_DISK, value: 'file:///var/lmc/'}, {name: LMCACHE_MAX_LOCAL_DISK_SIZE, value: '5'}"
DISK_MOUNT = "[{name: disk, mountPath: /var/lmc}]"
DISK_VOL = "[{name: disk, hostPath: {path: /srv/lmc}}]"
FS_ROOT = "/mnt/files-storage/kv"


def _in(ns: str, doc: str) -> str:
    return doc.replace("namespace: dk}", f"namespace: {ns}}}")


def _rbac(ns: str) -> list[dict[str, Any]]:
    """The repository's least-privilege Role and RoleBinding for ``ns`` and user alice."""
    text = ROLE_FILE.read_text().replace("NAMESPACE", ns).replace("USER", USER)
    return [d for d in yaml.safe_load_all(text) if d]


def _start(sim: Callable[..., SimCluster], tmp_path: Path, docs: str, **kwargs: Any) -> SimCluster:
    path = tmp_path / "m.yaml"
    path.write_text(docs)
    return sim([path], namespace="ta", scenario={"users": [{"name": USER}], "rbac": _rbac("ta")}, **kwargs)


def _name(cluster: SimCluster, ns: str, prefix: str) -> str:
    pod = next(p for p in cluster.live_pods() if p["namespace"] == ns and p["name"].startswith(prefix))
    return f"{ns}/{pod['name']}"


def _disk_cluster(sim: Callable[..., SimCluster], tmp_path: Path,
                  tb_model: str = "org/model-k") -> tuple[SimCluster, Path]:
    docs = "---\n".join([
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ta}\n",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: tb}\n",
        _in("ta", _vllm("hd-one", "org/model-h", env=DISK_ENV, mounts=DISK_MOUNT, volumes=DISK_VOL)),
        _in("tb", _vllm("hd-two", tb_model, env=DISK_ENV, mounts=DISK_MOUNT, volumes=DISK_VOL)),
    ])
    cluster = _start(sim, tmp_path, docs)
    # one simulated node: both pods' hostPath /srv/lmc is the same directory
    assert {p["namespace"] for p in cluster.live_pods()} == {"ta", "tb"}
    root = cluster.tmp / "state" / "hostpath" / "srv" / "lmc"
    return cluster, root


def _replant(root: Path) -> None:
    for f in root.glob("*"):
        f.unlink()
    _plant(root, "org/model-h", 4)
    _plant(root, "org/model-k", 3)


def test_store_disk_on_a_hostpath_other_namespaces_use_is_per_model(sim: Callable[..., SimCluster],
                                                                     tmp_path: Path) -> None:
    cluster, root = _disk_cluster(sim, tmp_path)
    _replant(root)
    other = _name(cluster, "tb", "hd-two")
    code, rows, err = cluster.run_json("clear-store", "-n", "ta", "hd-one", "--yes")
    assert code == 0, (rows, err)
    [row] = rows
    assert (row["store"], row["scope"], row["result"]) == ("lmcache-disk", "model org/model-h", "emptied"), row
    assert other in row["other_pods"], row
    assert (row["before"], row["after"]) == (4, 0), row
    assert _pt(root, "org/model-h") == 0 and _pt(root, "org/model-k") == 3
    assert row["kept_pods"] == [f"{other} (org/model-k)"], row
    # a user who may list only ta: tb's pods are unknown and may write org/model-h's files, so
    # even the per-model deletion needs --shared-stores
    _replant(root)
    done = cluster.run("clear-store", "-n", "ta", "hd-one", "--yes", "-o", "json", "--context", f"sim-{USER}")
    assert done.returncode == 1, (done.stdout, done.stderr)
    [row] = json.loads(done.stdout)
    assert row["scope"] == "model org/model-h" and row["result"] == "left", row
    assert row["other_pods"] == ["pods of namespaces that cannot be listed"], row
    assert "--shared-stores" in row["message"] and "cannot be listed" in row["message"], row
    assert "cannot be listed (not permitted)" in done.stderr, done.stderr
    assert _pt(root, "org/model-h") == 4 and _pt(root, "org/model-k") == 3
    done = cluster.run("clear-store", "-n", "ta", "hd-one", "--shared-stores", "--yes", "-o", "json",
                       "--context", f"sim-{USER}")
    assert done.returncode == 0, (done.stdout, done.stderr)
    [row] = json.loads(done.stdout)
    assert row["scope"] == "model org/model-h" and row["result"] == "emptied", row
    assert _pt(root, "org/model-h") == 0 and _pt(root, "org/model-k") == 3


def test_store_disk_same_model_written_from_another_namespace_needs_consent(sim: Callable[..., SimCluster],
                                                                         tmp_path: Path) -> None:
    cluster, root = _disk_cluster(sim, tmp_path, tb_model="org/model-h")
    _replant(root)
    other = _name(cluster, "tb", "hd-two")
    code, rows, err = cluster.run_json("clear-store", "-n", "ta", "hd-one", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert (row["scope"], row["result"]) == ("model org/model-h", "left"), row
    assert "--shared-stores" in row["message"] and other in row["message"], row
    assert _pt(root, "org/model-h") == 4 and _pt(root, "org/model-k") == 3


def _fs_cluster(sim: Callable[..., SimCluster], tmp_path: Path, tb_model: str = "org/model-k") -> SimCluster:
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                                  for ns in ("ta", "tb")]
    for ns, name, model in (("ta", "fs-one", "org/model-h"), ("tb", "fs-two", tb_model)):
        dep = copy.deepcopy(fs_deployment(name, FS_ROOT, model=model))
        dep["metadata"]["namespace"] = ns
        dep["spec"]["template"]["spec"]["volumes"][0] = {"name": "kv", "hostPath": {"path": "/srv/fs"}}
        docs.append(dep)
    return _start(sim, tmp_path, yaml.safe_dump_all(docs), dev_mode="on", vllm_version="0.26.0")


def _files(cluster: SimCluster, ns: str, model: str) -> list[str]:
    pod = next(p for p in cluster.live_pods() if p["namespace"] == ns)
    prefix = FS_ROOT + "/" + model.replace("/", "_") + "_"
    # vLLM's run record (config.json) of a model directory is kept by a per-model deletion
    return [f for f in pod["fs_tier_files"] if f.startswith(prefix) and not f.endswith("/config.json")]


@pytest.mark.parametrize("verb", ["clear-fs", "clear"])
def test_fs_tier_on_a_hostpath_keeps_the_other_namespaces_models(sim: Callable[..., SimCluster], tmp_path: Path,
                                                                 verb: str) -> None:
    cluster = _fs_cluster(sim, tmp_path)
    kept = _files(cluster, "tb", "org/model-k")
    assert kept and _files(cluster, "ta", "org/model-h")
    other = _name(cluster, "tb", "fs-two")
    code, rows, err = cluster.run_json(verb, "-n", "ta", "deployment/fs-one")
    assert code == 0, (rows, err)
    [row] = rows
    assert _files(cluster, "ta", "org/model-h") == [] and _files(cluster, "tb", "org/model-k") == kept
    if verb == "clear-fs":
        assert row["model_only"] and other in row["other_pods"], row
    assert other in row["message"] if verb == "clear-fs" else other in err, (row, err)


def test_fs_tier_on_a_hostpath_when_other_namespaces_cannot_be_listed(sim: Callable[..., SimCluster],
                                                                      tmp_path: Path) -> None:
    cluster = _fs_cluster(sim, tmp_path)
    kept = _files(cluster, "tb", "org/model-k")
    mine = _files(cluster, "ta", "org/model-h")
    done = cluster.run("clear-fs", "-n", "ta", "deployment/fs-one", "-o", "json", "--context", f"sim-{USER}")
    # pods of the namespaces alice cannot list may serve org/model-h there: its directories stay
    assert done.returncode == 1, (done.stdout, done.stderr)
    [row] = json.loads(done.stdout)
    assert row["model_only"] and row["other_pods"] == ["pods of namespaces that cannot be listed"], row
    assert row["result"] == "left" and row["held_models"] == ["org/model-h"], row
    assert "--shared-stores" in row["message"], row
    assert "cannot be listed (not permitted)" in done.stderr, done.stderr
    assert _files(cluster, "ta", "org/model-h") == mine and _files(cluster, "tb", "org/model-k") == kept
    done = cluster.run("clear-fs", "-n", "ta", "deployment/fs-one", "--shared-stores", "-o", "json",
                       "--context", f"sim-{USER}")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert _files(cluster, "ta", "org/model-h") == [] and _files(cluster, "tb", "org/model-k") == kept


def test_fs_tier_same_model_in_another_namespace_is_kept_without_the_flag(sim: Callable[..., SimCluster],
                                                                         tmp_path: Path) -> None:
    """Model A's Deployment in ta and a Deployment of the same model in tb on one hostPath: their
    ``<model>_<hash>`` directories are one. ``clear deployment/fs-one`` keeps them without
    ``--shared-stores`` (the dry run, its table and the prompt say who else uses the volume and
    what is kept), and deletes them with it."""
    from .test_confirm import run_on_tty

    cluster = _fs_cluster(sim, tmp_path, tb_model="org/model-h")
    theirs = _files(cluster, "tb", "org/model-h")
    assert theirs and _files(cluster, "ta", "org/model-h") == theirs  # one directory on the node
    other = _name(cluster, "tb", "fs-two")

    code, rows, err = cluster.run_json("clear", "-n", "ta", "deployment/fs-one", "--dry-run")
    [fs] = [r for r in rows if r["kind"] == "FsTierClear"]
    assert (fs["result"], fs["held_models"], fs["models"]) == ("left", ["org/model-h"], []), fs
    assert fs["users"] == [f"{other} (org/model-h)"] and fs["other_pods"] == [other], fs
    assert other in fs["message"] and "--shared-stores" in fs["message"], fs
    assert "org/model-h's directories are kept" in fs["message"], fs
    table = cluster.run("clear", "-n", "ta", "deployment/fs-one", "--dry-run", "-o", "wide")
    assert other in table.stdout and "org/model-h's directories are kept" in table.stdout, table.stdout
    assert _files(cluster, "tb", "org/model-h") == theirs

    asked = run_on_tty(cluster, ["clear", "-n", "ta", "deployment/fs-one"], "n\n")
    assert asked.returncode == 1 and "nothing changed" in asked.stderr, asked.stderr
    assert other in asked.stderr and "org/model-h's directories are kept" in asked.stderr, asked.stderr
    assert _files(cluster, "tb", "org/model-h") == theirs

    code, rows, err = cluster.run_json("clear", "-n", "ta", "deployment/fs-one", "--yes")
    assert code == 1, (rows, err)
    [row] = [r for r in rows if r["kind"] == "CacheReset"]
    assert row["fs"] != "emptied" and row["result"] == "partial", row
    [left] = [x for x in row["left"] if x["tier"].startswith("fs")]
    assert other in left["reason"] and "--shared-stores" in left["remedy"], row
    assert _files(cluster, "tb", "org/model-h") == theirs  # tb's directories survive

    code, rows, err = cluster.run_json("clear", "-n", "ta", "deployment/fs-one", "--shared-stores", "--yes")
    assert code == 0, (rows, err)
    [row] = [r for r in rows if r["kind"] == "CacheReset"]
    assert row["fs"] == "emptied", row
    assert _files(cluster, "tb", "org/model-h") == []


def test_clear_fs_keeps_a_same_model_sharer_in_another_namespace_and_names_it(sim: Callable[..., SimCluster],
                                                                             tmp_path: Path) -> None:
    cluster = _fs_cluster(sim, tmp_path, tb_model="org/model-h")
    theirs = _files(cluster, "tb", "org/model-h")
    other = _name(cluster, "tb", "fs-two")
    code, rows, err = cluster.run_json("clear-fs", "-n", "ta", "deployment/fs-one")
    assert code == 1, (rows, err)
    [row] = rows
    assert row["result"] == "left" and row["files_before"] is None and other in row["message"], row
    assert _files(cluster, "tb", "org/model-h") == theirs
    # --whole-tier deletes every entry of the root: theirs too
    code, rows, err = cluster.run_json("clear-fs", "-n", "ta", "deployment/fs-one", "--whole-tier")
    assert code == 0, (rows, err)
    assert _files(cluster, "tb", "org/model-h") == []
