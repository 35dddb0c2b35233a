"""LMCache's local disk and the engines' file tiers (SGLang's HiCache file backend), emptied by the
store step (per-model files through the FS deletion machinery, files before/after, scope that
path), with ``StoreClear`` rows. The kinds, and what tells one model's files from another's:
:mod:`.diskkinds`.

An engine's file tier (:class:`~kubectl_kvreset.engines.base.FileTier`) is always deleted per
model, the server's own files only (its names always carry the model): other files in the
directory are kept and counted, whoever wrote them. The rest of this docstring is LMCache's.

Where the files are: :func:`kubectl_kvreset.stores.lmcache_disk.local_disk_of` (LMCache 0.5.6's
settings). How they are deleted: as clear-fs deletes vLLM's FS tier (:mod:`kubectl_kvreset.fs`):
each directory is checked against the vLLM container's mounts (:func:`~kubectl_kvreset.fs.check_root`:
never a system directory, only a writable PVC/emptyDir/hostPath/NFS volume), grouped by backing
storage so a PVC shared by several pods is emptied once, and emptied by the fixed program
:data:`~kubectl_kvreset.fs.CLEAR_SCRIPT` run through ``pods/exec`` in a targeted pod (no
symlink followed, no other file system entered), selecting only ``*.pt`` children of the
directory. LMCache runs inside vLLM's Python, so ``python3`` is always in the image: no ``find``
fallback.

Consent, as for any store, with the per-model rule for shared volumes of the FS tier
(docs/clear-fs.md):

* no pod outside the targets mounts that storage: one call, scope ``store``: every ``*.pt`` of
  the directory;
* otherwise one call per targeted model, scope ``model M``: only ``<model>@*.pt`` files whose
  rest is LMCache's key layout (:func:`kubectl_kvreset.stores.lmcachekey.disk_name_regex`, so
  ``org/m`` never takes the files of ``org/m2`` or ``org/m@v2``); other models' files are kept.
  When a pod outside the targets writes the same model's files there (its LMCache local disk is
  on the same storage), or a model whose files may have the same names (``org-m`` for ``org/m``,
  :func:`kubectl_kvreset.stores.lmcachekey.may_write_as`; a model that cannot be read), or such a
  pod whose LMCache disk directory cannot be evaluated mounts that storage, or namespaces that
  cannot be listed may hold such pods (a hostPath/NFS volume), that model's call needs
  ``--shared-stores``: the one rule of :func:`kubectl_kvreset.consent.hold`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..consent import User, hold, kept, unlisted_user
from ..engines.vllm.servecmd import known_model, unevaluated_in
from ..fs import (
    CROSS_NAMESPACE_KINDS,
    Claims,
    ExecChoice,
    MountedVolume,
    check_root,
    may_share,
    pod_claims,
    pod_mounts,
    python_argv,
)
from ..kube import Kube, KubeApiError, KubeConnectionError
from ..pods import VllmPod, describe_pod
from ..stores.clear import StoreResult
from ..stores.lmcache_disk import DISK_SUFFIX, file_prefix
from ..stores.lmcachekey import disk_name_regex
from .diskkinds import LMCACHE_DISK, LMCACHE_INDEX_NOTE, PodDisk, hold_message, pod_disks, unknown_disks
from .fsclear import read_claims

__all__ = ["DiskCall", "disk_row", "plan_disks", "run_disk"]

#: The ``StoreClear`` store of LMCache's local disk (other kinds: :attr:`DiskCall.store`).
STORE = LMCACHE_DISK


@dataclass(frozen=True)
class DiskCall:
    """One deletion of LMCache local-disk files on one backing storage.

    Attributes:
        namespace: the pods' namespace.
        setting: ``local_disk`` as the first targeted pod configures it.
        root: the directory as the exec pod sees it (normalised), or as written when refused.
        volume: the volume label (``pvc/NAME``...), None when the directory is on none.
        scope: ``store`` (every ``*.pt``) or ``model``.
        model: for ``scope == "model"``: the model whose files go.
        prefixes: file-name starts selected (``org-m@``); empty: every ``*.pt``.
        choices: targeted pods that can run the deletion (ready first).
        targeted: targeted pods (``ns/name``) whose disk this is.
        others: pods outside the targets mounting the same storage over that directory.
        blocked: why nothing is deleted (refused directory, consent, unknown model), or None.
        kept: for ``scope == "model"``: the pods outside the targets whose files the deletion
            keeps (``ns/pod (model M)``; pods that write no LMCache files there by name alone).
        store: the ``StoreClear`` store (``lmcache-disk``; an engine file tier's, ``hicache-file``).
        label: what the rows call the directory.
        suffix: what every file of the kind ends with.
        layout: the expression the rest of a selected name matches in full (after a prefix).
        index_note: said when files were deleted.
        model_pods: for ``scope == "model"``: the targeted pods (``ns/name``) of that model, whose
            tier the call empties (empty: every targeted pod).
    """

    namespace: str
    setting: str
    root: str | None
    volume: str | None
    scope: str
    model: str | None
    prefixes: tuple[str, ...]
    choices: tuple[ExecChoice, ...]
    targeted: tuple[str, ...]
    others: tuple[str, ...] = ()
    blocked: str | None = None
    kept: tuple[str, ...] = ()
    store: str = STORE
    label: str = "LMCache local disk"
    suffix: str = DISK_SUFFIX
    layout: str | None = None
    index_note: str | None = LMCACHE_INDEX_NOTE
    model_pods: tuple[str, ...] = ()

    @property
    def name_layout(self) -> str | None:
        """The expression sent with the prefixes: :attr:`layout`, or LMCache's key layout."""
        if self.layout is not None or self.store != STORE:
            return self.layout
        return disk_name_regex()

    @property
    def method(self) -> str:
        """The row's METHOD: what is deleted, and how."""
        if self.scope == "model" and self.prefixes == ("",):
            what = f"{self.model}'s *{self.suffix} (the names of its pages)"
        else:
            what = " and ".join(f"{p}*{self.suffix}" for p in self.prefixes) or f"*{self.suffix}"
        return f"delete {what} under {self.root} (pods/exec)"


@dataclass
class _Group:
    namespace: str
    identity: tuple[str, ...]
    volume_path: str
    label: str
    setting: str
    choices: list[tuple[bool, ExecChoice]]
    pods: list[str]
    models: list[str | None]
    kind: PodDisk
    #: each targeted pod's model (``ns/name`` -> model), and each model's name expressions
    pod_models: dict[str, str | None] = field(default_factory=dict)
    layouts: dict[str | None, list[str]] = field(default_factory=dict)


def _cross_namespace_vllm(universe: Sequence[VllmPod], extra: Sequence[Mapping[str, Any]],
                          groups: Mapping[Any, _Group], claims: Claims | None = None) -> list[VllmPod]:
    """The vLLM pods among ``extra`` (pods of other namespaces, listed for a hostPath/NFS disk)
    that are not in ``universe`` and mount one of the ``groups``' hostPath/NFS storage, so the
    models whose files they write there are known."""
    known = {(p.namespace, p.name) for p in universe}
    wanted = [(g.identity, g.volume_path) for g in groups.values() if g.identity[0] in CROSS_NAMESPACE_KINDS]
    found: list[VllmPod] = []
    for obj in extra if wanted else ():
        meta = obj.get("metadata") or {}
        if (str(meta.get("namespace", "")), str(meta.get("name", ""))) in known:
            continue
        pod = describe_pod(obj)
        if pod is not None and any(may_share(m.identity, m.base, ident, path) for ident, path in wanted
                                   for m in pod_mounts(obj, pod.container, sharing=True, claims=claims)):
            found.append(pod)
    return found


def _claims(kube: Kube, keys: Sequence[tuple[str, str]], cache: dict[tuple[str, str], Any]) -> Claims:
    """:func:`~kubectl_kvreset.job.fsclear.read_claims`; no claim known when the API server does
    not answer (sharing is then judged by claim name, as without the PersistentVolumes)."""
    try:
        return read_claims(kube, keys, cache)
    except KubeConnectionError:
        return Claims()


#: ``(volume identity, volume path, pod)``: a mount of a pod outside the targets (or of the
#: stand-in for pods that cannot be seen).
_Mount = tuple[tuple[str, ...], str, str]
#: ``(store, volume identity, volume path, pod, model)``: a pod outside the targets whose files of
#: that kind are on that storage, and the model whose files it writes there (None: not known).
_Writer = tuple[str, tuple[str, ...], str, str, str | None]
#: ``(store, volume identity, volume path, pod, model, why)``: a mount of a pod outside the targets
#: whose directory of that kind cannot be evaluated (``why``), so it may write there.
_Maybe = tuple[str, tuple[str, ...], str, str, str | None, str]
#: The targeted disks by kind and backing storage: ``(store, volume identity, volume path)`` -> its group.
_Groups = dict[tuple[str, tuple[str, ...], str], _Group]


def plan_disks(kube: Kube, pods: Sequence[VllmPod], universe: Sequence[VllmPod], cache: dict[Any, Any], *,
               shared: bool,
               list_pods: Callable[[Sequence[tuple[str, ...]]], tuple[Sequence[Mapping[str, Any]], str | None]]
               | None = None) -> list[DiskCall]:
    """The deletions of the targeted ``pods``' LMCache local disks (module docstring rules).

    ``universe``: every vLLM pod the plugin sees (others writing to the same storage);
    ``list_pods``: called only when a disk was found, with the disks' volume identities; gives
    any other pod objects (API dicts) that may mount them (the targets' namespaces' pods, every
    namespace's for a hostPath/NFS volume) and, when some namespaces could not be listed, the
    OTHER PODS entry standing for their pods, added to every hostPath/NFS disk;
    the claims the pods mount are read (``get`` on ``persistentvolumeclaims`` and
    ``persistentvolumes``) so that claims on one backing storage are one volume, as for clear-fs;
    ``cache``: the
    ConfigMaps/Secrets read so far (:func:`~kubectl_kvreset.stores.find.pod_config`). Refused
    directories are calls with ``blocked`` set. Never raises for odd configurations.
    """
    # sharing by backing storage, as clear-fs judges it (job/fsclear.py read_claims)
    claim_cache: dict[tuple[str, str], Any] = {}
    keys = [k for p in pods for k in pod_claims(p.raw)]
    claims = _claims(kube, keys, claim_cache)
    groups, calls = _target_groups(kube, pods, claims, cache)
    extra: list[Mapping[str, Any]] = []
    unlisted: str | None = None
    if groups and list_pods is not None:
        listed, unlisted = list_pods([g.identity for g in groups.values()])
        extra = list(listed)
    if groups and claims.backing:
        # another pod's claim may be bound to the same storage under another name
        keys += [k for obj in [p.raw for p in universe] + extra for k in pod_claims(obj)]
        claims = _claims(kube, keys, claim_cache)
    # pods outside the targets: what they mount, and the models whose files they write there
    mounted = _other_mounts(pods, universe, extra, groups, claims, unlisted)
    writers, maybe = _other_writers(kube, pods, universe, extra, groups, claims, cache) if groups else ([], [])
    stand_ins = {unlisted} if unlisted is not None else set()
    stand_ins |= set(claims.shared.values())
    for group in groups.values():
        calls += _group_calls(group, pods, mounted, writers, maybe, stand_ins, shared=shared)
    return calls


def _target_groups(kube: Kube, pods: Sequence[VllmPod], claims: Claims,
                   cache: dict[Any, Any]) -> tuple[_Groups, list[DiskCall]]:
    """The targeted pods' LMCache disk directories grouped by backing storage (one deletion
    each), and a blocked call for each directory that is never deleted (:func:`_join_group`)."""
    groups: _Groups = {}
    calls: list[DiskCall] = []
    for pod in pods:
        disks = pod_disks(kube, pod, cache)
        for store, why in unknown_disks(kube, pod, cache).items():
            if store != STORE:  # an engine's file tier whose directory is not known: never guessed
                calls.append(DiskCall(pod.namespace, why, None, None, "store", None, (), (),
                                      (f"{pod.namespace}/{pod.name}",), store=store, blocked=(
                                          f"{why}: nothing was deleted (name the directory literally in the pod "
                                          "spec to let the plugin delete this server's files)")))
        if not disks:
            continue
        mounts = pod_mounts(pod.raw, pod.container, claims=claims)
        for disk in disks:
            for path in disk.paths:
                blocked = _join_group(groups, pod, disk, path, mounts)
                if blocked is not None:
                    calls.append(blocked)
    return groups, calls


def _kind_fields(disk: PodDisk) -> dict[str, Any]:
    """The :class:`DiskCall` fields that come from the file kind."""
    return dict(store=disk.store, label=disk.label, suffix=disk.suffix, layout=disk.layout,
                index_note=disk.index_note)


def _blocked_scope(disk: PodDisk) -> tuple[str, str | None, tuple[str, ...]]:
    """``(scope, model, prefixes)`` of a refused deletion: a kind deleted per model only says its
    model (never ``store``, which it never is)."""
    if disk.model_only:
        return "model", disk.model, (disk.prefix or "",)
    return "store", None, ()


def _join_group(groups: _Groups, pod: VllmPod, disk: PodDisk, path: str,
                mounts: Sequence[MountedVolume]) -> DiskCall | None:
    """Add ``pod``'s disk directory ``path`` to the group of its backing storage in ``groups``;
    instead, the blocked call when the directory cannot be evaluated from the pod spec or
    :func:`~kubectl_kvreset.fs.check_root` refuses it."""
    unknown = unevaluated_in(path, pod.serve.unevaluated)
    if unknown:
        # never deleted at a guessed path: the directory LMCache writes is not known
        return DiskCall(pod.namespace, disk.setting, path, None, *_blocked_scope(disk), (),
                        (f"{pod.namespace}/{pod.name}",), blocked=(
                            f"the {disk.label} {path!r} cannot be evaluated from the pod spec: "
                            f"{'; '.join(unknown)}; nothing was deleted and the directory the server "
                            "writes was not looked at (to let the plugin read it, give the directory as a "
                            "literal path)"), **_kind_fields(disk))
    verdict = check_root(path, mounts)
    if not verdict.ok or verdict.mount is None or verdict.volume_path is None or verdict.root is None:
        why = (verdict.refusal or "refused").replace("the FS tier root", f"the {disk.label}")
        return DiskCall(pod.namespace, disk.setting, verdict.root or path,
                        verdict.mount.label if verdict.mount else None, *_blocked_scope(disk), (),
                        (f"{pod.namespace}/{pod.name}",), blocked=why, **_kind_fields(disk))
    key = (disk.store, verdict.mount.identity, verdict.volume_path)
    group = groups.setdefault(key, _Group(pod.namespace, verdict.mount.identity, verdict.volume_path,
                                          verdict.mount.label, disk.setting, [], [], [], disk))
    group.choices.append((pod.ready and pod.phase == "Running", ExecChoice(pod.name, pod.container, verdict.root)))
    name = f"{pod.namespace}/{pod.name}"
    if name not in group.pods:
        group.pods.append(name)
    if disk.model not in group.models:
        group.models.append(disk.model)
    group.pod_models[name] = disk.model
    if disk.layout is not None and disk.layout not in group.layouts.setdefault(disk.model, []):
        group.layouts[disk.model].append(disk.layout)   # pods of one model with other TP sizes
    return None


def _other_mounts(pods: Sequence[VllmPod], universe: Sequence[VllmPod], extra: Sequence[Mapping[str, Any]],
                  groups: _Groups, claims: Claims, unlisted: str | None) -> list[_Mount]:
    """Every mount of every container of the pods outside the targets (``universe`` and
    ``extra``; init containers too), then the stand-ins for pods that cannot be seen: the
    ``unlisted`` namespaces' on each hostPath/NFS disk, other claims on a disk's storage."""
    targeted = {(p.namespace, p.name) for p in pods}
    mounted: list[_Mount] = []
    seen: set[tuple[str, str]] = set()
    for obj in [p.raw for p in universe] + list(extra):
        meta = obj.get("metadata") or {}
        ident = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if ident in targeted or ident in seen:
            continue  # a terminating pod still mounts the volume: it counts
        seen.add(ident)
        spec = obj.get("spec") or {}
        # init containers too: a native sidecar (restartPolicy Always) runs beside the main ones
        for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
            for m in pod_mounts(obj, str(c.get("name", "")), sharing=True, claims=claims):
                mounted.append((m.identity, m.base, f"{ident[0]}/{ident[1]}"))
    if unlisted is not None:
        mounted += [(g.identity, g.volume_path, unlisted) for g in groups.values()
                    if g.identity[0] in CROSS_NAMESPACE_KINDS]
    mounted += [(g.identity, g.volume_path, claims.shared[g.identity]) for g in groups.values()
                if g.identity in claims.shared]
    return mounted


def _other_writers(kube: Kube, pods: Sequence[VllmPod], universe: Sequence[VllmPod],
                   extra: Sequence[Mapping[str, Any]], groups: _Groups, claims: Claims,
                   cache: dict[Any, Any]) -> tuple[list[_Writer], list[_Maybe]]:
    """The vLLM containers outside the targets (of ``universe`` and the other namespaces' pods
    on a disk's hostPath/NFS storage) that write LMCache local-disk files: where and which model
    (``writers``), or, where their disk directory cannot be evaluated, each storage they mount
    (``maybe``)."""
    targeted = {(p.namespace, p.name) for p in pods}
    # a vLLM container of a targeted pod that --container left out writes like any other pod
    target_containers = {(p.namespace, p.name, p.container) for p in pods}
    writers: list[_Writer] = []
    maybe: list[_Maybe] = []
    for pod in [*universe, *_cross_namespace_vllm(universe, extra, groups, claims)]:
        if (pod.namespace, pod.name, pod.container) in target_containers:
            continue
        label = f"{pod.namespace}/{pod.name}"
        if (pod.namespace, pod.name) in targeted:
            label += f" (container {pod.container})"
        mounts = pod_mounts(pod.raw, pod.container, claims=claims)
        model_unknown = known_model(pod.serve) is None or bool(unevaluated_in(pod.serve.model, pod.serve.unevaluated))
        lmcache_model = None if model_unknown else pod.serve.model
        dark = unknown_disks(kube, pod, cache)
        tier_models = {t.store: t.model for t in pod.engine.file_tiers(pod.serve, pod.layout)}
        for store, why in dark.items():
            # where it writes cannot be told: any storage it mounts may hold its files
            model = lmcache_model if store == STORE else tier_models.get(store)
            maybe += [(store, m.identity, m.base, label, model, why) for m in mounts]
        for disk in pod_disks(kube, pod, cache):
            if disk.store in dark:
                continue
            model = lmcache_model if disk.store == STORE else disk.model
            for path in disk.paths:
                verdict = check_root(path, mounts)
                if verdict.ok and verdict.mount is not None and verdict.volume_path is not None:
                    writers.append((disk.store, verdict.mount.identity, verdict.volume_path, label, model))
                else:
                    # a directory the path rules refuse (``..``, a symlink...) may still be one of
                    # the targets' by another spelling: any storage the pod mounts may hold its files
                    maybe += [(disk.store, m.identity, m.base, label, model,
                               f"its directory {path!r} is not one the plugin places "
                               f"({verdict.refusal or 'refused'})") for m in mounts]
    return writers, maybe


def _group_calls(group: _Group, pods: Sequence[VllmPod], mounted: Sequence[_Mount], writers: Sequence[_Writer],
                 maybe: Sequence[_Maybe], stand_ins: set[str], *, shared: bool) -> list[DiskCall]:
    """The deletions on one backing storage: one call of scope ``store`` when no pod outside the
    targets counts as a user (:func:`~kubectl_kvreset.consent.hold`), else one per targeted
    model, held back by that rule (a model not known is never a per-model call)."""
    ordered = [c for ready, c in group.choices if ready] + [c for ready, c in group.choices if not ready]
    choices = tuple(dict.fromkeys(ordered))
    root = choices[0].root
    others = tuple(sorted({n for ident, base, n in mounted
                           if may_share(ident, base, group.identity, group.volume_path)}))
    kind = group.kind
    users = _disk_users(group, others, writers, maybe, stand_ins)
    common = dict(namespace=group.namespace, setting=group.setting, root=root, volume=group.label,
                  choices=choices, targeted=tuple(group.pods), others=others, **_kind_fields(kind))
    if hold(users, given=False) is None and not kind.model_only:
        return [DiskCall(scope="store", model=None, prefixes=(), **common)]
    calls: list[DiskCall] = []
    for model in group.models:
        if model is None:
            unknown_why = [p.serve.model_unknown for p in pods
                           if f"{p.namespace}/{p.name}" in group.pods and p.serve.model_unknown]
            # never a per-model call without the model: it would select every file of the kind
            where = (f"on a volume pods outside the targets mount ({', '.join(others)})" if others else
                     f"for the {kind.label}, whose other models' files are never deleted")
            calls.append(DiskCall(scope="model", model=None, prefixes=(), blocked=(
                "the model this pod serves is not known ("
                + ("; ".join(dict.fromkeys(unknown_why)) if unknown_why else
                   "the command names none, or its --config file could not be read")
                + f"): a per-model deletion is impossible {where}, so nothing is deleted; make the model "
                "known (name it literally in the container's command), or empty the directory from a "
                "shell in a pod that mounts it"), **common))
            continue
        held = hold(users, model=model, given=shared, alike=kind.alike)
        prefix = kind.prefix if kind.store != STORE else file_prefix(model)
        layouts = group.layouts.get(model) or ([kind.layout] if kind.layout else [])
        # this model's own names (every TP size its targeted pods run), never the first pod's
        layout = layouts[0] if len(layouts) == 1 else ("(?:" + "|".join(layouts) + ")" if layouts else None)
        calls.append(DiskCall(scope="model", model=model, prefixes=(prefix or "",),
                              blocked=hold_message(held, model, kind.label),
                              kept=tuple(u.shown() for u in kept(users, model, alike=kind.alike)),
                              model_pods=tuple(n for n, m in group.pod_models.items() if m == model),
                              **{**common, "layout": layout}))
    return calls


def _disk_users(group: _Group, others: Sequence[str], writers: Sequence[_Writer],
                maybe: Sequence[_Maybe], stand_ins: set[str]) -> list[User]:
    """The pods outside the targets on ``group``'s storage as consent users: writers of the
    group's file kind there (with their models), pods whose disk directory is unknown (``unsure``), the stand-ins
    of pods that cannot be seen (namespaces not listed, other claims on the storage) and every
    other pod that mounts it (it writes no LMCache files there: ``serves`` False)."""
    users: list[User] = []
    for store, ident, path, name, model in writers:
        if store == group.kind.store and may_share(ident, path, group.identity, group.volume_path):
            users.append(User(name, model))
    for store, ident, path, name, model, why in maybe:
        if store == group.kind.store and may_share(ident, path, group.identity, group.volume_path):
            users.append(User(name, model, unsure=why))
    named = {u.name for u in users}
    for name in others:
        if name in stand_ins:
            users.append(unlisted_user(name))
        elif name not in named:
            users.append(User(name, serves=False))
    return users


def _last_json(data: bytes) -> dict[str, Any] | None:
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        if line.strip().startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None


def _files(doc: Mapping[str, Any], key: str) -> tuple[int | None, int | None]:
    part = doc.get(key)
    if not isinstance(part, Mapping):
        return None, None
    files, size = part.get("files"), part.get("bytes")
    return (files if isinstance(files, int) else None, size if isinstance(size, int) else None)


def _remedy(call: DiskCall) -> str:
    if call.store != STORE:
        return (f"delete {call.model}'s files (names matching {call.name_layout}{call.suffix}) under {call.root} from "
                f"a shell in a pod that mounts {call.volume or 'it'}")
    what = " ".join(f"'{p}*{DISK_SUFFIX}'" for p in call.prefixes) or f"'*{DISK_SUFFIX}'"
    layout = (" (only those whose name goes on with a number after the '@', LMCache's key layout: "
              f"'{call.prefixes[0]}v2@...' is another model's)") if call.prefixes else ""
    return f"delete {what} under {call.root} from a shell in a pod that mounts {call.volume or 'it'}{layout}"


def run_disk(kube: Kube, call: DiskCall, *, dry_run: bool = False, timeout_s: float = 120.0) -> StoreResult:
    """Delete (with ``dry_run``: only count) the call's files through ``pods/exec`` in the first
    usable choice (the next one when a pod is gone or its container unknown); counts of files
    (``before``/``after``) in the call's scope. RBAC: ``get`` and ``create`` on ``pods/exec``.
    Never raises for the cluster's answers: the result says them."""
    if call.blocked is not None:
        return StoreResult("left", unit="files", message=call.blocked)
    last = StoreResult("failed", unit="files", message="no targeted pod to run the deletion in")
    for choice in call.choices:
        via = f"{call.namespace}/{choice.pod} (exec, container {choice.container})"
        argv = python_argv(choice.root, call.prefixes, count_only=dry_run, file_suffix=call.suffix,
                           layout=call.name_layout if call.prefixes else None, model_only=call.scope == "model")
        try:
            res = kube.exec_command(call.namespace, choice.pod, choice.container, argv, timeout_s=timeout_s)
        except KubeApiError as exc:
            if exc.status in (400, 404):
                last = StoreResult("failed", unit="files", via=via, message=f"exec refused: {exc}")
                continue
            hint = (f"; needs get and create on pods/exec in namespace {call.namespace} - the Role in rbac/ grants it; "
                    f"what would empty it: {_remedy(call)}") if exc.status == 403 else ""
            return StoreResult("failed", unit="files", via=via, message=f"exec refused: {exc}{hint}")
        except KubeConnectionError as exc:
            return StoreResult("failed", unit="files", via=via, message=f"exec failed: {exc}")
        return _outcome(call, choice, res, via, dry_run, timeout_s)
    return last


def _outcome(call: DiskCall, choice: ExecChoice, res: Any, via: str, dry_run: bool, timeout_s: float) -> StoreResult:
    if res.timed_out:
        return StoreResult("failed", unit="files", via=via, message=(
            f"the deletion did not finish within {timeout_s:g} s: not emptied (it may have deleted part)"))
    doc = _last_json(res.stdout)
    if doc is None:
        err = res.stderr.decode("utf-8", "replace").strip().splitlines()
        return StoreResult("failed", unit="files", via=via, message=(
            f"exec exited {res.exit_code}: {(err[-1] if err else res.message or 'no output')[:300]}"))
    if doc.get("refused"):
        return StoreResult("left", unit="files", via=via, message=f"refused in the pod: {doc['refused']}")
    before, bytes_before = _files(doc, "before")
    if doc.get("missing"):
        # LMCache creates every local_disk directory when its backend starts
        # (lmcache/v1/config_base.py::_parse_local_disk), so a missing one is not read as empty; so
        # does SGLang's HiCacheFile (srt/mem_cache/hicache_storage.py)
        if call.store != STORE:
            message = (f"{choice.root} does not exist in {choice.pod}: nothing deleted, and not confirmed empty (the "
                       f"server creates its {call.label} directory when it starts, so it may write to another one)")
            return StoreResult("planned" if dry_run else "unconfirmed", 0, None if not dry_run else 0, "files", via,
                               message)
        message = (f"{choice.root} does not exist in {choice.pod}: nothing deleted, and not confirmed empty (LMCache "
                   "creates it when its local disk backend starts, so it may write to another directory than the "
                   "configuration names, or has not started yet)")
        return StoreResult("planned" if dry_run else "unconfirmed", 0, None if not dry_run else 0, "files", via,
                           message)
    notes: list[str] = []
    if bytes_before:
        notes.append(f"{bytes_before} bytes before")
    kept, _ = _files(doc, "others")
    if kept and call.prefixes:
        whose = "not LMCache's" if call.store == STORE else f"not of {call.model}'s server"
        notes.append(f"{kept} other file(s) under {choice.root} kept (other models, or {whose})")
    if dry_run:
        return StoreResult("planned", before, before, "files", via, "; ".join(notes) or None)
    after, _ = _files(doc, "after")
    errors = [str(e) for e in doc.get("errors") or []]
    skipped = [str(s) for s in doc.get("skipped_mounts") or []]
    if errors:
        notes.append(f"{len(errors)} entries could not be deleted, e.g. {errors[0]}")
    if skipped:
        notes.append("file systems mounted below the directory were not entered: " + ", ".join(skipped[:5]))
    if after == 0 and not errors and not skipped:
        if res.exit_code is None:
            notes.insert(0, "the exec stream ended without an exit status after the deletion reported 0 files left: "
                            "not confirmed (run again to confirm)")
            return StoreResult("unconfirmed", before, after, "files", via, "; ".join(notes))
        if before and call.index_note:
            notes.append(call.index_note)
        return StoreResult("emptied", before, after, "files", via, "; ".join(notes) or None)
    notes.insert(0, f"{after if after is not None else 'an unknown number of'} file(s) are left under {choice.root}")
    return StoreResult("left", before, after, "files", via, "; ".join(notes))


def disk_row(call: DiskCall, outcome: StoreResult | None = None) -> dict[str, Any]:
    """One ``StoreClear`` row for a local-disk deletion, with the keys
    :func:`kubectl_kvreset.job.storeclear.store_row` gives: the plan (``planned``/``left``) or,
    with ``outcome``, what happened."""
    if outcome is None:
        result, message, before, after, via = ("left" if call.blocked else "planned"), call.blocked, None, None, None
    else:
        result, message, via = outcome.result, outcome.message, outcome.via
        before, after = outcome.before, outcome.after
    return {
        "namespace": call.namespace,
        "store": call.store,
        "address": call.setting,
        "resolved": f"volume {call.volume}" if call.volume else "no volume",
        "scope": f"model {call.model or '(unknown)'}" if call.scope == "model" else "store",
        "model": call.model,
        "method": call.method,
        "targeted_pods": list(call.targeted),
        "other_pods": list(call.others),
        "kept_pods": list(call.kept),
        "before": before,
        "after": after,
        "unit": "files",
        "via": via,
        "result": result,
        "message": message,
    }
