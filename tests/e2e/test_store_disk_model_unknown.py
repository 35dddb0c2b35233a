"""LMCache's local disk on a PVC when a writer's model name is not what the spec says literally
(a ConfigMap key): the target's per-model deletion is ``left`` with the reason, and an untargeted
writer of an unknown model counts as possibly writing the target's model's files (consent)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simctl import SimCluster

from .conftest import require_sandbox
from .test_store_disk import NS, PVC_ENV, PVC_MOUNT, PVC_VOL, _name, _plant, _pt, _vllm

pytestmark = pytest.mark.stores

FROM_CM = ", {name: MODEL, valueFrom: {configMapKeyRef: {name: cfg, key: model}}}"
MANIFEST = "---\n".join([
    f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n",
    textwrap.dedent(f"""\
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: cfg, namespace: {NS}}}
        data: {{model: org/model-l}}
        """),
    _vllm("u-tgt", "'$(MODEL)'", env=PVC_ENV + FROM_CM, mounts=PVC_MOUNT, volumes=PVC_VOL),
    _vllm("l-lit", "org/model-l", env=PVC_ENV, mounts=PVC_MOUNT, volumes=PVC_VOL),
    _vllm("x-other", "org/model-x", env=PVC_ENV, mounts=PVC_MOUNT, volumes=PVC_VOL),
])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    require_sandbox()
    path = tmp_path_factory.mktemp("disku") / "m.yaml"
    path.write_text(MANIFEST)
    with SimCluster([path], namespace=NS, ready_delay=0.05) as sim:
        sim.wait_ready()
        yield sim


def _root(sim: SimCluster) -> Path:
    root = sim.tmp / "state" / "pvc" / NS / "kv-disk"
    for f in root.glob("*"):
        f.unlink()
    _plant(root, "org/model-l", 5)
    _plant(root, "org/model-x", 3)
    return root


def test_an_unknown_model_leaves_the_per_model_disk_deletion(cluster: SimCluster) -> None:
    root = _root(cluster)
    code, rows, err = cluster.run_json("clear-store", "u-tgt", "--shared-stores", "--yes")
    assert code == 1, (rows, err)
    [row] = [r for r in rows if r["store"] == "lmcache-disk"]
    assert row["result"] == "left" and row["scope"] == "model (unknown)", row
    assert "the model this pod serves is not known" in row["message"] and \
        "MODEL comes from ConfigMap cfg" in row["message"], row
    assert _pt(root, "org/model-l") == 5 and _pt(root, "org/model-x") == 3


def test_an_untargeted_writer_of_an_unknown_model_needs_consent(cluster: SimCluster) -> None:
    root = _root(cluster)
    code, rows, err = cluster.run_json("clear-store", "l-lit", "--yes")
    assert code == 1, (rows, err)
    [row] = [r for r in rows if r["store"] == "lmcache-disk"]
    assert row["result"] == "left" and "--shared-stores" in row["message"], row
    assert _name(cluster, "u-tgt") in row["message"], row
    assert _pt(root, "org/model-l") == 5
