"""SGLang's HiCache file backend as a file tier of the store step: where its directory is (sglang
``srt/mem_cache/hicache_storage.py`` ``HiCacheFile``), which names are this server's pages
(``<sha256 hex>_<served model>_<tp rank>_<tp size>.bin``, observed on 0.5.23), the deletion
program selecting them alone, and the plan: always per model, held where a pod outside the
targets writes the same model's pages to the same volume."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kubectl_kvreset.discovery import describe_pod
from kubectl_kvreset.engines import engine_for, engine_named
from kubectl_kvreset.engines.sglang.cmdline import SglangConfig
from kubectl_kvreset.engines.sglang.engine import FILE_STORE, file_name_regex
from kubectl_kvreset.fs import python_argv
from kubectl_kvreset.job.storedisk import disk_row, plan_disks

ENGINE = engine_named("sglang")
KEY = "ab" * 32
DIR = "/mnt/files-storage"
HICACHE = ["--enable-hierarchical-cache", "--hicache-storage-backend", "file"]


def _cfg(args: list[str], env: dict[str, str] | None = None) -> SglangConfig:
    container = {"name": "modelserver", "command": ["python3", "-m", "sglang.launch_server"], "args": args,
                 "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}
    found = engine_for(container, dict(env or {}))
    assert found is not None and isinstance(found[1], SglangConfig)
    return found[1]


def test_the_directory_in_hicachefile_order() -> None:
    env = {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/mnt/a"}
    extra = ["--hicache-storage-backend-extra-config", json.dumps({"file_storage_path": "/mnt/b"})]
    assert _cfg(["--model-path", "m", *HICACHE, *extra], env).storage_dir == "/mnt/a"
    cfg = _cfg(["--model-path", "m", *HICACHE, *extra])
    assert (cfg.storage_dir, cfg.storage_dir_source) == ("/mnt/b", "--hicache-storage-backend-extra-config "
                                                         "file_storage_path")
    cfg = _cfg(["--model-path", "m", *HICACHE])
    assert (cfg.storage_dir, cfg.storage_dir_source, cfg.storage_dir_unknown) == ("/tmp/hicache", "default", None)
    bad = _cfg(["--model-path", "m", *HICACHE, "--hicache-storage-backend-extra-config", "{not json"])
    assert bad.storage_dir is None and "JSON" in (bad.storage_dir_unknown or "")
    # another backend has no directory of files
    assert _cfg(["--model-path", "m", "--enable-hierarchical-cache", "--hicache-storage-backend",
                 "mooncake"]).storage_dir is None


def test_a_directory_from_a_variable_the_spec_does_not_hold_is_not_known() -> None:
    container = {"name": "modelserver", "command": ["bash", "-c"], "args": [
        'export SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR=$(cat /etc/dir); exec python3 -m sglang.launch_server '
        '--model-path m --enable-hierarchical-cache --hicache-storage-backend file']}
    found = engine_for(container, {})
    assert found is not None and isinstance(found[1], SglangConfig)
    cfg = found[1]
    assert cfg.storage_dir is None and cfg.storage_dir_unknown is not None
    (tier,) = ENGINE.file_tiers(cfg, ENGINE.kv_layout(cfg, {}))
    assert tier.paths == () and tier.unknown is not None


@pytest.mark.parametrize("args,name,ours", [
    (["--served-model-name", "tiny-hc"], f"{KEY}_tiny-hc_0_1", True),
    (["--served-model-name", "tiny-hc"], f"{KEY}_tiny-hc", True),                       # MLA: no TP part
    (["--served-model-name", "tiny-hc"], f"{KEY}_tiny-hc-unified-token-major_0_1", True),
    (["--served-model-name", "tiny-hc"], f"{KEY}_tiny-hc_cp0_2_0_1", False),
    (["--served-model-name", "tiny-hc"], f"{KEY}_tiny-hc_0_1_cp1_2", True),
    (["--served-model-name", "tiny-hc"], f"{KEY}_tiny-hc2_0_1", False),
    (["--served-model-name", "tiny-hc"], f"{KEY}_tiny-hc-v2_0_1", False),
    (["--served-model-name", "tiny-hc"], f"{KEY}_tiny_0_1", False),
    (["--served-model-name", "tiny-hc"], f"{KEY}_tiny-hc_0_2", False),                 # another TP size
    (["--served-model-name", "tiny-hc"], f"{KEY[:-1]}_tiny-hc_0_1", False),
    (["--served-model-name", "m"], f"{KEY}_m_1_0_0_1", False),                          # model m_1_0, rank 0 of 1
    (["--served-model-name", "m"], f"{KEY}.mamba_m_0_1", True),                         # a hybrid model's pool
    (["--served-model-name", "m"], f"{KEY}.deepseek_v4_c4_indexer_m", True),
    (["--served-model-name", "m"], f"{KEY}.mamba_x_m_0_1", False),                      # model x_m's pool page
    (["--served-model-name", "m"], f"{KEY}.newpool_m_0_1", False),                      # a pool 0.5.23 has not
    (["--model-path", "org/m", "--tp-size", "2"], f"{KEY}_org-m_1_2", True),
    (["--model-path", "org/m", "--tp-size", "2"], f"{KEY}_org-m_2_2", True),     # a rank SGLang never writes
    (["--model-path", "org/m", "--tp", "2", "--pp-size", "2"], f"{KEY}_org-m_0_2_2_1", True),
    (["--model-path", "org/m", "--tp", "2", "--pp-size", "2"], f"{KEY}_org-m_0_2", False),
])
def test_the_names_of_this_servers_pages(args: list[str], name: str, ours: bool) -> None:
    regex = file_name_regex(_cfg(["--model-path", "Qwen/Qwen3-0.6B", *args, *HICACHE]))
    assert regex is not None
    assert (re.fullmatch(regex, name) is not None) is ours, (regex, name)


def test_models_whose_pages_read_as_anothers() -> None:
    assert ENGINE.files_alike("org/m", "org-m") and ENGINE.files_alike("org-m", "org/m")
    assert ENGINE.files_alike("m_0_1", "m") and ENGINE.files_alike("m-unified-token-major", "m")
    assert not ENGINE.files_alike("m", "m") and not ENGINE.files_alike("m2", "m")
    assert not ENGINE.files_alike("m-v2", "m") and not ENGINE.files_alike("m", "m-v2")
    # either way: a target m_0_1's deletion takes m's pages of rank 0 of 1, and m's takes m_0_1's MLA pages
    assert ENGINE.files_alike("m", "m_0_1") and ENGINE.files_alike("m-unified-token-major", "m")


def _program(root: Path, regex: str, *, count_only: bool = False) -> dict[str, Any]:
    argv = python_argv(str(root), [""], count_only=count_only, file_suffix=".bin", layout=regex, model_only=True)
    argv[0] = sys.executable
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_program_deletes_this_servers_pages_alone(tmp_path: Path) -> None:
    root = tmp_path / "hicache"
    root.mkdir()
    ours = [f"{c * 64}_tiny-hc_0_1.bin" for c in "0123"]
    kept = [f"{'e' * 64}_tiny-two_0_1.bin", f"{'f' * 64}_tiny-hc_0_2.bin", f".{'a' * 64}.tmp",
            f"{'a' * 64}_tiny-hc_0_1.bin.bak", "notes.txt"]
    for name in ours + kept:
        (root / name).write_bytes(b"x" * 8)
    regex = file_name_regex(_cfg(["--model-path", "Qwen/Qwen3-0.6B", "--served-model-name", "tiny-hc", *HICACHE]))
    assert regex is not None
    counted = _program(root, regex, count_only=True)
    assert counted["before"]["files"] == 4 and len(list(root.iterdir())) == 9
    done = _program(root, regex)
    assert done["after"]["files"] == 0 and done["others"]["files"] == len(kept)
    assert sorted(p.name for p in root.iterdir()) == sorted(kept)


def _pod(name: str, served: str, *, claim: str = "hicache-files", owner: str | None = None) -> Any:
    obj = {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "rs", "uid": "uid-" + name,
                     "labels": {"llm-d.ai/engine-type": "sglang"},
                     "ownerReferences": [{"kind": "ReplicaSet", "name": (owner or name) + "-abc", "controller": True}]},
        "spec": {"nodeName": "node-a", "volumes": [{"name": "files", "persistentVolumeClaim": {"claimName": claim}}],
                 "containers": [{"name": "modelserver", "image": "lmsysorg/sglang:v0.5.23",
                                 "command": ["python3", "-m", "sglang.launch_server"],
                                 "args": ["--model-path", "Qwen/Qwen3-0.6B", "--served-model-name", served,
                                          "--port", "8000", *HICACHE],
                                 "env": [{"name": "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", "value": DIR}],
                                 "volumeMounts": [{"name": "files", "mountPath": DIR}]}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    described = describe_pod(obj)
    assert described is not None and described.engine.name == "sglang"
    return described


class _NoClaims:
    def get_object(self, *a: object, **k: object) -> dict[str, Any]:
        from kubectl_kvreset.kube import KubeApiError
        raise KubeApiError(404, "NotFound", "not found")


def _plan(targets: list[Any], universe: list[Any], *, shared: bool = False) -> list[Any]:
    return plan_disks(_NoClaims(), targets, universe, {}, shared=shared,  # type: ignore[arg-type]
                      list_pods=lambda _ids: ([], None))


def test_alone_on_its_volume_it_is_still_a_per_model_deletion() -> None:
    a = _pod("hc-0", "tiny-hc")
    (call,) = _plan([a], [a])
    assert (call.store, call.scope, call.model, call.prefixes, call.blocked) == (FILE_STORE, "model", "tiny-hc",
                                                                                  ("",), None)
    assert call.root == DIR and call.suffix == ".bin" and call.layout is not None and "_tiny-hc(" in call.layout
    row = disk_row(call)
    assert row["store"] == FILE_STORE and row["scope"] == "model tiny-hc" and "tiny-hc's *.bin" in row["method"]


def test_another_model_on_the_volume_is_kept_and_the_same_model_needs_consent() -> None:
    a, b = _pod("hc-0", "tiny-hc"), _pod("two-0", "tiny-two", owner="two")
    (call,) = _plan([a], [a, b])
    assert call.blocked is None and call.others == ("rs/two-0",) and call.kept == ("rs/two-0 (tiny-two)",)
    same = _pod("hc-other-0", "tiny-hc", owner="hc-other")
    (call,) = _plan([a], [a, same])
    assert call.blocked is not None and "--shared-stores" in call.blocked and "tiny-hc" in call.blocked
    (call,) = _plan([a], [a, same], shared=True)
    assert call.blocked is None
    alike = _pod("hc-mla-0", "tiny-hc_0_1", owner="hc-mla")
    (call,) = _plan([a], [a, alike])
    assert call.blocked is not None and "cannot be told apart" in call.blocked


def test_an_unknown_directory_is_a_blocked_row() -> None:
    a = _pod("hc-0", "tiny-hc")
    c = a.raw["spec"]["containers"][0]
    c["env"] = [{"name": "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR",
                 "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "dir"}}}]
    described = describe_pod(a.raw)
    assert described is not None
    calls = _plan([described], [described])
    assert [c.store for c in calls] == [FILE_STORE] and calls[0].blocked is not None, calls
