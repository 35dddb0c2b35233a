"""LMCache's local disk: reading the setting as LMCache 0.5.6 does, and the deletion program's
``*.pt`` selection (run here on a temporary directory)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kubectl_kvreset.fs import python_argv
from kubectl_kvreset.stores.config import Unread
from kubectl_kvreset.stores.lmcache_disk import DISK_SUFFIX, file_prefix, local_disk_of

KV = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def test_env_setting_with_file_scheme_and_several_paths() -> None:
    disk = local_disk_of(KV, {"LMCACHE_LOCAL_DISK": "file:///mnt/a/, /mnt/b", "LMCACHE_MAX_LOCAL_DISK_SIZE": "5"}, {})
    assert disk is not None and disk.enabled
    assert disk.paths == ("/mnt/a/", "/mnt/b") and disk.max_gb == 5.0 and disk.source == "env LMCACHE_LOCAL_DISK"


def test_no_backend_without_a_size_or_a_path() -> None:
    off = local_disk_of(KV, {"LMCACHE_LOCAL_DISK": "/mnt/a"}, {})
    assert off is not None and not off.enabled  # max_local_disk_size defaults to 0: no LocalDiskBackend
    assert local_disk_of(KV, {"LMCACHE_MAX_LOCAL_DISK_SIZE": "5"}, {}) is None
    assert local_disk_of({"kv_connector": "OffloadingConnector"}, {"LMCACHE_LOCAL_DISK": "/x"}, {}) is None


def test_config_file_then_env_then_extra_config() -> None:
    files = {"/etc/l.yaml": "local_disk: file:///from/file\nmax_local_disk_size: 2\n"}
    env = {"LMCACHE_CONFIG_FILE": "/etc/l.yaml"}
    disk = local_disk_of(KV, env, files)
    assert disk is not None and disk.paths == ("/from/file",) and disk.source == "LMCACHE_CONFIG_FILE"
    disk = local_disk_of(KV, {**env, "LMCACHE_LOCAL_DISK": "/from/env"}, files)
    assert disk is not None and disk.paths == ("/from/env",)
    multi = {"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "NixlConnector"},
        {**KV, "kv_connector_extra_config": {"lmcache.local_disk": "/from/extra"}}]}}
    disk = local_disk_of(multi, {**env, "LMCACHE_LOCAL_DISK": "/from/env"}, files)
    assert disk is not None and disk.paths == ("/from/extra",) and disk.enabled
    # an unreadable file: nothing known from it (the store step reports the file itself)
    assert local_disk_of(KV, env, {"/etc/l.yaml": Unread("no")}) is None


def test_file_prefix_follows_key_to_path() -> None:
    assert file_prefix("org/model-a") == "org-model-a@" and file_prefix("m") == "m@"


def _run(root: Path, models: list[str], *, count_only: bool = False) -> dict[str, object]:
    done = subprocess.run(python_argv(str(root), models, count_only=count_only, file_suffix=DISK_SUFFIX),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_program_deletes_only_pt_files_of_the_models(tmp_path: Path) -> None:
    root = tmp_path / "lmc"
    root.mkdir()
    for name in ("org-a@1@0@aa@bfloat16.pt", "org-a@1@0@bb@bfloat16.pt", "org-b@1@0@aa@bfloat16.pt",
                 "org-a@notes.txt", "other.pt.bak"):
        (root / name).write_bytes(b"x" * 10)
    (root / "org-a_0123456789ab").mkdir()  # a vLLM FS-tier directory: never LMCache's
    counted = _run(root, ["org-a@"], count_only=True)
    assert counted["before"] == {"files": 2, "bytes": 20, "dirs": 0} and len(list(root.iterdir())) == 6
    done = _run(root, ["org-a@"])
    assert done["after"] == {"files": 0, "bytes": 0, "dirs": 0}
    assert sorted(p.name for p in root.iterdir()) == ["org-a@notes.txt", "org-a_0123456789ab",
                                                     "org-b@1@0@aa@bfloat16.pt", "other.pt.bak"]
    every = _run(root, [])
    assert every["before"]["files"] == 1 and every["after"]["files"] == 0  # type: ignore[index]
    assert sorted(p.name for p in root.iterdir()) == ["org-a@notes.txt", "org-a_0123456789ab", "other.pt.bak"]


def test_refused_exec_names_the_permission_and_what_would_empty_it() -> None:
    from kubectl_kvreset.fs import ExecChoice
    from kubectl_kvreset.job.storedisk import DiskCall, disk_row, run_disk
    from kubectl_kvreset.kube import KubeApiError

    class Kube:
        def exec_command(self, *a: object, **k: object) -> object:
            raise KubeApiError(403, "Forbidden", 'pods "p" is forbidden: User "u" cannot get resource "pods/exec"')

    call = DiskCall("ns", "/mnt/lmc", "/mnt/lmc", "pvc/d", "model", "org/m", ("org-m@",),
                    (ExecChoice("p", "vllm", "/mnt/lmc"),), ("ns/p",))
    result = run_disk(Kube(), call)  # type: ignore[arg-type]
    assert result.result == "failed" and result.unit == "files"
    assert "needs get and create on pods/exec in namespace ns" in (result.message or "")
    assert "what would empty it: delete 'org-m@*.pt' under /mnt/lmc" in (result.message or "")
    row = disk_row(call, result)
    assert (row["store"], row["scope"], row["resolved"], row["method"]) == (
        "lmcache-disk", "model org/m", "volume pvc/d", "delete org-m@*.pt under /mnt/lmc (pods/exec)")
