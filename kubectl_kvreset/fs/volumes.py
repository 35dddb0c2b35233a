"""Identity of the storage behind a mounted volume (PVC -> PV backing, CSI shares, hostPath, NFS),
the sharing check between two mounts (:func:`may_share`), and a pod's FS roots and model prefixes."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..engines.vllm.servecmd import known_model
from .roots import _MODEL_DIR_NAME, FS_TIER_TYPES, MountedVolume, RootRefused, _overlaps, normalise_root

if TYPE_CHECKING:
    from ..pods import VllmPod


def _volume_identity(volume: Mapping[str, Any], namespace: str, pod: str,
                     node: str) -> tuple[str, tuple[str, ...], str, str] | None:
    """(kind, identity, base, label) of a pod volume; None for a kind without contents."""
    name = str(volume.get("name", ""))
    if "persistentVolumeClaim" in volume:
        claim = str((volume["persistentVolumeClaim"] or {}).get("claimName", ""))
        return "pvc", ("pvc", namespace, claim), "/", f"pvc/{claim}"
    if "ephemeral" in volume:
        # Generic ephemeral volume: the claim is named <pod>-<volume> (Kubernetes KEP 1698).
        claim = f"{pod}-{name}"
        return "ephemeral", ("pvc", namespace, claim), "/", f"pvc/{claim}"
    if "emptyDir" in volume:
        return "emptyDir", ("emptyDir", namespace, pod, name), "/", f"emptyDir {name}@{pod}"
    if "hostPath" in volume:
        try:
            path = normalise_root(str((volume["hostPath"] or {}).get("path", "")))
        except RootRefused:
            return None
        return "hostPath", ("hostPath", node or "?"), path, f"hostPath {path}@{node or '?'}"
    if "nfs" in volume:
        nfs = volume["nfs"] or {}
        try:
            path = normalise_root(str(nfs.get("path", "/")))
        except RootRefused:
            return None
        server = str(nfs.get("server", ""))
        return "nfs", ("nfs", server), path, f"nfs {server}:{path}"
    kinds = [k for k in volume if k != "name"]
    kind = kinds[0] if kinds else "unknown"
    return kind, (kind, namespace, pod, name), "/", f"{kind} {name}@{pod}"


@dataclass(frozen=True)
class Claims:
    """What the plugin read of the PersistentVolumeClaims the pods mount, to judge sharing by
    backing storage rather than by claim name.

    Attributes:
        backing: ``(namespace, claim)`` -> ``(identity, top)``: the storage the claim's
            PersistentVolume keeps its files on (:func:`pv_backing`) and the directory of it the
            claim shows. A mount of such a claim gets that identity, so two claims bound to
            PersistentVolumes on one NFS export, one CSI volume or one host directory are one
            volume for sharing (and an inline ``nfs`` volume of the same export too).
        notes: ``("pvc", namespace, claim)`` -> why its storage is not known (the claim or its
            PersistentVolume cannot be read), added to the rows of that volume.
        shared: ``("pvc", namespace, claim)`` -> the OTHER PODS entry of a claim that may share
            its storage with claims not seen (its PersistentVolume cannot be read and the claim
            is ``ReadWriteMany``): the volume counts as shared, so only the targets' models go.
    """

    backing: Mapping[tuple[str, str], tuple[tuple[str, ...], str]] = field(default_factory=dict)
    notes: Mapping[tuple[str, ...], str] = field(default_factory=dict)
    shared: Mapping[tuple[str, ...], str] = field(default_factory=dict)


def pv_backing(pv: Mapping[str, Any]) -> tuple[tuple[str, ...], str]:
    """The storage a PersistentVolume object keeps its files on: ``(identity, top)``.

    ``nfs``: ``("nfs", server)`` and the export path (the identity an inline ``nfs`` volume has,
    :class:`MountedVolume`); ``csi``: see :func:`_csi_backing`; ``hostPath`` and ``local``:
    ``("hostPath", "")`` (the node is the pod's, filled in by :func:`pod_mounts`) and the path;
    any other kind: ``("pv", name)``, ``/`` (that PersistentVolume only). Kubernetes ``core/v1``
    ``PersistentVolumeSpec``. Two identities are compared with :func:`may_share`.
    """
    spec = pv.get("spec") or {}
    name = str((pv.get("metadata") or {}).get("name", ""))
    try:
        if isinstance(spec.get("nfs"), Mapping):
            return ("nfs", str(spec["nfs"].get("server", ""))), normalise_root(str(spec["nfs"].get("path", "/")))
        if isinstance(spec.get("csi"), Mapping):
            return _csi_backing(spec["csi"], spec.get("accessModes"))
        for kind in ("hostPath", "local"):
            if isinstance(spec.get(kind), Mapping):
                return ("hostPath", ""), normalise_root(str(spec[kind].get("path", "")))
    except RootRefused:
        pass
    return ("pv", name), "/"


#: Access modes under which the nodes of many pods mount one volume (Kubernetes ``core/v1``).
_MANY_ACCESS = frozenset({"ReadWriteMany", "ReadOnlyMany"})


def _share_top(share: str, sub: str | None) -> str:
    """The directory of a share a PersistentVolume shows: ``share`` plus ``subDir``; a subDir
    that is a template (``${pvc.metadata.name}``) or holds ``..`` is left out (the top is then
    the share's, wider, so it overlaps more)."""
    top = normalise_root("/" + share.lstrip("/"))
    parts = [p for p in (sub or "").split("/") if p not in ("", ".")]
    if parts and ".." not in parts and "${" not in (sub or ""):
        top = posixpath.join(top, *parts)
    return top


def _csi_backing(csi: Mapping[str, Any], access: Any) -> tuple[tuple[str, ...], str]:
    """``(identity, top)`` of a CSI PersistentVolume, by the share it names where the driver is
    known, since drivers of shared file systems give each PersistentVolume its own
    ``volumeHandle`` even when they name one share (csi-driver-nfs ``deploy/example/pv-nfs-csi.yaml``):

    - ``nfs.csi.k8s.io``: ``("nfs", server)`` and ``share`` + ``subDir`` of ``volumeAttributes``
      (keys compared in lower case, the parameter names of csi-driver-nfs ``pkg/nfs/nfs.go``):
      the identity of an inline ``nfs`` volume of that export;
    - ``smb.csi.k8s.io``: ``("smb", host)`` and the share path of ``source``
      (``//host/share[/dir]``) + ``subDir``;
    - ``efs.csi.aws.com``: ``("efs", fileSystemId)`` from the ``volumeHandle``
      ``FileSystemId[:Subpath[:AccessPointId]]`` (aws-efs-csi-driver ``README.md``) and the
      sub-path; with an access point its directory is not known, so ``/``;
    - any other driver: ``("csi", driver, volumeHandle, "access=many")`` when the volume is
      ``ReadWriteMany``/``ReadOnlyMany``, else ``"access=once"``, and ``/``: two of one driver
      with many-node access may be one share (:func:`may_share`); others (a block volume such as
      an EBS disk) are one volume per handle.
    """
    driver, handle = str(csi.get("driver", "")), str(csi.get("volumeHandle", ""))
    raw = csi.get("volumeAttributes")
    attrs = {str(k).lower(): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
    if driver == "nfs.csi.k8s.io" and attrs.get("server") and attrs.get("share"):
        return ("nfs", attrs["server"]), _share_top(attrs["share"], attrs.get("subdir"))
    if driver == "smb.csi.k8s.io" and attrs.get("source"):
        host, _, share = attrs["source"].replace("\\", "/").lstrip("/").partition("/")
        return ("smb", host), _share_top(share or "/", attrs.get("subdir"))
    if driver == "efs.csi.aws.com" and handle.startswith("fs-"):
        fsid, _, rest = handle.partition(":")
        sub, _, access_point = rest.partition(":")
        return ("efs", fsid), "/" if access_point or not sub else _share_top(sub, None)
    modes = set(access) if isinstance(access, list) else set()
    return ("csi", driver, handle, "access=many" if modes & _MANY_ACCESS else "access=once"), "/"


#: Identity kinds whose storage spans namespaces (a node's directory, a network share): pods of
#: any namespace may mount it.
CROSS_NAMESPACE_KINDS = ("hostPath", "nfs", "csi", "smb", "efs")


def may_share(a: tuple[str, ...], a_path: str, b: tuple[str, ...], b_path: str) -> bool:
    """Whether directory ``a_path`` of storage ``a`` and ``b_path`` of ``b`` (identities as
    :class:`MountedVolume` and :func:`pv_backing` give them; normalised absolute paths) may hold
    the same files: the paths overlap (equal, or one a parent of the other) and

    - the identities are equal; or
    - both are NFS exports (or both SMB shares), whatever the server names: a Service's short
      name, ``name.ns``, ``name.ns.svc``, its FQDN, a trailing dot and its ClusterIP all name one
      server, and a DNS name and an address cannot be told apart without resolving them, so two
      exports count as one by path only; or
    - both are CSI volumes of one driver the plugin does not know (:func:`_csi_backing`), each
      with many-node access.

    Used only to find the pods that may share a target's storage: saying yes too often only
    keeps a deletion to the targets' models (it never deletes more); saying no wrongly deletes
    another pod's cache. Grouping the targets' own roots for deletion uses equal identities.
    """
    if not _overlaps(a_path, b_path):
        return False
    if a == b:
        return True
    if a[0] == b[0] and a[0] in ("nfs", "smb"):
        return True
    return (len(a) == len(b) == 4 and a[0] == b[0] == "csi" and a[1] == b[1]
            and a[3] == b[3] == "access=many")


def pod_mounts(pod: Mapping[str, Any], container: str, *, sharing: bool = False,
               claims: Claims | None = None) -> list[MountedVolume]:
    """The volume mounts of ``container`` in a pod object (``spec.volumes`` joined with the
    container's ``volumeMounts``; init containers too, by name).

    ``subPath`` moves the mount's ``base`` inside the volume; ``subPathExpr`` (expanded by the
    kubelet from the env) and mounts with a relative or ``..`` path or subPath are left out, so
    no root can be placed on them. With ``sharing`` (the mounts of a pod that may share a
    target's volume) they are kept with ``base`` ``/``: the directory they show is not known, so
    it counts as anywhere in the volume (the whole volume is in use). With ``claims``, a claim
    whose PersistentVolume was read gets the identity and top directory of its backing storage
    (:class:`Claims`). Never raises for odd specs.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace, pod_name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    node = str(spec.get("nodeName") or "")
    volumes = {str(v.get("name")): v for v in spec.get("volumes") or [] if isinstance(v, Mapping)}
    chosen = None
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        if isinstance(c, Mapping) and c.get("name") == container:
            chosen = c
            break
    if chosen is None:
        return []
    out: list[MountedVolume] = []
    for m in chosen.get("volumeMounts") or []:
        if not isinstance(m, Mapping) or (m.get("subPathExpr") and not sharing):
            continue
        vol = volumes.get(str(m.get("name")))
        if vol is None:
            continue
        try:
            mount_path = normalise_root(str(m.get("mountPath", "")))
        except RootRefused:
            continue
        ident = _volume_identity(vol, namespace, pod_name, node)
        if ident is None:
            continue
        kind, identity, base, label = ident
        if claims is not None and identity[0] == "pvc" and (identity[1], identity[2]) in claims.backing:
            identity, base = claims.backing[(identity[1], identity[2])]
            if identity == ("hostPath", ""):
                identity = ("hostPath", node or "?")
        sub = str(m.get("subPath") or "")
        if m.get("subPathExpr"):
            pass  # sharing only: the sub-path is not evaluated, so the base stays the volume's top
        elif sub:
            parts = [p for p in sub.split("/") if p not in ("", ".")]
            if ".." in parts or sub.startswith("/"):
                if not sharing:
                    continue
            else:
                base = posixpath.join(base, *parts)
        out.append(MountedVolume(str(m.get("name")), kind, mount_path, bool(m.get("readOnly")),
                                 identity, base, label))
    return out


def pod_claims(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(namespace, claim)`` of every PersistentVolumeClaim a pod object mounts (generic
    ephemeral volumes as ``<pod>-<volume>``), in spec order, without repeats."""
    meta = pod.get("metadata") or {}
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    out: list[tuple[str, str]] = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if not isinstance(v, Mapping):
            continue
        if isinstance(v.get("persistentVolumeClaim"), Mapping):
            key = (ns, str(v["persistentVolumeClaim"].get("claimName", "")))
        elif "ephemeral" in v:
            key = (ns, f"{name}-{v.get('name', '')}")
        else:
            continue
        if key not in out:
            out.append(key)
    return out


def fs_roots(pod: VllmPod) -> list[str | None]:
    """The FS-tier roots a vLLM pod's config names (tier types in :data:`FS_TIER_TYPES`), in
    config order, duplicates removed; a tier without a root gives None."""
    roots: list[str | None] = []
    for tier in pod.layout.tiers:
        if tier.kind.value == "fs" and tier.tier_type in FS_TIER_TYPES and tier.root_dir not in roots:
            roots.append(tier.root_dir)
    return roots


def model_dir_prefixes(pod: VllmPod) -> tuple[str, ...]:
    """The models whose directories a pod's vLLM writes under a root: the model (``vllm serve
    MODEL`` / ``--model``) only. vLLM names the directories and records ``model_name`` from
    ``model_config.model`` (``vllm/v1/kv_offload/config.py::OffloadingModelConfig.name``), never
    from ``--served-model-name``, so a served name selects nothing."""
    model = known_model(pod.serve)
    return (model,) if model else ()


def is_model_dir(name: str, models: Iterable[str]) -> bool:
    """True when a directory name under a root is ``<model>_<hash12>`` or
    ``<model>_<hash12>_r<N>`` with ``<model>`` exactly one of ``models`` with ``/`` made ``_``
    (``vllm/v1/kv_offload/tiering/fs/manager.py``). The name only: ``org/victim`` and
    ``org_victim`` both pass for ``org_victim_<hash12>``; :data:`CLEAR_SCRIPT` decides by the
    directory's ``config.json``."""
    m = _MODEL_DIR_NAME.fullmatch(name)
    return m is not None and any(m.group(1) == x.replace("/", "_") for x in models if x)
