"""A hostPath volume shared by pods of two namespaces on one node: its identity is the node's
directory, so pods of other namespaces count as other users of an LMCache local disk
(``clear-store``) and of an FS tier (``clear-fs``, ``clear``): only the targets' models' files
are deleted, and a user who cannot list the other namespaces gets per-model deletion too
(DESIGN §6).
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


def _disk_cluster(sim: Callable[..., SimCluster], tmp_path: Path, tb_model: str = "org/model-k") -> tuple[SimCluster, Path]:
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
    # a user who may list only ta: tb's pods are unknown, so the deletion stays per model
    _replant(root)
    done = cluster.run("clear-store", "-n", "ta", "hd-one", "--yes", "-o", "json", "--context", f"sim-{USER}")
    assert done.returncode == 0, (done.stdout, done.stderr)
    [row] = json.loads(done.stdout)
    assert row["scope"] == "model org/model-h" and row["result"] == "emptied", row
    assert row["other_pods"] == ["pods of namespaces that cannot be listed"], row
    assert "cannot be listed (not permitted)" in done.stderr, done.stderr
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


def _fs_cluster(sim: Callable[..., SimCluster], tmp_path: Path) -> SimCluster:
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                                  for ns in ("ta", "tb")]
    for ns, name, model in (("ta", "fs-one", "org/model-h"), ("tb", "fs-two", "org/model-k")):
        dep = copy.deepcopy(fs_deployment(name, FS_ROOT, model=model))
        dep["metadata"]["namespace"] = ns
        dep["spec"]["template"]["spec"]["volumes"][0] = {"name": "kv", "hostPath": {"path": "/srv/fs"}}
        docs.append(dep)
    return _start(sim, tmp_path, yaml.safe_dump_all(docs), dev_mode="on", vllm_version="0.26.0")


def _files(cluster: SimCluster, ns: str, model: str) -> list[str]:
    pod = next(p for p in cluster.live_pods() if p["namespace"] == ns)
    prefix = FS_ROOT + "/" + model.replace("/", "_") + "_"
    return [f for f in pod["fs_tier_files"] if f.startswith(prefix)]


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
    done = cluster.run("clear-fs", "-n", "ta", "deployment/fs-one", "-o", "json", "--context", f"sim-{USER}")
    assert done.returncode == 0, (done.stdout, done.stderr)
    [row] = json.loads(done.stdout)
    assert row["model_only"] and row["other_pods"] == ["pods of namespaces that cannot be listed"], row
    assert "cannot be listed (not permitted)" in done.stderr, done.stderr
    assert _files(cluster, "ta", "org/model-h") == [] and _files(cluster, "tb", "org/model-k") == kept
