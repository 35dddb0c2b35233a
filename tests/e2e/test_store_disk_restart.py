"""LMCache's local disk when ``clear --fallback restart`` replaces the pods first: the store
step runs its deletion in the new pod (the PVC outlives the old one), and a disk on the old
pod's emptyDir is reported ``replaced`` (it went with the pod), never ``failed`` for the pod
that is gone nor ``emptied`` without a count."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simctl import SimCluster

from .conftest import require_sandbox

pytestmark = pytest.mark.stores

NS = "dkr"


def _vllm(name: str, model: str, *, env: str, mounts: str, volumes: str) -> str:
    # no VLLM_SERVER_DEV_MODE: the reset answers 404, so --fallback restart applies
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}, llm-d.ai/inference-serving: "true"}}}}
            spec:
              containers:
              - name: vllm
                image: vllm/vllm-openai:v0.32.0
                command: [vllm, serve, {model}]
                args: [--port, "8000", --kv-transfer-config,
                       '{{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}}']
                env: [{{name: LMCACHE_MAX_LOCAL_DISK_SIZE, value: '5'}}{env}]
                ports: [{{name: http, containerPort: 8000}}]
                volumeMounts: {mounts}
              volumes: {volumes}
        """)


MANIFEST = "---\n".join([
    f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n",
    _vllm("r-pvc", "org/model-r", env=", {name: LMCACHE_LOCAL_DISK, value: 'file:///mnt/lmc/'}",
          mounts="[{name: disk, mountPath: /mnt/lmc}]",
          volumes="[{name: disk, persistentVolumeClaim: {claimName: kv-disk-r}}]"),
    _vllm("r-tmp", "org/model-t", env=", {name: LMCACHE_LOCAL_DISK, value: /cache/lmc}",
          mounts="[{name: cache, mountPath: /cache}]", volumes="[{name: cache, emptyDir: {}}]"),
])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    require_sandbox()
    path = tmp_path_factory.mktemp("diskr") / "m.yaml"
    path.write_text(MANIFEST)
    with SimCluster([path], namespace=NS, ready_delay=0.05) as sim:
        sim.wait_ready()
        yield sim


def _plant(where: Path, model: str, count: int) -> None:
    where.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (where / f"{model.replace('/', '-')}@1@0@{i:016x}@bfloat16.pt").write_bytes(b"\0" * 512)


def test_restart_then_the_pvc_disk_is_emptied_in_the_new_pod(cluster: SimCluster) -> None:
    root = cluster.tmp / "state" / "pvc" / NS / "kv-disk-r"
    _plant(root, "org/model-r", 4)
    old = next(p["name"] for p in cluster.live_pods() if p["name"].startswith("r-pvc"))
    code, rows, err = cluster.run_json("clear", "-l", "app=r-pvc", "--fallback", "restart", "--yes")
    [reset] = [r for r in rows if r["kind"] == "CacheReset"]
    [disk] = [r for r in rows if r["kind"] == "StoreClear"]
    assert reset["result"] == "emptied" and "restarted" in reset["message"], (rows, err)
    assert reset["fs"] == "emptied by clear-store" and reset["left"] == [], reset
    assert (disk["before"], disk["after"], disk["result"]) == (4, 0, "emptied"), (disk, err)
    assert old not in disk["via"] and disk["via"].startswith(f"{NS}/r-pvc-"), disk
    assert not list(root.glob("*.pt"))
    assert code == 0, (rows, err)


def test_restart_then_an_emptydir_disk_is_replaced_not_failed(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear", "-l", "app=r-tmp", "--fallback", "restart", "--yes")
    [disk] = [r for r in rows if r["kind"] == "StoreClear"]
    assert disk["result"] == "replaced", (disk, err)
    assert "emptyDir" in disk["message"] and "went with it" in disk["message"], disk
    assert (disk["before"], disk["after"]) == (None, None)
    [reset] = [r for r in rows if r["kind"] == "CacheReset"]
    assert reset["fs"] == "emptied by clear-store" and reset["result"] == "emptied", reset
    assert code == 0, (rows, err)
