"""A per-model FS-tier deletion takes a directory only when its name and vLLM's run record
(``<model>_<hash12>/config.json``, ``vllm/v1/kv_offload/file_mapper.py``) say it is the model's;
the served name never selects, and ``org/victim`` and ``org_victim`` (one directory name) are
told apart by the record."""

from __future__ import annotations

import os
from pathlib import Path

from kubectl_kvreset.fs import run_fs_clear

from .test_fstier import LocalKube, run_script, target_for, vllm_record


def write_model(root: Path, model: str, *, record: bool = True, blocks: int = 2, **more: object) -> str:
    """vLLM's FS-tier directories of ``model`` under ``root``; returns the base name."""
    base, text = vllm_record(model, **more)
    (root / base).mkdir(parents=True, exist_ok=True)
    if record:
        (root / base / "config.json").write_text(text)
    d = root / (base + "_r0") / "abc" / "de_g0"
    d.mkdir(parents=True, exist_ok=True)
    for i in range(blocks):
        (d / f"{base}{i}.bin").write_bytes(b"k" * 10)
    return base


def files(root: Path, base: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                  and p.relative_to(root).parts[0] in (base, base + "_r0"))


def test_colliding_names_are_told_apart_by_the_record(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    victim = write_model(root, "org/victim")
    lookalike = write_model(root, "org_victim", blocks=3)
    attacker = write_model(root, "org/attacker")
    assert victim.split("_")[:2] == lookalike.split("_")[:2] == ["org", "victim"]
    keep_lookalike, keep_attacker = files(root, lookalike), files(root, attacker)
    code, doc = run_script(str(root), "org/victim")
    assert code == 0 and doc["before"]["files"] == 2 and doc["after"]["files"] == 0, doc
    assert doc["unidentified"] == [] and doc["others"]["files"] == 7
    assert files(root, victim) == [f"{victim}/config.json"]
    assert files(root, lookalike) == keep_lookalike and files(root, attacker) == keep_attacker
    # and the other way round: clearing the model named org_victim leaves org/victim's record
    code, doc = run_script(str(root), "org_victim")
    assert code == 0 and doc["before"]["files"] == 3 and doc["unidentified"] == [], doc
    assert files(root, victim) == [f"{victim}/config.json"] and files(root, attacker) == keep_attacker


def test_a_directory_without_a_record_is_left_with_the_reason_and_the_flag(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    mine = write_model(root, "org/victim")
    orphan = write_model(root, "org/victim", record=False, tp_size=4)  # another hash, no config.json
    res = run_fs_clear(LocalKube(), target_for(root, models=("org/victim",)))  # type: ignore[arg-type]
    assert res.result == "left", res
    assert res.files_before == 2 and res.files_after == 0
    assert res.unidentified == (f"{orphan}: no config.json", f"{orphan}_r0: no config.json")
    assert res.message and "--whole-tier" in res.message and f"{orphan}: no config.json" in res.message
    assert len(files(root, orphan)) == 2 and files(root, mine) == [f"{mine}/config.json"]


def test_a_record_that_is_a_link_or_not_json_is_no_record(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    text = vllm_record("org/victim")[1]
    linked = write_model(root, "org/victim", tp_size=2)
    (root / linked / "config.json").unlink()
    (tmp_path / "elsewhere.json").write_text(text)
    os.symlink(tmp_path / "elsewhere.json", root / linked / "config.json")
    garbled = write_model(root, "org/victim", tp_size=3)
    (root / garbled / "config.json").write_text("{not json")
    code, doc = run_script(str(root), "org/victim")
    assert code == 0 and doc["before"]["files"] == 0, doc
    why = "\n".join(doc["unidentified"])
    assert f"{linked}: config.json: [Errno 40]" in why and f"{garbled}_r0: config.json: Expecting" in why, why
    assert len(doc["unidentified"]) == 4 and doc["others"]["files"] == 2 * 3
    assert len([p for p in root.rglob("*.bin")]) == 4


def test_whole_tier_deletes_unidentified_directories_too(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    write_model(root, "org/victim", record=False)
    write_model(root, "org_victim")
    res = run_fs_clear(LocalKube(), target_for(root))  # type: ignore[arg-type]
    assert res.result == "emptied" and list(root.iterdir()) == []


# ----------------------------------------------------------------------------- LMCache's local disk

DISK_FILES = {
    "org/m": ["org-m@1@0@33f9bce4@bfloat16.pt", "org-m@2@1@-5@half@3.pt", "org-m@1@0@ab@half@user%u-1.pt"],
    "org/m@v2": ["org-m@v2@1@0@33f9bce4@bfloat16.pt"],
    "org/m2": ["org-m2@1@0@33f9bce4@bfloat16.pt"],
}


def test_disk_file_names_of_a_model_only() -> None:
    from kubectl_kvreset.stores.lmcachekey import is_disk_file_of

    for model in DISK_FILES:
        for other, theirs in DISK_FILES.items():
            assert all(is_disk_file_of(n, model) is (model == other) for n in theirs), (model, other)
    assert not is_disk_file_of("org-m@1@0@ab@half.pt.tmp", "org/m")


def test_script_deletes_only_the_models_disk_files(tmp_path: Path) -> None:
    import subprocess
    import sys

    from kubectl_kvreset.fs import python_argv
    from kubectl_kvreset.stores.lmcachekey import disk_name_regex

    root = tmp_path / "disk"
    root.mkdir()
    for names in DISK_FILES.values():
        for n in names:
            (root / n).write_bytes(b"t" * 8)
    argv = python_argv(str(root), ["org-m@"], file_suffix=".pt", layout=disk_name_regex())
    argv[0] = sys.executable
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert '"before": {"files": 3' in done.stdout, done.stdout
    assert sorted(p.name for p in root.iterdir()) == sorted(DISK_FILES["org/m@v2"] + DISK_FILES["org/m2"])
