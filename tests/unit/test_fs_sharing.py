"""Which pods are listed to find other users of a volume: the targets' namespaces for PVCs and
emptyDirs, every namespace (one list) for a hostPath or NFS volume, and a refused cluster-wide
list falls back to the namespaces with the unlisted ones counted as possible users."""

from __future__ import annotations

from typing import Any

from kubectl_kvreset.job.fsclear import sharing_pod_objects
from kubectl_kvreset.kube import KubeApiError


class FakeKube:
    """Records every pod list (namespace or None); refuses the cluster-wide one when asked."""

    def __init__(self, *, refuse_all: bool = False) -> None:
        self.calls: list[str | None] = []
        self.refuse_all = refuse_all

    def list_items(self, group_version: str, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        assert (group_version, plural) == ("v1", "pods")
        self.calls.append(namespace)
        if namespace is None and self.refuse_all:
            raise KubeApiError(403, "Forbidden", "pods is forbidden")
        return [{"metadata": {"name": f"p-{namespace or 'all'}", "namespace": namespace or "any"}}]


def test_pvc_and_emptydir_list_only_the_targets_namespaces() -> None:
    kube = FakeKube()
    notes: list[str] = []
    found, unlisted = sharing_pod_objects(kube, ["ta", "tb"], [("pvc", "ta", "c"), ("emptyDir", "ta", "p", "v")],
                                          notes)  # type: ignore[arg-type]
    assert kube.calls == ["ta", "tb"] and not unlisted and not notes and len(found) == 2


def test_hostpath_or_nfs_lists_every_namespace_once() -> None:
    for ident in (("hostPath", "node-a"), ("nfs", "10.0.0.1")):
        kube = FakeKube()
        found, unlisted = sharing_pod_objects(kube, ["ta", "tb"], [("pvc", "ta", "c"), ident], [])  # type: ignore[arg-type]
        assert kube.calls == [None] and not unlisted and found[0]["metadata"]["name"] == "p-all"


def test_a_refused_cluster_wide_list_falls_back_and_says_so() -> None:
    kube = FakeKube(refuse_all=True)
    notes: list[str] = []
    found, unlisted = sharing_pod_objects(kube, ["ta"], [("hostPath", "node-a")], notes)  # type: ignore[arg-type]
    assert kube.calls == [None, "ta"] and unlisted and len(found) == 1
    assert len(notes) == 1 and "not permitted" in notes[0] and "only the targets' models' files" in notes[0]
