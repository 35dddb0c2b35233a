"""The per-model deletion of LMCache's local disk on a shared PVC when a pod outside the
targets serves a model whose files have the same names (``org-m`` for ``org/m``: LMCache's
``local_disk_backend.py::_key_to_path`` makes ``/`` ``-``) and where it writes cannot be told
(``local_disk`` built from a ConfigMap or Secret value, an ``LMCACHE_CONFIG_FILE`` that is not
there), or a model named like ``org/m@1@0@ab@half`` whose tagged files read as ``org/m``'s:
the row is ``left``, names that pod and ``--shared-stores``, and deletes nothing. A
look-alike that cannot collide (``org/m2``) does not stop the deletion, which takes the files
whose tag values hold ``@``, ``%`` and spaces (``lmcache/utils.py::CacheEngineKey.to_string``)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simctl import SimCluster

from .conftest import require_sandbox

pytestmark = pytest.mark.stores

DISK_ENV = ", {name: LMCACHE_LOCAL_DISK, value: 'file:///mnt/lmc/'}, {name: LMCACHE_MAX_LOCAL_DISK_SIZE, value: '5'}"
FROM_DIR = ", {name: LMCACHE_LOCAL_DISK, value: 'file://$(DISKDIR)/'}, {name: LMCACHE_MAX_LOCAL_DISK_SIZE, value: '5'}"
#: namespace -> (look-alike model, its env): where each writes cannot be told, except in "dl-ok"
CASES = {
    "dl-cm": ("org-m", ", {name: DISKDIR, valueFrom: {configMapKeyRef: {name: dirs, key: disk}}}" + FROM_DIR),
    "dl-sec": ("org-m", ", {name: DISKDIR, valueFrom: {secretKeyRef: {name: dirs, key: disk}}}" + FROM_DIR),
    "dl-cfg": ("org-m", ", {name: LMCACHE_CONFIG_FILE, value: /etc/lmcache/missing.yaml}"),
    # its directory is known, but its tagged files read as org/m's (lmcachekey.may_write_as)
    "dl-at": ("org/m@1@0@ab@half", DISK_ENV),
    "dl-ok": ("org/m2", ", {name: DISKDIR, valueFrom: {configMapKeyRef: {name: dirs, key: disk}}}" + FROM_DIR),
}


def _vllm(ns: str, name: str, model: str, env: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}, namespace: {ns}}}
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
                volumeMounts: [{{name: disk, mountPath: /mnt/lmc}}]
              volumes: [{{name: disk, persistentVolumeClaim: {{claimName: kv-disk}}}}]
        """)


def _manifest() -> str:
    docs = []
    for ns, (model, env) in CASES.items():
        docs += [f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n",
                 f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: dirs, namespace: {ns}}}\n"
                 "data: {disk: /mnt/lmc}\n",
                 f"apiVersion: v1\nkind: Secret\nmetadata: {{name: dirs, namespace: {ns}}}\n"
                 "stringData: {disk: /mnt/lmc}\n",
                 _vllm(ns, "t", "org/m", DISK_ENV), _vllm(ns, "o", model, env)]
    return "---\n".join(docs)


#: files of org/m as LMCache 0.5.6 names them: plain, layerwise, tag values with '@', '%', spaces
MINE = ["org-m@1@0@77@bfloat16.pt", "org-m@1@0@-5@half@3.pt", "org-m@1@0@77@half@user%alice@example.com.pt",
        "org-m@2@1@ab@half@lora%a%b@who%two words.pt"]
THEIRS = ["org-m2@1@0@77@bfloat16.pt", "org-m@v2@1@0@77@half@user%x.pt"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    require_sandbox()
    path = tmp_path_factory.mktemp("disk-alike") / "m.yaml"
    path.write_text(_manifest())
    with SimCluster([path], namespace="dl-cm", ready_delay=0.05) as sim:
        sim.wait_ready()
        yield sim


def _plant(sim: SimCluster, ns: str) -> Path:
    root = sim.tmp / "state" / "pvc" / ns / "kv-disk"
    root.mkdir(parents=True, exist_ok=True)
    for f in root.glob("*"):
        f.unlink()
    for name in MINE + THEIRS:
        (root / name).write_bytes(b"\0" * 64)
    return root


def _other(sim: SimCluster, ns: str) -> str:
    return next(f"{ns}/{p['name']}" for p in sim.live_pods() if p["namespace"] == ns and p["name"].startswith("o-"))


@pytest.mark.parametrize("ns", ["dl-cm", "dl-sec", "dl-cfg", "dl-at"])
def test_a_look_alike_writer_whose_files_may_be_named_alike_needs_consent(cluster: SimCluster, ns: str) -> None:
    root = _plant(cluster, ns)
    code, rows, err = cluster.run_json("clear-store", "-n", ns, "t", "--yes")
    assert code == 1, (rows, err)
    [row] = [r for r in rows if r["store"] == "lmcache-disk"]
    assert (row["scope"], row["result"]) == ("model org/m", "left"), row
    assert "--shared-stores" in row["message"] and _other(cluster, ns) in row["message"], row
    assert sorted(p.name for p in root.iterdir()) == sorted(MINE + THEIRS)
    code, rows, err = cluster.run_json("clear-store", "-n", ns, "t", "--shared-stores", "--yes")
    assert code == 0, (rows, err)
    [row] = [r for r in rows if r["store"] == "lmcache-disk"]
    assert (row["result"], row["before"], row["after"]) == ("emptied", len(MINE), 0), row
    assert sorted(p.name for p in root.iterdir()) == sorted(THEIRS)


def test_a_writer_that_cannot_collide_does_not_stop_the_deletion(cluster: SimCluster) -> None:
    root = _plant(cluster, "dl-ok")
    code, rows, err = cluster.run_json("clear-store", "-n", "dl-ok", "t", "--yes")
    assert code == 0, (rows, err)
    [row] = [r for r in rows if r["store"] == "lmcache-disk"]
    assert (row["scope"], row["result"], row["before"], row["after"]) == ("model org/m", "emptied", len(MINE), 0), row
    assert sorted(p.name for p in root.iterdir()) == sorted(THEIRS)
