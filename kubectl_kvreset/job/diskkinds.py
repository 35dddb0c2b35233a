"""The directories of per-model files that the store step deletes (:mod:`.storedisk`): LMCache's
local disk (read from the pod's LMCache settings) and each engine's file tiers
(:meth:`kubectl_kvreset.engines.base.Engine.file_tiers`: SGLang's HiCache file backend).

One :class:`PodDisk` per directory set a pod writes, with what tells its files from other
models': the name start (LMCache: ``<model with / as ->@``), a regular expression for the rest,
the rule for models whose files cannot be told apart, and whether a store-wide deletion may
ever be planned (never for a tier whose names always carry the model: only this server's files go).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..consent import Hold
from ..engines.vllm.kvconfig import LMCACHE_CONNECTORS
from ..engines.vllm.servecmd import known_model, unevaluated_in
from ..kube import Kube
from ..pods import VllmPod
from ..stores.calls import SHARED_FLAG
from ..stores.find import pod_config
from ..stores.lmcache_disk import DISK_SUFFIX, file_prefix, local_disk_of
from ..stores.lmcachekey import disk_name_regex, may_write_as

__all__ = ["LMCACHE_DISK", "LMCACHE_INDEX_NOTE", "PodDisk", "hold_message", "pod_disks", "unknown_disks"]

#: The ``StoreClear`` store of LMCache's local disk.
LMCACHE_DISK = "lmcache-disk"

#: Said on LMCache rows that deleted files: what LMCache's running engines still believe.
LMCACHE_INDEX_NOTE = ("running LMCache engines drop a deleted file from their in-memory index when a read finds it "
                      "gone (local_disk_backend.py read_file)")


@dataclass(frozen=True)
class PodDisk:
    """One pod's directories of one file kind.

    Attributes:
        store: the ``StoreClear`` store (``lmcache-disk``, ``hicache-file``).
        label: what rows call it (``LMCache local disk``).
        setting: the directory setting as configured (the row's ADDRESS).
        paths: the directories, as the pod's server container sees them.
        suffix: what every file ends with (``.pt``, ``.bin``).
        model: the model name of the pod's files, None when not known.
        prefix: the start of the names of the pod's files (``""`` when the expression says it
            all), None when the model is not known.
        layout: the expression the rest of a name (after ``prefix``, before ``suffix``) matches
            in full, or None.
        model_only: only the pod's own files are ever deleted, even where no other pod mounts
            the storage (a tier whose names always carry the model).
        index_note: said on a row that deleted files (what the running servers still believe).
        alike: ``alike(other, model)``: True when ``other``'s files may be named as ``model``'s.
    """

    store: str
    label: str
    setting: str
    paths: tuple[str, ...]
    suffix: str
    model: str | None
    prefix: str | None
    layout: str | None
    model_only: bool = False
    index_note: str | None = None
    alike: Callable[[str, str], bool] = may_write_as


def _lmcache(kube: Kube, pod: VllmPod, cache: dict[Any, Any]) -> PodDisk | None:
    if not set(LMCACHE_CONNECTORS) & set(pod.layout.connectors):
        return None
    env, files, _notes = pod_config(kube, pod, cache)
    disk = local_disk_of(pod.serve.kv_transfer_config, env, files)
    if disk is None or not disk.enabled:
        return None
    model = known_model(pod.serve)
    return PodDisk(LMCACHE_DISK, "LMCache local disk", disk.setting, disk.paths, DISK_SUFFIX, model,
                   file_prefix(model) if model is not None else None, disk_name_regex(),
                   index_note=LMCACHE_INDEX_NOTE)


def pod_disks(kube: Kube, pod: VllmPod, cache: dict[Any, Any]) -> list[PodDisk]:
    """Every directory set of per-model files ``pod``'s server writes whose place is known: its
    LMCache local disk (``cache``: the ConfigMaps and Secrets read so far,
    :func:`~kubectl_kvreset.stores.find.pod_config`), then its engine's file tiers."""
    out = [d for d in [_lmcache(kube, pod, cache)] if d is not None]
    engine = pod.engine
    for tier in engine.file_tiers(pod.serve, pod.layout):
        if tier.unknown is not None or not tier.paths:
            continue
        out.append(PodDisk(tier.store, tier.label, tier.setting, tier.paths, tier.suffix, tier.model,
                           "" if tier.name_regex is not None else None, tier.name_regex, model_only=True,
                           index_note=f"{tier.label}: the server finds a deleted page missing on its next lookup",
                           alike=engine.files_alike))
    return out


def _lmcache_unknown(kube: Kube, pod: VllmPod, cache: dict[Any, Any]) -> str | None:
    if not set(LMCACHE_CONNECTORS) & set(pod.layout.connectors):
        return None
    env, files, notes = pod_config(kube, pod, cache)
    unread = [n for n in notes if n.startswith(("envFrom:", "LMCACHE_"))]
    config = env.get("LMCACHE_CONFIG_FILE")
    if config and not isinstance(files.get(config), str):
        unread.append(f"LMCACHE_CONFIG_FILE {config} was not read")
    disk = local_disk_of(pod.serve.kv_transfer_config, env, files)
    for path in disk.paths if disk is not None else ():
        unread += unevaluated_in(path, pod.serve.unevaluated)
        if "$(" in path or not path.startswith("/"):
            # a reference the kubelet expands (or a relative path): not the directory it writes
            unread.append(f"its local disk {path!r} cannot be evaluated from the pod spec")
    return "; ".join(dict.fromkeys(unread)) if unread else None


def unknown_disks(kube: Kube, pod: VllmPod, cache: dict[Any, Any]) -> dict[str, str]:
    """``store -> why`` for each file kind ``pod`` writes whose directory cannot be told: an
    LMCache ``local_disk`` that cannot be evaluated from the spec (``file://$(DIR)/``), an
    ``LMCACHE_CONFIG_FILE`` that was not read, an ``LMCACHE_*`` variable (or ``envFrom`` source)
    not resolved; an engine file tier whose directory is not known."""
    out: dict[str, str] = {}
    why = _lmcache_unknown(kube, pod, cache)
    if why is not None:
        out[LMCACHE_DISK] = why
    for tier in pod.engine.file_tiers(pod.serve, pod.layout):
        if tier.unknown is not None or not tier.paths:
            out[tier.store] = tier.unknown or "its directory is not known"
    return out


def hold_message(held: Hold | None, model: str, label: str = "LMCache local disk") -> str | None:
    """The row's reason for a per-model deletion held back (:func:`kubectl_kvreset.consent.hold`);
    ``label``: the file kind's (:attr:`DiskCall.label`)."""
    if held is None:
        return None
    files = "LMCache files" if label == "LMCache local disk" else f"{label} files"
    if held.why == "same":
        return (f"{len(held.users)} pod(s) outside the targets write {model}'s {files} to this volume "
                f"({', '.join(held.names)}): give {SHARED_FLAG} to delete them anyway")
    if held.why == "alike":
        how = "LMCache writes '/' as '-'" if files == "LMCache files" else "'/' is written as '-', ranks as '_N'"
        return (f"pod(s) outside the targets write {files} named as {model}'s to this volume "
                f"({', '.join(u.shown() for u in held.users)}; {how}), so they cannot be told "
                f"apart: give {SHARED_FLAG} to delete them too")
    if held.why == "unsure":
        return (f"pod(s) outside the targets may write {files} named as {model}'s to this volume: "
                f"where they write cannot be told ({', '.join(f'{u.shown()[:-1]}: {u.unsure})' for u in held.users)}), "
                f"and their files cannot be told apart from {model}'s: give {SHARED_FLAG} to delete them too")
    return (f"{', '.join(held.names)} may write {model}'s {files} to this volume (who they are cannot be "
            f"seen): give {SHARED_FLAG} to delete them anyway")
