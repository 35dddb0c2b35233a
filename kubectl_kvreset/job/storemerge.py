"""The store step's results merged into the pods' outcome: a ``CacheReset`` row's shared tier,
LMCache local disk or in-process LMCache CPU tier that ``clear``'s chained store step emptied
is no longer ``left``, and the row's result is derived again (never ``emptied`` while a tier is
left).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..engines.vllm.kvconfig import LMCACHE_CONNECTORS
from ..report import ExitCode, Report
from ..tiers import TierKind
from .outcometypes import Outcome, PortOutcome, UnconfirmedRow, tier_label
from .planning import Plan, PodPlan
from .storedisk import DiskCall
from .storedone import StoreDone

#: The state of a shared tier that the chained clear-store step emptied (its ``StoreClear``
#: row says ``emptied``, confirmed by the store's own count).
EMPTIED_BY_CLEAR_STORE = "emptied by clear-store"

#: :attr:`Tier.store` of the shared tier a store kind is, where the names differ (none now:
#: tiers.py names each shared tier by its store kind).
_TIER_STORE: dict[str, str] = {}

#: ``StoreClear`` ``store`` of an LMCache local-disk deletion (job/storedisk.py), which empties
#: the pod's ``lmcache_local_disk`` FS tier.
LMCACHE_DISK_ROW = "lmcache-disk"
#: ``StoreClear`` ``store`` of an LMCache server (``lm://``), which only a restart of its pod empties.
LMCACHE_SERVER_ROW = "lmcache-server"


def with_store_results(outcome: Outcome, plan: Plan, done: Sequence[StoreDone]) -> Outcome:
    """The outcome of ``clear`` once its chained clear-store step ran: each ``CacheReset`` row's
    shared tier that a store call of ``done`` emptied (for that pod, and for a per-model
    store that pod's model) says :data:`EMPTIED_BY_CLEAR_STORE` instead of ``left``, leaves the
    ``left`` list, and its message names the store call; a row ``partial`` only for that becomes
    ``emptied`` (``unconfirmed`` where a tier is). A call ``left`` or ``failed`` changes
    nothing: the tier stays ``left``. The same holds for a pod's ``lmcache_local_disk`` FS tier
    and its :data:`LMCACHE_DISK_ROW` deletion (``emptied``, or ``replaced`` where the disk was an
    emptyDir of a pod the restart replaced). Other rows and tiers are untouched.

    ``done``: the typed results of the store step
    (:attr:`kubectl_kvreset.job.storeclear.StoreRun.done`). Pure; returns ``outcome`` itself
    when no store was emptied.
    """
    emptied: dict[tuple[str, str], list[tuple[str, StoreDone]]] = {}
    for d in done:
        if isinstance(d.target, DiskCall):
            # LMCache's local disk (job/storedisk.py): emptied, or gone with its replaced pod's emptyDir
            if d.result not in ("emptied", "replaced"):
                continue
            name = d.store   # lmcache-disk, or an engine file tier's store (hicache-file)
        elif d.result == "emptied" or (d.result == "replaced" and d.store == LMCACHE_SERVER_ROW):
            # an LMCache server (lm://) is emptied only by the restart of its pod (--fallback restart)
            name = _TIER_STORE.get(d.store, d.store)
        else:
            continue
        for pod in d.tier_pods():
            emptied.setdefault(pod, []).append((name, d))
    if not emptied:
        return outcome

    def change(po: PortOutcome, pod_plan: PodPlan) -> PortOutcome:
        got = emptied.get((po.namespace, po.pod))
        return _store_emptied(po, pod_plan, got) if got else po

    return _each_port(outcome, plan, change)


def _each_port(outcome: Outcome, plan: Plan, change: Callable[[PortOutcome, PodPlan], PortOutcome]) -> Outcome:
    """``outcome`` with ``change`` applied to each port whose pod ``plan`` holds (its
    :class:`PodPlan` by namespace, pod and container), the report's rows made again from the
    ports in their order, the other rows kept."""
    plans = {(p.pod.namespace, p.pod.name, p.pod.container): p for p in plan.pods}
    report = Report(outcome.report.kind, outcome.report.columns)
    ports: list[PortOutcome] = []
    for po in outcome.ports:
        pod_plan = plans.get((po.namespace, po.pod, po.container))
        if pod_plan is not None:
            po = change(po, pod_plan)
        ports.append(po)
        report.add(po.row(), po.code)
    return replace(outcome, ports=tuple(ports), report=outcome.add_others(report))


def _after_store(po: PortOutcome, tiers: Mapping[str, Sequence[str]], left: Sequence[Any],
                 unconfirmed: bool) -> tuple[str, ExitCode]:
    """The row's result once the store step changed some of its tiers: a row ``partial`` only
    for tiers that are now done becomes ``emptied`` (``unconfirmed`` where a tier or an entry
    is); any other result stays (the rule of
    :func:`~kubectl_kvreset.job.portoutcome.port_outcome`: never ``emptied`` while a tier is
    left)."""
    done = ("emptied", "unconfirmed", "replaced", EMPTIED_BY_CLEAR_STORE)
    states = [st for v in tiers.values() for st in v]
    if po.result != "partial" or left or not all(st in done for st in states):
        return po.result, po.code
    if unconfirmed or "unconfirmed" in states:
        return "unconfirmed", ExitCode.UNCONFIRMED
    return "emptied", ExitCode.OK


def _store_emptied(po: PortOutcome, plan: PodPlan, got: list[tuple[str, StoreDone]]) -> PortOutcome:
    left, messages = list(po.left), list(po.messages)
    tiers = dict(po.tiers)
    for kind, store_of in ((TierKind.SHARED, lambda t: t.store),
                           (TierKind.FS, lambda t: LMCACHE_DISK_ROW if t.tier_type == "lmcache_local_disk" else None)):
        these = [e.tier for e in plan.effects if e.tier.kind is kind]
        states = list(tiers.get(kind.value, ()))
        if len(states) != len(these):
            continue
        for i, tier in enumerate(these):
            store = store_of(tier)
            by = next((d for name, d in got if store is not None and name == store), None)
            if by is None or states[i] not in ("left", "not emptied"):
                continue
            label = tier_label(tier)
            states[i] = EMPTIED_BY_CLEAR_STORE
            left = [lt for lt in left if lt.tier != label]
            messages = [m for m in messages if not m.startswith(f"{label} left: ") and not m.startswith(f"{label}: ")]
            messages.append(f"{label}: {EMPTIED_BY_CLEAR_STORE} (StoreClear {by.store} "
                            f"{by.address or ''} {by.scope or ''}{by.counted()})".replace("  ", " "))
        tiers[kind.value] = tuple(states)
    result, code = _after_store(po, tiers, left, bool(po.unconfirmed))
    return replace(po, tiers=tiers, left=tuple(left), messages=tuple(messages), result=result, code=code)


def with_lmcache_clears(plan: Plan, outcome: Outcome, cleared: dict[tuple[str, str], tuple[str, str]]) -> Outcome:
    """The outcome once the store step ran: on a pod whose in-process LMCache CPU tier was
    emptied by the LMCache controller's ``/clear`` or the worker API's ``DELETE /cache/clear``
    (``cleared``: ``(namespace, pod)`` -> ``(state, what emptied it)``, state ``emptied`` or
    ``unconfirmed``, from the ``StoreClear`` rows), that tier is no longer ``left``: it takes the
    store row's state, its left entry goes, and the row's result is derived again with the same
    rule as :func:`~kubectl_kvreset.job.portoutcome.port_outcome` (never ``emptied`` while
    another tier is left). Other rows are unchanged.

    LMCache's vLLM connectors have no ``reset_cache`` (plan.py's LMCache rule), so this is the
    only step that empties that tier short of a restart.
    """
    if not cleared:
        return outcome

    def change(po: PortOutcome, pod_plan: PodPlan) -> PortOutcome:
        hit = cleared.get((po.namespace, po.pod))
        return _lmcache_cleared(po, pod_plan, hit) if hit is not None and pod_plan.not_running is None else po

    return _each_port(outcome, plan, change)


def _lmcache_cleared(po: PortOutcome, pplan: PodPlan, hit: tuple[str, str]) -> PortOutcome:
    """``po`` once the LMCache controller or worker step reached its pod: each LMCache CPU tier
    left by the reset takes ``hit`` (``(state, by)``), its left entry goes and the result is
    derived again (:func:`_after_store`)."""
    cells = {kind: list(states) for kind, states in po.tiers.items()}
    seen: dict[str, int] = {}
    left = list(po.left)
    drop: list[int] = []
    messages = list(po.messages)
    unconfirmed = list(po.unconfirmed)
    j = 0
    for effect in pplan.effects:
        kind = effect.tier.kind.value
        i = seen.get(kind, 0)
        seen[kind] = i + 1
        states = cells.get(kind) or []
        state = states[i] if i < len(states) else None
        if (state == "left" and effect.tier.kind is TierKind.CPU
                and effect.tier.connector in LMCACHE_CONNECTORS and j < len(left)):
            lt = left[j]
            drop.append(j)
            text = f"{lt.tier} left: {lt.reason}" + (f"; to empty it: {lt.remedy}" if lt.remedy else "")
            messages = [m for m in messages if m != text]
            states[i] = hit[0]
            messages.append(f"{lt.tier}: {hit[0]} by {hit[1]}")
            if hit[0] == "unconfirmed":
                unconfirmed.append(UnconfirmedRow(lt.tier, f"{hit[1]}: nothing counts what remains"))
        if state in ("left", "not emptied"):
            j += 1
    if not drop:
        return po
    remaining = tuple(lt for k, lt in enumerate(left) if k not in drop)
    result, code = _after_store(po, cells, remaining, bool(unconfirmed))
    return replace(po, tiers={k: tuple(v) for k, v in cells.items()}, left=remaining, messages=tuple(messages),
                   unconfirmed=tuple(unconfirmed), result=result, code=code)
