"""The inference pods this version cannot empty (:mod:`kubectl_kvreset.otherpods`) in a clear: each
gets a row ``left`` with the reason and the restart that would empty it, and with
``--fallback restart`` its owner is restarted under the same consent and prompt rules as vLLM
pods. The LMCache server (``lm://``) is a store every engine of its release uses: its restart
empties it for all of them and cuts each one's connection to it while it restarts, so it needs
:data:`~kubectl_kvreset.consent.SHARED_FLAG` whenever an engine is known to use it, targeted or not
(:func:`kubectl_kvreset.consent.hold` says which users outside the targets it reaches).

Pure apart from the types it reads: the plan is built from the scope, the store calls and the
options; the rows from the plan and the restart results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..consent import SHARED_FLAG, User, hold, unlisted_user
from ..otherpods import OtherPod, unsupported_reason
from ..pods import Owner, VllmPod
from ..report import ExitCode
from ..rollout import DevModeResult, RestartResult
from ..stores.calls import StoreCall
from ..stores.config import StoreKind

__all__ = ["OtherKey", "OtherPlan", "leads_to", "other_key", "other_outcome_row", "other_plan_row",
           "other_skipped_row", "other_users", "plan_others", "router_notes", "store_calls_named", "targeted_users"]

#: ``(namespace, pod, container)`` of an :class:`~kubectl_kvreset.otherpods.OtherPod`.
OtherKey = tuple[str, str, str]

#: Owner kinds ``kubectl rollout restart`` restarts.
_ROLLOUT_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
#: Owner kinds ``--fallback restart`` restarts (:func:`kubectl_kvreset.rollout.restart_owner`
#: refuses the others): a pod of another owner is left with the restart by hand as its remedy.
_FALLBACK_KINDS = ("Deployment", "LeaderWorkerSet")


def other_key(pod: OtherPod) -> OtherKey:
    """The key of ``pod`` in :attr:`OtherPlan` maps."""
    return (pod.namespace, pod.name, pod.container)


@dataclass(frozen=True)
class OtherPlan:
    """What a clear does with one :class:`~kubectl_kvreset.otherpods.OtherPod`.

    Attributes:
        pod: the container.
        restart: its owner is restarted (``--fallback restart``, consent given where needed).
        reason: why its cache is not emptied by this version.
        remedy: what would empty it (the flag, or the kubectl command).
        held: why the restart is held back although ``--fallback restart`` was given (the
            LMCache server used by engines outside the targets, without ``--shared-stores``),
            or None.
        by_hand: the owner is of a kind ``--fallback restart`` does not restart (a StatefulSet,
            a DaemonSet, a bare Pod): the remedy is the restart by hand, never the flag.
    """

    pod: OtherPod
    restart: bool
    reason: str
    remedy: str
    held: str | None = None
    by_hand: bool = False


def _manual(owner: Owner) -> str | None:
    """The command that restarts ``owner`` by hand, or None where none is simple (a
    LeaderWorkerSet: ``--fallback restart`` patches its templates)."""
    if owner.kind in _ROLLOUT_KINDS:
        return f"kubectl rollout restart {owner.ref()}"
    if owner.kind == "Pod":
        return f"delete and recreate {owner.ref()} (a bare pod has no owner that replaces it)"
    return None


def leads_to(pod: OtherPod, calls: Sequence[StoreCall]) -> list[StoreCall]:
    """The ``lm://`` store calls of the store plan whose address leads to the LMCache server ``pod``."""
    return [c for c in calls if c.store.kind is StoreKind.LMCACHE_SERVER
            and any((e.namespace, e.name) == (pod.namespace, pod.name) for e in c.store.resolution.endpoints)]


def other_users(pod: OtherPod, universe: Sequence[VllmPod], targeted: Sequence[VllmPod],
                calls: Sequence[StoreCall], unlisted: Sequence[str] = ()) -> tuple[User, ...]:
    """The engines outside the targets that use the LMCache server ``pod`` (empty for another
    engine), as the consent rule's :class:`~kubectl_kvreset.consent.User` rows: the users of each
    ``lm://`` store of the store plan whose address leads to this pod (and the namespaces that
    could not be listed), else, where no store of the plan leads here, every vLLM pod outside the
    targets whose configuration names an ``lm://`` store (it may be this one): ``universe`` is then
    every vLLM pod the caller could list, not only the command's namespace or selector, and
    ``unlisted`` the namespaces it could not list (possible users too)."""
    if not pod.shared:
        return ()
    users: list[User] = []
    mine = leads_to(pod, calls)
    if mine:
        for call in mine:
            for u in call.store.users:
                if not u.targeted:
                    users.append(User(f"{u.pod.namespace}/{u.pod.name}", u.use.model))
            users += [unlisted_user(f"pods of namespace {ns} (not listed)") for ns in call.store.unlisted]
        return tuple(dict.fromkeys(users))
    chosen = {(p.namespace, p.name) for p in targeted}
    for p in universe:
        if (p.namespace, p.name) in chosen:
            continue
        if any(t.store == StoreKind.LMCACHE_SERVER.value for t in p.layout.tiers):
            users.append(User(f"{p.namespace}/{p.name}", p.serve.model,
                              unsure="its lm:// address was not resolved to a pod"))
    users += [unlisted_user(f"pods of {ns} (not listed)") for ns in unlisted]
    return tuple(dict.fromkeys(users))


def targeted_users(pod: OtherPod, targeted: Sequence[VllmPod], calls: Sequence[StoreCall]) -> tuple[str, ...]:
    """The targeted engines (``ns/pod``) that use the LMCache server ``pod`` (empty for another
    engine): the targeted users of each ``lm://`` store of the store plan whose address leads to
    this pod, else, where none leads here, every targeted vLLM pod whose configuration names an
    ``lm://`` store (it may be this one)."""
    if not pod.shared:
        return ()
    mine = leads_to(pod, calls)
    if mine:
        names = [f"{u.pod.namespace}/{u.pod.name}" for c in mine for u in c.store.users if u.targeted]
    else:
        names = [f"{p.namespace}/{p.name}" for p in targeted
                 if any(t.store == StoreKind.LMCACHE_SERVER.value for t in p.layout.tiers)]
    return tuple(dict.fromkeys(names))


def _held(pod: OtherPod, users: tuple[User, ...], targeted: tuple[str, ...], shared: bool) -> str | None:
    """Why the restart of the LMCache server ``pod`` waits for :data:`SHARED_FLAG`, or None: engines
    outside the targets use it (the consent rule), or targeted engines do (its restart empties the
    store for each of them and cuts their connections to it: a store-wide effect asked for by name)."""
    got = hold(users, given=shared)
    if got is not None:
        names = ", ".join(u.shown() for u in got.users)
        return (f"restarting {pod.owner.ref()} empties the LMCache server for every engine that uses it, and "
                f"engines outside the targets use it ({names}): give {SHARED_FLAG} to restart it anyway")
    if targeted and not shared:
        return (f"restarting {pod.owner.ref()} empties the LMCache server for every engine that uses it "
                f"({', '.join(targeted)}) and cuts their connections to it while it restarts: give {SHARED_FLAG} "
                "to restart it")
    return None


def plan_others(pods: Sequence[OtherPod], fallback: str, *, shared: bool,
                users: Mapping[OtherKey, tuple[User, ...]],
                targeted: Mapping[OtherKey, tuple[str, ...]] | None = None) -> list[OtherPlan]:
    """One :class:`OtherPlan` per pod: the restart of its owner with ``fallback == "restart"``,
    held for the LMCache server unless ``shared`` (``--shared-stores``) while engines use it:
    outside the targets (``users``, from :func:`other_users`) or among them (``targeted``, from
    :func:`targeted_users`)."""
    plans: list[OtherPlan] = []
    for pod in pods:
        reason = unsupported_reason(pod)
        manual = _manual(pod.owner)
        key = other_key(pod)
        held = _held(pod, users.get(key, ()), (targeted or {}).get(key, ()), shared) if pod.shared else None
        if held is not None:
            remedy = f"--fallback restart {SHARED_FLAG}" + (f", or {manual}" if manual else "")
        else:
            remedy = "--fallback restart" + (f", or {manual}" if manual else "")
        by_hand = pod.owner.kind not in _FALLBACK_KINDS
        if by_hand:
            remedy = manual or f"restart {pod.owner.ref()} by hand"
        plans.append(OtherPlan(pod, fallback == "restart" and held is None and not by_hand, reason, remedy, held,
                               by_hand))
    return plans


def store_calls_named(calls: Sequence[StoreCall], plans: Sequence[OtherPlan]) -> tuple[StoreCall, ...]:
    """``calls`` with each ``lm://`` store whose address leads to a targeted LMCache server's pod
    saying, as its ``StoreClear`` row's message, what empties it: ``the lm:// protocol has no
    delete; restart deployment/NAME empties it (for every engine that uses it; to do it: REMEDY)``
    (the remedy of its :class:`OtherPlan`: ``--fallback restart --shared-stores`` where its
    restart needs that consent). Other calls are returned as they are."""
    out: list[StoreCall] = []
    for call in calls:
        mine = [p for p in plans if p.pod.shared and leads_to(p.pod, [call])]
        if call.store.kind is StoreKind.LMCACHE_SERVER and call.blocked and mine:
            owners = ", ".join(dict.fromkeys(p.pod.owner.ref() for p in mine))
            call = replace(call, blocked=(f"the lm:// protocol has no delete; restart {owners} empties it (for every "
                                          f"engine that uses it; to do it: {mine[0].remedy})"))
        out.append(call)
    return tuple(out)


def needs_restart(plans: Sequence[OtherPlan]) -> bool:
    """True when some pod would be emptied by ``--fallback restart`` and is not restarted now."""
    return any(not p.restart and p.held is None and not p.by_hand for p in plans)


def _base(pod: OtherPod) -> dict[str, object]:
    return {"namespace": pod.namespace, "pod": pod.name, "owner": pod.owner.ref(), "container": pod.container,
            "engine": pod.engine}


def other_plan_row(plan: OtherPlan) -> dict[str, object]:
    """The ``PlannedReset`` row of one pod: the restart planned, or nothing and the tiers left;
    ``result`` says which (``planned`` or ``left``), as the run's row will."""
    pod = plan.pod
    steps = [f"restart {pod.owner.ref()}"] if plan.restart else []
    leaves = [] if plan.restart else [f"every tier ({plan.reason}; to empty it: {plan.remedy})"]
    notes = list(pod.notes) + ([plan.held] if plan.held else [])
    return {**_base(pod), "ports": [pod.port] if pod.port is not None else [], "version": None, "steps": steps,
            "empties": ["every tier (the new pods start cold)"] if plan.restart else [], "leaves": leaves,
            "disruptive": ["restart"] if plan.restart else [], "result": "planned" if plan.restart else "left",
            "notes": notes}


def other_outcome_row(plan: OtherPlan, restarted: RestartResult | DevModeResult | None, *,
                      interrupted: bool, successor: str | None = None) -> tuple[dict[str, object], ExitCode]:
    """The ``CacheReset`` row of one pod and the exit code it earns: ``replaced`` (exit 0) when
    its owner's restart completed, else ``left`` with the reason and remedy (exit 1), ``failed``
    when the restart failed, ``interrupted`` when the run stopped first. ``successor``: the new
    pod that took this pod's place after the restart; a ``replaced`` row names it as ``pod`` and
    its message starts ``replaces OLD-POD``, as a vLLM pod's row does."""
    pod = plan.pod
    messages = [plan.reason]
    if plan.held:
        messages.append(plan.held)
    left = [{"tier": "every tier", "reason": plan.reason, "remedy": plan.remedy}]
    result, code, state = "left", ExitCode.FAILED, "left"
    if plan.restart:
        if restarted is not None and restarted.ok:
            result, code, state, left = "replaced", ExitCode.OK, "replaced", []
            messages = [f"{pod.engine_name}: {pod.owner.ref()} was restarted; its new pods start cold"]
            if successor is not None:
                messages.insert(0, f"replaces {pod.name}" if successor != pod.name
                                else f"a new pod of the same name replaced {pod.name}")
        elif restarted is None and interrupted:
            result = "interrupted"
            code = ExitCode.INTERRUPTED
            messages.append("not restarted: the run was interrupted first")
        elif restarted is not None:
            result, state = ("interrupted", "left") if restarted.result == "interrupted" else ("failed", "not emptied")
            messages.append(f"restart of {pod.owner.ref()}: {restarted.result}: {restarted.message}")
    row = {**_base(pod), **({"pod": successor} if successor is not None and result == "replaced" else {}),
           "port": pod.port, "role": pod.role, "version": None,
           "gpu": state, "cpu": None, "fs": None, "shared": state if pod.shared else None,
           "result": result, "message": "; ".join(messages), "steps": ["restart"] if plan.restart else [],
           "calls": 0, "busy_answers": 0, "left": left, "unconfirmed": []}
    if pod.shared:
        row["gpu"] = None
    return row, code


def other_skipped_row(pod: OtherPod, container: str | None) -> tuple[dict[str, object], ExitCode]:
    """The ``CacheReset`` row of a container ``--container`` left out: ``skipped`` (exit 0, as a
    vLLM container left out: it was not a target), its message saying that its cache stays warm
    (``--container NAME`` names it)."""
    reason = unsupported_reason(pod)
    row = {**_base(pod), "port": pod.port, "role": pod.role, "version": None, "gpu": None, "cpu": None, "fs": None,
           "shared": None, "result": "skipped",
           "message": (f"container {pod.container} not targeted (--container {container}): nothing was done; "
                       f"{reason} (--container {pod.container} --fallback restart would restart {pod.owner.ref()})"),
           "steps": [], "calls": 0, "busy_answers": 0, "left": [], "unconfirmed": []}
    return row, ExitCode.OK


def router_notes(kube: Any, pods: Sequence[VllmPod], *, cleared: bool = True) -> list[str]:
    """The note on the sglang-router pods that route to SGLang servers like ``pods`` (those of
    their namespaces whose policy keeps a prefix tree: :func:`kubectl_kvreset.routers.router_note`),
    or none when no SGLang server is among ``pods``. One pod list per namespace."""
    namespaces = sorted({p.namespace for p in pods if p.engine.name == "sglang"})
    if not namespaces:
        return []
    from ..discovery import find_routers
    from ..routers import router_note

    note = router_note(find_routers(kube, namespaces), cleared=cleared)
    return [note] if note else []
