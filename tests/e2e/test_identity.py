"""Per-model deletion by the model's identity, through the built CLI against the simulator:

* FS tier on a shared PVC: a Deployment serving ``org/attacker`` with ``--served-model-name
  org/victim``, and one serving a model named ``org_victim`` (the same directory name as
  ``org/victim``'s), never make clear-fs delete ``org/victim``'s directories; a directory named
  like the target's without vLLM's record is left, the row says why and names ``--whole-tier``;
* LMCache's local disk on a shared PVC: clearing ``org/m`` keeps the files of ``org/m@v2`` and
  ``org/m2``; a writer of ``org-m`` (the same file names) needs ``--shared-stores``.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.simctl import SimCluster

from .conftest import require_sandbox
from .test_clear_fs import deployment, write_manifest

NS = "llmd"
ROOT = "/mnt/files-storage/kv"


def fs_docs() -> list[dict[str, Any]]:
    attacker = deployment("attacker", ROOT, model="org/attacker")
    cmd = attacker["spec"]["template"]["spec"]["containers"][0]["command"]
    cmd += ["--served-model-name", "org/victim"]
    return [deployment("victim", ROOT, model="org/victim"), attacker,
            deployment("lookalike", ROOT, model="org_victim")]


def pvc(cluster: SimCluster) -> Path:
    return cluster.tmp / "state" / "pvc" / NS / "kv-cache" / "kv"


def tree(cluster: SimCluster) -> dict[str, list[str]]:
    """Files under the shared root, by the recorded model of the directory (``?`` without one)."""
    root = pvc(cluster)
    out: dict[str, list[str]] = {}
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        top = f.relative_to(root).parts[0]
        base = top.rsplit("_r", 1)[0] if "_r" in top[-4:] else top
        cfg = root / base / "config.json"
        owner = json.loads(cfg.read_text())["model_name"] if cfg.is_file() else "?"
        out.setdefault(owner, []).append(str(f.relative_to(root)))
    return out


def blocks(files: list[str]) -> list[str]:
    return [f for f in files if f.endswith(".bin")]


@pytest.fixture
def fs_cluster(sim: Callable[..., SimCluster], tmp_path: Path) -> SimCluster:
    return sim([write_manifest(tmp_path, fs_docs())], namespace=NS, dev_mode="on", vllm_version="0.26.0")


def test_served_name_and_look_alike_model_never_delete_the_victims_directories(fs_cluster: SimCluster) -> None:
    before = tree(fs_cluster)
    assert set(before) == {"org/victim", "org/attacker", "org_victim"}
    assert all(blocks(before[m]) for m in before)
    tops = {f.split("/")[0] for f in before["org/victim"] + before["org_victim"]}
    assert all(re.fullmatch(r"org_victim_[0-9a-f]{12}(_r0)?", t) for t in tops), tops  # one name, two models
    code, rows, err = fs_cluster.run_json("clear-fs", "-n", NS, "deployment/attacker")
    assert code == 0, (rows, err)
    (row,) = rows
    assert row["result"] == "emptied" and row["models"] == ["org/attacker"], row
    after = tree(fs_cluster)
    assert blocks(after["org/attacker"]) == [] and after["org/victim"] == before["org/victim"]
    assert after["org_victim"] == before["org_victim"]
    # the model named org_victim: only the directories whose record says org_victim
    code, rows, err = fs_cluster.run_json("clear-fs", "-n", NS, "deployment/lookalike")
    assert code == 0 and rows[0]["result"] == "emptied", (rows, err)
    after = tree(fs_cluster)
    assert blocks(after["org_victim"]) == [] and after["org/victim"] == before["org/victim"]
    # and the victim's own clear takes its blocks, keeping its record for the next run
    code, rows, err = fs_cluster.run_json("clear-fs", "-n", NS, "deployment/victim")
    assert code == 0 and rows[0]["result"] == "emptied", (rows, err)
    assert tree(fs_cluster)["org/victim"] == [f for f in before["org/victim"] if f.endswith("/config.json")]


def test_a_directory_without_a_record_is_left_and_whole_tier_takes_it(fs_cluster: SimCluster) -> None:
    orphan = pvc(fs_cluster) / "org_victim_0123456789ab_r0" / "abc" / "de_g0"
    orphan.mkdir(parents=True)
    (orphan / "f.bin").write_bytes(b"\0" * 64)
    before = tree(fs_cluster)
    code, rows, err = fs_cluster.run_json("clear-fs", "-n", NS, "deployment/victim")
    assert code == 1, (rows, err)
    (row,) = rows
    assert row["result"] == "left", row
    text = row["message"]
    assert "org_victim_0123456789ab_r0" in text and "config.json" in text and "--whole-tier" in text, text
    after = tree(fs_cluster)
    assert blocks(after["org/victim"]) == [] and after["?"] == before["?"]
    assert after["org_victim"] == before["org_victim"] and after["org/attacker"] == before["org/attacker"]
    done = fs_cluster.run("clear-fs", "-n", NS, "deployment/victim", "-o", "wide")
    assert done.returncode == 1 and "left" in done.stdout and "--whole-tier" in done.stdout, done.stdout
    code, rows, err = fs_cluster.run_json("clear-fs", "-n", NS, "deployment/victim", "--whole-tier")
    assert code == 0 and rows[0]["result"] == "emptied", (rows, err)
    assert tree(fs_cluster) == {}


# ----------------------------------------------------------------------------- LMCache's local disk

DNS = "dkid"


def _vllm(name: str, model: str, claim: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}, namespace: {DNS}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}, llm-d.ai/inference-serving: "true"}}}}
            spec:
              containers:
              - name: vllm
                image: vllm/vllm-openai:v0.32.0
                command: [vllm, serve, "{model}"]
                args: [--port, "8000", --kv-transfer-config,
                       '{{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}}']
                env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}, {{name: LMCACHE_LOCAL_DISK, value: /mnt/lmc}},
                      {{name: LMCACHE_MAX_LOCAL_DISK_SIZE, value: "5"}}]
                ports: [{{name: http, containerPort: 8000}}]
                volumeMounts: [{{name: disk, mountPath: /mnt/lmc}}]
              volumes: [{{name: disk, persistentVolumeClaim: {{claimName: {claim}}}}}]
        """)


DISK_MANIFEST = "---\n".join([
    f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {DNS}}}\n",
    _vllm("m-one", "org/m", "kv-m"), _vllm("m-v2", "org/m@v2", "kv-m"), _vllm("m-two", "org/m2", "kv-m"),
    _vllm("n-one", "org/n", "kv-n"), _vllm("n-dash", "org-n", "kv-n"),
])

#: File names as LMCache 0.5.6's LocalDiskBackend writes them (key with '/' -> '-', then .pt).
FILES = {
    "org/m": ["org-m@1@0@33f9bce42327706c@bfloat16.pt", "org-m@1@0@-5a@bfloat16@3.pt",
              "org-m@2@1@ab@half@user%u1.pt"],
    "org/m@v2": ["org-m@v2@1@0@33f9bce42327706c@bfloat16.pt", "org-m@v2@1@0@ab@half.pt"],
    "org/m2": ["org-m2@1@0@33f9bce42327706c@bfloat16.pt"],
}


@pytest.fixture(scope="module")
def disk_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    require_sandbox()
    path = tmp_path_factory.mktemp("diskid") / "m.yaml"
    path.write_text(DISK_MANIFEST)
    with SimCluster([path], namespace=DNS, ready_delay=0.05) as cluster:
        cluster.wait_ready()
        yield cluster


def _plant(root: Path, names: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for n in names:
        (root / n).write_bytes(b"\0" * 128)


@pytest.mark.stores
def test_disk_clear_of_org_m_keeps_org_m_at_v2_and_org_m2(disk_cluster: SimCluster) -> None:
    root = disk_cluster.tmp / "state" / "pvc" / DNS / "kv-m"
    _plant(root, [n for names in FILES.values() for n in names])
    code, rows, err = disk_cluster.run_json("clear-store", "m-one", "--yes")
    assert code == 0, (rows, err)
    [row] = rows
    assert (row["store"], row["scope"], row["result"]) == ("lmcache-disk", "model org/m", "emptied"), row
    assert (row["before"], row["after"]) == (3, 0), row
    assert sorted(p.name for p in root.iterdir()) == sorted(FILES["org/m@v2"] + FILES["org/m2"])


@pytest.mark.stores
def test_disk_clear_with_a_same_named_model_needs_the_flag(disk_cluster: SimCluster) -> None:
    root = disk_cluster.tmp / "state" / "pvc" / DNS / "kv-n"
    names = ["org-n@1@0@ab@half.pt", "org-n@1@0@cd@half.pt"]
    _plant(root, names)
    code, rows, err = disk_cluster.run_json("clear-store", "n-one", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert row["result"] == "left" and "cannot be told apart" in row["message"], row
    assert "--shared-stores" in row["message"] and "org-n" in row["message"], row
    assert sorted(p.name for p in root.iterdir()) == names
