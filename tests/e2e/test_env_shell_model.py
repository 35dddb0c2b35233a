"""What the command line's variables and model really are, against the simulator (whose pods
run their ``bash -c`` scripts and resolve their env as the kubelet does, so the FS tier lands
where vLLM really writes it):

* a name given twice in ``env`` (a literal, then a ConfigMap key): the kubelet takes the last,
  so the root built from it is ``left``, never the earlier literal's directory emptied;
* shell assignments in branches, functions, ``eval``, ``printf -v``, ``read``: ``left``;
* a model name from a ConfigMap or ``VLLM_MODEL_REDIRECT_PATH`` on a volume another pod also
  mounts: the per-model deletion is ``left`` (clear-fs and clear with dev mode off), and with
  dev mode on ``clear`` takes the running server's model and deletes only its directories.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.manifests import build
from tests.simctl import SimCluster

NS = "envs"
MODEL = "Qwen/Qwen3-0.6B"
MOUNT = "/mnt/files-storage"


def _ktc(root: str) -> dict[str, Any]:
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 30,
                                          "block_size": 256, "secondary_tiers": [{"type": "fs", "root_dir": root}]}}


def _deployment(name: str, container: dict[str, Any], claim: str | None = None) -> dict[str, Any]:
    container = {"name": "vllm", "image": "vllm/vllm-openai:v0.26.0",
                 "volumeMounts": [{"name": "kv", "mountPath": MOUNT}], **container}
    return build.deployment(name, [container], namespace=NS,
                            volumes=[build.pvc_volume("kv", claim or f"{name}-kv")])


def _write(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, *docs]))
    return path


def _files(cluster: SimCluster) -> dict[str, list[str]]:
    return {p["owner"]["name"]: sorted(p["fs_tier_files"]) for p in cluster.live_pods()}


def _seed(cluster: SimCluster, claim: str, sub: str) -> Path:
    """A decoy directory on the volume, where the plugin guessed before: it must stay."""
    decoy = cluster.tmp / "state" / "pvc" / NS / claim / sub / "Qwen_Qwen3-0.6B_000000000000"
    decoy.mkdir(parents=True, exist_ok=True)
    (decoy / "decoy.bin").write_bytes(b"x" * 16)
    return decoy / "decoy.bin"


def test_a_duplicated_env_name_and_unfollowed_shell_assignments_are_left(sim: Callable[..., SimCluster],
                                                                       tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "roots", "namespace": NS},
          "data": {"root": f"{MOUNT}/b"}}
    dup = _deployment("dup", {"command": ["vllm", "serve", MODEL, "--port", "8000", "--kv-transfer-config",
                                          json.dumps(_ktc("$(ROOT)"))],
                              "env": [{"name": "ROOT", "value": f"{MOUNT}/a"},
                                      {"name": "ROOT", "valueFrom": {"configMapKeyRef": {"name": "roots",
                                                                                         "key": "root"}}}]})
    body = json.dumps(_ktc("$ROOT")).replace('"', '\\"')
    serve = f'exec vllm serve {MODEL} --port 8000 --kv-transfer-config "{body}"'
    # X is unset in the pods: bash leaves ROOT at .../a; the plugin must not take .../b for it
    shells = {
        "xif": f'ROOT={MOUNT}/a; if [ -n "$X" ]; then ROOT={MOUNT}/b; fi; {serve}',
        "xfunc": f"ROOT={MOUNT}/a; f() {{ ROOT={MOUNT}/b; }}; [ -n \"$X\" ] && f; {serve}",
        "xeval": f'ROOT={MOUNT}/b; eval ROOT={MOUNT}/a; {serve}',
        "xprintf": f"ROOT={MOUNT}/b; printf -v ROOT %s {MOUNT}/a; {serve}",
        "xread": f"ROOT={MOUNT}/b; read ROOT <<< {MOUNT}/a; {serve}",
    }
    docs = [cm, dup, *(_deployment(n, {"command": ["bash", "-c", s]}) for n, s in shells.items())]
    cluster = sim([_write(tmp_path, docs)], namespace=NS, dev_mode="off")
    before = _files(cluster)
    # vLLM wrote where the kubelet and bash put the root
    assert before["dup"] and all(f.startswith(f"{MOUNT}/b/") for f in before["dup"]), before
    for name in shells:
        assert before[name] and all(f.startswith(f"{MOUNT}/a/") for f in before[name]), (name, before[name])
    decoys = [_seed(cluster, "dup-kv", "a"), *(_seed(cluster, f"{n}-kv", "b") for n in shells)]

    code, rows, err = cluster.run_json("clear-fs", "-n", NS, "--all", "-y")
    assert code == 1, (rows, err)
    assert len(rows) == 1 + len(shells) and {r["result"] for r in rows} == {"left"}, rows
    by = {r["pods"][0].rsplit("-", 2)[0]: r for r in rows}
    assert "ROOT comes from ConfigMap roots key root" in by["dup"]["message"], by["dup"]
    assert "if command" in by["xif"]["message"] and "function f" in by["xfunc"]["message"], rows
    assert "eval" in by["xeval"]["message"] and "printf -v" in by["xprintf"]["message"], rows
    assert "read" in by["xread"]["message"], rows
    assert _files(cluster) == before and all(d.exists() for d in decoys)

    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--yes")
    assert code == 1, (rows, err)
    resets = [r for r in rows if r["kind"] == "CacheReset"]
    assert len(resets) == 6 and all(r["fs"] == "left" for r in resets), resets
    assert _files(cluster) == before and all(d.exists() for d in decoys)


def _shared(name: str, model: str, env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return _deployment(name, {"command": ["vllm", "serve", model, "--port", "8000", "--kv-transfer-config",
                                          json.dumps(_ktc(MOUNT))], "env": env or []}, claim="kv-cache")


def test_an_unknown_model_on_a_shared_volume_is_left_and_the_live_model_is_used(
        sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": NS},
          "data": {"model": "org/a"}}
    docs = [cm,
            _shared("tgt", "$(MODEL)", [{"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "cfg",
                                                                                           "key": "model"}}}]),
            _shared("redir", "org/c", [{"name": "VLLM_MODEL_REDIRECT_PATH", "value": "/etc/no-such-redirect"}]),
            _shared("other", "org/b")]
    cluster = sim([_write(tmp_path, docs)], namespace=NS, dev_mode="off")
    before = _files(cluster)
    assert any("/org_a_" in f for f in before["tgt"]) and any("/org_b_" in f for f in before["other"]), before

    for target in ("tgt", "redir"):
        code, rows, err = cluster.run_json("clear-fs", "-n", NS, target, "-y")
        assert code == 1, (target, rows, err)
        (row,) = rows
        assert row["result"] == "left" and "nothing was deleted" in row["message"], row
        assert ("MODEL comes from ConfigMap cfg" if target == "tgt" else "VLLM_MODEL_REDIRECT_PATH") in row["message"]
        assert _files(cluster) == before

    code, rows, err = cluster.run_json("clear", "-n", NS, "tgt", "--yes")
    (reset,) = [r for r in rows if r["kind"] == "CacheReset"]
    assert code == 1 and reset["fs"] != "emptied", (rows, err)
    (fs_left,) = [e for e in reset["left"] if e["tier"].startswith("fs")]
    assert "MODEL comes from ConfigMap cfg" in fs_left["reason"] and "nothing was deleted" in fs_left["reason"], reset
    assert _files(cluster) == before


def test_with_dev_mode_on_clear_uses_the_running_servers_model(sim: Callable[..., SimCluster],
                                                               tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": NS},
          "data": {"model": "org/a"}}
    docs = [cm,
            _shared("tgt", "$(MODEL)", [{"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "cfg",
                                                                                           "key": "model"}}}]),
            _shared("other", "org/b")]
    cluster = sim([_write(tmp_path, docs)], namespace=NS, dev_mode="on")
    before = _files(cluster)
    code, rows, err = cluster.run_json("clear", "-n", NS, "tgt", "--yes")
    (reset,) = [r for r in rows if r["kind"] == "CacheReset"]
    assert reset["fs"] == "emptied", (rows, err)
    assert "the running server's model is 'org/a'" in reset["message"], reset
    after = _files(cluster)["tgt"]
    # org/a's blocks are gone (vLLM writes its config.json again), org/b's are all kept
    assert any("/org_a_" in f and f.endswith(".bin") for f in before["tgt"]), before
    assert not any("/org_a_" in f and f.endswith(".bin") for f in after), after
    assert [f for f in after if "/org_b_" in f] == [f for f in before["tgt"] if "/org_b_" in f], after
