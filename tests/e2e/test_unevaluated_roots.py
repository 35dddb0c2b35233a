"""Locations the plugin cannot evaluate from the pod spec, against the simulator (whose pods run
their ``bash -c`` scripts for real in a sandbox, so the FS tier lands where bash puts it):

* an FS ``root_dir`` holding ``$(hostname)`` in a script, and one built from a variable the
  spec does not hold literally: ``clear-fs`` and ``clear`` (dev mode off) say ``left`` with the
  reason and exit 1, and delete nothing;
* a root that does not exist in the pod: ``unconfirmed`` (exit 3), never ``emptied``;
* an LMCache configuration file kept in a ConfigMap's ``binaryData``: read as the kubelet
  mounts it;
* a root holding a newline: the ``detect -o wide`` table keeps one line per pod, JSON keeps the
  real value.
"""

from __future__ import annotations

import base64
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.manifests import build
from tests.simctl import SimCluster

NS = "loc"
MODEL = "Qwen/Qwen3-0.6B"


def _ktc(root: str) -> dict[str, Any]:
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 30,
                                          "block_size": 256, "secondary_tiers": [{"type": "fs", "root_dir": root}]}}


def _deployment(name: str, container: dict[str, Any]) -> dict[str, Any]:
    container = {"name": "vllm", "image": "vllm/vllm-openai:v0.26.0",
                 "volumeMounts": [{"name": "kv", "mountPath": "/mnt/files-storage"}], **container}
    return build.deployment(name, [container], namespace=NS, volumes=[build.pvc_volume("kv", f"{name}-kv")])


def _script_deployment(name: str, root: str, env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Deployment whose ``bash -c`` script writes the kv-transfer-config in double quotes, so
    bash expands what ``root`` holds (``$(hostname)``, ``$VAR``) before vLLM reads it."""
    body = json.dumps(_ktc(root)).replace('"', '\\"')
    script = f'exec vllm serve {MODEL} --port 8000 --kv-transfer-config "{body}"'
    return _deployment(name, {"command": ["bash", "-c", script], "env": env or []})


def _write(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, *docs]))
    return path


def _pod(cluster: SimCluster, owner: str) -> dict[str, Any]:
    return next(p for p in cluster.live_pods() if p["owner"]["name"] == owner)


def test_hostname_and_unset_variable_roots_are_left_not_emptied(sim: Callable[..., SimCluster],
                                                                 tmp_path: Path) -> None:
    docs = [
        _script_deployment("host", "/mnt/files-storage/$(hostname)"),
        # the variable comes from a ConfigMap key: the kubelet sets it, the pod spec does not hold it
        _script_deployment("unset", "/mnt/files-storage/$KV_SHARD",
                           env=[{"name": "KV_SHARD", "valueFrom": {"configMapKeyRef": {"name": "kv-shard",
                                                                                      "key": "shard"}}}]),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kv-shard", "namespace": NS},
         "data": {"shard": "shard-a"}},
    ]
    cluster = sim([_write(tmp_path, docs)], namespace=NS, dev_mode="off")
    host, unset = _pod(cluster, "host"), _pod(cluster, "unset")
    # the real roots, where bash put them (the output of hostname in the pod's sandbox), are full
    real = {f.split("/")[3] for f in host["fs_tier_files"]}
    assert len(real) == 1 and "$" not in real.pop() and len(host["fs_tier_files"]) >= 5, host["fs_tier_files"]
    assert unset["fs_tier_files"] and all(f.startswith("/mnt/files-storage/shard-a/")
                                          for f in unset["fs_tier_files"]), unset["fs_tier_files"]
    before = {p["name"]: p["fs_tier_files"] for p in (host, unset)}

    code, rows, err = cluster.run_json("detect", "-n", NS)
    notes = {r["pod"]: " ".join(r["notes"]) for r in rows}
    assert "command substitution $(hostname) not evaluated" in notes[host["name"]], rows
    assert "cannot be evaluated" in notes[unset["name"]] and "KV_SHARD" in notes[unset["name"]], rows

    # dry run: the plan already says left
    code, rows, err = cluster.run_json("clear-fs", "-n", NS, "--all", "--dry-run")
    assert code == 1 and sorted(r["result"] for r in rows) == ["left", "left"], (rows, err)

    code, rows, err = cluster.run_json("clear-fs", "-n", NS, "--all")
    assert code == 1, (rows, err)  # a tier not looked at is left full: 1, not 3 (README, exit codes)
    by_pod = {r["pods"][0]: r for r in rows}
    assert len(rows) == 2, rows
    row = by_pod[host["name"]]
    assert row["result"] == "left" and row["root"] == "/mnt/files-storage/$(hostname)", row
    assert row["files_before"] is None and row["files_after"] is None and row["exec_pod"] is None, row
    assert "command substitution $(hostname) is not evaluated" in row["message"], row
    assert "nothing was deleted" in row["message"] and "literal path" in row["message"], row
    row = by_pod[unset["name"]]
    assert row["result"] == "left" and "KV_SHARD comes from ConfigMap kv-shard key shard" in row["message"], row
    assert {p["name"]: p["fs_tier_files"] for p in cluster.live_pods()} == before

    # clear with dev mode off: the FS tier is left with the reason, never emptied
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--yes")
    assert code == 1, (rows, err)
    resets = {r["pod"]: r for r in rows if r["kind"] == "CacheReset"}
    for name, needle in ((host["name"], "$(hostname)"), (unset["name"], "KV_SHARD")):
        reset = resets[name]
        assert reset["fs"] == "left" and reset["result"] != "emptied", reset
        fs_left = [entry for entry in reset["left"] if entry["tier"].startswith("fs")]
        assert len(fs_left) == 1 and needle in fs_left[0]["reason"], reset
        assert "literal path" in fs_left[0]["remedy"], reset
        assert "clear-fs" not in reset["steps"], reset
    assert {p["name"]: p["fs_tier_files"] for p in cluster.live_pods()} == before


def test_a_root_that_does_not_exist_is_unconfirmed(sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    # the server writes below /mnt/files-storage/real; the spec names /mnt/files-storage/named,
    # which does not exist on the volume (as when a launcher script rewrites the path)
    doc = _deployment("gone", {"command": ["vllm", "serve", MODEL, "--port", "8000",
                                           "--kv-transfer-config", json.dumps(_ktc("/mnt/files-storage/named"))]})
    cluster = sim([_write(tmp_path, [doc])], namespace=NS, dev_mode="on")
    named = cluster.tmp / "state" / "pvc" / NS / "gone-kv" / "named"
    assert named.is_dir()  # the simulator wrote the tier there: move it away
    named.rename(named.with_name("real"))
    code, rows, err = cluster.run_json("clear-fs", "-n", NS, "--all")
    assert code == 3, (rows, err)
    (row,) = rows
    assert row["result"] == "unconfirmed" and "does not exist" in row["message"], row
    assert "not confirmed empty" in row["message"], row
    assert any(named.with_name("real").rglob("*.bin"))  # nothing deleted anywhere
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--yes")
    (reset,) = [r for r in rows if r["kind"] == "CacheReset"]
    assert code == 3 and reset["fs"] == "unconfirmed" and reset["result"] == "unconfirmed", (rows, err)
    assert any(u["tier"].startswith("fs") and "does not exist" in u["reason"] for u in reset["unconfirmed"]), reset


def test_lmcache_config_in_configmap_binary_data_is_read(sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    config = textwrap.dedent("""\
        chunk_size: 256
        local_cpu: true
        local_disk: "file:///cache/lmc"
        max_local_disk_size: 2.0
        """)
    doc = _deployment("bin", {
        "command": ["vllm", "serve", "org/model-b", "--port", "8000", "--kv-transfer-config",
                    json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})],
        "env": [{"name": "LMCACHE_CONFIG_FILE", "value": "/etc/lmcache/lmcache.yaml"}],
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/lmcache"}, {"name": "cache", "mountPath": "/cache"}]})
    doc["spec"]["template"]["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "lmc-bin"}},
                                                  {"name": "cache", "emptyDir": {}}]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lmc-bin", "namespace": NS},
          "binaryData": {"lmcache.yaml": base64.b64encode(config.encode()).decode()}}
    cluster = sim([_write(tmp_path, [cm, doc])], namespace=NS, dev_mode="on")
    pod = _pod(cluster, "bin")
    cache = cluster.tmp / "state" / "pods" / f"{NS}_{pod['name']}_{pod['uid'][:8]}" / "volumes" / "cache" / "lmc"
    cache.mkdir(parents=True, exist_ok=True)
    for i in range(3):
        (cache / f"org-model-b@1@0@{i:016x}@bfloat16.pt").write_bytes(b"\0" * 64)
    code, rows, err = cluster.run_json("clear-store", "-n", NS, "--all", "--yes")
    disk = [r for r in rows if r["store"] == "lmcache-disk"]
    assert "absent" not in err and len(disk) == 1, (rows, err)
    assert disk[0]["address"] == "file:///cache/lmc", disk
    assert (disk[0]["result"], disk[0]["before"], disk[0]["after"]) == ("emptied", 3, 0), disk
    assert not list(cache.glob("*.pt"))


def test_a_newline_in_a_root_keeps_the_wide_table_on_one_line(sim: Callable[..., SimCluster],
                                                                tmp_path: Path) -> None:
    root = "/mnt/files-storage/new\nline"
    doc = _deployment("nl", {"command": ["vllm", "serve", MODEL, "--port", "8000",
                                         "--kv-transfer-config", json.dumps(_ktc(root))]})
    cluster = sim([_write(tmp_path, [doc])], namespace=NS, dev_mode="on")
    done = cluster.run("detect", "-n", NS, "-o", "wide")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout  # the header and one line for the pod
    assert '"/mnt/files-storage/new\\nline"' in lines[1], lines
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0 and rows[0]["fs_roots"] == [root], (rows, err)


def test_an_lmcache_disk_named_by_command_substitution_is_left(sim: Callable[..., SimCluster],
                                                               tmp_path: Path) -> None:
    ktc = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    script = ('export LMCACHE_LOCAL_DISK="file:///cache/$(hostname)" LMCACHE_MAX_LOCAL_DISK_SIZE=1; '
              f"exec vllm serve org/model-d --port 8000 --kv-transfer-config '{ktc}'")
    doc = _deployment("disk", {"command": ["bash", "-c", script],
                               "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]})
    doc["spec"]["template"]["spec"]["volumes"] = [{"name": "cache", "emptyDir": {}}]
    cluster = sim([_write(tmp_path, [doc])], namespace=NS, dev_mode="on")
    pod = _pod(cluster, "disk")
    cache = cluster.tmp / "state" / "pods" / f"{NS}_{pod['name']}_{pod['uid'][:8]}" / "volumes" / "cache"
    real = cache / "some-host"
    real.mkdir(parents=True, exist_ok=True)
    (real / "org-model-d@1@0@0000000000000001@bfloat16.pt").write_bytes(b"\0" * 64)
    code, rows, err = cluster.run_json("clear-store", "-n", NS, "--all", "--yes")
    disk = [r for r in rows if r["store"] == "lmcache-disk"]
    assert code == 1 and len(disk) == 1, (rows, err)
    assert disk[0]["result"] == "left" and "$(hostname)" in disk[0]["message"], disk
    assert "nothing was deleted" in disk[0]["message"] and disk[0]["via"] is None, disk
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--yes")
    (reset,) = [r for r in rows if r["kind"] == "CacheReset"]
    assert code == 1 and reset["result"] != "emptied" and "left" in reset["fs"], (rows, err)
    assert any(e["tier"].startswith("fs") and "$(hostname)" in e["reason"] for e in reset["left"]), reset
    assert list(real.glob("*.pt"))


def test_with_dev_mode_on_clear_takes_the_real_root_from_the_server(sim: Callable[..., SimCluster],
                                                                    tmp_path: Path) -> None:
    # GET /server_info gives the kv-transfer-config vLLM runs, with the root bash evaluated
    cluster = sim([_write(tmp_path, [_script_deployment("host", "/mnt/files-storage/$(hostname)")])],
                  namespace=NS, dev_mode="on")
    host = _pod(cluster, "host")
    real = "/mnt/files-storage/" + host["fs_tier_files"][0].split("/")[3]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--yes")
    (reset,) = [r for r in rows if r["kind"] == "CacheReset"]
    assert code == 0 and reset["result"] == "emptied" and reset["fs"] == "emptied", (rows, err)
    assert "the server's configuration is used" in reset["message"] and real in reset["message"], reset
    assert _pod(cluster, "host")["fs_tier_files"] == []
