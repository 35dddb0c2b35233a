"""The model and root the plugin reads are the ones vLLM and the kubelet use, against the
simulator (whose pods read their argv as vLLM 0.32's argparse does and resolve env as the
kubelet does, so the FS tier lands where vLLM really writes it):

* ``vllm serve --api-key k org/a``: argparse gives ``org/a`` to ``--api-key`` (``nargs="+"``) and
  vLLM 0.32 serves its default model; only that model's directories go, the other pod's
  ``org/a`` directories on the same volume stay; on another release the model is unknown: left;
* ``MODEL="$(ORG)/a"`` with ORG from a ConfigMap, ``ROOT=/mnt/kv/$(X)`` likewise: left, naming
  the ConfigMap, and nothing is deleted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.manifests import build
from tests.simctl import SimCluster

NS = "argv"
MOUNT = "/mnt/kv"


def _ktc(root: str) -> str:
    return json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 30,
                                                     "block_size": 256,
                                                     "secondary_tiers": [{"type": "fs", "root_dir": root}]}})


def _deployment(name: str, command: list[str], *, image: str = "vllm/vllm-openai:v0.32.0", claim: str = "kv-cache",
                env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container = {"name": "vllm", "image": image, "command": command, "env": env or [],
                 "volumeMounts": [{"name": "kv", "mountPath": MOUNT}]}
    return build.deployment(name, [container], namespace=NS, volumes=[build.pvc_volume("kv", claim)])


def _write(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, *docs]))
    return path


def _files(cluster: SimCluster) -> dict[str, list[str]]:
    return {p["owner"]["name"]: sorted(p["fs_tier_files"]) for p in cluster.live_pods()}


def _blocks(files: list[str], model_dir: str) -> list[str]:
    return [f for f in files if f"/{model_dir}_" in f and f.endswith(".bin")]


def test_a_model_after_a_multi_value_flag_is_vllms_default(sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    swallowed = ["vllm", "serve", "--port", "8000", "--kv-transfer-config", _ktc(MOUNT), "--api-key", "k1", "org/a"]
    docs = [_deployment("tgt", swallowed),
            _deployment("old", swallowed, image="vllm/vllm-openai:v0.26.0", claim="kv-old"),
            _deployment("other", ["vllm", "serve", "org/a", "--port", "8000", "--kv-transfer-config", _ktc(MOUNT)]),
            _deployment("other-old", ["vllm", "serve", "org/a", "--port", "8000", "--kv-transfer-config", _ktc(MOUNT)],
                        image="vllm/vllm-openai:v0.26.0", claim="kv-old")]
    cluster = sim([_write(tmp_path, docs)], namespace=NS, dev_mode="off")
    before = _files(cluster)
    # the simulated vLLM serves its default model, as vLLM 0.32 does (tgt and other share the volume)
    assert _blocks(before["tgt"], "Qwen_Qwen3-0.6B") and _blocks(before["other"], "org_a"), before["tgt"]
    assert _blocks(before["old"], "Qwen_Qwen3-0.6B") and _blocks(before["other-old"], "org_a"), before["old"]

    code, rows, err = cluster.run_json("clear-fs", "-n", NS, "tgt", "-y")
    (row,) = rows
    assert code == 0 and row["result"] == "emptied", (rows, err)
    after = _files(cluster)
    assert not _blocks(after["tgt"], "Qwen_Qwen3-0.6B"), after["tgt"]
    assert _blocks(after["other"], "org_a") == _blocks(before["other"], "org_a"), after["other"]

    code, rows, err = cluster.run_json("clear-fs", "-n", NS, "old", "-y")
    (row,) = rows
    assert code == 1 and row["result"] == "left", json.dumps(row)
    assert "2 value(s) to the api-key flag" in row["message"] and "k1" not in row["message"] and \
        "default model" in row["message"], row
    assert _files(cluster)["old"] == before["old"]


def test_env_values_built_from_a_configmap_variable_are_left(sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": NS},
          "data": {"ORG": "org", "X": "team-a"}}
    docs = [cm,
            _deployment("ev2", ["vllm", "serve", "$(MODEL)", "--port", "8000", "--kv-transfer-config", _ktc(MOUNT)],
                        env=[{"name": "ORG", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "ORG"}}},
                             {"name": "MODEL", "value": "$(ORG)/a"}]),
            _deployment("ev1", ["vllm", "serve", "org/a", "--port", "8000", "--kv-transfer-config", _ktc("$(ROOT)")],
                        claim="kv-cache2",
                        env=[{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "X"}}},
                             {"name": "ROOT", "value": f"{MOUNT}/$(X)"}]),
            _deployment("o2", ["vllm", "serve", "org/b", "--port", "8000", "--kv-transfer-config", _ktc(MOUNT)])]
    cluster = sim([_write(tmp_path, docs)], namespace=NS, dev_mode="off")
    before = _files(cluster)
    assert _blocks(before["ev2"], "org_a") and _blocks(before["o2"], "org_b"), before
    assert before["ev1"] and all(f.startswith(f"{MOUNT}/team-a/") for f in before["ev1"]), before["ev1"]

    for target, source in (("ev2", "ConfigMap cfg key ORG"), ("ev1", "ConfigMap cfg key X")):
        code, rows, err = cluster.run_json("clear-fs", "-n", NS, target, "-y")
        (row,) = rows
        assert code == 1 and row["result"] == "left", (target, rows, err)
        assert source in row["message"], row
        assert _files(cluster) == before
