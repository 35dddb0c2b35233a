"""A per-model FS deletion never runs without a model, and every pod that may use a target's
volume counts as a sharer: ``subPathExpr`` mounts (the whole volume), terminating pods, native
sidecars; the LMCache disk step sees the same sharers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from kubectl_kvreset.fs import plan_fs_clear, pod_mounts, python_argv, run_fs_clear
from kubectl_kvreset.job.storedisk import plan_disks
from tests.unit.test_fstier import MODEL, PVC_VOL, LocalKube, ktc_fs, make_tree, pod, vllm_record

ROOT = "/mnt/files-storage/kv"


def no_model_pod(name: str = "t0") -> Any:
    """A targeted pod whose model is not known: ``vllm serve`` with no model, a ``--config`` file
    on an emptyDir (not readable from the spec)."""
    p = pod(name, ktc_fs(ROOT))
    c = p.raw["spec"]["containers"][0]
    c["args"] = [a for a in c["args"] if a != MODEL] + ["--config", "/etc/vcfg/v.yaml"]
    c["volumeMounts"].append({"name": "vcfg", "mountPath": "/etc/vcfg"})
    p.raw["spec"]["volumes"].append({"name": "vcfg", "emptyDir": {}})
    from kubectl_kvreset.discovery import describe_pod
    described = describe_pod(p.raw)
    assert described is not None and described.serve.model is None
    return described


def test_the_program_refuses_a_per_model_deletion_with_no_model(tmp_path: Path) -> None:
    root = tmp_path / "tier"
    make_tree(root, tmp_path / "outside")
    before = sorted(str(p) for p in root.rglob("*"))
    argv = python_argv(str(root), [], model_only=True)
    assert argv[-1] == "--model-only"
    argv[0] = sys.executable
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "no model" in done.stdout, done.stdout
    assert sorted(str(p) for p in root.rglob("*")) == before


def test_a_shared_volume_with_no_known_model_is_refused_and_nothing_runs() -> None:
    target = no_model_pod()
    other = pod("o0", ktc_fs(ROOT), model="org/b", owner="other")
    (t,) = plan_fs_clear([target], [target, other])
    assert t.model_only and t.models == () and t.refusal is not None
    assert "the model this pod serves is not known" in t.refusal and "--config" in t.refusal
    assert "--whole-tier" in t.refusal and "o0" in t.refusal
    kube = LocalKube()
    res = run_fs_clear(kube, t)  # type: ignore[arg-type]
    assert res.result == "refused" and kube.calls == []
    # --whole-tier is the consent to empty it whole
    (w,) = plan_fs_clear([target], [target, other], whole_tier=True)
    assert w.refusal is None and not w.model_only


def test_model_only_with_no_known_model_is_refused_with_the_remedy() -> None:
    target = no_model_pod()
    (t,) = plan_fs_clear([target], [target], model_only=True)
    assert t.refusal is not None and "without --model-only" in t.refusal
    # the fallback of `clear` when the sharers cannot be listed plans model_only too
    kube = LocalKube()
    assert run_fs_clear(kube, t).result == "refused" and kube.calls == []  # type: ignore[arg-type]


def test_an_unlisted_namespace_on_a_hostpath_with_no_known_model_is_refused() -> None:
    host = {"name": "kv", "hostPath": {"path": "/srv/kv"}}
    target = no_model_pod()
    target.raw["spec"]["volumes"][0] = host
    from kubectl_kvreset.discovery import describe_pod
    target = describe_pod(target.raw)
    (t,) = plan_fs_clear([target], [target], unlisted="pods of namespaces that cannot be listed")
    assert t.refusal is not None and "not known" in t.refusal


def test_a_run_that_deletes_the_known_models_but_not_an_unknown_ones_is_left(tmp_path: Path) -> None:
    known = pod("k0", ktc_fs(ROOT))
    target = no_model_pod("u0")
    other = pod("o0", ktc_fs(ROOT), model="org/b", owner="other")
    (t,) = plan_fs_clear([known, target], [known, target, other])
    assert t.refusal is None and t.models == (MODEL,) and t.unknown_models
    assert any("not known" in n for n in t.notes)
    root = tmp_path / "tier"
    make_tree(root, tmp_path / "outside")
    from dataclasses import replace

    from kubectl_kvreset.fs import ExecChoice
    local = replace(t, root=str(root), choices=(ExecChoice("k0", "vllm", str(root)),))
    res = run_fs_clear(LocalKube(), local)  # type: ignore[arg-type]
    assert res.result == "left" and "u0" in (res.message or ""), res


def subpathexpr_sharer(name: str = "s0") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "llm"},
            "spec": {"volumes": [PVC_VOL], "containers": [
                {"name": "c", "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 "volumeMounts": [{"name": "kv", "mountPath": "/mnt/x", "subPathExpr": "$(POD_NAME)"}]}]}}


def test_a_subpathexpr_mount_counts_as_the_whole_volume_for_sharing() -> None:
    target = pod("d0", ktc_fs(ROOT))
    obj = subpathexpr_sharer()
    assert pod_mounts(obj, "c") == []  # never a place for a target's root
    (m,) = pod_mounts(obj, "c", sharing=True)
    assert m.base == "/" and m.identity == ("pvc", "llm", "kv-cache")
    (t,) = plan_fs_clear([target], [target], other_pod_objects=[obj])
    assert t.other_pods == ("s0",) and t.model_only and t.models == (MODEL,)


def test_terminating_pods_and_native_sidecars_are_sharers() -> None:
    target = pod("d0", ktc_fs(ROOT))
    dying = pod("x0", ktc_fs(ROOT), model="org/b", owner="other")
    dying.raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    sidecar = {"metadata": {"name": "sc", "namespace": "llm"},
               "spec": {"volumes": [PVC_VOL], "containers": [{"name": "main"}], "initContainers": [
                   {"name": "sync", "restartPolicy": "Always",
                    "volumeMounts": [{"name": "kv", "mountPath": "/data"}]}]}}
    (t,) = plan_fs_clear([target], [target, dying], other_pod_objects=[sidecar])
    assert t.other_pods == ("sc", "x0") and t.model_only


DISK_KTC = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'


def lmcache_pod(name: str, model: str, *, owner: str) -> Any:
    from kubectl_kvreset.discovery import describe_pod
    obj = pod(name, None, model=model, owner=owner, mounts=[{"name": "kv", "mountPath": "/mnt/lmc"}]).raw
    c = obj["spec"]["containers"][0]
    c["args"] += ["--kv-transfer-config", DISK_KTC]
    c["env"] = [{"name": "LMCACHE_LOCAL_DISK", "value": "file:///mnt/lmc/"},
                {"name": "LMCACHE_MAX_LOCAL_DISK_SIZE", "value": "5"}]
    described = describe_pod(obj)
    assert described is not None
    return described


def test_the_lmcache_disk_step_counts_subpathexpr_sidecar_and_terminating_sharers() -> None:
    target = lmcache_pod("l0", "org/m", owner="l")
    cases: list[tuple[str, list[dict[str, Any]], list[Any]]] = []
    cases.append(("s0", [subpathexpr_sharer()], []))
    sidecar = {"metadata": {"name": "sc", "namespace": "llm"},
               "spec": {"volumes": [PVC_VOL], "containers": [{"name": "main"}], "initContainers": [
                   {"name": "sync", "restartPolicy": "Always", "volumeMounts": [{"name": "kv", "mountPath": "/d"}]}]}}
    cases.append(("sc", [sidecar], []))
    dying = lmcache_pod("x0", "org/other", owner="x")
    dying.raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cases.append(("x0", [], [dying]))
    for name, objects, universe in cases:
        calls = plan_disks(ClaimKube({}, {}), [target], [target, *universe], {}, shared=False,  # type: ignore[arg-type]
                           list_pods=lambda _ids, objs=objects: (objs, None))
        (call,) = calls
        assert call.scope == "model" and call.model == "org/m" and call.others == (f"llm/{name}",), (name, call)


def test_the_lmcache_disk_step_never_deletes_per_model_without_a_model() -> None:
    target = lmcache_pod("l0", "org/m", owner="l")
    c = target.raw["spec"]["containers"][0]
    c["args"] = [a for a in c["args"] if a != "org/m"]
    from kubectl_kvreset.discovery import describe_pod
    target = describe_pod(target.raw)
    assert target is not None and target.serve.model is None
    (call,) = plan_disks(ClaimKube({}, {}), [target], [target], {}, shared=True,  # type: ignore[arg-type]
                         list_pods=lambda _ids: ([subpathexpr_sharer()], None))
    assert call.scope == "model" and call.blocked is not None and "not known" in call.blocked
    assert "--config" not in call.prefixes
    argv = python_argv("/mnt/lmc", call.prefixes, file_suffix=".pt", model_only=call.scope == "model")
    assert "--model-only" in argv


_ = vllm_record


class ClaimKube:
    """Answers PVC and PV gets from dicts; a name in ``refused`` gets 403."""

    def __init__(self, pvcs: dict[str, Any], pvs: dict[str, Any], refused: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.pvcs, self.pvs, self.refused = pvcs, pvs, refused
        self.calls: list[tuple[str, str]] = []

    def get_object(self, gv: str, plural: str, ns: str | None, name: str) -> dict[str, Any]:
        from kubectl_kvreset.kube import KubeApiError
        self.calls.append((plural, name))
        if name in self.refused:
            raise KubeApiError(403, "Forbidden", f"{plural} is forbidden")
        table = self.pvcs if plural == "persistentvolumeclaims" else self.pvs
        if name not in table:
            raise KubeApiError(404, "NotFound", "not found")
        return dict(table[name])


def claim(volume: str | None, modes: tuple[str, ...] = ("ReadWriteMany",)) -> dict[str, Any]:
    return {"spec": {"volumeName": volume, "accessModes": list(modes)}}


NFS_PV = {"metadata": {"name": "pv"}, "spec": {"nfs": {"server": "10.0.0.9", "path": "/exports/kv/"}}}


def test_pv_backing_of_each_source() -> None:
    from kubectl_kvreset.fs import pv_backing
    assert pv_backing(NFS_PV) == (("nfs", "10.0.0.9"), "/exports/kv")
    assert pv_backing({"spec": {"csi": {"driver": "efs.csi.aws.com", "volumeHandle": "fs-1"}}}) == (
        ("efs", "fs-1"), "/")
    assert pv_backing({"spec": {"hostPath": {"path": "/srv/kv"}}}) == (("hostPath", ""), "/srv/kv")
    assert pv_backing({"spec": {"local": {"path": "/mnt/disk"}}}) == (("hostPath", ""), "/mnt/disk")
    assert pv_backing({"metadata": {"name": "x"}, "spec": {"awsElasticBlockStore": {}}}) == (("pv", "x"), "/")


def kv_pod(name: str, claim_name: str, *, model: str = MODEL, node: str = "node-a") -> Any:
    return pod(name, ktc_fs(ROOT), volumes=[{"name": "kv", "persistentVolumeClaim": {"claimName": claim_name}}],
               model=model, owner=name, node=node)


def test_claims_on_one_nfs_export_or_one_inline_nfs_volume_are_one_volume() -> None:
    from kubectl_kvreset.job.fsclear import read_claims
    kube = ClaimKube({"kv-a": claim("pv-a"), "kv-b": claim("pv-b")},
                     {"pv-a": NFS_PV, "pv-b": {**NFS_PV, "metadata": {"name": "pv-b"}}})
    a, b = kv_pod("a0", "kv-a"), kv_pod("b0", "kv-b", model="org/b")
    claims = read_claims(kube, [("llm", "kv-a"), ("llm", "kv-b")])  # type: ignore[arg-type]
    (t,) = plan_fs_clear([a], [a, b], claims=claims)
    assert t.other_pods == ("b0",) and t.model_only and t.volume == "pvc/kv-a"
    assert t.volume_path == "/exports/kv/kv"
    inline = {"metadata": {"name": "n0", "namespace": "other"}, "spec": {
        "volumes": [{"name": "n", "nfs": {"server": "10.0.0.9", "path": "/exports"}}],
        "containers": [{"name": "c", "volumeMounts": [{"name": "n", "mountPath": "/x"}]}]}}
    claims = read_claims(kube, [("llm", "kv-a")])  # type: ignore[arg-type]
    (t,) = plan_fs_clear([a], [a], claims=claims, other_pod_objects=[inline])
    assert t.other_pods == ("other/n0",) and t.model_only
    # without the PersistentVolumes: two names, two volumes
    (t,) = plan_fs_clear([a], [a, b])
    assert t.other_pods == () and not t.model_only


def test_a_hostpath_persistentvolume_is_per_node() -> None:
    from kubectl_kvreset.job.fsclear import read_claims
    host = {"metadata": {"name": "h"}, "spec": {"hostPath": {"path": "/srv/kv"}}}
    kube = ClaimKube({"kv-a": claim("h1"), "kv-b": claim("h2")}, {"h1": host, "h2": host})
    a, b = kv_pod("a0", "kv-a"), kv_pod("b0", "kv-b", model="org/b")
    far = kv_pod("c0", "kv-b", model="org/c", node="node-b")
    claims = read_claims(kube, [("llm", "kv-a"), ("llm", "kv-b")])  # type: ignore[arg-type]
    (t,) = plan_fs_clear([a], [a, b, far], claims=claims)
    assert t.other_pods == ("b0",) and t.volume.startswith("pvc/kv-a")  # type: ignore[union-attr]


def test_an_unreadable_pv_is_said_and_a_readwritemany_claim_counts_as_shared() -> None:
    from kubectl_kvreset.job.fsclear import read_claims
    a = kv_pod("a0", "kv-a")
    kube = ClaimKube({"kv-a": claim("pv-a")}, {}, refused={"pv-a"})
    claims = read_claims(kube, [("llm", "kv-a")])  # type: ignore[arg-type]
    (t,) = plan_fs_clear([a], [a], claims=claims)
    assert t.model_only and len(t.other_pods) == 1 and "ReadWriteMany" in t.other_pods[0]
    assert any("PersistentVolume pv-a of pvc/kv-a cannot be read" in n and "persistentvolumes" in n for n in t.notes)
    # a ReadWriteOnce claim: said, not counted as shared
    kube = ClaimKube({"kv-a": claim("pv-a", ("ReadWriteOnce",))}, {}, refused={"pv-a"})
    (t,) = plan_fs_clear([a], [a], claims=read_claims(kube, [("llm", "kv-a")]))  # type: ignore[arg-type]
    assert not t.model_only and t.other_pods == () and any("cannot be read" in n for n in t.notes)
    # an unbound claim (no volumeName) and a claim not found change nothing
    kube = ClaimKube({"kv-a": claim(None)}, {})
    (t,) = plan_fs_clear([a], [a], claims=read_claims(kube, [("llm", "kv-a"), ("llm", "gone")]))  # type: ignore[arg-type]
    assert not t.model_only and t.notes == ()


def test_the_lmcache_disk_step_judges_sharing_by_backing_storage() -> None:
    a = lmcache_pod("l0", "org/m", owner="l")
    b = lmcache_pod("x0", "org/x", owner="x")
    for p, name in ((a, "kv-a"), (b, "kv-b")):
        p.raw["spec"]["volumes"][0] = {"name": "kv", "persistentVolumeClaim": {"claimName": name}}
    kube = ClaimKube({"kv-a": claim("pv-a"), "kv-b": claim("pv-b")},
                     {"pv-a": NFS_PV, "pv-b": {**NFS_PV, "metadata": {"name": "pv-b"}}})
    (call,) = plan_disks(kube, [a], [a, b], {}, shared=False,  # type: ignore[arg-type]
                         list_pods=lambda _ids: ([], None))
    assert call.scope == "model" and call.others == ("llm/x0",), call
    (call,) = plan_disks(ClaimKube({}, {}), [a], [a, b], {}, shared=False,  # type: ignore[arg-type]
                         list_pods=lambda _ids: ([], None))
    assert call.scope == "store" and call.others == ()
