"""The FS tier's path rules: which tier types it is, a container's mounted volumes, and
:func:`check_root`, which accepts a root only on a writable volume outside system paths."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

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


def _overlaps(a: str, b: str) -> bool:
    return _under(a, b) or _under(b, a)


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
