"""LMCache's local disk emptied by ``clear-store`` (and ``clear``) through ``pods/exec``, with
files planted in the pods' volumes as LMCache 0.5.6 names them
(``<dir>/<model with / -> ->@<world>@<worker>@<hash>@<dtype>.pt``):

* a PVC that pods of two models and a second pod of the same model mount: per-model deletion,
  the other model's files kept, the same model's untargeted writer asks for ``--shared-stores``;
* an emptyDir named by the ``LMCACHE_CONFIG_FILE`` YAML in a ConfigMap: every ``*.pt`` goes,
  other files stay; ``--dry-run`` counts and deletes nothing;
* a directory on no volume: refused, with what would empty it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.simctl import ROOT, SimCluster

from .conftest import require_sandbox

pytestmark = pytest.mark.stores

NS = "dk"


def _vllm(name: str, model: str, *, env: str, mounts: str, volumes: str) -> str:
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
                env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}{env}]
                ports: [{{name: http, containerPort: 8000}}]
                volumeMounts: {mounts}
              volumes: {volumes}
        """)


PVC_ENV = ", {name: LMCACHE_LOCAL_DISK, value: 'file:///mnt/lmc/'}, {name: LMCACHE_MAX_LOCAL_DISK_SIZE, value: '5'}"
PVC_MOUNT = "[{name: disk, mountPath: /mnt/lmc}]"
PVC_VOL = "[{name: disk, persistentVolumeClaim: {claimName: kv-disk}}]"

MANIFEST = "---\n".join([
    f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n",
    textwrap.dedent(f"""\
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: lmc-cfg, namespace: {NS}}}
        data:
          lmcache.yaml: |
            chunk_size: 256
            local_cpu: true
            local_disk: "file:///cache/lmc"
            max_local_disk_size: 2.0
        """),
    _vllm("l-one", "org/model-l", env=PVC_ENV, mounts=PVC_MOUNT, volumes=PVC_VOL),
    _vllm("l-same", "org/model-l", env=PVC_ENV, mounts=PVC_MOUNT, volumes=PVC_VOL),
    _vllm("l-other", "org/model-x", env=PVC_ENV, mounts=PVC_MOUNT, volumes=PVC_VOL),
    _vllm("l-cfg", "org/model-c", env=", {name: LMCACHE_CONFIG_FILE, value: /etc/lmcache/lmcache.yaml}",
          mounts="[{name: cfg, mountPath: /etc/lmcache}, {name: cache, mountPath: /cache}]",
          volumes="[{name: cfg, configMap: {name: lmc-cfg}}, {name: cache, emptyDir: {}}]"),
    _vllm("l-layer", "org/model-z",
          env=", {name: LMCACHE_LOCAL_DISK, value: /srv/lmc}, {name: LMCACHE_MAX_LOCAL_DISK_SIZE, value: '1'}",
          mounts="[]", volumes="[]"),
    _vllm("l-off", "org/model-o",
          env=", {name: LMCACHE_LOCAL_DISK, value: /mnt/lmc}, {name: LMCACHE_MAX_LOCAL_DISK_SIZE, value: '0'}",
          mounts=PVC_MOUNT, volumes=PVC_VOL),
])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    require_sandbox()
    path = tmp_path_factory.mktemp("disk") / "m.yaml"
    path.write_text(MANIFEST)
    with SimCluster([path], namespace=NS, ready_delay=0.05) as sim:
        sim.wait_ready()
        yield sim


def _pod(sim: SimCluster, prefix: str) -> dict[str, Any]:
    return next(p for p in sim.live_pods() if p["name"].startswith(prefix))


def _name(sim: SimCluster, prefix: str) -> str:
    return f"{NS}/{_pod(sim, prefix)['name']}"


def _pvc(sim: SimCluster) -> Path:
    return sim.tmp / "state" / "pvc" / NS / "kv-disk"


def _empty_dir(sim: SimCluster, prefix: str, volume: str) -> Path:
    pod = _pod(sim, prefix)
    return sim.tmp / "state" / "pods" / f"{NS}_{pod['name']}_{pod['uid'][:8]}" / "volumes" / volume


def _plant(where: Path, model: str, count: int) -> None:
    where.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (where / f"{model.replace('/', '-')}@1@0@{i:016x}@bfloat16.pt").write_bytes(b"\0" * 512)


def _pt(where: Path, model: str | None = None) -> int:
    start = f"{model.replace('/', '-')}@" if model else ""
    return sum(1 for f in where.iterdir() if f.name.endswith(".pt") and f.name.startswith(start))


def _reset_pvc(sim: SimCluster) -> Path:
    root = _pvc(sim)
    for f in root.glob("*"):
        f.unlink()
    _plant(root, "org/model-l", 5)
    _plant(root, "org/model-x", 3)
    (root / "README").write_text("not LMCache's")
    return root


def test_shared_pvc_is_emptied_per_model_with_consent(cluster: SimCluster) -> None:
    root = _reset_pvc(cluster)
    same, other = _name(cluster, "l-same"), _name(cluster, "l-other")
    # l-same writes org/model-l's files to the same PVC: its deletion needs the flag
    code, rows, err = cluster.run_json("clear-store", "l-one", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert (row["store"], row["scope"], row["result"]) == ("lmcache-disk", "model org/model-l", "left"), row
    assert row["resolved"] == "volume pvc/kv-disk" and row["address"] == "file:///mnt/lmc/"
    assert "--shared-stores" in row["message"] and same in row["message"], row
    assert set(row["other_pods"]) >= {same, other}
    assert _pt(root, "org/model-l") == 5
    # dry run with the flag: counted, nothing deleted
    code, rows, err = cluster.run_json("clear-store", "l-one", "--shared-stores", "--dry-run")
    assert code == 0 and (rows[0]["result"], rows[0]["before"], rows[0]["after"]) == ("planned", 5, 5), (rows, err)
    assert rows[0]["method"] == "delete org-model-l@*.pt under /mnt/lmc (pods/exec)"
    assert _pt(root, "org/model-l") == 5
    # with the flag: only org/model-l's files go; model-x's and the other file stay
    code, rows, err = cluster.run_json("clear-store", "l-one", "--shared-stores", "--yes")
    assert code == 0, (rows, err)
    [row] = rows
    assert (row["before"], row["after"], row["result"], row["unit"]) == (5, 0, "emptied", "files"), row
    assert row["via"].startswith(f"{_name(cluster, 'l-one')} (exec")
    assert "4 other file(s) under /mnt/lmc kept" in row["message"], row
    assert _pt(root, "org/model-l") == 0 and _pt(root, "org/model-x") == 3 and (root / "README").exists()


def test_every_writer_targeted_still_keeps_to_the_targets_models(cluster: SimCluster) -> None:
    root = _reset_pvc(cluster)
    # l-other (org/model-x) and l-off (no disk tier: max_local_disk_size 0) still mount the PVC
    code, rows, err = cluster.run_json("clear-store", "l-one", "l-same", "--yes")
    assert code == 0, (rows, err)
    [row] = rows
    assert row["scope"] == "model org/model-l" and (row["before"], row["after"]) == (5, 0), row
    assert sorted(row["targeted_pods"]) == sorted([_name(cluster, "l-one"), _name(cluster, "l-same")])
    assert _pt(root, "org/model-x") == 3


def test_config_file_disk_on_an_emptydir_and_clear_chains_it(cluster: SimCluster) -> None:
    cache = _empty_dir(cluster, "l-cfg", "cache") / "lmc"
    _plant(cache, "org/model-c", 4)
    _plant(cache, "org/stale-model", 2)
    (cache / "notes.txt").write_text("kept")
    code, rows, err = cluster.run_json("clear-store", "l-cfg", "--dry-run")
    assert code == 0, (rows, err)
    [row] = rows
    assert (row["scope"], row["result"], row["before"], row["after"]) == ("store", "planned", 6, 6), row
    assert row["address"] == "file:///cache/lmc" and row["method"] == "delete *.pt under /cache/lmc (pods/exec)"
    assert _pt(cache) == 6
    # no pod outside the targets mounts the emptyDir: every *.pt goes, through clear's store step
    code, rows, err = cluster.run_json("clear", "l-cfg", "--yes")
    disk = [r for r in rows if r["kind"] == "StoreClear"]
    assert len(disk) == 1 and (disk[0]["before"], disk[0]["after"], disk[0]["result"]) == (6, 0, "emptied"), (rows, err)
    assert _pt(cache) == 0 and (cache / "notes.txt").read_text() == "kept"
    # the second time there is nothing: 0 files, emptied
    code, rows, err = cluster.run_json("clear-store", "l-cfg", "--yes")
    assert code == 0 and (rows[0]["before"], rows[0]["after"]) == (0, 0), (rows, err)


def test_a_disk_named_only_in_the_config_file_is_in_detect_and_the_pod_row(cluster: SimCluster) -> None:
    """The spec names no local_disk: only the ConfigMap's LMCACHE_CONFIG_FILE does. detect and the
    CacheReset row's FS cell show it, as the store step clears it."""
    code, rows, err = cluster.run_json("detect")
    assert code == 0, (rows, err)
    [found] = [r for r in rows if r["pod"].startswith("l-cfg")]
    assert found["fs_roots"] == ["/cache/lmc"], found
    assert "fs" in found["tiers"], found
    assert not any("were not read" in n for n in found["notes"]), found
    table = cluster.run("detect", "-o", "wide")
    assert "/cache/lmc" in next(line for line in table.stdout.splitlines() if line.startswith("l-cfg")), table.stdout
    cache = _empty_dir(cluster, "l-cfg", "cache") / "lmc"
    _plant(cache, "org/model-c", 2)
    code, rows, err = cluster.run_json("clear", "l-cfg", "--yes")
    assert code == 1, (rows, err)  # LMCache's in-process CPU tier is left (only a restart empties it)
    [row] = [r for r in rows if r["kind"] == "CacheReset"]
    assert row["fs"] == "emptied by clear-store" and [x["tier"] for x in row["left"]] == ["cpu"], row
    assert "the running server reports" not in row["message"], row
    assert _pt(cache) == 0


def test_disk_on_no_volume_is_refused_with_what_would_empty_it(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear-store", "l-layer", "--yes")
    assert code == 1, (rows, err)
    [row] = rows
    assert row["result"] == "left" and row["resolved"] == "no volume", row
    assert "on no volume of the pod" in row["message"] and "kubectl kvreset restart" in row["message"], row


def test_a_disabled_disk_tier_gives_no_row(cluster: SimCluster) -> None:
    code, rows, err = cluster.run_json("clear-store", "l-off", "--yes")
    assert code == 0 and rows == [], (rows, err)
    assert "no shared store" in err


PYTHON_CLEAR = """
import json, sys
from kubectl_kvreset.job import Cancel, ClearOptions, Targets, clear, connect, prepare, select_targets

kube = connect(namespace=sys.argv[1])
scope = select_targets(kube, Targets(owners=(sys.argv[2],)))
preview = prepare(scope, ClearOptions()).preview()
done = clear(scope, ClearOptions(), Cancel())
print(json.dumps({"preview": json.loads(preview.render("json")), "rows": json.loads(done.report.render("json")),
                  "exit_code": int(done.exit_code), "click_loaded": "click" in sys.modules}, default=str))
"""


def test_the_python_api_runs_the_store_step_as_clear_does(cluster: SimCluster) -> None:
    """``kubectl_kvreset.job.clear`` is the whole job: the LMCache disk that ``clear``'s store
    step empties is emptied from Python too, with the same rows; ``prepare().preview()`` is the
    dry run's rows."""
    cache = _empty_dir(cluster, "l-cfg", "cache") / "lmc"
    _plant(cache, "org/model-c", 3)
    code, dry, err = cluster.run_json("clear", "l-cfg", "--dry-run")
    assert code == 0, (dry, err)
    done = subprocess.run([sys.executable, "-c", PYTHON_CLEAR, NS, "deployment/l-cfg"], env=cluster.env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    got = json.loads(done.stdout)
    assert got["click_loaded"] is False
    assert got["preview"] == dry
    stores = [r for r in got["rows"] if r["kind"] == "StoreClear"]
    assert len(stores) == 1 and (stores[0]["before"], stores[0]["after"], stores[0]["result"]) == (3, 0, "emptied"), got
    assert _pt(cache) == 0
    # the command line, on the same (now empty) disk, gives the same rows
    _plant(cache, "org/model-c", 3)
    code, rows, err = cluster.run_json("clear", "l-cfg", "--yes")
    # exit 1 both ways: LMCache's in-process CPU tier is left (no reset_cache in its connectors)
    assert code == got["exit_code"] == 1, (rows, err)
    keys = ("kind", "pod", "result", "store", "before", "after", "message")
    assert [[r.get(k) for k in keys] for r in rows] == [[r.get(k) for k in keys] for r in got["rows"]]
