"""Tests of kubectl_kvreset.fs: path rules, volume mapping, one deletion per volume,
model-only matching, and the program that runs in the pod (run here on a local directory)."""

from __future__ import annotations

import hashlib
import json
import posixpath
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_kvreset.discovery import VllmPod, describe_pod
from kubectl_kvreset.fs import (
    CLEAR_PROGRAM,
    CLEAR_SCRIPT,
    PACKED_PROGRAM,
    FsVolumeTarget,
    MountedVolume,
    check_root,
    find_argv,
    fs_roots,
    is_model_dir,
    model_dir_prefixes,
    normalise_root,
    plan_fs_clear,
    pod_mounts,
    python_argv,
    run_fs_clear,
)
from kubectl_kvreset.kube import ExecResult, KubeApiError

MODEL = "Qwen/Qwen3-0.6B"
PVC_VOL = {"name": "kv", "persistentVolumeClaim": {"claimName": "kv-cache"}}
SHM_VOL = {"name": "shm", "emptyDir": {"medium": "Memory"}}


def ktc_fs(root: str | None, kind: str = "fs") -> str:
    tier: dict[str, Any] = {"type": kind}
    if root is not None:
        tier["root_dir"] = root
    return json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
                                                     "cpu_bytes_to_use": 1 << 30,
                                                     "secondary_tiers": [tier]}})


def ktc_legacy(root: str) -> str:
    return json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"spec_name": "SharedStorageOffloadingSpec",
                                                     "spec_module_path": "llmd_fs_backend.spec",
                                                     "shared_storage_path": root}})


def pod(name: str, ktc: str | None, *, volumes: Sequence[Mapping[str, Any]] = (PVC_VOL,),
        mounts: Sequence[Mapping[str, Any]] = ({"name": "kv", "mountPath": "/mnt/files-storage"},),
        ns: str = "llm", node: str = "node-a", ready: bool = True, model: str = MODEL,
        owner: str = "decode", extra_containers: Sequence[Mapping[str, Any]] = ()) -> VllmPod:
    args = ["serve", model, "--port", "8000"]
    if ktc is not None:
        args += ["--kv-transfer-config", ktc]
    obj = {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": "uid-" + name,
                     "ownerReferences": [{"kind": "ReplicaSet", "name": owner + "-abc", "controller": True}]},
        "spec": {"nodeName": node, "volumes": list(volumes),
                 "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.26.0", "command": ["vllm"],
                                 "args": args, "volumeMounts": list(mounts)}, *extra_containers]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }
    described = describe_pod(obj)
    assert described is not None
    return described


def mv(path: str, kind: str = "pvc", read_only: bool = False, base: str = "/") -> MountedVolume:
    return MountedVolume("v", kind, path, read_only, (kind, "ns", "c" + path), base, f"{kind}/c")


# ----------------------------------------------------------------------------- path rules

@pytest.mark.parametrize("root,words", [
    (None, "empty"), ("", "empty"), ("/", "'/'"), ("relative/dir", "relative"),
    ("kv", "relative"), ("/mnt/../etc", "'..'"), ("/mnt/files-storage/../../etc", "'..'"),
    ("/dev/shm", "/dev/shm itself"), ("/dev/shm/", "/dev/shm itself"),
    ("/dev/shm/vllm_offload_1234.mmap", "vllm_offload"), ("/dev/shm/vllm_offload/x", "vllm_offload"),
    ("/etc", "system directory"), ("/etc/kv", "inside the system directory /etc"),
    ("/usr/lib/kv", "/usr"), ("/proc/1", "/proc"), ("/var/run/secrets/kubernetes.io", "secrets"),
    ("/dev/kv", "/dev"), ("/tmp", "system directory"), ("/var", "system directory"),
    ("/mnt/a\0b", "NUL"),
])
def test_refused_roots(root: str | None, words: str) -> None:
    mounts = [mv("/"), mv("/mnt"), mv("/dev/shm", "emptyDir"), mv("/etc"), mv("/tmp", "emptyDir")]
    verdict = check_root(root, mounts)
    assert not verdict.ok
    assert words in (verdict.refusal or "")


def test_root_on_no_volume_says_a_restart_empties_it() -> None:
    verdict = check_root("/cache/kv", [mv("/mnt/files-storage")])
    assert not verdict.ok and verdict.root == "/cache/kv"
    assert "writable layer" in (verdict.refusal or "") and "restart" in (verdict.refusal or "")


def test_prefix_of_a_mount_name_is_not_inside_it() -> None:
    """/mnt/files-storage-2 is not below a mount at /mnt/files-storage."""
    assert not check_root("/mnt/files-storage-2", [mv("/mnt/files-storage")]).ok


@pytest.mark.parametrize("kind,read_only,words", [("configMap", False, "configMap"), ("pvc", True, "read-only"),
                                                  ("secret", False, "secret")])
def test_roots_on_volumes_that_are_not_a_cache(kind: str, read_only: bool, words: str) -> None:
    verdict = check_root("/mnt/kv", [mv("/mnt", kind, read_only)])
    assert not verdict.ok and words in (verdict.refusal or "")


@pytest.mark.parametrize("root,expected,volume_path", [
    ("/mnt/files-storage", "/mnt/files-storage", "/"),
    ("/mnt/files-storage/kv-cache/", "/mnt/files-storage/kv-cache", "/kv-cache"),
    ("//mnt//files-storage/./kv", "/mnt/files-storage/kv", "/kv"),
    ("/mnt/files-storage/$(touch /tmp/kvreset-canary)", "/mnt/files-storage/$(touch /tmp/kvreset-canary)",
     "/$(touch /tmp/kvreset-canary)"),
    ("/mnt/files-storage/it's \"q\" a b\nc", "/mnt/files-storage/it's \"q\" a b\nc", "/it's \"q\" a b\nc"),
])
def test_accepted_roots_are_normalised_and_mapped(root: str, expected: str, volume_path: str) -> None:
    verdict = check_root(root, [mv("/mnt"), mv("/mnt/files-storage")])
    assert verdict.ok, verdict.refusal
    assert verdict.root == expected
    assert verdict.mount is not None and verdict.mount.mount_path == "/mnt/files-storage"  # the deepest
    assert verdict.volume_path == volume_path


def test_dev_shm_subdirectory_on_an_emptydir_is_accepted() -> None:
    verdict = check_root("/dev/shm/kv-fs", [mv("/dev/shm", "emptyDir")])
    assert verdict.ok and verdict.volume_path == "/kv-fs"


def test_normalise_root_keeps_dollar_and_quotes_literal() -> None:
    assert normalise_root("/a/$(b)/'c'/") == "/a/$(b)/'c'"


_COMPONENTS = st.sampled_from(["", ".", "..", "mnt", "files-storage", "kv", "dev", "shm", "etc", "usr",
                               "vllm_offload_1", "tmp", "a b", "$(touch x)", "'", '"', "\n", "data", "/"])
_PATHS = st.lists(_COMPONENTS, max_size=6).map(lambda parts: "/".join(parts))
_ROOTS = st.one_of(_PATHS, st.builds(lambda p: "/" + p, _PATHS), st.text(max_size=20), st.none())
_MOUNTS = st.lists(st.tuples(st.builds(lambda p: "/" + p, _PATHS),
                             st.sampled_from(["pvc", "emptyDir", "hostPath", "configMap"]), st.booleans()),
                   max_size=4)


@settings(max_examples=400, deadline=None)
@given(root=_ROOTS, mount_specs=_MOUNTS)
def test_check_never_admits_a_root_outside_a_volume(root: str | None,
                                                    mount_specs: list[tuple[str, str, bool]]) -> None:
    mounts = []
    for path, kind, ro in mount_specs:
        try:
            mounts.append(mv(normalise_root(path), kind, ro))
        except ValueError:
            continue
    verdict = check_root(root, mounts)
    if not verdict.ok:
        assert verdict.refusal
        return
    r = verdict.root
    assert r is not None and root is not None
    assert r.startswith("/") and not r.startswith("//")
    assert r == posixpath.normpath(r)
    assert ".." not in r.split("/")
    assert r not in ("/", "/dev/shm", "/etc", "/usr", "/proc", "/sys")
    assert not r.startswith("/dev/shm/vllm_offload")
    assert not any(r == top or r.startswith(top + "/") for top in ("/etc", "/usr", "/proc", "/sys", "/bin"))
    m = verdict.mount
    assert m is not None and m.deletable and m in mounts
    assert r == m.mount_path or r.startswith(m.mount_path.rstrip("/") + "/")
    deepest = max((x for x in mounts if r == x.mount_path or r.startswith(x.mount_path.rstrip("/") + "/")),
                  key=lambda x: len(x.mount_path))
    assert deepest.mount_path == m.mount_path
    # The same root, written any other way, must normalise to the same place.
    assert normalise_root(root) == r


# ----------------------------------------------------------------------------- volumes and roots

def test_pod_mounts_with_subpath_and_kinds() -> None:
    p = pod("p0", ktc_fs("/data/kv"), volumes=[
        PVC_VOL, SHM_VOL, {"name": "host", "hostPath": {"path": "/srv/cache/"}},
        {"name": "cfg", "configMap": {"name": "x"}}, {"name": "eph", "ephemeral": {"volumeClaimTemplate": {}}},
    ], mounts=[
        {"name": "kv", "mountPath": "/data", "subPath": "tiers/a"},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "host", "mountPath": "/host/", "subPath": "x"},
        {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True},
        {"name": "eph", "mountPath": "/eph"},
        {"name": "kv", "mountPath": "/bad", "subPath": "../escape"},
        {"name": "kv", "mountPath": "/expr", "subPathExpr": "$(POD_NAME)"},
        {"name": "missing", "mountPath": "/nothing"},
    ])
    mounts = {m.mount_path: m for m in pod_mounts(p.raw, "vllm")}
    assert set(mounts) == {"/data", "/dev/shm", "/host", "/etc/cfg", "/eph"}
    assert mounts["/data"].identity == ("pvc", "llm", "kv-cache") and mounts["/data"].base == "/tiers/a"
    assert mounts["/data"].label == "pvc/kv-cache"
    assert mounts["/dev/shm"].identity == ("emptyDir", "llm", "p0", "shm")
    assert mounts["/dev/shm"].label == "emptyDir shm@p0"
    assert mounts["/host"].identity == ("hostPath", "node-a") and mounts["/host"].base == "/srv/cache/x"
    assert mounts["/host"].label == "hostPath /srv/cache@node-a"
    assert mounts["/eph"].identity == ("pvc", "llm", "p0-eph")
    assert mounts["/etc/cfg"].read_only and not mounts["/etc/cfg"].deletable
    verdict = check_root("/data/kv", list(mounts.values()))
    assert verdict.ok and verdict.volume_path == "/tiers/a/kv"


@pytest.mark.parametrize("ktc,expected", [
    (ktc_fs("/mnt/files-storage"), ["/mnt/files-storage"]),
    (ktc_fs("/mnt/files-storage", "fs_python"), ["/mnt/files-storage"]),
    (ktc_legacy("/mnt/files-storage/kv-cache/"), ["/mnt/files-storage/kv-cache/"]),
    (ktc_fs(None), [None]),
    (None, []),
])
def test_fs_roots_from_every_config_form(ktc: str | None, expected: list[str | None]) -> None:
    assert fs_roots(pod("p", ktc)) == expected


# ----------------------------------------------------------------------------- planning

def test_one_target_per_shared_pvc() -> None:
    pods = [pod(f"d{i}", ktc_fs("/mnt/files-storage"), ready=i != 0) for i in range(4)]
    targets = plan_fs_clear(pods, pods)
    assert len(targets) == 1
    (t,) = targets
    assert t.volume == "pvc/kv-cache" and t.root == "/mnt/files-storage" and t.volume_path == "/"
    assert t.pods == ("d0", "d1", "d2", "d3") and t.refusal is None and t.other_pods == ()
    assert t.exec_pod == "d1"  # a ready pod first
    assert [c.pod for c in t.choices] == ["d1", "d2", "d3", "d0"]
    assert t.container == "vllm"


def test_subpath_mounts_of_the_same_directory_are_one_target() -> None:
    a = pod("a", ktc_fs("/mnt/files-storage/kv"))  # PVC root mounted at /mnt/files-storage
    b = pod("b", ktc_fs("/cache"), mounts=[{"name": "kv", "mountPath": "/cache", "subPath": "kv"}])
    (t,) = plan_fs_clear([a, b], [a, b])
    assert t.volume_path == "/kv" and t.pods == ("a", "b")


def test_nested_directories_fold_into_the_outer_one_but_not_with_model_only() -> None:
    a = pod("a", ktc_fs("/mnt/files-storage"))
    b = pod("b", ktc_fs("/mnt/files-storage/inner"))
    (t,) = plan_fs_clear([a, b], [a, b])
    assert t.volume_path == "/" and t.pods == ("a", "b") and t.exec_pod == "a"
    assert len(plan_fs_clear([a, b], [a, b], model_only=True)) == 2


def test_disjoint_subpaths_and_emptydirs_are_separate() -> None:
    a = pod("a", ktc_fs("/kv"), mounts=[{"name": "kv", "mountPath": "/kv", "subPath": "one"}])
    b = pod("b", ktc_fs("/kv"), mounts=[{"name": "kv", "mountPath": "/kv", "subPath": "two"}])
    assert {t.volume_path for t in plan_fs_clear([a, b], [a, b])} == {"/one", "/two"}
    e = [pod(n, ktc_fs("/dev/shm/fs"), volumes=[SHM_VOL], mounts=[{"name": "shm", "mountPath": "/dev/shm"}])
         for n in ("e0", "e1")]
    targets = plan_fs_clear(e, e)
    assert [t.volume for t in targets] == ["emptyDir shm@e0", "emptyDir shm@e1"]
    assert all(t.volume_path == "/fs" for t in targets)


def test_hostpath_is_per_node() -> None:
    host = [{"name": "h", "hostPath": {"path": "/var/kv"}}]
    m = [{"name": "h", "mountPath": "/kv"}]
    pods = [pod("a", ktc_fs("/kv"), volumes=host, mounts=m, node="n1"),
            pod("b", ktc_fs("/kv"), volumes=host, mounts=m, node="n1"),
            pod("c", ktc_fs("/kv"), volumes=host, mounts=m, node="n2")]
    targets = plan_fs_clear(pods, pods)
    assert [(t.volume, t.pods) for t in targets] == [("hostPath /var/kv@n1", ("a", "b")),
                                                     ("hostPath /var/kv@n2", ("c",))]


def test_other_pods_sharing_the_volume_are_named() -> None:
    targeted = [pod("d0", ktc_fs("/mnt/files-storage/kv"))]
    prefill = pod("p0", ktc_fs("/mnt/files-storage"), owner="prefill")
    apart = pod("x0", ktc_fs("/kv"), owner="other", mounts=[{"name": "kv", "mountPath": "/kv", "subPath": "else"}])
    elsewhere = pod("y0", ktc_fs("/mnt/files-storage"), ns="other-ns", owner="other")
    loader = {"metadata": {"name": "loader", "namespace": "llm"},
              "spec": {"volumes": [PVC_VOL], "containers": [
                  {"name": "c", "volumeMounts": [{"name": "kv", "mountPath": "/in", "subPath": "kv/sub"}]}]}}
    (t,) = plan_fs_clear(targeted, [targeted[0], prefill, apart, elsewhere], other_pod_objects=[loader])
    assert t.volume_path == "/kv"
    assert t.other_pods == ("loader", "p0")  # not x0 (a disjoint subPath) nor y0 (another namespace's claim)


HOST_VOL = {"name": "kv", "hostPath": {"path": "/srv/kv"}}


def test_a_hostpath_is_shared_across_namespaces_on_one_node_and_unlisted_namespaces_count() -> None:
    targeted = [pod("d0", ktc_fs("/mnt/files-storage/kv"), volumes=[HOST_VOL])]
    same_node = pod("b0", ktc_fs("/mnt/files-storage/kv"), volumes=[HOST_VOL], ns="tb", owner="b", model="org/b")
    other_node = pod("c0", ktc_fs("/mnt/files-storage/kv"), volumes=[HOST_VOL], ns="tc", owner="c", node="node-b")
    (t,) = plan_fs_clear(targeted, targeted, other_pod_objects=[same_node.raw, other_node.raw])
    assert t.other_pods == ("tb/b0",) and t.model_only  # not c0: the same path on another node
    (t,) = plan_fs_clear(targeted, targeted, unlisted="pods of namespaces that cannot be listed")
    assert t.other_pods == ("pods of namespaces that cannot be listed",) and t.model_only
    # a PVC is per namespace: namespaces that cannot be listed cannot share it
    (t,) = plan_fs_clear([pod("d0", ktc_fs("/mnt/files-storage/kv"))], [], unlisted="unlisted")
    assert t.other_pods == () and not t.model_only


def test_refusals_are_grouped_and_keep_the_pods() -> None:
    pods = [pod(f"d{i}", ktc_fs("/cache/kv")) for i in range(3)] + [pod("r", ktc_fs("relative"), owner="r")]
    targets = plan_fs_clear(pods, pods)
    assert len(targets) == 2 and all(t.refusal for t in targets)
    by_root = {t.root: t for t in targets}
    assert by_root["/cache/kv"].pods == ("d0", "d1", "d2") and "writable layer" in str(by_root["/cache/kv"].refusal)
    assert by_root["relative"].pods == ("r",) and by_root["relative"].exec_pod is None


def test_dev_shm_root_is_refused_even_when_mounted() -> None:
    p = pod("s", ktc_fs("/dev/shm"), volumes=[SHM_VOL], mounts=[{"name": "shm", "mountPath": "/dev/shm"}])
    (t,) = plan_fs_clear([p], [p])
    assert t.refusal and "vllm_offload" in t.refusal and t.volume == "emptyDir shm@s"


# ----------------------------------------------------------------------------- model-only

@pytest.mark.parametrize("name,ok", [
    ("Qwen_Qwen3-0.6B_0123456789ab", True), ("Qwen_Qwen3-0.6B_0123456789ab_r0", True),
    ("Qwen_Qwen3-0.6B_0123456789ab_r17", True), ("Qwen_Qwen3-0.6B_0123456789AB", False),
    ("Qwen_Qwen3-0.6B_0123456789a", False), ("Qwen_Qwen3-0.6B_0123456789abc", False),
    ("Qwen_Qwen3-0.6B_0123456789ab_r", False), ("Qwen_Qwen3-0.6B_0123456789ab_rx", False),
    ("Qwen_Qwen3-0.6B-Instruct_0123456789ab", False), ("meta_llama_0123456789ab", False),
    ("Qwen_Qwen3-0.6B_0123456789ab.tmp", False), ("Qwen_Qwen3-0.6B", False),
])
def test_model_dir_names(name: str, ok: bool) -> None:
    assert is_model_dir(name, ["Qwen/Qwen3-0.6B"]) is ok


def test_the_model_selects_never_the_served_name() -> None:
    p = pod("p", ktc_fs("/mnt/files-storage"), model="/models/llama")
    assert model_dir_prefixes(p) == ("/models/llama",)
    (t,) = plan_fs_clear([p], [p], model_only=True)
    assert t.model_only and t.models == ("/models/llama",)
    (t,) = plan_fs_clear([p], [p])
    assert not t.model_only and t.models == ()
    # vLLM names the directories from the model only (vllm/v1/kv_offload/config.py)
    obj = dict(p.raw)
    obj["spec"] = dict(obj["spec"])
    ctr = dict(obj["spec"]["containers"][0])
    ctr["args"] = [*ctr["args"], "--served-model-name", "org/victim"]
    obj["spec"]["containers"] = [ctr]
    served = describe_pod(obj)
    assert served is not None and served.serve.served_model_name == "org/victim"
    assert model_dir_prefixes(served) == ("/models/llama",)


# ----------------------------------------------------------------------------- the program in the pod

def run_script(root: str, *extra: str) -> tuple[int, dict[str, Any]]:
    models = [e for e in extra if not e.startswith("--")]
    argv = python_argv(root, models, count_only="--count-only" in extra)
    argv[0] = sys.executable
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def vllm_record(model: str, **more: Any) -> tuple[str, str]:
    """(directory name, config.json text) as vLLM's FileMapper and FS tier write them."""
    fields = {"model_name": model, "tokens_per_hash": 16, "blocks_per_file": 1, "tp_size": 1, "pp_size": 1,
              "pcp_size": 1, "dcp_size": 1, "dtype": "torch.bfloat16", "kv_cache_groups": [],
              "inference_engine": "vllm", **more}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
    return f"{model.replace('/', '_')}_{digest}", json.dumps(fields, indent=2, sort_keys=True)


QWEN_DIR, QWEN_RECORD = vllm_record("Qwen/Qwen3-0.6B")


def make_tree(root: Path, outside: Path) -> None:
    base = QWEN_DIR
    (root / base).mkdir(parents=True)
    (root / base / "config.json").write_text(QWEN_RECORD)
    blocks = root / (base + "_r0") / "abc" / "de_g0"
    blocks.mkdir(parents=True)
    for i in range(3):
        (blocks / f"abcde{i}.bin").write_bytes(b"x" * 100)
    (root / "other_fedcba987654_r0").mkdir()
    (root / "other_fedcba987654_r0" / "x.bin").write_bytes(b"y" * 10)
    odd = root / "$(touch canary)" / "it's \"quoted\" a b\nnl"
    odd.mkdir(parents=True)
    (odd / "f").write_bytes(b"z")
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (root / "link-to-outside").symlink_to(outside)
    (root / base / "link-file").symlink_to(outside / "keep.txt")


def test_script_empties_children_never_the_root_and_never_follows_links(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = tmp_path / "tier", tmp_path / "outside"
    make_tree(root, outside)
    monkeypatch.chdir(tmp_path)
    code, doc = run_script(str(root))
    assert code == 0, doc
    assert doc["before"] == {"files": 8, "bytes": 1 + 300 + 10 + len(QWEN_RECORD), "dirs": 7}
    assert doc["after"] == {"files": 0, "bytes": 0, "dirs": 0}
    assert root.is_dir() and list(root.iterdir()) == []
    assert (outside / "keep.txt").read_text() == "keep"
    assert not (tmp_path / "canary").exists()


def test_script_model_only(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    make_tree(root, tmp_path / "outside")
    code, doc = run_script(str(root), "Qwen/Qwen3-0.6B")
    assert code == 0, doc
    # the record (config.json) is kept: vLLM writes it once at start, and it alone names the model
    assert doc["before"]["files"] == 4 and doc["after"]["files"] == 0
    assert doc["others"]["files"] == 3 and doc["unidentified"] == []
    assert sorted(p.name for p in root.iterdir()) == [
        "$(touch canary)", QWEN_DIR, "link-to-outside", "other_fedcba987654_r0"]
    assert [p.name for p in (root / QWEN_DIR).iterdir()] == ["config.json"]
    # a second run finds the blocks written since by their record
    (root / (QWEN_DIR + "_r0") / "abc").mkdir(parents=True)
    (root / (QWEN_DIR + "_r0") / "abc" / "new.bin").write_bytes(b"n")
    code, doc = run_script(str(root), "Qwen/Qwen3-0.6B")
    assert code == 0 and doc["before"]["files"] == 1 and doc["after"]["files"] == 0, doc


def test_script_count_only_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    make_tree(root, tmp_path / "outside")
    code, doc = run_script(str(root), "--count-only")
    assert code == 0 and doc["before"]["files"] == 8 and doc["after"] is None
    assert len(list(root.iterdir())) == 5


@pytest.mark.parametrize("bad", ["", "/", "relative", "/a/../b", "/a//b", "/a/b/"])
def test_script_refuses_unnormalised_roots(bad: str) -> None:
    code, doc = run_script(bad)
    assert code == 3 and doc["refused"]


def test_script_refuses_a_symlinked_root_or_parent(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "f").write_text("keep")
    (tmp_path / "link").symlink_to(real)
    for root in (tmp_path / "link", tmp_path / "link" / "."):
        code, doc = run_script(str(root).rstrip("/.") if str(root).endswith("/.") else str(root))
        assert code == 3 and "symlink" in doc["refused"]
    (real / "sub").mkdir()
    code, doc = run_script(str(tmp_path / "link" / "sub"))
    assert code == 3 and "symlink" in doc["refused"]
    assert (real / "f").read_text() == "keep"


def test_script_missing_root_and_file_root(tmp_path: Path) -> None:
    code, doc = run_script(str(tmp_path / "nope" / "kv"))
    assert code == 0 and doc["missing"] and doc["after"]["files"] == 0
    (tmp_path / "file").write_text("x")
    code, doc = run_script(str(tmp_path / "file"))
    assert code == 3 and "not a directory" in doc["refused"]


def _bwrap_works() -> bool:
    if not shutil.which("bwrap"):
        return False
    try:
        return subprocess.run(["bwrap", "--bind", "/", "/", "--tmpfs", "/mnt", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _bwrap_works(), reason="bubblewrap cannot mount a tmpfs here")
def test_script_never_crosses_into_another_file_system(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    (root / "mnt").mkdir(parents=True)
    (root / "plain").write_text("gone")
    argv = python_argv(str(root))
    argv[0] = sys.executable
    # Inside bwrap a tmpfs is mounted at tier/mnt and a file written there; the script must not touch it.
    inner = [sys.executable, "-c", "import subprocess, sys; open(sys.argv[1] + '/kept', 'w').write('k');"
             " r = subprocess.run(sys.argv[2:], capture_output=True, text=True); print(r.stdout, end='');"
             " import os; print('KEPT' if os.path.exists(sys.argv[1] + '/kept') else 'LOST')",
             str(root / "mnt"), *argv]
    done = subprocess.run(["bwrap", "--bind", "/", "/", "--tmpfs", str(root / "mnt"), *inner],
                          capture_output=True, text=True, timeout=60)
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "KEPT", done.stdout + done.stderr
    doc = json.loads(lines[-2])
    assert doc["skipped_mounts"] == [str(root / "mnt")]
    assert not (root / "plain").exists()


# ----------------------------------------------------------------------------- run_fs_clear with a local "pod"

class LocalKube:
    """Runs exec argv locally with no shell; can pretend python3 is missing, time out or refuse."""

    def __init__(self, *, no_python: bool = False, timeout: bool = False,
                 errors: Mapping[str, KubeApiError] | None = None, lose_status: bool = False) -> None:
        self.no_python = no_python
        self.timeout = timeout
        self.lose_status = lose_status
        self.errors = dict(errors or {})
        self.calls: list[tuple[str, list[str]]] = []

    def exec_command(self, namespace: str, pod: str, container: str, argv: Sequence[str],
                     *, timeout_s: float = 60.0) -> ExecResult:
        self.calls.append((pod, list(argv)))
        if pod in self.errors:
            raise self.errors[pod]
        if self.timeout:
            return ExecResult(None, b"", b"", f"no exit status within {timeout_s:g} s", True)
        if argv[0] == "python3":
            if self.no_python:
                return ExecResult(None, b"", b"", 'exec: "python3": executable file not found in $PATH')
            argv = [sys.executable, *argv[1:]]
        done = subprocess.run(list(argv), capture_output=True, timeout=60)
        if self.lose_status and (argv[0] != "find" or "-delete" in argv):
            # the command ran, its output arrived, the stream lost its Status
            return ExecResult(None, done.stdout, done.stderr, "no exit status")
        return ExecResult(done.returncode, done.stdout, done.stderr, None)


def target_for(root: Path, *, models: tuple[str, ...] = (), pods: tuple[str, ...] = ("p0",)) -> FsVolumeTarget:
    from kubectl_kvreset.fs import ExecChoice

    return FsVolumeTarget(key="k", namespace="llm", volume="pvc/kv", root=str(root), volume_path="/",
                          exec_pod=pods[0], container="vllm",
                          choices=tuple(ExecChoice(p, "vllm", str(root)) for p in pods), pods=pods,
                          models=models, model_only=bool(models))


def test_run_fs_clear_with_python(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    make_tree(root, tmp_path / "outside")
    kube = LocalKube()
    res = run_fs_clear(kube, target_for(root))  # type: ignore[arg-type]
    assert res.result == "emptied" and res.method == "python3", res
    assert (res.files_before, res.bytes_before, res.files_after, res.bytes_after) == (8, 311 + len(QWEN_RECORD), 0, 0)
    assert list(root.iterdir()) == [] and (tmp_path / "outside" / "keep.txt").exists()
    (pod_name, argv), = kube.calls
    assert argv[:4] == ["python3", "-I", "-c", CLEAR_PROGRAM] and argv[4] == str(root)


def test_run_fs_clear_falls_back_to_find(tmp_path: Path) -> None:
    if not shutil.which("find"):
        pytest.skip("find is missing")
    root = tmp_path / "tier"
    make_tree(root, tmp_path / "outside")
    kube = LocalKube(no_python=True)
    res = run_fs_clear(kube, target_for(root))  # type: ignore[arg-type]
    assert res.result == "emptied" and res.method == "find", res
    assert res.files_before == 8 and res.bytes_before == 311 + len(QWEN_RECORD) and res.files_after == 0
    assert root.is_dir() and list(root.iterdir()) == []
    assert (tmp_path / "outside" / "keep.txt").read_text() == "keep"
    assert all(argv[0] in ("python3", "find") for _, argv in kube.calls)


def test_run_fs_clear_find_model_only_cannot_read_records_so_leaves(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    make_tree(root, tmp_path / "outside")
    res = run_fs_clear(LocalKube(no_python=True), target_for(root, models=("Qwen/Qwen3-0.6B",)))  # type: ignore[arg-type]
    assert res.result == "left" and res.files_before == 5 and res.files_after == 5, res
    assert res.message and "--whole-tier" in res.message and "config.json" in res.message
    assert len(res.unidentified) == 2 and len(list(root.iterdir())) == 5


def test_run_fs_clear_find_refuses_symlink_root(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    res = run_fs_clear(LocalKube(no_python=True), target_for(tmp_path / "link"))  # type: ignore[arg-type]
    assert res.result == "refused" and (tmp_path / "real" / "f").exists()


def test_run_fs_clear_timeout_is_not_emptied(tmp_path: Path) -> None:
    res = run_fs_clear(LocalKube(timeout=True), target_for(tmp_path), timeout_s=5)  # type: ignore[arg-type]
    assert res.result == "failed" and res.timed_out and "not emptied" in (res.message or "")


def test_run_fs_clear_forbidden_and_next_pod(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    root.mkdir()
    (root / "f").write_text("x")
    forbidden = KubeApiError(403, "Forbidden", 'pods "p0" is forbidden: cannot create pods/exec')
    res = run_fs_clear(LocalKube(errors={"p0": forbidden}), target_for(root, pods=("p0", "p1")))  # type: ignore[arg-type]
    assert res.result == "failed" and "pods/exec" in (res.message or "") and (root / "f").exists()
    gone = KubeApiError(404, "NotFound", 'pods "p0" not found')
    res = run_fs_clear(LocalKube(errors={"p0": gone}), target_for(root, pods=("p0", "p1")))  # type: ignore[arg-type]
    assert res.result == "emptied" and res.exec_pod == "p1" and not (root / "f").exists()


def test_run_fs_clear_refused_target_runs_nothing() -> None:
    t = FsVolumeTarget(key="r", namespace="llm", volume=None, root="", volume_path=None, exec_pod=None,
                       container=None, refusal="the FS tier root is empty")
    kube = LocalKube()
    res = run_fs_clear(kube, t)  # type: ignore[arg-type]
    assert res.result == "refused" and kube.calls == []


def test_find_argv_keeps_root_one_element() -> None:
    root = "/mnt/a b/$(touch x)\n'"
    for step in ("check", "list", "count", "delete"):
        argv = find_argv(step, root)
        assert argv[:2] == ["find", "-P"] and root in argv
    assert find_argv("delete", root) == ["find", "-P", root, "-xdev", "-mindepth", "1", "-delete"]
    with pytest.raises(ValueError):
        find_argv("shell", root)


# ----------------------------------------------------------------------------- rows of the clear-fs command

def test_rows_and_table_escape_control_characters(tmp_path: Path) -> None:
    from kubectl_kvreset.cli.clear_fs import FsReport, columns, fs_row, row_code
    from kubectl_kvreset.report import ExitCode

    root = tmp_path / "new\nline"
    root.mkdir()
    (root / "f").write_bytes(b"abc")
    target = target_for(root)
    planned = fs_row(target)
    assert planned["result"] == "planned" and planned["files_before"] is None and planned["pod_count"] == 1
    res = run_fs_clear(LocalKube(), target)  # type: ignore[arg-type]
    row = fs_row(target, res)
    assert (row["result"], row["files_before"], row["bytes_before"], row["files_after"]) == ("emptied", 1, 3, 0)
    assert row["root"] == str(root) and row_code(res) is ExitCode.OK
    report = FsReport("FsTierClear", columns("llm"))
    report.add(row)
    table = report.render("table")
    assert len(table.splitlines()) == 2 and "\\n" in table
    assert json.loads(report.render("json"))[0]["root"] == str(root)
    refused = FsVolumeTarget(key="r", namespace="llm", volume=None, root="relative", volume_path=None,
                             exec_pod=None, container=None, pods=("p",), refusal="relative")
    assert fs_row(refused)["result"] == "refused" and fs_row(refused)["message"] == "relative"


@pytest.mark.parametrize("no_python", [False, True])
def test_run_fs_clear_without_exit_status_is_unconfirmed(tmp_path: Path, no_python: bool) -> None:
    if no_python and not shutil.which("find"):
        pytest.skip("find is missing")
    root = tmp_path / "tier"
    make_tree(root, tmp_path / "outside")
    res = run_fs_clear(LocalKube(lose_status=True, no_python=no_python), target_for(root))  # type: ignore[arg-type]
    assert res.result == "unconfirmed", res
    assert "without an exit status" in (res.message or "") and "?" not in (res.message or "")
    assert list(root.iterdir()) == []  # it did delete; only the confirmation is missing


def test_run_fs_clear_lost_status_before_any_answer_is_failed_with_reason(tmp_path: Path) -> None:
    class Cut(LocalKube):
        def exec_command(self, namespace: str, pod: str, container: str, argv: Sequence[str],
                         *, timeout_s: float = 60.0) -> ExecResult:
            return ExecResult(None, b"", b"", None)

    res = run_fs_clear(Cut(), target_for(tmp_path))  # type: ignore[arg-type]
    assert res.result == "failed" and res.message
    assert "without an exit status" in res.message and "?" not in res.message and "None" not in res.message


def _sglang_layouts() -> str:
    """The SGLang HiCache page names of a long model at TP 8 (a per-model call's expression)."""
    from kubectl_kvreset.engines import engine_for
    from kubectl_kvreset.engines.sglang.engine import file_name_regex

    found = engine_for({"name": "m", "command": ["python3", "-m", "sglang.launch_server"], "args": [
        "--model-path", "meta-llama/Llama-3.1-70B-Instruct", "--tp-size", "8",
        "--enable-hierarchical-cache", "--hicache-storage-backend", "file"]}, {})
    assert found is not None
    return str(file_name_regex(found[1]))  # type: ignore[arg-type]


def test_the_program_sent_is_the_script_compacted_and_fits_an_8k_request_line() -> None:
    from urllib.parse import urlencode

    assert [line.strip() for line in CLEAR_PROGRAM.splitlines()] == [
        line.strip() for line in CLEAR_SCRIPT.splitlines() if line.strip() and not line.strip().startswith("#")]
    from kubectl_kvreset.stores.lmcachekey import disk_name_regex

    # a long namespace, a 63-character pod name, a deep root, a long model name
    for argv in (python_argv("/mnt/files-storage/" + "k" * 30, ["meta-llama/Llama-3.1-70B-Instruct"], model_only=True),
                 python_argv("/mnt/lmcache/" + "k" * 30, ["meta-llama-Llama-3.1-70B-Instruct@"], file_suffix=".pt",
                             layout=disk_name_regex(), model_only=True),
                 python_argv("/mnt/hicache", [""], file_suffix=".bin", model_only=True,
                             layout=_sglang_layouts())):
        # SGLang's page-name expression is longer: a shorter root, a 52-character pod and a 12-character
        # namespace (llm-d's SGLang decode pods are named about so); past the limit the API server's
        # refusal fails the row, nothing is deleted (tests/e2e/test_sglang.py)
        long = "--layout" not in argv or not argv[argv.index("--layout") + 1].startswith("[\\da-f]")
        ns, pod = ("n" * 40, "p" * 63) if long else ("n" * 12, "p" * 52)
        line = (f"GET /api/v1/namespaces/{ns}/pods/{pod}/exec?"
                + urlencode([("command", a) for a in argv] + [("container", "vllm"), ("stdout", "true"),
                                                             ("stderr", "true")]) + " HTTP/1.1")
        assert len(line) < 8192, (len(line), argv[5:])
        assert argv[3] in (CLEAR_PROGRAM, PACKED_PROGRAM)
    # the plain program where it fits (what an audit log shows), the packed one only past the budget
    assert python_argv("/mnt/kv", ["org/m"], model_only=True)[3] == CLEAR_PROGRAM
    assert python_argv("/mnt/hicache", [""], file_suffix=".bin", layout=_sglang_layouts(),
                       model_only=True)[3] == PACKED_PROGRAM


def test_the_packed_program_is_the_program() -> None:
    import base64
    import zlib

    blob = PACKED_PROGRAM.split("'")[1]
    assert zlib.decompress(base64.urlsafe_b64decode(blob)).decode() == CLEAR_PROGRAM
    assert all(c.isalnum() or c in "-_=" for c in blob)


def test_the_packed_program_runs_as_the_plain_one(tmp_path: Path) -> None:
    root = tmp_path / "hicache"
    root.mkdir()
    for name in ("a" * 64 + "_m_0_1.bin", "b" * 64 + "_other_0_1.bin"):
        (root / name).write_bytes(b"x")
    for program in (CLEAR_PROGRAM, PACKED_PROGRAM):
        argv = python_argv(str(root), [""], file_suffix=".bin", layout=r"[\da-f]{64}_m(_\d+_1)?", model_only=True,
                           count_only=True)
        argv[0], argv[3] = sys.executable, program
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and json.loads(done.stdout)["before"]["files"] == 1, done.stdout + done.stderr
