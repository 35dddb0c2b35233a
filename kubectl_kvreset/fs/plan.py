"""Planning the FS-tier deletion (pure): roots -> one :class:`~.target.FsVolumeTarget` per backing
directory, with the pods outside the targets that share it and the models held back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..consent import User, hold, kept, unlisted_user
from ..engines.vllm.servecmd import known_model, unevaluated_in
from ..pods import describe_pod_containers
from .roots import FS_TIER_TYPES, _under, check_root
from .target import ExecChoice, FsVolumeTarget, held_message, unknown_model_message, unknown_model_reason
from .volumes import CROSS_NAMESPACE_KINDS, Claims, fs_roots, may_share, model_dir_prefixes, pod_mounts

if TYPE_CHECKING:
    from ..pods import VllmPod


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
    target_names = {(p.namespace, p.name) for p in pods}
    target_containers = {(p.namespace, p.name, p.container) for p in pods}
    siblings = [p for p in universe if (p.namespace, p.name) in target_names
                and (p.namespace, p.name, p.container) not in target_containers]
    groups, refused, unknown = _group_roots(pods, claims)
    merged = _merge_nested(list(groups.values())) if not model_only else list(groups.values())
    others = _other_mounts(universe, other_pod_objects, target_names, claims)
    served = _served(universe, other_pod_objects, claims)
    targets = [_volume_target(group, pods, _group_sharing(group, others, served, siblings, unlisted, claims),
                              model_only=model_only, whole_tier=whole_tier, shared_stores=shared_stores)
               for group in merged]
    targets.sort(key=lambda t: (t.namespace, t.volume or "", t.volume_path or ""))
    return targets + _unplanned(refused, unknown, model_only)


#: Refused roots: (namespace, repr(root), refusal) -> (root shown, volume label, pod names).
_Refused = dict[tuple[str, str, str], tuple[str | None, str | None, list[str]]]
#: Roots the plugin could not evaluate: (namespace, root, reason) -> pod names.
_Unknown = dict[tuple[str, str, str], list[str]]


def _group_roots(pods: Sequence[VllmPod], claims: Claims | None
                 ) -> tuple[dict[tuple[tuple[str, ...], str], _Group], _Refused, _Unknown]:
    """Check each root of each pod against its container's mounts (:func:`check_root`) and group the
    accepted ones by backing storage (volume identity, directory inside it); the refused and the
    unevaluated ones are kept apart, keyed so that pods sharing the same verdict make one row."""
    groups: dict[tuple[tuple[str, ...], str], _Group] = {}
    refused: _Refused = {}
    unknown: _Unknown = {}
    for pod in pods:
        mounts = pod_mounts(pod.raw, pod.container, claims=claims)
        roots = fs_roots(pod)
        why_unknown = {t.root_dir: t.unevaluated for t in pod.layout.tiers
                       if t.kind.value == "fs" and t.tier_type in FS_TIER_TYPES and t.unevaluated}
        for raw_root in roots:
            if raw_root in why_unknown:
                ukey = (pod.namespace, str(raw_root), str(why_unknown[raw_root]))
                unknown.setdefault(ukey, []).append(pod.name)
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
    return groups, refused, unknown


@dataclass(frozen=True)
class _GroupSharing:
    """Who else may write on one group's storage: ``sharing`` the OTHER PODS entries (names, or
    notes for what cannot be listed), ``users`` the same as :class:`~kubectl_kvreset.consent.User`,
    ``notes`` the claims' notes on that storage."""

    sharing: list[str]
    users: list[User]
    notes: list[str]


def _group_sharing(group: _Group, others: Sequence[tuple[tuple[str, ...], str, str, str]],
                   served: Mapping[tuple[str, str], list[tuple[str, list[tuple[tuple[str, ...], str]] | None]]],
                   siblings: Sequence[VllmPod], unlisted: str | None, claims: Claims | None) -> _GroupSharing:
    """The pods outside the targets that mount ``group``'s storage over an overlapping directory
    (``others``, :func:`_other_mounts`), the left-out sibling containers, the namespaces that could not
    be listed (``unlisted``, on a kind whose identity spans namespaces) and the claims whose storage is
    not known."""
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
    return _GroupSharing(sharing, users, notes)


def _volume_target(group: _Group, pods: Sequence[VllmPod], shared: _GroupSharing, *, model_only: bool,
                   whole_tier: bool, shared_stores: bool) -> FsVolumeTarget:
    """One accepted group's :class:`FsVolumeTarget`: ready pods first to exec in; a per-model deletion
    where ``model_only`` or others share the storage (unless ``whole_tier``); models held back by the
    consent rule (:func:`kubectl_kvreset.consent.hold`)."""
    ordered = [c for ready, c in group.choices if ready] + [c for ready, c in group.choices if not ready]
    seen: list[ExecChoice] = []
    for c in ordered:
        if c not in seen:
            seen.append(c)
    sharing, users, notes = shared.sharing, shared.users, list(shared.notes)
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
    return FsVolumeTarget(
        key=f"{'/'.join(group.identity)}:{group.volume_path}", namespace=group.namespace,
        volume=group.label, root=seen[0].root, volume_path=group.volume_path,
        exec_pod=seen[0].pod, container=seen[0].container, choices=tuple(seen),
        pods=tuple(sorted(group.pods)), other_pods=tuple(sharing),
        held="; ".join(held) or None, held_models=tuple(held_models),
        sharers=tuple(u.shown() for u in users), kept_pods=tuple(keep),
        models=tuple(models) if scoped else (), model_only=scoped,
        notes=tuple(notes), whole_tier=whole_tier and bool(sharing), refusal=refusal,
        unknown_models=tuple(group.unknown) if scoped else (),
        model_unknown="; ".join(dict.fromkeys(why_model)) if scoped and why_model else None)


def _unplanned(refused: _Refused, unknown: _Unknown, model_only: bool) -> list[FsVolumeTarget]:
    """The rows of the roots refused (one per namespace, root and refusal) and of the roots the
    plugin could not evaluate (one per namespace, root and reason), in the order first met."""
    targets: list[FsVolumeTarget] = []
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
