"""Which PersistentVolumes may be one storage: NFS exports compared by export path (server names
are not compared), CSI volumes by the share their attributes name (csi-driver-nfs, SMB, EFS),
unknown drivers with many-node access as possibly shared; distinct exports and block volumes
stay distinct."""

from __future__ import annotations

from typing import Any

import pytest

from kubectl_kvreset.fs import may_share, plan_fs_clear, pv_backing
from kubectl_kvreset.job.fsclear import read_claims
from kubectl_kvreset.job.storedisk import plan_disks
from tests.unit.test_fs_scoped_safety import ClaimKube, claim, kv_pod, lmcache_pod


def pv(name: str, source: dict[str, Any], modes: tuple[str, ...] = ("ReadWriteMany",)) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"accessModes": list(modes), **source}}


def nfs(server: str, path: str) -> dict[str, Any]:
    return {"nfs": {"server": server, "path": path}}


def csi(driver: str, handle: str, **attrs: str) -> dict[str, Any]:
    return {"csi": {"driver": driver, "volumeHandle": handle, "volumeAttributes": attrs}}


def shared(a: dict[str, Any], b: dict[str, Any]) -> bool:
    (ia, pa), (ib, pb) = pv_backing(a), pv_backing(b)
    return may_share(ia, pa, ib, pb)


SAME = [
    # one Service by its FQDN and its short name (the tester's case), name.ns.svc, a trailing dot, its ClusterIP
    (nfs("nfs.storage.svc.cluster.local", "/exports/kv"), nfs("nfs.storage", "/exports/kv")),
    (nfs("nfs.storage.svc", "/exports/kv/"), nfs("nfs.storage.svc.cluster.local.", "//exports//kv")),
    (nfs("nfs.storage", "/exports/kv"), nfs("10.96.0.12", "/exports/kv")),
    (nfs("nfs.storage", "/exports"), nfs("nfs", "/exports/kv")),  # one export a parent of the other
    # csi-driver-nfs: a unique volumeHandle per PV (deploy/example/pv-nfs-csi.yaml), one share
    (csi("nfs.csi.k8s.io", "kv-a-unique-id", server="nfs-server.default.svc.cluster.local", share="/exports/kv"),
     csi("nfs.csi.k8s.io", "kv-b-unique-id", server="nfs-server.default.svc.cluster.local", share="/exports/kv")),
    (csi("nfs.csi.k8s.io", "h1", server="nfs-server", share="/exports", subDir="kv"),
     nfs("nfs-server.default.svc", "/exports/kv")),  # a CSI share and an in-tree nfs PV of it
    (csi("smb.csi.k8s.io", "s1", source="//smb.default.svc.cluster.local/share"),
     csi("smb.csi.k8s.io", "s2", source="//smb/share", subDir="kv")),
    (csi("efs.csi.aws.com", "fs-0abc"), csi("efs.csi.aws.com", "fs-0abc::fsap-1")),
    (csi("efs.csi.aws.com", "fs-0abc:/kv"), csi("efs.csi.aws.com", "fs-0abc:/kv/x")),
    (csi("example.com/shared-fs", "v1"), csi("example.com/shared-fs", "v2")),  # unknown driver, both RWX
]

DISTINCT = [
    (nfs("nfs.storage", "/exports/kv"), nfs("nfs.storage", "/exports/other")),
    (nfs("nfs.storage", "/exports/kv"), nfs("nfs.storage", "/exports/kv2")),  # a prefix that is no parent
    (csi("nfs.csi.k8s.io", "h1", server="nfs", share="/exports/a"),
     csi("nfs.csi.k8s.io", "h2", server="nfs", share="/exports/b")),
    (csi("nfs.csi.k8s.io", "h1", server="nfs", share="/exports", subDir="a"),
     csi("nfs.csi.k8s.io", "h2", server="nfs", share="/exports", subDir="b")),
    (csi("efs.csi.aws.com", "fs-0abc"), csi("efs.csi.aws.com", "fs-0def")),
    (csi("efs.csi.aws.com", "fs-0abc:/a"), csi("efs.csi.aws.com", "fs-0abc:/b")),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_volumes_that_may_be_one_storage_share(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert shared(pv("a", a), pv("b", b)) and shared(pv("b", b), pv("a", a))


@pytest.mark.parametrize(("a", "b"), DISTINCT)
def test_different_exports_stay_distinct(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert not shared(pv("a", a), pv("b", b)) and not shared(pv("b", b), pv("a", a))


def test_block_volumes_and_single_node_csi_volumes_stay_distinct() -> None:
    ebs = ("ReadWriteOnce",)
    assert not shared(pv("a", csi("ebs.csi.aws.com", "vol-1"), ebs), pv("b", csi("ebs.csi.aws.com", "vol-2"), ebs))
    assert shared(pv("a", csi("ebs.csi.aws.com", "vol-1"), ebs), pv("b", csi("ebs.csi.aws.com", "vol-1"), ebs))
    # one RWX, one RWO of an unknown driver; two RWX of different drivers
    assert not shared(pv("a", csi("example.com/fs", "v1")), pv("b", csi("example.com/fs", "v2"), ebs))
    assert not shared(pv("a", csi("example.com/fs", "v1")), pv("b", csi("example.org/fs", "v2")))
    # in-tree block volumes: one PersistentVolume each
    assert not shared(pv("a", {"awsElasticBlockStore": {"volumeID": "vol-1"}}, ebs),
                      pv("b", {"awsElasticBlockStore": {"volumeID": "vol-1"}}, ebs))


def test_csi_backing_identities() -> None:
    assert pv_backing(pv("p", csi("nfs.csi.k8s.io", "x", Server="nfs", Share="/exports/", SubDir="kv/"))) == (
        ("nfs", "nfs"), "/exports/kv")
    # a templated subDir is left out: the share's top, which overlaps more
    assert pv_backing(pv("p", csi("nfs.csi.k8s.io", "x", server="nfs", share="/e",
                                  subDir="${pvc.metadata.name}")))[1] == "/e"
    assert pv_backing(pv("p", csi("smb.csi.k8s.io", "x", source="//host/share/dir"))) == (
        ("smb", "host"), "/share/dir")
    assert pv_backing(pv("p", csi("efs.csi.aws.com", "fs-1:/kv:fsap-2"))) == (("efs", "fs-1"), "/")
    assert pv_backing(pv("p", csi("ebs.csi.aws.com", "vol-1"), ("ReadWriteOnce",))) == (
        ("csi", "ebs.csi.aws.com", "vol-1", "access=once"), "/")


@pytest.mark.parametrize(("a", "b"), [SAME[0], SAME[4]], ids=["nfs-server-names", "csi-driver-nfs"])
def test_the_other_pod_on_one_share_makes_the_deletion_per_model(a: dict[str, Any], b: dict[str, Any]) -> None:
    kube = ClaimKube({"kv-a": claim("pv-a"), "kv-b": claim("pv-b")}, {"pv-a": pv("pv-a", a), "pv-b": pv("pv-b", b)})
    t0, o0 = kv_pod("a0", "kv-a"), kv_pod("b0", "kv-b", model="org/b")
    claims = read_claims(kube, [("llm", "kv-a"), ("llm", "kv-b")])  # type: ignore[arg-type]
    (t,) = plan_fs_clear([t0], [t0, o0], claims=claims)
    assert t.other_pods == ("b0",) and t.model_only, t
    # the LMCache disk step judges the same way
    la, lb = lmcache_pod("l0", "org/m", owner="l"), lmcache_pod("x0", "org/x", owner="x")
    for p, name in ((la, "kv-a"), (lb, "kv-b")):
        p.raw["spec"]["volumes"][0] = {"name": "kv", "persistentVolumeClaim": {"claimName": name}}
    (call,) = plan_disks(kube, [la], [la, lb], {}, shared=False,  # type: ignore[arg-type]
                         list_pods=lambda _ids: ([], None))
    assert call.scope == "model" and call.others == ("llm/x0",), call


def test_two_different_exports_of_one_server_keep_the_whole_deletion() -> None:
    kube = ClaimKube({"kv-a": claim("pv-a"), "kv-b": claim("pv-b")},
                     {"pv-a": pv("pv-a", nfs("nfs", "/exports/a")), "pv-b": pv("pv-b", nfs("nfs", "/exports/b"))})
    t0, o0 = kv_pod("a0", "kv-a"), kv_pod("b0", "kv-b", model="org/b")
    (t,) = plan_fs_clear([t0], [t0, o0], claims=read_claims(kube, [("llm", "kv-a"), ("llm", "kv-b")]))  # type: ignore[arg-type]
    assert t.other_pods == () and not t.model_only
