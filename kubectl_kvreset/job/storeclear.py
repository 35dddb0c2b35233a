"""The clear-store job: the shared stores outside the pods that the targets use
(:mod:`kubectl_kvreset.stores`), one call per store and scope, and LMCache's local disk
(:mod:`.storedisk`), with their ``StoreClear`` rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..fs import ExecChoice
from ..pool import Cancel, InFlight, NotRun, parallel
from ..report import Column, ExitCode, Report
from ..stores.calls import StoreCall, plan_calls
from ..stores.clear import StoreResult, run_call
from ..stores.config import StoreKind
from ..stores.find import find_stores
from ..stores.mpserver import FORCE_FLAG, with_force
from ..stores.registry import kind_of
from .scope import Scope
from .storedisk import DiskCall, disk_row, plan_disks, run_disk
from .storedone import PodKey, StoreDone, scope_text

__all__ = ["ChainedReport", "StorePlan", "StoreRun", "columns", "count_first", "lmcache_cpu_cleared",
           "lmcache_cpu_planned", "plan_store", "run_store", "store_row", "with_counts_before_reset"]


def columns(scope: str | None) -> list[Column]:
    """Columns of the ``StoreClear`` table (NAMESPACE only with ``-A``)."""
    cols = [Column("NAMESPACE", "namespace"), Column("STORE", "store"), Column("ADDRESS", "address"),
            Column("RESOLVED", "resolved"), Column("SCOPE", "scope"), Column("METHOD", "method", wide=True),
            Column("TARGETED PODS", "targeted_pods", wide=True), Column("OTHER PODS", "other_pods", wide=True),
            Column("KEPT PODS", "kept_pods", wide=True), Column("BEFORE", "before"), Column("AFTER", "after"),
            Column("UNIT", "unit", wide=True),
            Column("VIA", "via", wide=True), Column("RESULT", "result"), Column("MESSAGE", "message", notes=True)]
    return cols[1:] if scope is not None else cols


def store_row(call: StoreCall, outcome: StoreResult | None = None) -> dict[str, Any]:
    """One ``StoreClear`` row: the plan (``planned`` or ``left``) or, with ``outcome``, what
    happened (``emptied``, ``left``, ``failed``).

    Keys: namespace (of the first targeted user), store (kind), address (without credentials),
    resolved (``service NS/NAME``, ``pod NS/NAME``, ``outside the cluster``), scope
    (``model M``, ``instance ID``, ``worker`` or ``store``), model, method, targeted_pods, other_pods
    (untargeted pods the call reaches), kept_pods (untargeted pods using the store whose data the
    call keeps: ``ns/pod (model M)``), before, after, unit, via, result, message.
    """
    store = call.store
    targeted = [f"{u.pod.namespace}/{u.pod.name}" for u in store.users if u.targeted
                and (call.scope != "instance" or u.use.instance_id == call.instance)]
    if outcome is None:
        result = "left" if call.blocked else "planned"
        message = call.blocked
        before = after = None
        via = None
        unit = kind_of(store.kind).unit  # what its before/after count, for rows with no answer yet
    else:
        result, message, before, after, via, unit = (outcome.result, outcome.message, outcome.before,
                                                    outcome.after, outcome.via, outcome.unit)
    notes = [n for n in store.notes if n]
    return {
        "namespace": store.targeted()[0].namespace if store.targeted() else "",
        "store": store.kind.value,
        "address": store.address.display() if store.address else None,
        "resolved": store.resolution.describe(),
        "scope": scope_text(call),
        "model": call.model,
        "method": call.method,
        "targeted_pods": targeted,
        "other_pods": list(call.others),
        "kept_pods": list(call.kept),
        "before": before,
        "after": after,
        "unit": unit,
        "via": via,
        "result": result,
        "message": "; ".join([m for m in [message] if m] + notes) or None,
    }


def row_code(outcome: StoreResult) -> ExitCode:
    """0 when emptied (or planned, or its pod replaced by the restart), 3 when unconfirmed (the store's answer
    proves less than emptied), 1 when left or failed."""
    if outcome.result == "unconfirmed":
        return ExitCode.UNCONFIRMED
    return ExitCode.OK if outcome.result in ("emptied", "planned", "replaced") else ExitCode.FAILED


@dataclass(frozen=True)
class StorePlan:
    """What clear-store will do: the ``calls`` (each with its consent decision) and the
    ``notes`` to show first (configuration that could not be read)."""

    scope: Scope
    calls: tuple[StoreCall, ...]
    notes: tuple[str, ...]
    unknown: tuple[str, ...] = ()
    disks: tuple[DiskCall, ...] = ()

    def report(self) -> Report:
        """The plan as ``StoreClear`` rows (``planned`` or ``left``)."""
        plan = Report("StoreClear", columns(self.scope.namespace))
        for call in self.calls:
            plan.add(store_row(call), ExitCode.FAILED if call.blocked else ExitCode.OK)
        for disk in self.disks:
            plan.add(disk_row(disk), ExitCode.FAILED if disk.blocked else ExitCode.OK)
        add_unknown(plan, self)
        return plan

    @property
    def empty(self) -> bool:
        """True when there is no store call and no local-disk deletion to make."""
        return not self.calls and not self.disks


def add_unknown(report: Report, plan: StorePlan) -> None:
    """One ``left`` row per targeted pod whose store configuration could not be read (a
    ConfigMap or Secret not permitted or absent, a file on a volume the API cannot read): its
    stores may be full, so the run fails."""
    for text in plan.unknown:
        pod, _, why = text.partition(": ")
        report.add({"namespace": pod.split("/")[0], "store": "unknown", "address": None, "resolved": None,
                    "scope": None, "model": None, "method": None, "targeted_pods": [pod], "other_pods": [],
                    "kept_pods": [],
                    "before": None, "after": None, "unit": None, "via": None, "result": "left",
                    "message": f"the stores this pod uses could not be read: {why}"}, ExitCode.FAILED)


def plan_store(scope: Scope, *, shared: bool = False, extra_universe: Sequence[Any] = (),
               force_mp: bool = False) -> StorePlan:
    """Find the stores the targeted pods use and plan one call per store and scope.

    Every vLLM pod the plugin can list (all namespaces when permitted) counts as a possible
    other user, not only those of the command's namespace. ``force_mp`` (``--force-mp-clear``)
    makes the MP server clears send ``force: true``.

    Raises:
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer a list.
    """
    from ..discovery import discover
    from ..kube import KubeApiError
    from ..stores.find import may_use_stores, pod_stores

    cache: dict[Any, Any] = {}
    named: list[str] = []
    unknown: list[str] = []
    for pod in scope.pods:
        if may_use_stores(pod):
            uses, pod_notes = pod_stores(scope.kube, pod, cache)
            named += [u.kind.value for u in uses if u.address is not None]
            for use in uses:
                if use.address is None:
                    unknown.append(f"{pod.namespace}/{pod.name}: " + "; ".join([*use.notes, *pod_notes]))
    from .fsclear import UNLISTED, sharing_pod_objects

    disk_notes: list[str] = []
    namespaces = sorted({p.namespace for p in scope.pods})

    def list_pods(identities: Sequence[tuple[str, ...]]) -> tuple[list[Any], str | None]:
        found, unlisted = sharing_pod_objects(scope.kube, namespaces, identities, disk_notes)
        return found, UNLISTED if unlisted else None

    disks = tuple(plan_disks(scope.kube, scope.pods, scope.universe, cache, shared=shared, list_pods=list_pods))
    if not named:
        none = () if disks else ("The targeted pods use no shared store outside the pods.",)
        return StorePlan(scope, (), (*none, *disk_notes), tuple(unknown), disks)
    universe = list(scope.universe)
    notes: list[str] = []
    try:
        seen = {p.uid for p in universe}
        universe += [p for p in discover(scope.kube, None) if p.uid not in seen]
    except KubeApiError as exc:
        why = "not permitted" if exc.status == 403 else str(exc)
        notes.append(f"note: the vLLM pods of other namespaces cannot be listed ({why}); pods there may use "
                     "the same stores")
    universe += list(extra_universe)
    stores, find_notes = find_stores(scope.kube, universe, {p.uid for p in scope.pods},
                                     containers={(p.uid, p.container) for p in scope.pods})
    notes.extend(f"note: {n}" for n in find_notes)
    notes.extend(dict.fromkeys(f"error: {s.resolution.message}" for s in stores if s.resolution.kind == "unresolved"))
    calls = with_force(plan_calls(stores, shared=shared), force_mp)
    if force_mp and any(c.force and c.blocked is None for c in calls):
        notes.append(f"note: {FORCE_FLAG}: the MP server clears remove locked objects too; stores and "
                     "prefetches in flight on those servers may be corrupted")
    return StorePlan(scope, tuple(calls), (*notes, *disk_notes), tuple(unknown), disks)


class StoreRun(Report):
    """The ``StoreClear`` report of a run of the store step and, typed, :attr:`done`: one
    :class:`~kubectl_kvreset.job.storedone.StoreDone` per call, then per local-disk deletion, in
    the plan's order (the rows of configuration that could not be read come after and have
    none)."""

    def __init__(self, kind: str, columns: Sequence[Column], done: Sequence[StoreDone] = ()) -> None:
        """As :class:`~kubectl_kvreset.report.Report`, with the typed results ``done``."""
        super().__init__(kind, columns)
        self.done: list[StoreDone] = list(done)


def run_store(plan: StorePlan, *, dry_run: bool = False, max_concurrency: int = 8,
              cancel: Cancel | None = None, timeout_s: float = 30.0,
              replaced: Mapping[tuple[str, str], Sequence[str]] | None = None) -> StoreRun:
    """Make every call of ``plan`` (``dry_run``: only count), in parallel; the ``StoreClear``
    report with its typed results. Never raises for a store's failure: its row says it.

    ``replaced``: ``(namespace, pod)`` -> the new pods of its owner, for pods the pod step just
    replaced (``Outcome.replaced``). A worker-API call whose every pod was replaced is not made:
    its row says ``replaced`` (the in-process tier went with the pod). A local-disk deletion
    runs in a successor instead (same container and directory: the same PVC or hostPath), and
    where the directory was an emptyDir of the replaced pod, it went with that pod (``replaced``).
    """
    kube = plan.scope.kube
    gone = dict(replaced or {})
    results = parallel(plan.calls, lambda c: _run_call(kube, c, gone, dry_run, timeout_s), max_concurrency, cancel)
    report = StoreRun("StoreClear", columns(plan.scope.namespace))
    for call, outcome in zip(plan.calls, results, strict=True):
        if isinstance(outcome, NotRun):
            row = store_row(call)
            row.update(result="interrupted", message=interrupted_message(outcome))
            report.add(row, ExitCode.INTERRUPTED)
            report.done.append(StoreDone(call, "interrupted", unit=str(row["unit"])))
            continue
        report.add(store_row(call, outcome), row_code(outcome))
        report.done.append(StoreDone(call, outcome.result, outcome.before, outcome.after, outcome.unit))
    disk_results = parallel(plan.disks, lambda d: _run_disk(kube, d, gone, dry_run, max(timeout_s, 120.0)),
                            max_concurrency, cancel)
    for disk, outcome in zip(plan.disks, disk_results, strict=True):
        if isinstance(outcome, NotRun):
            row = disk_row(disk)
            row.update(result="interrupted", message=interrupted_message(outcome))
            report.add(row, ExitCode.INTERRUPTED)
            report.done.append(StoreDone(disk, "interrupted", unit="files"))
            continue
        report.add(disk_row(disk, outcome), row_code(outcome))
        report.done.append(StoreDone(disk, outcome.result, outcome.before, outcome.after, "files"))
    add_unknown(report, plan)
    return report


#: A count read before the pods' resets, per store call (by ``id``): ``(count, unit)``.
FirstCounts = dict[int, tuple[int, str]]


def count_first(plan: StorePlan, calls: Sequence[StoreCall], *, max_concurrency: int = 8,
                cancel: Cancel | None = None, timeout_s: float = 30.0) -> FirstCounts:
    """The count of each of ``calls`` (a part of ``plan.calls``) read now, as a dry run reads it,
    before the pods' resets: ``clear`` passes the stores a reset with ``reset_external=true``
    empties by itself (:func:`kubectl_kvreset.job.resetconsent.reset_reaches`), so that their
    row can show what was there. A call whose count cannot be read is left out. Never raises."""
    if not calls:
        return {}
    part = dataclasses.replace(plan, calls=tuple(calls), disks=(), unknown=())
    report = run_store(part, dry_run=True, max_concurrency=max_concurrency, cancel=cancel, timeout_s=timeout_s)
    out: FirstCounts = {}
    for call, row in zip(calls, report.rows, strict=False):
        if isinstance(row.get("before"), int):
            out[id(call)] = (int(row["before"]), str(row.get("unit") or ""))
    return out


def with_counts_before_reset(report: StoreRun, plan: StorePlan, first: Mapping[int, tuple[int, str]]) -> StoreRun:
    """``report`` (:func:`run_store` of ``plan``) with the count read before the resets
    (:func:`count_first`) as ``before`` of each such call's row and result, and the message
    saying so and what the store step found; the result (and so the confirmation) stays the
    store step's."""
    if not first:
        return report
    out = StoreRun(report.kind, report.columns)
    done = list(report.done)
    for i, (row, code) in enumerate(zip(report.rows, report.codes, strict=True)):
        call = plan.calls[i] if i < len(plan.calls) else None
        got = first.get(id(call)) if call is not None else None
        row = dict(row)
        row.pop("kind", None)
        if got is not None and i < len(done) and done[i].result != "interrupted":
            count, unit = got
            found = done[i].before
            text = (f"{count} {unit} before the targets' resets, whose reset_external=true empties this store "
                    f"itself; {found if found is not None else '?'} {unit} when the store step ran")
            row["before"] = count
            row["message"] = "; ".join(m for m in (text, row.get("message")) if m)
            done[i] = dataclasses.replace(done[i], before=count)
        out.add(row, code)
    out.done = done
    return out


def interrupted_message(outcome: NotRun) -> str:
    """The message of a store call a cancel kept from running (nothing sent) or stopped waiting
    for (sent: the store may have been emptied in part)."""
    if isinstance(outcome, InFlight):
        return ("interrupted while the call was in flight: the store may have been emptied in part; its answer was "
                "not awaited")
    return "not run: interrupted"


def _run_call(kube: Any, call: StoreCall, gone: Mapping[tuple[str, str], Sequence[str]], dry_run: bool,
              timeout_s: float) -> StoreResult:
    if call.scope == "worker" and gone:
        pods = [(u.pod.namespace, u.pod.name) for u in call.store.users if u.targeted]
        if pods and all(p in gone for p in pods):
            new = sorted({n for p in pods for n in gone[p]})
            return StoreResult("replaced", message=(
                "the pod was replaced by the restart, and its in-process LMCache CPU tier with it"
                + (f"; the new pod(s) {', '.join(new)} start cold" if new else "")))
    if call.store.kind is StoreKind.LMCACHE_SERVER and gone and not dry_run:
        servers = [(e.namespace, e.name) for e in call.store.resolution.endpoints]
        if servers and all(p in gone for p in servers):
            new = sorted({n for p in servers for n in gone[p]})
            return StoreResult("replaced", message=(
                "the LMCache server's pod was restarted by this run (--fallback restart), and the cache it held in "
                "memory went with it" + (f"; the new pod(s) {', '.join(new)} start empty" if new else "")))
    return run_call(kube, call, dry_run=dry_run, timeout_s=timeout_s)


def _run_disk(kube: Any, call: DiskCall, gone: Mapping[tuple[str, str], Sequence[str]], dry_run: bool,
              timeout_s: float) -> StoreResult:
    if gone and any((call.namespace, c.pod) in gone for c in call.choices):
        if call.volume and call.volume.startswith("emptyDir") and \
                all((call.namespace, c.pod) in gone for c in call.choices):
            return StoreResult("replaced", unit="files", message=(
                f"the restart replaced the pod, and its {call.volume} went with it: the new pod starts with an "
                "empty directory"))
        choices: list[ExecChoice] = []
        for c in call.choices:
            if (call.namespace, c.pod) in gone:
                choices += [ExecChoice(n, c.container, c.root) for n in gone[(call.namespace, c.pod)]]
            else:
                choices.append(c)
        call = dataclasses.replace(call, choices=tuple(dict.fromkeys(choices)))
    return run_disk(kube, call, dry_run=dry_run, timeout_s=timeout_s)


#: What empties a pod's in-process LMCache CPU tier, by store kind (``StoreClear`` ``store``).
LMCACHE_CPU_CLEARS = {"lmcache-controller": "the LMCache controller's POST /clear",
                      "lmcache-worker": "LMCache's worker API DELETE /cache/clear"}


def lmcache_cpu_planned(plan: StorePlan) -> list[str]:
    """The targeted pods (``ns/name``) whose in-process LMCache CPU tier a planned call (not
    blocked) of ``plan`` empties: an LMCache controller instance or worker API call. Their
    ``PlannedReset`` rows list that tier as left (vLLM's reset does not reach it); the store step
    empties it."""
    pods: list[str] = []
    for call in plan.calls:
        if call.blocked is None and call.scope in ("instance", "worker"):
            pods += [f"{u.pod.namespace}/{u.pod.name}" for u in call.store.users if u.targeted
                     and (call.scope != "instance" or u.use.instance_id == call.instance)]
    return list(dict.fromkeys(pods))


def lmcache_cpu_cleared(done: Sequence[StoreDone]) -> dict[PodKey, tuple[str, str]]:
    """The targeted pods whose in-process LMCache CPU tier a store call of ``done``
    (:attr:`StoreRun.done`) emptied: an LMCache controller instance or worker API call,
    ``emptied`` or ``unconfirmed``: ``(namespace, pod)`` -> ``(state, what emptied it)``, for
    :func:`~kubectl_kvreset.job.outcome.with_lmcache_clears`."""
    out: dict[PodKey, tuple[str, str]] = {}
    for d in done:
        what = LMCACHE_CPU_CLEARS.get(d.store)
        if what is None or d.result not in ("emptied", "unconfirmed"):
            continue
        for pod in d.targeted_pods():
            if out.get(pod, ("",))[0] != "emptied":
                out[pod] = (d.result, f"{what} ({d.scope})")
    return out


class ChainedReport(Report):
    """Several reports as one (``clear``: the ``CacheReset`` rows, then the ``StoreClear``
    rows): ``json``/``yaml`` print one list of every row, a table prints each part in turn;
    the exit code combines every row's."""

    def __init__(self, parts: Sequence[Report]) -> None:
        """``parts``: the reports in order (at least one)."""
        super().__init__(parts[0].kind, parts[0].columns, [r for p in parts for r in p.rows],
                         [c for p in parts for c in p.codes])
        self.parts = list(parts)

    def render(self, fmt: str, *, no_headers: bool = False) -> str:
        """As :meth:`Report.render`; tables of the parts that have rows, a blank line between."""
        if fmt not in ("table", "wide"):
            return super().render(fmt, no_headers=no_headers)
        return "\n".join(p.render(fmt, no_headers=no_headers) for p in self.parts if p.rows)
