"""Safe deletion of vLLM's FS offload tier: path checks, one deletion per backing volume, exec.

The FS tier is a directory tree that vLLM fills and never empties (research/vllm.md §3.1:
``vllm/v1/kv_offload/tiering/fs/manager.py``; llm-d's legacy ``llmd_fs_backend`` "is not
responsible for cleanup"). Its roots come from three config forms, all read by
:mod:`kubectl_kvreset.tiers`:

* ``TieringOffloadingSpec`` ``secondary_tiers[]`` of type ``fs`` (vLLM >= 0.23) or ``fs_python``
  (0.22.x) with ``root_dir``;
* llm-d's ``SharedStorageOffloadingSpec`` with ``shared_storage_path``.

The layout below a root (``vllm/v1/kv_offload/file_mapper.py``, unchanged 0.22.0 -> 0.33.0) is
``<root>/<model>_<hash12>/config.json`` plus ``<root>/<model>_<hash12>_r<rank>/...`` where
``<model>`` is the model name with ``/`` replaced by ``_`` and ``<hash12>`` the first 12 hex
digits of a sha256. Files are content-addressed and shared by every pod that mounts the same
volume, so the deletion is planned per backing volume, not per pod.

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

if TYPE_CHECKING:
    from .kube import ExecResult, Kube
    from .pods import VllmPod

__all__ = [
    "CLEAR_SCRIPT",
    "ExecChoice",
    "FS_TIER_TYPES",
    "FsClearResult",
    "FsVolumeTarget",
    "MountedVolume",
    "RootCheck",
    "check_root",
    "find_argv",
    "fs_roots",
    "is_model_dir",
    "model_dir_prefixes",
    "normalise_root",
    "plan_fs_clear",
    "pod_mounts",
    "python_argv",
    "run_fs_clear",
]

#: ``Tier.tier_type`` values whose root this module empties: the Tiering ``fs``/``fs_python``
#: secondary tiers and llm-d's legacy ``shared_storage_path`` (research/vllm.md §3.1). LMCache's
#: ``local_disk`` is left out: LMCache keeps its own in-memory index of that directory.
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

#: Exit status of :data:`CLEAR_SCRIPT` when it refuses the root (symlink, not a directory).
SCRIPT_REFUSED = 3

#: ``<model>_<hash12>`` and ``<model>_<hash12>_r<rank>`` (``vllm/v1/kv_offload/file_mapper.py``).
_MODEL_DIR_SUFFIX = re.compile(r"_[0-9a-f]{12}(_r[0-9]+)?")


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
            ``("emptyDir", ns, pod, volume)``, ``("hostPath", node)``, ``("nfs", server)``.
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
                    "live CPU tier (research/vllm.md §3.1), cleared only by reset_external or a restart")
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


def pod_mounts(pod: Mapping[str, Any], container: str) -> list[MountedVolume]:
    """The volume mounts of ``container`` in a pod object (``spec.volumes`` joined with the
    container's ``volumeMounts``; init containers too, by name).

    ``subPath`` moves the mount's ``base`` inside the volume; ``subPathExpr`` (expanded by the
    kubelet from the env) and mounts with a relative or ``..`` path or subPath are left out, so
    no root can be placed on them. Never raises for odd specs.
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
        if not isinstance(m, Mapping) or m.get("subPathExpr"):
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
        sub = str(m.get("subPath") or "")
        if sub:
            parts = [p for p in sub.split("/") if p not in ("", ".")]
            if ".." in parts or sub.startswith("/"):
                continue
            base = posixpath.join(base, *parts)
        out.append(MountedVolume(str(m.get("name")), kind, mount_path, bool(m.get("readOnly")),
                                 identity, base, label))
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
    """The ``<model>`` parts of the directory names a pod's vLLM writes under a root: the
    model (``vllm serve MODEL`` / ``--model``) and the first ``--served-model-name``, each with
    ``/`` replaced by ``_`` as ``vllm/v1/kv_offload/file_mapper.py`` does."""
    names = [pod.serve.model, pod.serve.served_model_name]
    return tuple(dict.fromkeys(n.replace("/", "_") for n in names if n))


def is_model_dir(name: str, prefixes: Iterable[str]) -> bool:
    """True when a directory name under a root is ``<model>_<hash12>`` or
    ``<model>_<hash12>_r<N>`` for one of ``prefixes`` (research/vllm.md §3.1)."""
    return any(name.startswith(p) and _MODEL_DIR_SUFFIX.fullmatch(name[len(p):]) is not None
               for p in prefixes if p)


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
        models: with ``model_only``: the ``<model>`` prefixes whose directories are deleted.
        model_only: only ``<model>_<hash12>`` and ``..._r<N>`` children are deleted (asked with
            ``--model-only``, or because ``other_pods`` mount the volume and ``whole_tier`` was
            not given).
        refusal: why nothing will be deleted, or None.
        notes: other remarks for the row.
        whole_tier: every entry is deleted although ``other_pods`` mount the volume
            (``--whole-tier``).
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


@dataclass
class _Group:
    namespace: str
    identity: tuple[str, ...]
    volume_path: str
    label: str
    choices: list[tuple[bool, ExecChoice]] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)


def _overlaps(a: str, b: str) -> bool:
    return _under(a, b) or _under(b, a)


def plan_fs_clear(pods: Sequence[VllmPod], universe: Sequence[VllmPod], *, model_only: bool = False,
                  whole_tier: bool = False,
                  other_pod_objects: Sequence[Mapping[str, Any]] = (),
                  unlisted: str | None = None) -> list[FsVolumeTarget]:
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
        model_only: delete only the served models' ``<model>_<hash12>[_r<N>]`` directories.
        other_pod_objects: extra pod objects (API dicts) to check for sharing; a pod of another
            namespace than the volume's targets is named ``namespace/name``.
        unlisted: when set, the OTHER PODS entry naming pods of namespaces that could not be
            listed: added to every hostPath/NFS volume (their identity spans namespaces), which
            then counts as shared (DESIGN §6).
        whole_tier: on a volume that pods outside the targets also mount, delete every entry of
            the root anyway. Without it such a volume's deletion keeps to the directories of the
            models the targets serve (as ``model_only``), so other models' files are kept; a
            volume only targets mount is emptied whole (unless ``model_only``).

    Returns:
        Accepted targets sorted by namespace and volume, then refused ones; never raises.
    """
    groups: dict[tuple[tuple[str, ...], str], _Group] = {}
    refused: dict[tuple[str, str, str], tuple[str | None, str | None, list[str]]] = {}
    target_names = {(p.namespace, p.name) for p in pods}
    for pod in pods:
        mounts = pod_mounts(pod.raw, pod.container)
        roots = fs_roots(pod)
        for raw_root in roots:
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
    merged = _merge_nested(list(groups.values())) if not model_only else list(groups.values())
    others = _other_mounts(universe, other_pod_objects, target_names)
    targets: list[FsVolumeTarget] = []
    for group in merged:
        ordered = [c for ready, c in group.choices if ready] + [c for ready, c in group.choices if not ready]
        seen: list[ExecChoice] = []
        for c in ordered:
            if c not in seen:
                seen.append(c)
        sharing = sorted({name if ns == group.namespace else f"{ns}/{name}" for ident, ns, path, name in others
                          if ident == group.identity and _overlaps(path, group.volume_path)})
        if unlisted is not None and group.identity[0] in ("hostPath", "nfs"):
            sharing.append(unlisted)
        notes: list[str] = []
        # a volume pods outside the targets mount: only the targets' models, unless --whole-tier
        scoped = model_only or (bool(sharing) and not whole_tier)
        if not any(ready for ready, _ in group.choices):
            notes.append("no targeted pod mounting it is ready; exec may fail")
        if scoped and not group.models:
            notes.append("no model name known for these pods: no directory matches, nothing is deleted")
        targets.append(FsVolumeTarget(
            key=f"{'/'.join(group.identity)}:{group.volume_path}", namespace=group.namespace,
            volume=group.label, root=seen[0].root, volume_path=group.volume_path,
            exec_pod=seen[0].pod, container=seen[0].container, choices=tuple(seen),
            pods=tuple(sorted(group.pods)), other_pods=tuple(sharing),
            models=tuple(group.models) if scoped else (), model_only=scoped,
            notes=tuple(notes), whole_tier=whole_tier and bool(sharing)))
    targets.sort(key=lambda t: (t.namespace, t.volume or "", t.volume_path or ""))
    for (ns, _, why), (shown, label, names) in refused.items():
        targets.append(FsVolumeTarget(
            key=f"refused:{ns}:{shown!r}:{label}", namespace=ns, volume=label, root=shown,
            volume_path=None, exec_pod=None, container=None, pods=tuple(sorted(set(names))),
            model_only=model_only, refusal=why))
    return targets


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
    return kept


def _other_mounts(universe: Sequence[VllmPod], objects: Sequence[Mapping[str, Any]],
                  targets: set[tuple[str, str]]) -> list[tuple[tuple[str, ...], str, str, str]]:
    """(identity, namespace, directory inside the storage, pod name) of every mount of every
    container of every non-targeted pod."""
    out: list[tuple[tuple[str, ...], str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for obj in [p.raw for p in universe] + list(objects):
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if key in targets or key in seen or meta.get("deletionTimestamp"):
            continue
        seen.add(key)
        spec = obj.get("spec") or {}
        for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
            for m in pod_mounts(obj, str(c.get("name", ""))):
                out.append((m.identity, key[0], m.base, key[1]))
    return out


# --------------------------------------------------------------------------- the program run in the pod

#: The fixed program run in the pod with ``python3 -I -c CLEAR_SCRIPT ROOT [--model P]...
#: [--file-suffix S] [--count-only]``. The root and model prefixes arrive as argv elements, never as code.
#: It walks from ``/`` with ``O_NOFOLLOW`` at every component (a symlink anywhere on the way is
#: refused), works on directory descriptors only (``dir_fd``), never follows a symlink below
#: the root (links are unlinked, not followed), never crosses into another file system below
#: the root (their mount points are listed in ``skipped_mounts``), deletes the root's children
#: and never the root, and prints one JSON object on stdout:
#: ``{"root", "missing", "refused", "before": {"files","bytes","dirs"}, "after": {...},
#: "others": {...} (model-only: what is left outside the scope), "skipped_mounts", "errors"}``.
#: Exit status 0 done, 1 some entries could not be deleted, 3 refused.
CLEAR_SCRIPT = r'''
import json, os, re, stat, sys
sys.setrecursionlimit(20000)
args = sys.argv[1:]
root = args[0] if args else ""
models, count_only, file_suffix, i = [], False, None, 1
while i < len(args):
    if args[i] == "--model" and i + 1 < len(args):
        models.append(args[i + 1]); i += 2
    elif args[i] == "--file-suffix" and i + 1 < len(args):
        file_suffix = args[i + 1]; i += 2
    elif args[i] == "--count-only":
        count_only = True; i += 1
    else:
        i += 1
suffix = re.compile(r"_[0-9a-f]{12}(_r[0-9]+)?")
out = {"root": root, "missing": False, "refused": None, "before": None, "after": None,
       "others": None, "skipped_mounts": [], "errors": []}
def done(code):
    sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush(); sys.exit(code)
def err(msg):
    if len(out["errors"]) < 20:
        out["errors"].append(msg)
parts = root.split("/")
if (not root.startswith("/") or root == "/" or os.path.normpath(root) != root
        or root.startswith("//") or ".." in parts or "\0" in root):
    out["refused"] = "root is not a normalised absolute path"; done(3)
FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
fd = os.open("/", FLAGS)
walked = ""
for comp in [p for p in parts if p]:
    walked += "/" + comp
    try:
        st = os.stat(comp, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        out["missing"] = True; out["before"] = out["after"] = {"files": 0, "bytes": 0, "dirs": 0}
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
def selected(name):
    if file_suffix is not None:
        return name.endswith(file_suffix) and (not models or any(name.startswith(p) for p in models))
    if not models:
        return True
    return any(name.startswith(p) and suffix.fullmatch(name[len(p):]) for p in models)
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
        add(dfd, e, rel, acc)
def count(want):
    acc, rest = {"files": 0, "bytes": 0, "dirs": 0}, {"files": 0, "bytes": 0, "dirs": 0}
    for e in list(os.scandir(rootfd)):
        add(rootfd, e, root, acc if want(e.name) else rest)
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
    try:
        if os.fstat(sub).st_dev != dev:
            out["skipped_mounts"].append(rel); return
        for e in list(os.scandir(sub)):
            remove(sub, e.name, rel + "/" + e.name)
    except OSError as exc:
        err(rel + ": " + exc.strerror)
    finally:
        os.close(sub)
    for attempt in (1, 2):
        try:
            os.rmdir(name, dir_fd=dfd); return
        except FileNotFoundError:
            return
        except OSError as exc:
            if attempt == 2:
                err(rel + ": " + exc.strerror)
out["before"], rest = count(selected)
if models:
    out["others"] = rest
if not count_only:
    for e in list(os.scandir(rootfd)):
        if selected(e.name):
            remove(rootfd, e.name, root + "/" + e.name)
    out["after"], rest = count(selected)
    if models:
        out["others"] = rest
done(1 if out["errors"] or out["skipped_mounts"] else 0)
'''


def python_argv(root: str, models: Sequence[str] = (), *, count_only: bool = False,
                file_suffix: str | None = None) -> list[str]:
    """argv running :data:`CLEAR_SCRIPT` on ``root``: ``python3 -I -c SCRIPT ROOT [--model P]...``.

    ``-I`` (isolated mode) ignores ``PYTHON*`` variables and the user site directory of the
    container, so nothing in the pod's environment changes the program. With ``file_suffix``
    the root's children selected are the entries whose name ends with it and, with ``models``,
    starts with one of them (LMCache's local disk: ``<model>@...pt`` files, not vLLM's
    ``<model>_<hash12>`` directories).
    """
    argv = ["python3", "-I", "-c", CLEAR_SCRIPT, root]
    for m in models:
        argv += ["--model", m]
    if file_suffix is not None:
        argv += ["--file-suffix", file_suffix]
    if count_only:
        argv.append("--count-only")
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
            the pod refused the root), ``failed`` (exec failed, timed out, or entries are left),
            ``unconfirmed`` (the exec stream ended without an exit status, :data:`NO_EXIT_STATUS`,
            after the deletion reported nothing left).
        files_before, bytes_before, files_after, bytes_after: counts in the deletion's scope
            (every child of the root, or the model's directories with ``model_only``); bytes are
            the sizes of regular files; None when unknown.
        message: what the user should know, or None.
        exec_pod, container: where it ran (None when it did not).
        method: ``python3`` or ``find``; None when nothing ran.
        other_files: with ``model_only``: files left in the root outside the scope.
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
                            python_argv(choice.root, target.models), timeout_s=timeout_s)
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
    result = replace(base, files_before=fb, bytes_before=bb, files_after=fa, bytes_after=ba,
                     other_files=others, skipped_mounts=skipped)
    if doc.get("refused"):
        return replace(result, result="refused", message=f"refused in the pod: {doc['refused']}")
    messages: list[str] = []
    if doc.get("missing"):
        messages.append(f"{choice.root} does not exist in {choice.pod} (nothing stored yet)")
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
    if not emptied and not messages:
        messages.append(_exec_failure(res, timeout_s) if res.exit_code not in (0, 1)
                        else f"{fa if fa is not None else 'an unknown number of'} files are left under {choice.root}")
    return replace(result, result="emptied" if emptied else "failed", message="; ".join(messages) or None)


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
        if b"No such file" in check.stderr:
            return replace(base, result="emptied", files_before=0, bytes_before=0, files_after=0, bytes_after=0,
                           message=f"{root} does not exist in {pod} (nothing stored yet)")
        return replace(base, message=_exec_failure(check, timeout_s))
    if check.stdout.rstrip(b"\n") != root.encode():
        return replace(base, result="refused", message=f"refused in the pod: {root} is a symlink or not a directory")
    paths: list[str] = []
    if target.model_only:
        listing = run(find_argv("list", root))
        if listing.exit_code != 0:
            return replace(base, message=_exec_failure(listing, timeout_s), timed_out=listing.timed_out)
        prefix = root.rstrip("/") + "/"
        for entry in listing.stdout.decode("utf-8", "surrogateescape").split("\0"):
            if entry.startswith(prefix) and is_model_dir(entry[len(prefix):], target.models):
                paths.append(entry)
        if not paths:
            return replace(base, result="emptied", files_before=0, bytes_before=0, files_after=0, bytes_after=0,
                           message="no directory of the served model under the root")
    fb, bb = _find_counts(run(find_argv("count", root, paths)))
    deleted = run(find_argv("delete", root, paths))
    if deleted.timed_out:
        return replace(base, files_before=fb, bytes_before=bb, message=_exec_failure(deleted, timeout_s),
                       timed_out=True)
    if paths:
        # The matched directories are deleted whole: list again to find any left.
        again = run(find_argv("list", root))
        prefix = root.rstrip("/") + "/"
        left = [e for e in again.stdout.decode("utf-8", "surrogateescape").split("\0")
                if e.startswith(prefix) and is_model_dir(e[len(prefix):], target.models)]
        fa, ba = _find_counts(run(find_argv("count", root, left))) if left else (0, 0)
    else:
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
    if not target.other_pods or target.refusal is not None:
        return None
    whose = f"pods outside the targets ({', '.join(target.other_pods)})"
    models = ", ".join(f"{m}_*" for m in target.models) or "no model"
    if result is None:
        if target.model_only:
            return (f"{target.volume} is also mounted by {whose}: only the directories of {models} under "
                    f"{target.root} are to be deleted; every other entry is kept (--whole-tier deletes them too)")
        return (f"{target.volume} is also mounted by {whose}: every entry under {target.root} is to be deleted, "
                "theirs included (--whole-tier)")
    if result.result not in ("emptied", "unconfirmed", "failed"):
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

    if target.refusal is not None or not target.choices:
        return FsClearResult(target=target, result="refused",
                             message=target.refusal or "no pod to run the deletion in")
    last: FsClearResult | None = None
    for choice in target.choices:
        try:
            done = _run_python(kube, target, choice, timeout_s)
            if done is None:
                done = _run_find(kube, target, choice, timeout_s)
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
