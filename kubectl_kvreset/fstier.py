"""Safe deletion of vLLM's FS offload tier: path checks, one deletion per backing volume, exec.

The FS tier is a directory tree that vLLM fills and never empties
(``vllm/v1/kv_offload/tiering/fs/manager.py``; llm-d's legacy ``llmd_fs_backend`` "is not
responsible for cleanup"). Its roots come from three config forms, all read by
:mod:`kubectl_kvreset.tiers`:

* ``TieringOffloadingSpec`` ``secondary_tiers[]`` of type ``fs`` (vLLM >= 0.23) or ``fs_python``
  (0.22.x) with ``root_dir``;
* llm-d's ``SharedStorageOffloadingSpec`` with ``shared_storage_path``.

The layout below a root (``vllm/v1/kv_offload/file_mapper.py``, unchanged 0.22.0 -> 0.33.0) is
``<root>/<model>_<hash12>/config.json`` plus ``<root>/<model>_<hash12>_r<rank>/...`` where
``<model>`` is the model (``model_config.model``, never ``--served-model-name``) with ``/``
replaced by ``_`` and ``<hash12>`` the first 12 hex digits of the sha256 of the run record's
canonical JSON; ``config.json`` is that record (``FileMapper.get_run_config``, written by
``tiering/fs/manager.py`` once at start), whose ``model_name`` is the model. Files are
content-addressed and shared by every pod that mounts the same volume, so the deletion is
planned per backing volume, not per pod.

A per-model deletion takes a directory only when its name and its record agree that it is the
model's: ``org/victim`` and ``org_victim`` both name ``org_victim_<hash12>``, and only the
record tells them apart (a ``_r<N>`` directory's record is its ``<model>_<hash12>`` sibling's).
A directory named like the model whose record is missing, unreadable or not a JSON object with
a ``model_name`` is left (the row says so and names ``--whole-tier``). The record of
a deleted model directory is kept, so that the next per-model deletion still knows the blocks
vLLM writes there afterwards.

Two halves:

* planning (pure): :func:`check_root` (the path rules), :func:`pod_mounts` (a container's
  volumes as the pod spec declares them), :func:`plan_fs_clear` (roots -> one
  :class:`FsVolumeTarget` per backing directory);
* running: :func:`run_fs_clear` runs a fixed program in the pod through ``pods/exec`` with the
  root and options as separate argv elements (never a shell string): ``python3 -I -c``
  :data:`CLEAR_SCRIPT`, or, when the image has no ``python3``, GNU ``find -P ... -xdev``.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .consent import SHARED_FLAG, User, hold, kept, unlisted_user
from .pods import describe_pod_containers
from .servecmd import known_model, unevaluated_in

if TYPE_CHECKING:
    from .kube import ExecResult, Kube
    from .pods import VllmPod

__all__ = [
    "CLEAR_PROGRAM",
    "CLEAR_SCRIPT",
    "Claims",
    "ExecChoice",
    "FS_TIER_TYPES",
    "FsClearResult",
    "FsVolumeTarget",
    "MountedVolume",
    "RootCheck",
    "UNEVALUATED_REMEDY",
    "check_root",
    "find_argv",
    "fs_roots",
    "is_model_dir",
    "missing_root_message",
    "model_dir_prefixes",
    "normalise_root",
    "plan_fs_clear",
    "pod_mounts",
    "pod_claims",
    "pv_backing",
    "may_share",
    "CROSS_NAMESPACE_KINDS",
    "python_argv",
    "run_fs_clear",
    "unevaluated_message",
    "model_unknown_message",
]

#: ``Tier.tier_type`` values whose root this module empties: the Tiering ``fs``/``fs_python``
#: secondary tiers and llm-d's legacy ``shared_storage_path`` (``vllm/v1/kv_offload/tiering/``).
#: LMCache's ``local_disk`` is left out: LMCache keeps its own in-memory index of that directory.
FS_TIER_TYPES: frozenset[str] = frozenset({"fs", "fs_python", "shared_storage"})

#: Directories that are never a root, exactly.
_SYSTEM_DIRS: frozenset[str] = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
    "/media", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/var/lib", "/var/log", "/var/run", "/var/tmp", "/var/cache",
})

#: Trees in which no root is accepted (``/dev`` has one exception: sub-directories of
#: ``/dev/shm`` other than vLLM's CPU-tier files).
_SYSTEM_TREES: tuple[str, ...] = (
    "/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin", "/sys",
    "/usr", "/run/secrets", "/var/run/secrets", "/dev",
)

_SHM = "/dev/shm"

#: ``<model>_<hash12>`` and ``<model>_<hash12>_r<rank>`` (``vllm/v1/kv_offload/file_mapper.py``).
_MODEL_DIR_NAME = re.compile(r"(.*)_([0-9a-f]{12})(_r[0-9]+)?", re.S)


class RootRefused(ValueError):
    """A root the path rules refuse; ``str()`` says why, fit for a user."""


@dataclass(frozen=True)
class MountedVolume:
    """One ``volumeMount`` of a container joined with its pod ``volume``.

    Attributes:
        name: the volume name in the pod spec.
        kind: ``pvc``, ``emptyDir``, ``hostPath``, ``ephemeral``, ``nfs`` or the spec's own key
            for other kinds (``configMap``, ``secret``, ...; never deleted from).
        mount_path: normalised absolute mount path in the container.
        read_only: the mount is read-only.
        identity: what makes two mounts the same storage: ``("pvc", ns, claim)``,
            ``("emptyDir", ns, pod, volume)``, ``("hostPath", node)``, ``("nfs", server)``; a
            claim's PersistentVolume may give ``("smb", host)``, ``("efs", id)`` or ``("csi", ...)``
            (:func:`pv_backing`). Sharing compares identities with :func:`may_share`.
        base: the directory of that storage the mount shows, as a normalised absolute path
            inside it (``/`` + ``subPath``; for hostPath and nfs the host/export path).
        label: how a row names the volume: ``pvc/NAME``, ``emptyDir NAME@pod``,
            ``hostPath /x@node``.
    """

    name: str
    kind: str
    mount_path: str
    read_only: bool
    identity: tuple[str, ...]
    base: str
    label: str

    @property
    def deletable(self) -> bool:
        """True for the kinds whose contents belong to the pods (not a ConfigMap, Secret...)."""
        return self.kind in ("pvc", "emptyDir", "hostPath", "ephemeral", "nfs") and not self.read_only


@dataclass(frozen=True)
class RootCheck:
    """The verdict on one root: ``root`` (normalised, when accepted), the ``mount`` holding it,
    ``volume_path`` (the root inside the mount's storage), or ``refusal`` (why not)."""

    raw: str | None
    root: str | None = None
    mount: MountedVolume | None = None
    volume_path: str | None = None
    refusal: str | None = None

    @property
    def ok(self) -> bool:
        """True when the root may be emptied."""
        return self.refusal is None


def _under(path: str, top: str) -> bool:
    """``path`` is ``top`` or inside it (both normalised absolute)."""
    return path == top or top == "/" or path.startswith(top + "/")


def normalise_root(root: str | None) -> str:
    """The normalised absolute form of an FS-tier root as vLLM's config gives it.

    Trailing slashes, ``//`` and ``.`` components are dropped (the legacy connector's README
    writes ``/mnt/files-storage/kv-cache/``); ``..`` is never resolved.

    Raises:
        RootRefused: empty, relative, holding a ``..`` component or a NUL byte.
    """
    if root is None or root == "":
        raise RootRefused("the FS tier root is empty: nothing names the directory to empty")
    if "\0" in root:
        raise RootRefused(f"the FS tier root {root!r} holds a NUL byte")
    if not root.startswith("/"):
        raise RootRefused(f"the FS tier root {root!r} is relative: vLLM resolves it against its "
                          "working directory, which the pod spec does not fix")
    parts = [p for p in root.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise RootRefused(f"the FS tier root {root!r} holds '..': refused rather than resolved")
    return "/" + "/".join(parts)


def _system_refusal(root: str) -> str | None:
    """Why a normalised root is a system location, or None."""
    if root == "/":
        return "the FS tier root is '/': refusing to empty the root file system"
    if root == _SHM:
        return ("the FS tier root is /dev/shm itself: it also holds vLLM's live CPU-tier files "
                "(/dev/shm/vllm_offload_*.mmap), which must not be deleted")
    if root.startswith(_SHM + "/"):
        first = root[len(_SHM) + 1:].split("/", 1)[0]
        if first.startswith("vllm_offload"):
            return (f"the FS tier root {root!r} is under /dev/shm/vllm_offload*: that is vLLM's "
                    "live CPU tier, cleared only by reset_external or a restart")
        return None
    if root in _SYSTEM_DIRS:
        return f"the FS tier root {root!r} is a system directory"
    for top in _SYSTEM_TREES:
        if _under(root, top):
            return f"the FS tier root {root!r} is inside the system directory {top}"
    return None


def check_root(root: str | None, mounts: Sequence[MountedVolume]) -> RootCheck:
    """Decide whether ``root`` (as the vLLM config writes it) may be emptied in a container
    whose volume mounts are ``mounts``.

    Accepted only when, after :func:`normalise_root`, the root is not a system location
    (``/``, ``/etc``..., ``/dev/shm`` itself, anything under ``/dev/shm/vllm_offload*``) and lies
    at or below the deepest mount holding it, and that mount is a writable PVC, emptyDir,
    hostPath, generic ephemeral or NFS volume. A root on no volume lives in the container's
    writable layer: refused, since a restart empties it anyway.

    Returns:
        A :class:`RootCheck`; never raises.
    """
    try:
        norm = normalise_root(root)
    except RootRefused as exc:
        return RootCheck(root, refusal=str(exc))
    holders = [m for m in mounts if _under(norm, m.mount_path)]
    why = _system_refusal(norm)
    if why:
        deepest = max(holders, key=lambda m: len(m.mount_path)) if holders else None
        return RootCheck(root, root=norm, mount=deepest, refusal=why)
    if not holders:
        return RootCheck(root, root=norm, refusal=(
            f"the FS tier root {norm!r} is on no volume of the pod: it lives in the container's "
            "writable layer, so a restart of the pod empties it (kubectl kvreset restart)"))
    mount = max(holders, key=lambda m: len(m.mount_path))
    if not mount.deletable:
        what = "read-only" if mount.read_only else f"a {mount.kind} volume"
        return RootCheck(root, root=norm, mount=mount, refusal=(
            f"the FS tier root {norm!r} is on {what} ({mount.label}): not deleted from"))
    rel = norm[len(mount.mount_path):].lstrip("/") if mount.mount_path != "/" else norm.lstrip("/")
    volume_path = posixpath.join(mount.base, rel) if rel else mount.base
    return RootCheck(root, root=norm, mount=mount, volume_path=volume_path)


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


@dataclass(frozen=True)
class ExecChoice:
    """Where the deletion can run: ``pod``, ``container`` and the ``root`` as that container sees it."""

    pod: str
    container: str
    root: str


@dataclass(frozen=True)
class FsVolumeTarget:
    """One FS-tier directory to empty, on one backing volume (or one refused root).

    Attributes:
        key: unique key: volume identity and the directory inside it (or the refused root).
        namespace: the pods' namespace.
        volume: the volume label (``pvc/NAME``, ``emptyDir NAME@pod``, ``hostPath /x@node``),
            None when the root maps to no volume.
        root: the root as the exec container sees it (normalised), or as written when refused.
        volume_path: the root inside the volume (``/`` + subPath + rest), None when refused.
        exec_pod, container: where the deletion runs (the first of ``choices``), None when refused.
        choices: every targeted pod that could run it, ready pods first.
        pods: targeted pods whose tier this directory is.
        other_pods: pods outside the targets that mount the same storage over this directory.
        models: with ``model_only``: the models (as ``vllm serve`` names them) whose directories
            are deleted (those whose ``config.json`` records the model).
        model_only: only ``<model>_<hash12>`` and ``..._r<N>`` children are deleted (asked with
            ``--model-only``, or because ``other_pods`` mount the volume and ``whole_tier`` was
            not given).
        refusal: why nothing will be deleted, or None.
        notes: other remarks for the row.
        whole_tier: every entry is deleted although ``other_pods`` mount the volume
            (``--whole-tier``).
        unevaluated: why the root as read is not the directory the server uses (a construct of
            the command line not evaluated, :attr:`kubectl_kvreset.tiers.Tier.unevaluated`):
            nothing is deleted and the tier is reported ``left``; None otherwise.
        model_unknown: with ``model_only``: why the name vLLM gives a target's model directories
            is not known (:attr:`kubectl_kvreset.servecmd.ServeConfig.model_unknown`): nothing is
            deleted and the tier is reported ``left``; None otherwise.
        unknown_models: with ``model_only``: the targeted pods (``name: why``) whose model is
            not known, so a per-model deletion cannot select their directories. With no model
            known at all the target is refused (:func:`unknown_model_message`); otherwise the
            known models' directories are deleted and the result is ``left``, not ``emptied``.
        held: why the directories of some targeted models are not deleted: pods outside the
            targets serve them on this volume (or may: a model that cannot be read, namespaces
            that cannot be listed), and neither ``--shared-stores`` nor ``--whole-tier`` was
            given (:func:`kubectl_kvreset.consent.hold`); None otherwise. Those models are not
            in ``models``; with none left nothing runs and the tier is ``left``.
        held_models: the models held back.
        sharers: ``other_pods`` with what each serves there (``ns/pod (model M)``).
        kept_pods: the sharers whose directories a per-model deletion keeps (another model, or
            no vLLM).
    """

    key: str
    namespace: str
    volume: str | None
    root: str | None
    volume_path: str | None
    exec_pod: str | None
    container: str | None
    choices: tuple[ExecChoice, ...] = ()
    pods: tuple[str, ...] = ()
    other_pods: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    model_only: bool = False
    refusal: str | None = None
    notes: tuple[str, ...] = ()
    whole_tier: bool = False
    unevaluated: str | None = None
    model_unknown: str | None = None
    unknown_models: tuple[str, ...] = ()
    held: str | None = None
    held_models: tuple[str, ...] = ()
    sharers: tuple[str, ...] = ()
    kept_pods: tuple[str, ...] = ()


def held_message(model: str, why: str, users: Sequence[User]) -> str:
    """Why ``model``'s directories are not deleted: pods outside the targets serve it on the
    volume (``why`` ``same``), or may (``unlisted``), and the flags that delete them anyway."""
    if why == "same":
        who = (f"{len(users)} pod(s) outside the targets serve {model} on this volume "
               f"({', '.join(u.shown() for u in users)}) and use its directories")
    else:
        who = f"{', '.join(u.name for u in users)} may serve {model} on this volume"
    return (f"{who}: {model}'s directories are kept; give {SHARED_FLAG} to delete them anyway "
            "(or --whole-tier to delete every entry of the root)")


def model_unknown_message(target: FsVolumeTarget) -> str:
    """The row message of a per-model deletion whose model name is not known: why, and that
    nothing was deleted (the directories vLLM names after it cannot be told from others')."""
    return (f"only the targets' models' directories under {target.root} may be deleted here, and {target.model_unknown}: "
            "nothing was deleted (to let the plugin read it, write the model name literally, or enable dev mode so "
            "clear reads it from the running server's /server_info)")


#: What lets the plugin read a root it cannot evaluate (:attr:`FsVolumeTarget.unevaluated`).
UNEVALUATED_REMEDY = ("to let the plugin read it, write the root as a literal path in --kv-transfer-config, "
                      "or give the variable it uses a literal value in the container's env")


def unevaluated_message(root: str | None, reason: str) -> str:
    """The row message of a root that cannot be evaluated: why, that nothing was deleted or
    looked at, and what would let the plugin read it."""
    return (f"the FS tier root {root!r} cannot be evaluated from the pod spec: {reason}; nothing was deleted "
            f"and the directory the server writes was not looked at ({UNEVALUATED_REMEDY})")


def unknown_model_reason(pod: VllmPod) -> str:
    """Why the plugin does not know the model a pod serves: its ``--config`` file could not be
    read, or the command names none (vLLM's default model is not guessed)."""
    if pod.serve.model_unknown:
        return pod.serve.model_unknown
    if pod.serve.config_error:
        return f"its --config file could not be read ({pod.serve.config_error})"
    return "the command names none (no 'vllm serve MODEL', no --model)"


def unknown_model_message(unknown: Sequence[str], root: str, sharing: Sequence[str], asked: bool, *,
                          partial: bool = False) -> str:
    """Why a per-model deletion leaves the directories of pods whose model is not known
    (``unknown``: ``pod: why``), and what would delete them: ``--whole-tier`` (every entry of
    ``root``, the ``sharing`` pods' files too) where pods outside the targets mount the volume,
    dropping ``--model-only`` (``asked``) where none does, or making the model known."""
    what = ("their directories are not deleted (the other models' are)" if partial
            else f"nothing is deleted under {root}")
    if sharing:
        flag = ("drop --model-only and give --whole-tier" if asked else "give --whole-tier")
        remedy = (f"{flag} to delete every entry of the root, the files of the pods outside the targets "
                  f"({', '.join(sharing)}) included")
    else:
        remedy = "without --model-only the root is emptied whole (no pod outside the targets mounts it)"
    return (f"the model this pod serves is not known: {'; '.join(unknown)}: a per-model deletion cannot select "
            f"its directories, so {what}; {remedy}; or make the model known (name it with 'vllm serve MODEL' "
            "or --model in the container's command, or let the plugin read the --config file)")


def missing_root_message(root: str, pod: str) -> str:
    """The message of a root that does not exist in the exec pod: not read as empty, since
    vLLM's FS tier writes ``<root>/<model>_<hash12>/config.json`` when it starts
    (``vllm/v1/kv_offload/file_mapper.py``), so the server may write somewhere else."""
    return (f"{root} does not exist in {pod}: nothing deleted, and not confirmed empty (vLLM creates the root "
            "when its FS tier starts, so the server may write to another directory than the spec names, "
            "e.g. a variable the spec does not hold, or has not started yet)")


@dataclass
class _Group:
    namespace: str
    identity: tuple[str, ...]
    volume_path: str
    label: str
    choices: list[tuple[bool, ExecChoice]] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def _overlaps(a: str, b: str) -> bool:
    return _under(a, b) or _under(b, a)


def plan_fs_clear(pods: Sequence[VllmPod], universe: Sequence[VllmPod], *, model_only: bool = False,
                  whole_tier: bool = False,
                  other_pod_objects: Sequence[Mapping[str, Any]] = (),
                  unlisted: str | None = None, claims: Claims | None = None,
                  shared_stores: bool = False) -> list[FsVolumeTarget]:
    """Plan the FS-tier deletion for the targeted ``pods``.

    Each root of each pod (:func:`fs_roots`) is checked with :func:`check_root` against the
    vLLM container's mounts. Accepted roots are grouped by backing storage (volume identity and
    the directory inside it), so a PVC shared by eight pods is emptied once. Without
    ``model_only`` a directory nested in another of the same volume is covered by the outer one.
    ``other_pods`` lists pods of ``universe`` (and of ``other_pod_objects``: any other pod
    objects, e.g. non-vLLM pods of the namespace) that are not targeted but mount the same
    storage over an overlapping directory.

    Args:
        pods: the targeted vLLM pods (``VllmPod.raw`` must hold the pod object).
        universe: every vLLM pod in scope.
        model_only: delete only the targets' models' ``<model>_<hash12>[_r<N>]`` directories
            (by name and ``config.json``, :data:`CLEAR_SCRIPT`).
        other_pod_objects: extra pod objects (API dicts) to check for sharing; a pod of another
            namespace than the volume's targets is named ``namespace/name``.
        unlisted: when set, the OTHER PODS entry naming pods of namespaces that could not be
            listed: added to every hostPath/NFS volume (their identity spans namespaces), which
            then counts as shared.
        claims: the PersistentVolumeClaims read (:class:`Claims`): mounts of claims on the same
            backing storage are one volume; a claim whose storage is not known adds its note, and
            counts as shared when it may be.
        whole_tier: on a volume that pods outside the targets also mount, delete every entry of
            the root anyway. Without it such a volume's deletion keeps to the directories of the
            models the targets serve (as ``model_only``), so other models' files are kept; a
            volume only targets mount is emptied whole (unless ``model_only``).
        shared_stores: ``--shared-stores``: a per-model deletion takes a model's directories
            even where pods outside the targets serve that model on the volume. Without it (and
            without ``whole_tier``) those models are held back (:func:`kubectl_kvreset.consent.hold`:
            a sharer that serves the model, one whose model cannot be read, namespaces that cannot
            be listed, claims whose storage cannot be told).

    Returns:
        Accepted targets sorted by namespace and volume, then refused ones; never raises.
    """
    groups: dict[tuple[tuple[str, ...], str], _Group] = {}
    refused: dict[tuple[str, str, str], tuple[str | None, str | None, list[str]]] = {}
    unknown: dict[tuple[str, str, str], list[str]] = {}
    target_names = {(p.namespace, p.name) for p in pods}
    target_containers = {(p.namespace, p.name, p.container) for p in pods}
    siblings = [p for p in universe if (p.namespace, p.name) in target_names
                and (p.namespace, p.name, p.container) not in target_containers]
    for pod in pods:
        mounts = pod_mounts(pod.raw, pod.container, claims=claims)
        roots = fs_roots(pod)
        why_unknown = {t.root_dir: t.unevaluated for t in pod.layout.tiers
                       if t.kind.value == "fs" and t.tier_type in FS_TIER_TYPES and t.unevaluated}
        for raw_root in roots:
            if raw_root in why_unknown:
                unknown.setdefault((pod.namespace, str(raw_root), str(why_unknown[raw_root])), []).append(pod.name)
                continue
            verdict = check_root(raw_root, mounts)
            if not verdict.ok or verdict.mount is None or verdict.volume_path is None or verdict.root is None:
                shown = verdict.root if verdict.root is not None else raw_root
                rkey = (pod.namespace, repr(raw_root), verdict.refusal or "")
                label = verdict.mount.label if verdict.mount else None
                entry = refused.setdefault(rkey, (shown, label, []))
                entry[2].append(pod.name)
                continue
            gkey = (verdict.mount.identity, verdict.volume_path)
            group = groups.get(gkey)
            if group is None:
                group = groups[gkey] = _Group(pod.namespace, verdict.mount.identity, verdict.volume_path,
                                              verdict.mount.label)
            ready = pod.ready and pod.phase == "Running"
            group.choices.append((ready, ExecChoice(pod.name, pod.container, verdict.root)))
            if pod.name not in group.pods:
                group.pods.append(pod.name)
            for prefix in model_dir_prefixes(pod):
                if prefix not in group.models:
                    group.models.append(prefix)
            if not model_dir_prefixes(pod):
                group.unknown.append(f"{pod.name}: {unknown_model_reason(pod)}")
    merged = _merge_nested(list(groups.values())) if not model_only else list(groups.values())
    others = _other_mounts(universe, other_pod_objects, target_names, claims)
    served = _served(universe, other_pod_objects, claims)
    targets: list[FsVolumeTarget] = []
    for group in merged:
        ordered = [c for ready, c in group.choices if ready] + [c for ready, c in group.choices if not ready]
        seen: list[ExecChoice] = []
        for c in ordered:
            if c not in seen:
                seen.append(c)
        sharers = sorted({(ns, name) for ident, ns, path, name in others
                          if may_share(ident, path, group.identity, group.volume_path)})
        sharing = [name if ns == group.namespace else f"{ns}/{name}" for ns, name in sharers]
        users = _fs_users(sharers, sharing, group, served)
        # another vLLM container of a targeted pod that --container left out writes there too
        for name, user in _sibling_users(siblings, group, claims):
            sharing.append(name)
            users.append(user)
        if unlisted is not None and group.identity[0] in CROSS_NAMESPACE_KINDS:
            sharing.append(unlisted)
            users.append(unlisted_user(unlisted))
        notes: list[str] = []
        if claims is not None:
            if group.identity in claims.shared:
                sharing.append(claims.shared[group.identity])
                users.append(unlisted_user(claims.shared[group.identity]))
            if group.identity in claims.notes:
                notes.append(claims.notes[group.identity])
        # a volume pods outside the targets mount: only the targets' models, unless --whole-tier
        scoped = model_only or (bool(sharing) and not whole_tier)
        if not any(ready for ready, _ in group.choices):
            notes.append("no targeted pod mounting it is ready; exec may fail")
        why_model = [p.serve.model_unknown for p in pods if p.namespace == group.namespace and p.name in group.pods
                     and p.serve.model_unknown]
        refusal = None
        if scoped and group.unknown and not why_model:
            # a per-model deletion without the model selects nothing of that pod's: never the whole root
            refusal = unknown_model_message(group.unknown, seen[0].root, sharing, model_only,
                                            partial=bool(group.models))
            if group.models:
                notes.append(refusal)
                refusal = None
        # the one consent rule: a model's directories go only where no pod outside the targets
        # serves that model there (or may), unless --shared-stores (or --whole-tier)
        models, held_models, held = list(group.models), [], []
        for model in group.models if scoped else ():
            consent = hold(users, model=model, given=shared_stores or whole_tier)
            if consent is not None:
                models.remove(model)
                held_models.append(model)
                held.append(held_message(model, consent.why, consent.users))
        keep = sorted({u.shown() for m in models for u in kept(users, m)}) if scoped else []
        targets.append(FsVolumeTarget(
            key=f"{'/'.join(group.identity)}:{group.volume_path}", namespace=group.namespace,
            volume=group.label, root=seen[0].root, volume_path=group.volume_path,
            exec_pod=seen[0].pod, container=seen[0].container, choices=tuple(seen),
            pods=tuple(sorted(group.pods)), other_pods=tuple(sharing),
            held="; ".join(held) or None, held_models=tuple(held_models),
            sharers=tuple(u.shown() for u in users), kept_pods=tuple(keep),
            models=tuple(models) if scoped else (), model_only=scoped,
            notes=tuple(notes), whole_tier=whole_tier and bool(sharing), refusal=refusal,
            unknown_models=tuple(group.unknown) if scoped else (),
            model_unknown="; ".join(dict.fromkeys(why_model)) if scoped and why_model else None))
    targets.sort(key=lambda t: (t.namespace, t.volume or "", t.volume_path or ""))
    for (ns, _, why), (shown, label, names) in refused.items():
        targets.append(FsVolumeTarget(
            key=f"refused:{ns}:{shown!r}:{label}", namespace=ns, volume=label, root=shown,
            volume_path=None, exec_pod=None, container=None, pods=tuple(sorted(set(names))),
            model_only=model_only, refusal=why))
    for (ns, raw, why), names in unknown.items():
        targets.append(FsVolumeTarget(
            key=f"unevaluated:{ns}:{raw!r}", namespace=ns, volume=None, root=raw, volume_path=None,
            exec_pod=None, container=None, pods=tuple(sorted(set(names))), model_only=model_only,
            unevaluated=why))
    return targets


#: A writer location that is not known: the pod may write anywhere on what it mounts.
_ANYWHERE: None = None


def _served(universe: Sequence[VllmPod], objects: Sequence[Mapping[str, Any]], claims: Claims | None
            ) -> dict[tuple[str, str], list[tuple[str, list[tuple[tuple[str, ...], str]] | None]]]:
    """Per vLLM pod (``(namespace, name)``), what its containers' FS tiers write: one
    ``(model, places)`` each, ``model`` ``""`` when it cannot be read (a ``$(MODEL)`` from a
    ConfigMap, a ``--config`` file not read), ``places`` the ``(volume identity, directory in
    it)`` of each root, or None when a root cannot be placed (not evaluated, or the ``--config``
    file that may set one was not read: it may write anywhere it mounts). Pods of ``objects``
    not in ``universe`` are read with :func:`kubectl_kvreset.pods.describe_pod_containers` (no
    ``--config`` file is read). A pod absent from the result runs no vLLM."""
    found: dict[tuple[str, str], list[tuple[str, list[tuple[tuple[str, ...], str]] | None]]] = {}
    seen = {(p.namespace, p.name) for p in universe}
    vllm = list(universe)
    for obj in objects:
        meta = obj.get("metadata") or {}
        if (str(meta.get("namespace", "")), str(meta.get("name", ""))) not in seen:
            vllm.extend(describe_pod_containers(obj))
    for pod in vllm:
        entries = found.setdefault((pod.namespace, pod.name), [])
        entry = _writes(pod, claims)
        if entry is not None:
            entries.append(entry)
    return found


def _writes(pod: VllmPod, claims: Claims | None) -> tuple[str, list[tuple[tuple[str, ...], str]] | None] | None:
    """What one vLLM container's FS tier writes: ``(model, places)`` as :func:`_served` gives
    them, or None when it writes no FS tier on a volume."""
    model = known_model(pod.serve)
    if model is None or unevaluated_in(model, pod.serve.unevaluated):
        model = ""
    unplaced = {t.root_dir for t in pod.layout.tiers if t.kind.value == "fs" and t.unevaluated}
    placed: list[tuple[tuple[str, ...], str]] = []
    anywhere = bool(pod.serve.config_error)
    mounts = pod_mounts(pod.raw, pod.container, claims=claims)
    for root in fs_roots(pod):
        if root in unplaced:
            anywhere = True
            break
        verdict = check_root(root, mounts)
        if verdict.ok and verdict.mount is not None and verdict.volume_path is not None:
            placed.append((verdict.mount.identity, verdict.volume_path))
    if anywhere or placed:
        return model, _ANYWHERE if anywhere else placed
    return None


def _sibling_users(siblings: Sequence[VllmPod], group: _Group, claims: Claims | None) -> list[tuple[str, User]]:
    """The vLLM containers of targeted pods that are not targets themselves (``--container``
    left them out) and whose FS tier writes into ``group``'s directory (or may), as
    ``(shown name, consent user)``: ``pod (container c)`` with the model it serves there."""
    out: list[tuple[str, User]] = []
    for pod in siblings:
        entry = _writes(pod, claims)
        if entry is None:
            continue
        model, places = entry
        if places is None or any(may_share(i, p, group.identity, group.volume_path) for i, p in places):
            name = f"{pod.name} (container {pod.container})"
            if pod.namespace != group.namespace:
                name = f"{pod.namespace}/{name}"
            out.append((name, User(name, model or None)))
    return out


def _fs_users(sharers: Sequence[tuple[str, str]], shown: Sequence[str], group: _Group,
              served: Mapping[tuple[str, str], list[tuple[str, list[tuple[tuple[str, ...], str]] | None]]]
              ) -> list[User]:
    """The pods outside the targets that mount ``group``'s storage, as consent users: a vLLM pod
    whose FS tier writes into the group's directory (or may: a root that cannot be placed) with
    each model it serves there; any other pod with ``serves`` False (it uses the volume, but
    writes no model directory there)."""
    users: list[User] = []
    for key, name in zip(sharers, shown, strict=True):
        models = [model for model, places in served.get(key, [])
                  if places is None or any(may_share(i, p, group.identity, group.volume_path) for i, p in places)]
        if models:
            users.extend(User(name, model or None) for model in dict.fromkeys(models))
        else:
            users.append(User(name, serves=False))
    return users


def _merge_nested(groups: list[_Group]) -> list[_Group]:
    """Fold a group whose directory lies inside another group's directory on the same storage
    into that outer group (its pods and exec choices come along)."""
    groups = sorted(groups, key=lambda g: (g.identity, len(g.volume_path)))
    kept: list[_Group] = []
    for g in groups:
        outer = next((k for k in kept if k.identity == g.identity and _under(g.volume_path, k.volume_path)), None)
        if outer is None:
            kept.append(g)
            continue
        outer.pods.extend(p for p in g.pods if p not in outer.pods)
        outer.models.extend(m for m in g.models if m not in outer.models)
        outer.unknown.extend(u for u in g.unknown if u not in outer.unknown)
    return kept


def _other_mounts(universe: Sequence[VllmPod], objects: Sequence[Mapping[str, Any]],
                  targets: set[tuple[str, str]],
                  claims: Claims | None = None) -> list[tuple[tuple[str, ...], str, str, str]]:
    """(identity, namespace, directory inside the storage, pod name) of every mount of every
    container (init containers too: a native sidecar runs beside the main ones) of every
    non-targeted pod, terminating ones too (a pod with ``deletionTimestamp`` keeps the volume
    mounted until it is gone, and its replacement reads the same files); a ``subPathExpr``
    mount counts as the whole volume (:func:`pod_mounts` with ``sharing``)."""
    out: list[tuple[tuple[str, ...], str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for obj in [p.raw for p in universe] + list(objects):
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if key in targets or key in seen:
            continue
        seen.add(key)
        spec = obj.get("spec") or {}
        for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
            for m in pod_mounts(obj, str(c.get("name", "")), sharing=True, claims=claims):
                out.append((m.identity, key[0], m.base, key[1]))
    return out


# --------------------------------------------------------------------------- the program run in the pod

#: The fixed program run in the pod with ``python3 -I -c CLEAR_SCRIPT ROOT [--model M]...
#: [--file-suffix S] [--layout REGEX] [--count-only] [--model-only]`` (what each selects: :func:`python_argv`). The root and model prefixes arrive as argv elements, never as code.
#: It walks from ``/`` with ``O_NOFOLLOW`` at every component (a symlink anywhere on the way is
#: refused), works on directory descriptors only (``dir_fd``), never follows a symlink below
#: the root (links are unlinked, not followed), never crosses into another file system below
#: the root (their mount points are listed in ``skipped_mounts``), deletes the root's children
#: and never the root, and prints one JSON object on stdout:
#: ``{"root", "missing", "refused", "before": {"files","bytes","dirs"}, "after": {...},
#: "others": {...} (model-only: what is left outside the scope, unidentified directories too),
#: "unidentified": [names with why] (model-only: directories named like a model's whose record
#: does not identify them), "skipped_mounts", "errors"}``.
#: Exit status 0 done, 1 some entries could not be deleted, 3 refused.
CLEAR_SCRIPT = r'''
import json, os, re, stat, sys
sys.setrecursionlimit(20000)
args = sys.argv[1:]
root = args[0] if args else ""
opt, i = {"--model": [], "--file-suffix": [None], "--layout": [None]}, 1
while i < len(args):
    if args[i] in opt and i + 1 < len(args):
        opt[args[i]].append(args[i + 1]); i += 2
    else:
        i += 1
count_only = "--count-only" in args
models, file_suffix, layout = opt["--model"], opt["--file-suffix"][-1], opt["--layout"][-1]
layout = layout and re.compile(layout)
dir_name = re.compile(r"(.*)_([0-9a-f]{12})(_r[0-9]+)?", re.S)
out = {"root": root, "missing": False, "refused": None, "before": None, "after": None,
       "others": None, "skipped_mounts": [], "errors": []}
def zero():
    return {"files": 0, "bytes": 0, "dirs": 0}
def done(code):
    sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush(); sys.exit(code)
def err(msg):
    if len(out["errors"]) < 20:
        out["errors"].append(msg)
parts = root.split("/")
if (not root.startswith("/") or root == "/" or os.path.normpath(root) != root
        or root.startswith("//") or ".." in parts or "\0" in root):
    out["refused"] = "root is not a normalised absolute path"; done(3)
if "--model-only" in args and not models:
    # a per-model deletion given no model selects nothing: never read as "every entry"
    out["refused"] = "no model given"; done(3)
FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
fd = os.open("/", FLAGS)
walked = ""
for comp in [p for p in parts if p]:
    walked += "/" + comp
    try:
        st = os.stat(comp, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        out["missing"] = True; out["before"] = out["after"] = zero()
        done(0)
    if stat.S_ISLNK(st.st_mode):
        out["refused"] = walked + " is a symlink: not followed"; done(3)
    if not stat.S_ISDIR(st.st_mode):
        out["refused"] = walked + " is not a directory"; done(3)
    try:
        nfd = os.open(comp, FLAGS, dir_fd=fd)
    except OSError as exc:
        out["refused"] = walked + ": " + exc.strerror; done(3)
    os.close(fd); fd = nfd
rootfd = fd
dev = os.fstat(rootfd).st_dev
records = {}
def record(base):
    # (model_name, None) from <base>/config.json as vLLM writes it, or (None, why)
    if base not in records:
        records[base] = (None, "no config.json")
        try:
            dfd = os.open(base, FLAGS, dir_fd=rootfd)
            try:
                ffd = os.open("config.json", FLAGS ^ os.O_DIRECTORY | os.O_NONBLOCK, dir_fd=dfd)
            finally:
                os.close(dfd)
            with os.fdopen(ffd, "rb") as fh:
                records[base] = (json.loads(fh.read(1 << 20))["model_name"] + "", None)
        except FileNotFoundError:
            pass
        except Exception as exc:
            records[base] = (None, "config.json: " + str(exc)[:60])
    return records[base]
def kind(name):
    # "in" (in the scope), "unknown" (named like a target model's, not identified), None (not ours)
    if file_suffix is not None:
        ok = name.endswith(file_suffix) and (not models or any(name.startswith(p) and (
            not layout or layout.fullmatch(name[len(p):len(name) - len(file_suffix)])) for p in models))
        return "in" if ok else None
    if not models:
        return "in"
    m = dir_name.fullmatch(name)
    wanted = m and [x for x in models if x.replace("/", "_") == m.group(1)]
    if not wanted:
        return None
    owner, no = record(m.group(1) + "_" + m.group(2))
    if owner is None:
        why[name] = no
        return "unknown"
    return "in" if owner in wanted else None
why = {}
def is_record(rel, name):
    # vLLM's run record <base>/config.json of a directory in the scope: kept
    return name == "config.json" and rel in bases
bases = set()
def add(dfd, e, rel, acc):
    try:
        st = e.stat(follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        if st.st_dev != dev:
            return
        acc["dirs"] += 1
        try:
            sub = os.open(e.name, FLAGS, dir_fd=dfd)
        except OSError:
            return
        try:
            tally(sub, rel + "/" + e.name, acc)
        finally:
            os.close(sub)
    else:
        acc["files"] += 1
        if stat.S_ISREG(st.st_mode):
            acc["bytes"] += st.st_size
def tally(dfd, rel, acc):
    try:
        entries = list(os.scandir(dfd))
    except OSError as exc:
        err(rel + ": " + exc.strerror); return
    for e in entries:
        if is_record(rel, e.name):
            continue
        add(dfd, e, rel, acc)
def count():
    acc, rest = zero(), zero()
    for e in list(os.scandir(rootfd)):
        k = kind(e.name)
        if k == "in" and models and file_suffix is None and not dir_name.fullmatch(e.name).group(3):
            bases.add(root + "/" + e.name)
        add(rootfd, e, root, acc if k == "in" else rest)
    return acc, rest
def remove(dfd, name, rel):
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            err(rel + ": " + exc.strerror)
        return
    if st.st_dev != dev:
        out["skipped_mounts"].append(rel); return
    try:
        sub = os.open(name, FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        return
    except OSError as exc:
        try:
            os.unlink(name, dir_fd=dfd)
        except OSError:
            err(rel + ": " + exc.strerror)
        return
    kept = False
    try:
        if os.fstat(sub).st_dev != dev:
            out["skipped_mounts"].append(rel); return
        for e in list(os.scandir(sub)):
            if is_record(rel, e.name):
                kept = True
                continue
            remove(sub, e.name, rel + "/" + e.name)
    except OSError as exc:
        err(rel + ": " + exc.strerror)
    finally:
        os.close(sub)
    if kept:
        return
    for attempt in (1, 2):
        try:
            os.rmdir(name, dir_fd=dfd); return
        except FileNotFoundError:
            return
        except OSError as exc:
            if attempt == 2:
                err(rel + ": " + exc.strerror)
out["before"], rest = count()
if not count_only:
    for e in list(os.scandir(rootfd)):
        if kind(e.name) == "in":
            remove(rootfd, e.name, root + "/" + e.name)
    out["after"], rest = count()
if models:
    out.update(others=rest, unidentified=sorted(n + ": " + w for n, w in why.items())[:20])
done(1 if out["errors"] or out["skipped_mounts"] else 0)
'''


def _compact(source: str) -> str:
    """``source`` without blank and comment-only lines, each indentation level one space instead of
    four: the program travels as a ``command`` query parameter of the exec request, whose request
    line then stays below 8 KiB (the limit of many HTTP front ends and of the ``websockets``
    server). No line of the program is inside a multi-line string, so the meaning is unchanged."""
    lines = []
    for line in source.splitlines():
        text = line.lstrip(" ")
        if text and not text.startswith("#"):
            lines.append(" " * ((len(line) - len(text)) // 4) + text)
    return "\n".join(lines) + "\n"


#: :data:`CLEAR_SCRIPT` as sent (:func:`_compact`).
CLEAR_PROGRAM = _compact(CLEAR_SCRIPT)


def python_argv(root: str, models: Sequence[str] = (), *, count_only: bool = False,
                file_suffix: str | None = None, layout: str | None = None,
                model_only: bool = False) -> list[str]:
    """argv running :data:`CLEAR_SCRIPT` on ``root``: ``python3 -I -c SCRIPT ROOT [--model P]...``.

    ``-I`` (isolated mode) ignores ``PYTHON*`` variables and the user site directory of the
    container, so nothing in the pod's environment changes the program.

    Without ``file_suffix``, ``models`` are model names (``org/m``): the children selected are
    the vLLM directories named ``<model with / -> _>_<hash12>[_r<N>]`` whose ``config.json``
    (of the ``<model>_<hash12>`` directory) records that model (the record itself is kept); children named so
    whose record is missing or does not say are left and listed in ``unidentified``. With
    ``file_suffix`` the children selected are the entries whose name ends with it and, with
    ``models`` (then name prefixes), starts with one of them followed by what the regular
    expression ``layout`` matches in full up to the suffix (LMCache's local disk:
    ``<model>@...pt`` files).

    ``model_only`` (``--model-only``) says the deletion is per model: the program then refuses
    (exit 3, ``refused`` set, nothing deleted) when ``models`` is empty, instead of selecting
    every entry.
    """
    argv = ["python3", "-I", "-c", CLEAR_PROGRAM, root]
    for m in models:
        argv += ["--model", m]
    if file_suffix is not None:
        argv += ["--file-suffix", file_suffix]
    if layout is not None:
        argv += ["--layout", layout]
    if count_only:
        argv.append("--count-only")
    if model_only:
        argv.append("--model-only")
    return argv


def find_argv(step: str, root: str, paths: Sequence[str] = ()) -> list[str]:
    """argv of the ``find`` fallback for images without ``python3`` (GNU findutils).

    ``step``: ``check`` prints the root only when it is a directory and not a symlink;
    ``list`` prints the root's children NUL-separated; ``count`` prints the type and size of
    every non-directory below the start points, one per line (bytes count regular files only); ``delete`` deletes below the start
    points. Start points are ``root`` (children only: ``-mindepth 1``) or ``paths`` (model-only:
    the matched children, deleted whole). ``-P`` never follows symlinks, ``-xdev`` never crosses
    into another file system. Every start point is absolute (it begins with ``/``), so none can
    be read as an option or an expression.
    """
    starts = list(paths) if paths else [root]
    depth = [] if paths else ["-mindepth", "1"]
    if step == "check":
        return ["find", "-P", root, "-maxdepth", "0", "-type", "d", "-print"]
    if step == "list":
        return ["find", "-P", root, "-mindepth", "1", "-maxdepth", "1", "-print0"]
    if step == "count":
        return ["find", "-P", *starts, "-xdev", *depth, "!", "-type", "d", "-printf", "%y %s\\n"]
    if step == "delete":
        return ["find", "-P", *starts, "-xdev", *depth, "-delete"]
    raise ValueError(f"unknown find step {step!r}")


@dataclass(frozen=True)
class FsClearResult:
    """What happened to one :class:`FsVolumeTarget`.

    Attributes:
        target: the plan.
        result: ``emptied`` (nothing selected is left), ``refused`` (the plan or the program in
            the pod refused the root), ``left`` (model-only: directories named like the model's
            could not be identified, so were not deleted; ``--whole-tier`` deletes them), ``failed`` (exec failed, timed out, or entries are left),
            ``unconfirmed`` (the exec stream ended without an exit status, :data:`NO_EXIT_STATUS`,
            after the deletion reported nothing left; or the root does not exist in the pod,
            :func:`missing_root_message`), ``left`` (the root cannot be evaluated from the pod
            spec, :attr:`FsVolumeTarget.unevaluated`: nothing ran).
        files_before, bytes_before, files_after, bytes_after: counts in the deletion's scope
            (every child of the root, or the model's directories with ``model_only``); bytes are
            the sizes of regular files; None when unknown.
        message: what the user should know, or None.
        exec_pod, container: where it ran (None when it did not).
        method: ``python3`` or ``find``; None when nothing ran.
        other_files: with ``model_only``: files left in the root outside the scope.
        unidentified: with ``model_only``: directories named like a target model's that were left
            because their record does not say whose they are (``name: why``); the result is
            then ``left``.
        skipped_mounts: file systems mounted below the root, not entered.
        timed_out: the exec bound ended the wait (reported as not emptied).
    """

    target: FsVolumeTarget
    result: str
    files_before: int | None = None
    bytes_before: int | None = None
    files_after: int | None = None
    bytes_after: int | None = None
    message: str | None = None
    exec_pod: str | None = None
    container: str | None = None
    method: str | None = None
    other_files: int | None = None
    skipped_mounts: tuple[str, ...] = ()
    timed_out: bool = False
    unidentified: tuple[str, ...] = ()


def _missing_executable(res: ExecResult) -> bool:
    """True when exec could not start the program because the image lacks it (containerd/runc
    say ``executable file not found in $PATH``; a shell-less runtime may exit 127)."""
    text = ((res.message or "") + " " + res.stderr.decode("utf-8", "replace")).lower()
    if "executable file not found" in text or ("no such file or directory" in text and res.exit_code in (None, 126, 127)):
        return True
    return res.exit_code == 127 and not res.stdout.strip()


def _last_json(data: bytes) -> dict[str, Any] | None:
    """The last line of ``data`` that is a JSON object."""
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None


#: The reason given when an exec stream ends without the command's exit status (the runtime
#: cut the stream, or sent no ``Status`` on channel 3): what the command did is then not known.
NO_EXIT_STATUS = "the exec stream ended without an exit status"


def _exec_failure(res: ExecResult, timeout_s: float) -> str:
    """A one-line reason for an exec that did not give a usable answer."""
    if res.timed_out:
        return (f"the deletion did not finish within {timeout_s:g} s: not emptied (it may have "
                "deleted part; run again, or raise --timeout)")
    err = res.stderr.decode("utf-8", "replace").strip().splitlines()
    detail = err[-1] if err else (res.message or "no output")
    if res.exit_code is None:
        return f"{NO_EXIT_STATUS}: {detail[:300]}"
    return f"exec exited {res.exit_code}: {detail[:300]}"


def _counts(doc: Mapping[str, Any], key: str) -> tuple[int | None, int | None]:
    part = doc.get(key)
    if not isinstance(part, Mapping):
        return None, None
    files, size = part.get("files"), part.get("bytes")
    return (int(files) if isinstance(files, int) else None, int(size) if isinstance(size, int) else None)


def _run_python(kube: Kube, target: FsVolumeTarget, choice: ExecChoice, timeout_s: float) -> FsClearResult | None:
    """Run :data:`CLEAR_SCRIPT`; None when the image has no python3."""
    res = kube.exec_command(target.namespace, choice.pod, choice.container,
                            python_argv(choice.root, target.models, model_only=target.model_only),
                            timeout_s=timeout_s)
    base = _blank_result(target, choice, "python3")
    if res.timed_out:
        return replace(base, result="failed", message=_exec_failure(res, timeout_s), timed_out=True)
    doc = _last_json(res.stdout)
    if doc is None:
        if _missing_executable(res):
            return None
        return replace(base, result="failed", message=_exec_failure(res, timeout_s))
    fb, bb = _counts(doc, "before")
    fa, ba = _counts(doc, "after")
    others, _ = _counts(doc, "others")
    skipped = tuple(str(s) for s in doc.get("skipped_mounts") or [])
    errors = [str(e) for e in doc.get("errors") or []]
    unidentified = tuple(str(u) for u in doc.get("unidentified") or [])
    result = replace(base, files_before=fb, bytes_before=bb, files_after=fa, bytes_after=ba,
                     other_files=others, skipped_mounts=skipped, unidentified=unidentified)
    if doc.get("refused"):
        return replace(result, result="refused", message=f"refused in the pod: {doc['refused']}")
    messages: list[str] = []
    if unidentified:
        messages.append(unidentified_message(target, unidentified, None))
    if doc.get("missing"):
        if res.exit_code != 0:
            return replace(result, result="failed", message=_exec_failure(res, timeout_s))
        return replace(result, result="unconfirmed", message=missing_root_message(choice.root, choice.pod))
    if skipped:
        messages.append("other file systems mounted below the root were not entered: " + ", ".join(skipped[:5]))
    if errors:
        messages.append(f"{len(errors)} entries could not be deleted, e.g. {errors[0]}")
    if fa == 0 and not errors and res.exit_code is None:
        # the program's report says nothing is left, but the stream lost its end: not confirmed
        messages.insert(0, f"{NO_EXIT_STATUS} after the deletion reported 0 files left: not confirmed "
                           "(run clear-fs again to confirm)")
        return replace(result, result="unconfirmed", message="; ".join(messages))
    emptied = fa == 0 and not errors and res.exit_code in (0, 1)
    if emptied and unidentified:
        return replace(result, result="left", message="; ".join(messages))
    if not emptied and not messages:
        messages.append(_exec_failure(res, timeout_s) if res.exit_code not in (0, 1)
                        else f"{fa if fa is not None else 'an unknown number of'} files are left under {choice.root}")
    return replace(result, result="emptied" if emptied else "failed", message="; ".join(messages) or None)


def unidentified_message(target: FsVolumeTarget, unidentified: Sequence[str], files: int | None) -> str:
    """Why directories named like the targets' models were left: their ``config.json`` does not
    say whose they are (``unidentified`` holds ``name: why``, at most 20), and the flag that
    deletes them anyway."""
    what = f"{len(unidentified)}{'+' if len(unidentified) >= 20 else ''} director(ies)"
    held = f" holding {files} file(s)" if files is not None else ""
    return (f"left {what}{held} named like {', '.join(target.models)}'s but not identified by vLLM's run "
            f"record, e.g. {unidentified[0]} (another model, such as one named with '_' for '/', may own "
            "them): not deleted; --whole-tier deletes every entry of the root")


def _blank_result(target: FsVolumeTarget, choice: ExecChoice, method: str) -> FsClearResult:
    """An empty :class:`FsClearResult` for ``target`` run in ``choice`` with ``method``."""
    return FsClearResult(target=target, result="failed", exec_pod=choice.pod, container=choice.container,
                         method=method)


def _find_counts(res: ExecResult) -> tuple[int | None, int | None]:
    if res.exit_code != 0 or res.timed_out:
        return None, None
    lines = [line.split() for line in res.stdout.decode("utf-8", "replace").splitlines() if line.strip()]
    try:
        return len(lines), sum(int(size) for kind, size in lines if kind == "f")
    except ValueError:
        return None, None


def _run_find(kube: Kube, target: FsVolumeTarget, choice: ExecChoice, timeout_s: float) -> FsClearResult:
    """The ``find`` fallback: check, (list,) count, delete, count."""
    ns, pod, ctr, root = target.namespace, choice.pod, choice.container, choice.root
    base = _blank_result(target, choice, "find")

    def run(argv: list[str]) -> ExecResult:
        return kube.exec_command(ns, pod, ctr, argv, timeout_s=timeout_s)

    check = run(find_argv("check", root))
    if check.timed_out:
        return replace(base, message=_exec_failure(check, timeout_s), timed_out=True)
    if _missing_executable(check):
        return replace(base, method=None, message="the container has neither python3 nor find: "
                       "cannot delete through exec (restart the pods, or empty the volume another way)")
    if check.exit_code != 0:
        if b"No such file" in check.stderr and check.exit_code is not None:
            return replace(base, result="unconfirmed", files_before=0, bytes_before=0,
                           message=missing_root_message(root, pod))
        return replace(base, message=_exec_failure(check, timeout_s))
    if check.stdout.rstrip(b"\n") != root.encode():
        return replace(base, result="refused", message=f"refused in the pod: {root} is a symlink or not a directory")
    if target.model_only:
        paths: list[str] = []
        listing = run(find_argv("list", root))
        if listing.exit_code != 0:
            return replace(base, message=_exec_failure(listing, timeout_s), timed_out=listing.timed_out)
        prefix = root.rstrip("/") + "/"
        for entry in listing.stdout.decode("utf-8", "surrogateescape").split("\0"):
            if entry.startswith(prefix) and is_model_dir(entry[len(prefix):], target.models):
                paths.append(entry)
        if not paths:
            return replace(base, result="emptied", files_before=0, bytes_before=0, files_after=0, bytes_after=0,
                           message="no directory named like the targets' models under the root")
        # find cannot read a directory's config.json, which alone tells org/m's from org_m's
        names = tuple(p[len(prefix):] + ": python3 is not in the image to read its config.json" for p in paths)
        fb, bb = _find_counts(run(find_argv("count", root, paths)))
        return replace(base, result="left", files_before=fb, bytes_before=bb, files_after=fb, bytes_after=bb,
                       unidentified=names, message=unidentified_message(target, names, fb))
    fb, bb = _find_counts(run(find_argv("count", root)))
    deleted = run(find_argv("delete", root))
    if deleted.timed_out:
        return replace(base, files_before=fb, bytes_before=bb, message=_exec_failure(deleted, timeout_s),
                       timed_out=True)
    fa, ba = _find_counts(run(find_argv("count", root)))
    ok = deleted.exit_code == 0 and fa == 0
    message = "python3 is not in the image: deleted with find -P -xdev"
    if deleted.exit_code != 0:
        message += "; " + _exec_failure(deleted, timeout_s)
    if deleted.exit_code is None and fa == 0:
        return replace(base, result="unconfirmed", files_before=fb, bytes_before=bb, files_after=fa,
                       bytes_after=ba, message=message + ", though a count after it found 0 files: not confirmed")
    return replace(base, result="emptied" if ok else "failed", files_before=fb, bytes_before=bb,
                   files_after=fa, bytes_after=ba, message=message)


def sharing_message(target: FsVolumeTarget, result: FsClearResult | None = None) -> str | None:
    """What became of the files of pods outside the targets that mount ``target``'s volume
    (None when none do): before the run (``result`` None) what will happen, after it what did.
    Names the pods, the models whose directories are deleted and what was kept."""
    if not target.other_pods or target.refusal is not None or target.unevaluated is not None or target.model_unknown:
        return None
    whose = f"pods outside the targets ({', '.join(target.sharers or target.other_pods)})"
    models = ", ".join(f"{m} ({m.replace('/', '_')}_* by config.json)" for m in target.models) or "no model"
    if target.model_only and not target.models:
        # every targeted model held back for consent (its message says why)
        done = "is to be deleted" if result is None else "was deleted"
        return f"{target.volume} is also mounted by {whose}: nothing under {target.root} {done}"
    if result is None:
        if target.model_only:
            return (f"{target.volume} is also mounted by {whose}: only the directories of {models} under "
                    f"{target.root} are to be deleted; every other entry is kept (--whole-tier deletes them too)")
        return (f"{target.volume} is also mounted by {whose}: every entry under {target.root} is to be deleted, "
                "theirs included (--whole-tier)")
    if result.result not in ("emptied", "unconfirmed", "failed", "left"):
        return f"{target.volume} is also mounted by {whose}: nothing was deleted"
    if target.model_only:
        kept = (f"{result.other_files} file(s) outside them were kept" if result.other_files is not None
                else "every other entry was kept")
        return (f"{target.volume} is also mounted by {whose}: only the directories of {models} under "
                f"{target.root} were deleted; {kept} (--whole-tier deletes them too)")
    return (f"{target.volume} is also mounted by {whose}: every entry under {target.root} was deleted, "
            "theirs included (--whole-tier)")


def run_fs_clear(kube: Kube, target: FsVolumeTarget, *, timeout_s: float = 120.0) -> FsClearResult:
    """Empty one planned FS-tier directory through ``pods/exec``.

    Runs ``python3 -I -c`` :data:`CLEAR_SCRIPT` in the exec pod (the next choice when the pod is
    gone or its container not found), falling back to :func:`find_argv` when the image has no
    ``python3``. Every exec is bounded by ``timeout_s``; a timeout is reported as not emptied.
    RBAC: ``get`` and ``create`` on ``pods/exec``.

    Returns:
        A :class:`FsClearResult`. Never raises for cluster answers (403, 404, connection
        failures become ``failed`` with the reason).
    """
    from .kube import KubeApiError, KubeConnectionError

    if target.unevaluated is not None:
        return FsClearResult(target=target, result="left", message=unevaluated_message(target.root, target.unevaluated))
    if target.model_unknown is not None and target.refusal is None:
        return FsClearResult(target=target, result="left", message=model_unknown_message(target))
    if target.held is not None and not target.models and target.refusal is None:
        # every targeted model is held back for consent: nothing to delete
        return FsClearResult(target=target, result="left", message=target.held)
    if target.model_only and not target.models and target.refusal is None:
        # never sent: a per-model program given no model (CLEAR_SCRIPT refuses it too)
        return FsClearResult(target=target, result="refused", message=(
            "a per-model deletion with no model known: nothing deleted"))
    if target.refusal is not None or not target.choices:
        return FsClearResult(target=target, result="refused",
                             message=target.refusal or "no pod to run the deletion in")
    last: FsClearResult | None = None
    for choice in target.choices:
        try:
            done = _run_python(kube, target, choice, timeout_s)
            if done is None:
                done = _run_find(kube, target, choice, timeout_s)
            if target.unknown_models and done.result in ("emptied", "unconfirmed"):
                # the pods whose model is not known keep their directories: not emptied
                done = replace(done, result="left", message="; ".join(
                    m for m in (done.message, f"the directories of {', '.join(target.unknown_models)} "
                                "were not deleted: their model is not known") if m))
            if target.held is not None and done.result in ("emptied", "unconfirmed"):
                # the models held back for consent keep their directories: not emptied
                done = replace(done, result="left", message="; ".join(m for m in (done.message, target.held) if m))
            return done
        except KubeApiError as exc:
            hint = ""
            if exc.status == 403:
                hint = " (needs get and create on pods/exec)"
            last = replace(_blank_result(target, choice, "python3"), method=None, message=f"exec refused: {exc}{hint}")
            if exc.status not in (400, 404):
                return last
        except KubeConnectionError as exc:
            last = replace(_blank_result(target, choice, "python3"), method=None, message=f"exec failed: {exc}")
    assert last is not None
    return last
