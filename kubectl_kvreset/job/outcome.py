"""The clear job's outcome: one typed :class:`PortOutcome` per pod and API port (tiers as
states), built here from the plan and what the run gave, and the rows and exit code derived
from them. Rows are built in this one place; the command line only chooses how to print them.

Tier states: ``emptied``, ``unconfirmed`` (vLLM < 0.26 answers an empty 200; an exec without
an exit status), ``replaced``
(the pod vanished and its successor starts cold), ``not emptied`` (a step failed) and ``left``
(no planned step empties it). Never ``emptied`` for a tier that was not.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from ..consent import SHARED_FLAG
from ..engines.vllm.api import (
    EngineSplit,
    ResetOutcome,
    engine_list,
    parse_version,
    reset_answers_for_every_engine,
)
from ..fs import FsClearResult, sharing_message
from ..podapi import ResetResult
from ..pods import Owner
from ..pool import InFlight, NotRun
from ..report import Column, ExitCode, Report, step_codes
from ..rollout import DevModeResult, RestartResult
from ..tiers import Tier, TierKind
from .others import other_outcome_row, other_plan_row, other_skipped_row
from .planning import Plan, PodPlan, dev_mode_on
from .verify import planned_steps, verify_codes

if TYPE_CHECKING:
    from ..pods import ApiPort, VllmPod
    from .storedone import StoreDone

#: ``(namespace, pod, container, port)``: where an API reset ran (a pod with several vLLM
#: containers gets a key per container and port).
PortKey = tuple[str, str, str, int]
#: ``(namespace, owner)``: what a restart or dev-mode rollout acts on.
OwnerKey = tuple[str, Owner]


@dataclass
class RunResults:
    """What every step of a run gave, keyed for the outcome: API resets per :data:`PortKey`
    (:data:`~kubectl_kvreset.pool.NOT_RUN` when the first route did not run), FS volume results per (namespace,
    pod), owner results per (namespace, owner), successors of vanished pods per owner, and which
    data-parallel engines reset on a port whose answer stayed ``success: false`` (``engines``)."""

    resets: dict[PortKey, list[ResetResult] | NotRun] = field(default_factory=dict)
    fs: dict[tuple[str, str], list[FsClearResult]] = field(default_factory=dict)
    owners: dict[OwnerKey, RestartResult | DevModeResult] = field(default_factory=dict)
    successors: dict[OwnerKey, list[str]] = field(default_factory=dict)
    engines: dict[PortKey, EngineSplit] = field(default_factory=dict)


#: The tier kinds, in column order.
TIER_KINDS = ("gpu", "cpu", "fs", "shared")


def tier_label(tier: Tier) -> str:
    """``gpu``, ``cpu``, ``fs:/root/dir`` or ``shared:store`` for a tier."""
    kind = tier.kind.value
    if tier.root_dir:
        return f"{kind}:{tier.root_dir}"
    if tier.store:
        return f"{kind}:{tier.store}"
    return str(kind)


@dataclass(frozen=True)
class LeftRow:
    """A tier that was not emptied: its label, why (no planned step empties it, or the step
    failed), and what would empty it (a flag, or what to do; None only when nothing the
    plugin does can, e.g. a store outside the pods)."""

    tier: str
    reason: str
    remedy: str | None


@dataclass(frozen=True)
class UnconfirmedRow:
    """A tier whose emptying ran but could not be confirmed: its label and why."""

    tier: str
    reason: str


#: What to do about an API reset that failed, by the row's result.
RESET_REMEDIES = {
    "busy": "retry later, raise --busy-timeout, or use --preempt-running",
    "dev mode off": "--fallback=devmode|restart, or kubectl kvreset devmode --enable",
    "forbidden": "grant the rights the message names (rbac/ has the role), then run clear again",
    "unreachable": "run clear again once the pod is Ready and its API port answers, or --fallback=restart",
    "interrupted": "run clear again",
}
#: What to do about a reset failure not in :data:`RESET_REMEDIES`.
RESET_REMEDY = "run clear again once the cause in the message is fixed, or --fallback=restart"
#: What to do about an FS tier whose deletion did not empty it.
FS_REMEDY = "run kubectl kvreset clear-fs again once the cause in the message is fixed"


@dataclass(frozen=True)
class PortOutcome:
    """The end of a clear on one pod and API port (``port`` None for a pod without one).

    ``tiers``: kind (``gpu``, ``cpu``, ``fs``, ``shared``) -> the states of that kind's tiers
    (several FS roots or stores give several states). ``result``: ``emptied``, ``unconfirmed``,
    ``replaced``, ``gone``, ``partial`` or the failure (``failed``, ``busy``, ``dev mode off``,
    ``unreachable``, ``forbidden``, ``interrupted``, ``config unread``: a ``--config`` file whose
    port or tiers could not be read...). ``code``: the exit code it earns.
    Keyed by :attr:`key` (namespace, pod, container, port), so several vLLM containers per pod
    or several ports each get their own. ``successor``: the new pod that took this pod's place
    when a restart or dev-mode rollout replaced it; the row then names the new pod, and its
    message the one it replaces (the key keeps the pod the plan was made for). ``reset_busy``:
    the reset's last answer was ``success: false`` (blocks held by running requests); ``engines_emptied``: the data-parallel
    engines behind the port shown emptied even so (:class:`~kubectl_kvreset.engines.vllm.api.EngineSplit`).
    """

    namespace: str
    pod: str
    container: str
    port: int | None
    role: str | None
    owner: str
    version: str | None
    tiers: dict[str, tuple[str, ...]]
    result: str
    messages: tuple[str, ...]
    steps: tuple[str, ...]
    calls: int
    busy_answers: int
    left: tuple[LeftRow, ...]
    code: ExitCode
    unconfirmed: tuple[UnconfirmedRow, ...] = ()
    successor: str | None = None
    reset_busy: bool = False
    engines_emptied: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str, int | None]:
        """``(namespace, pod, container, port)``."""
        return (self.namespace, self.pod, self.container, self.port)

    @property
    def emptied(self) -> bool:
        """True when every tier of this port was emptied and confirmed (or its pod replaced)."""
        return self.result in ("emptied", "replaced", "gone") and self.code is ExitCode.OK

    def row(self) -> dict[str, Any]:
        """The ``CacheReset`` row (the README documents its fields)."""
        messages = self.messages
        if self.successor is not None:
            messages = (f"replaces {self.pod}" if self.successor != self.pod
                        else f"a new pod of the same name replaced {self.pod}",) + messages
        return {
            "namespace": self.namespace, "pod": self.successor or self.pod, "port": self.port, "role": self.role,
            "owner": self.owner, "container": self.container, "engine": "vllm", "version": self.version,
            **{kind: _join(list(self.tiers.get(kind, ()))) for kind in TIER_KINDS},
            "result": self.result, "message": "; ".join(messages) or None, "steps": list(self.steps),
            "calls": self.calls, "busy_answers": self.busy_answers,
            "left": [{"tier": lt.tier, "reason": lt.reason, "remedy": lt.remedy} for lt in self.left],
            "unconfirmed": [{"tier": u.tier, "reason": u.reason} for u in self.unconfirmed],
        }


@dataclass(frozen=True)
class Outcome:
    """What a clear did: one :class:`PortOutcome` per pod and port (plan order), the ``notes``
    the user should read (lines for stderr: shared volumes, dev mode now on), whether the run
    was ``interrupted``, and the ``report`` (rows and exit code) the command line prints.
    ``replaced``: ``(namespace, pod)`` of each pod a restart or dev-mode rollout replaced ->
    its owner's new pods (empty when none came up); a later step that would reach the old pod
    uses these (:func:`kubectl_kvreset.job.storeclear.run_store`)."""

    ports: tuple[PortOutcome, ...]
    notes: tuple[str, ...]
    interrupted: bool
    report: Report
    replaced: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    other_rows: tuple[tuple[dict[str, Any], ExitCode], ...] = ()
    """The rows of the inference pods this version cannot empty (:mod:`kubectl_kvreset.job.others`)
    and their exit codes, after the vLLM rows in :attr:`report`; kept when a later step rebuilds it."""

    def add_others(self, report: Report, extra: Mapping[str, Any] | None = None) -> Report:
        """``report`` with :attr:`other_rows` appended (each with ``extra`` fields), returned."""
        for row, code in self.other_rows:
            report.add({**row, **(extra or {})}, code)
        return report

    @property
    def exit_code(self) -> ExitCode:
        """0, 1, 3 or 130 (130, then 1, then 3: README "Exit codes"); the command line reports a
        run stopped by SIGTERM as 143 instead of 130 (:func:`kubectl_kvreset.cli.signals.exit_code`)."""
        codes = list(self.report.codes) + ([ExitCode.INTERRUPTED] if self.interrupted else [])
        return ExitCode.combine(codes)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The ``CacheReset`` rows, as ``-o json`` prints them."""
        return self.report.rows


def result_columns(scope: str | None) -> list[Column]:
    """Columns of the ``CacheReset`` table (tiers as columns; NAMESPACE only with ``-A``)."""
    cols = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("PORT", "port"),
            Column("ROLE", "role"), Column("OWNER", "owner", wide=True), Column("CONTAINER", "container", wide=True),
            Column("VERSION", "version"), Column("GPU", "gpu"), Column("CPU", "cpu"), Column("FS", "fs"), Column("SHARED", "shared"),
            Column("RESULT", "result"), Column("STEPS", "steps", wide=True), Column("CALLS", "calls", wide=True),
            Column("MESSAGE", "message", notes=True)]
    return cols[1:] if scope is not None else cols


def _engine_column(report: Report) -> None:
    """Show the ENGINE column (after POD) when a row is not vLLM's."""
    if any(r.get("engine") not in (None, "vllm") for r in report.rows):
        cols = list(report.columns)
        at = next(i for i, c in enumerate(cols) if c.key == "pod") + 1
        report.columns = [*cols[:at], Column("ENGINE", "engine"), *cols[at:]]


def plan_report(plan: Plan, *, store: bool = False) -> Report:
    """The plan as a report: one ``PlannedReset`` row per pod (steps, tiers each empties,
    tiers left with the flag that would empty them). ``--dry-run`` prints exactly this. With
    ``--verify`` each row also has ``verify``: per API port the canary's steps
    (:func:`~kubectl_kvreset.job.verify.planned_steps`; ``store``: the run has a store step,
    probed after it), shown as the VERIFY column."""
    fallback = plan.fallback_chosen
    cols = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("PORTS", "ports", wide=True),
            Column("VERSION", "version"), Column("STEPS", "steps", short=step_codes), Column("EMPTIES", "empties"),
            Column("LEAVES", "leaves", notes=True), Column("NOTES", "notes", wide=True)]
    if plan.options.verify:
        cols.insert(-2, Column("VERIFY", "verify", short=verify_codes))
    if plan.scope.namespace is not None:
        cols = cols[1:]
    report = Report("PlannedReset", cols)
    for p in plan.pods:
        steps: list[str] = []
        replaced = plan.devmode_changes.get((p.pod.namespace, p.pod.owner), ())
        changes = f" ({'; '.join(replaced)})" if replaced else ""
        for step in p.steps.steps:
            if step.action == "api-reset":
                q = "?" + urlencode(p.query) if p.query else ""
                steps += [f"POST {p.routes[0]}{q}"] + [f"POST {r}" for r in p.routes[1:]]
                if fallback in ("devmode", "restart") and dev_mode_on(p.pod) is None:
                    verb = "restart" if fallback == "restart" else "devmode --enable"
                    steps.append(f"if vLLM answers 404 (dev mode off): {verb} {p.pod.owner.ref()}"
                                 + (changes if fallback == "devmode" else ""))
            elif step.action == "clear-fs":
                steps.append("clear-fs " + ",".join(t.root_dir or "" for t in step.empties)
                             + (" (--whole-tier: every model's files, also where pods outside the targets mount the "
                                "volume)" if plan.options.whole_tier else ""))
            elif step.action == "restart":
                steps.append(f"restart {p.pod.owner.ref()}")
            else:
                steps.append(f"devmode --enable {p.pod.owner.ref()}{changes}")
        if p.not_running is not None:
            steps.append(f"none: {p.not_running.describe()}")
        report.add({
            "namespace": p.pod.namespace, "pod": p.pod.name, "owner": p.pod.owner.ref(), "container": p.pod.container,
            "engine": "vllm", "ports": [port.port for port in p.pod.ports], "version": p.version or "unknown",
            "steps": steps,
            "empties": [tier_label(t) for step in p.steps.steps for t in step.empties],
            "leaves": [f"{tier_label(lt.tier)} ({lt.flag or ('pod not running' if p.not_running else 'outside the pods')})"
                       for lt in p.steps.left]
            + ([f"every pod tier if vLLM answers 404 (VLLM_SERVER_DEV_MODE is not in the spec): "
                f"{'then ' + fallback if fallback in ('devmode', 'restart') else '--fallback=devmode|restart'}"]
               if p.has("api-reset") and dev_mode_on(p.pod) is None else []),
            "disruptive": [s.action for s in p.steps.steps if s.disruptive],
            "notes": list(p.notes),
            **({"verify": planned_steps(p, plan.options.fallback, store=store)} if plan.options.verify else {}),
        })
    for other in plan.others:
        report.add(other_plan_row(other))  # a plan earns no failure: the run's rows do
    _engine_column(report)
    return report


def dev_mode_hint(pod: VllmPod) -> str:
    """The row's short hint for a pod whose vLLM has dev mode off (the long one is a note,
    :func:`dev_mode_note`, given once)."""
    return f"dev mode off: rerun with --fallback=devmode|restart, or kubectl kvreset devmode --enable {pod.owner.ref()}"


def dev_mode_note() -> str:
    """The explanation given once when some pod answered 404 for the reset routes."""
    return ("note: vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1 (stock llm-d and KServe do not "
            "set it). --fallback=devmode sets it and rolls the pods (which empties their caches; later runs can use "
            "the API); --fallback=restart only restarts them. The dev routes are unauthenticated: turn dev mode off "
            "when done (kubectl kvreset devmode --disable OWNER).")


def build_outcome(plan: Plan, results: RunResults, notes: list[str], *, interrupted: bool) -> Outcome:
    """The :class:`Outcome` of a run: one :class:`PortOutcome` per pod and API port (one per
    pod without ports), the ``CacheReset`` report of them, and the notes."""
    report = Report("CacheReset", result_columns(plan.scope.namespace))
    ports: list[PortOutcome] = []
    successor = successors_by_pod(plan, results)
    for p in plan.pods:
        ports_of: list[ApiPort | None] = [*p.pod.ports] or [None]
        for port in ports_of:
            po = port_outcome(p, port, results, interrupted=interrupted)
            new = successor.get((p.pod.namespace, p.pod.name))
            if new is not None:
                po = replace(po, successor=new)
            ports.append(po)
            report.add(po.row(), po.code)
    for pod in plan.scope.skipped:
        skipped_ports: list[ApiPort | None] = [*pod.ports] or [None]
        for port in skipped_ports:
            po = skipped_outcome(pod, port, plan.scope.container)
            ports.append(po)
            report.add(po.row(), po.code)
    others = tuple(other_outcome_row(o, results.owners.get((o.pod.namespace, o.pod.owner)), interrupted=interrupted,
                                     successor=successor.get((o.pod.namespace, o.pod.name)))
                   for o in plan.others)
    for row, code in others:
        report.add(row, code)
    for other in plan.scope.skipped_others:
        report.add(*other_skipped_row(other, plan.scope.container))
    _engine_column(report)
    notes = list(notes)
    if any(po.result == "dev mode off" for po in ports):
        notes.append(dev_mode_note())
    notes += refusal_notes(ports)
    rolled = {key for key, res in results.owners.items() if owner_result_ok(res)}
    vanished = {(ns, name) for (ns, name, _c, _p), got in results.resets.items()
                if isinstance(got, list) and got and got[0].failure is not None and got[0].failure.kind == "pod-gone"}
    replaced = {(p.pod.namespace, p.pod.name): tuple(results.successors.get((p.pod.namespace, p.pod.owner), ()))
                for p in plan.pods if (p.pod.namespace, p.pod.owner) in rolled
                or (p.pod.namespace, p.pod.name) in vanished}
    # the restarted pods of engines this version cannot empty (the LMCache server's store row reads it)
    replaced.update({(o.pod.namespace, o.pod.name): tuple(results.successors.get((o.pod.namespace, o.pod.owner), ()))
                     for o in plan.others if (o.pod.namespace, o.pod.owner) in rolled})
    return Outcome(tuple(ports), tuple(notes), interrupted, report, replaced, others)


def successors_by_pod(plan: Plan, results: RunResults) -> dict[tuple[str, str], str]:
    """``(namespace, old pod) -> new pod`` for the pods of owners a restart or dev-mode rollout
    replaced: the owner's old pods and its new ones (:func:`kubectl_kvreset.job.execute.find_successors`)
    paired in name order, so each row can name the pod that now serves (a StatefulSet's or
    LeaderWorkerSet's successor keeps its name). Old pods beyond the new ones (a scale-down
    meanwhile) get none."""
    rolled = {key for key, res in results.owners.items() if owner_result_ok(res)}
    out: dict[tuple[str, str], str] = {}
    for key in rolled:
        ns, owner = key
        new = sorted(results.successors.get(key, ()))
        old = sorted({p.pod.name for p in plan.pods if p.pod.namespace == ns and p.pod.owner == owner}
                     | {o.pod.name for o in plan.others if o.pod.namespace == ns and o.pod.owner == owner})
        same = [n for n in old if n in new]          # successors that keep the name
        for name in same:
            out[(ns, name)] = name
        for o, n in zip([n for n in old if n not in same], [n for n in new if n not in same], strict=False):
            out[(ns, o)] = n
    return out


def refusal_notes(ports: list[PortOutcome]) -> list[str]:
    """One ``error:`` line per refused permission among the ``forbidden`` rows (for stderr: the
    rows say it per pod), with the first pod it stopped and how many others."""
    seen: dict[str, list[str]] = {}
    for po in ports:
        if po.result != "forbidden":
            continue
        for text in po.messages:
            m = re.search(r"(not permitted: .*|every transport was refused.*|[^;]*cannot [a-z]+ resource .*)", text)
            if m is not None:
                seen.setdefault(m.group(1).replace(po.pod, "POD"), []).append(f"{po.namespace}/{po.pod}")
                break
    return [f"error: {pods[0]}" + (f" (and {len(pods) - 1} more)" if len(pods) > 1 else "") + ": "
            + text.replace("POD", pods[0].split("/", 1)[1]) for text, pods in seen.items()]


def port_outcome(plan: PodPlan, port: ApiPort | None, results: RunResults, *, interrupted: bool) -> PortOutcome:
    """The :class:`PortOutcome` of one pod and port: each tier's state from the step that was
    to empty it, the result, the messages and the exit code it earns."""
    pod = plan.pod
    if plan.not_running is not None:
        return not_running_outcome(plan, port)
    messages: list[str] = list(plan.notes)
    failure_result: str | None = None
    unconfirmed = False
    gone = False
    reset_busy = False
    engines_emptied: tuple[str, ...] = ()
    step_of: dict[int, str] = {}
    for step in plan.steps.steps:
        for tier in step.empties:
            step_of.setdefault(id(tier), step.action)
    left_ids = {id(lt.tier): lt for lt in plan.steps.left}
    got = results.resets.get((pod.namespace, pod.name, pod.container, port.port)) if port is not None else None
    resets: list[ResetResult] | None = None if isinstance(got, NotRun) else got
    reset_state: str | None = None
    if plan.has("api-reset"):
        if isinstance(got, InFlight):  # sent, and vLLM may have acted on it: never "not reset"
            reset_state, failure_result = "unconfirmed", "interrupted"
            messages.append("unknown: interrupted in flight (the reset was sent and vLLM may have emptied the "
                            "cache, but its answer was not awaited)")
        elif isinstance(got, NotRun) or (got is None and interrupted and port is not None):
            reset_state, failure_result = "not emptied", "interrupted"
            messages.append("not reset: the run was interrupted before this call finished")
        elif not resets:
            reset_state, failure_result = "not emptied", "failed"
            messages.append("no API port found in the vLLM command")
        else:
            first = resets[0]
            if first.outcome is ResetOutcome.CLEARED:
                reset_state = "emptied"
                dp_text = engine_zero_only(plan.version, pod.serve.engines_per_port, port, plan.engines,
                                           unknown=pod.serve.engines_unknown, secret=pod.serve.engines_secret)
                if dp_text is not None:
                    reset_state, unconfirmed = "unconfirmed", True
                    messages.append(dp_text)
            elif first.outcome is ResetOutcome.UNCONFIRMED:
                reset_state, unconfirmed = "unconfirmed", True
                messages.append("vLLM < 0.26 answers an empty 200: the reset ran but its result is not known")
            elif first.failure is not None and first.failure.kind == "pod-gone":
                successors = results.successors.get((pod.namespace, pod.owner), [])
                reset_state, gone = "replaced", True
                messages.append(f"pod {pod.name} was deleted during the run"
                                + (f"; its successor {', '.join(successors)} is a new pod and starts cold" if successors
                                   else " and has no successor: nothing is left to empty"))
            else:
                reset_state = "not emptied"
                failure_result, reset_text = describe_reset_failure(pod, first)
                split = results.engines.get((pod.namespace, pod.name, pod.container, port.port)) if port else None
                reset_busy = first.outcome is ResetOutcome.BUSY
                if split is not None:
                    reset_text = f"{split.describe()}: {reset_text}"
                    engines_emptied = tuple(split.emptied)
                messages.append(reset_text)
            for extra in resets[1:] if reset_state in ("emptied", "unconfirmed") else []:
                if extra.outcome not in (ResetOutcome.CLEARED, ResetOutcome.UNCONFIRMED):
                    detail = extra.answer.detail if extra.answer else (extra.failure.message if extra.failure else "")
                    messages.append(f"{extra.route}: {detail}")
                    failure_result = failure_result or "failed"
    owner_res = results.owners.get((pod.namespace, pod.owner))
    owner_state: str | None = None
    if owner_res is not None:
        if owner_result_ok(owner_res):
            owner_state = "emptied"
            verb = "restarted" if plan.has("restart") else "dev mode turned on, which rolled"
            messages.append(f"{pod.owner.ref()} {verb}: its new pods start cold")
        elif owner_res.result == "interrupted" and owner_res.requested:  # the pods are being replaced
            owner_state, failure_result = "unconfirmed", failure_result or "interrupted"
            messages.append(owner_result_message(owner_res))
        else:
            owner_state = "not emptied"
            failure_result = failure_result or ("interrupted" if owner_res.result == "interrupted" else "failed")
            messages.append(owner_result_message(owner_res))
    if interrupted and owner_res is None and any(st.disruptive for st in plan.steps.steps):
        failure_result = failure_result or "interrupted"
        messages.append("the restart or dev-mode rollout was not started: the run was interrupted")
    if not plan.has("api-reset") and owner_res is None and dev_mode_on(pod) is False:
        failure_result = failure_result or "dev mode off"
        messages.append(dev_mode_hint(pod))
    fs_results = results.fs.get((pod.namespace, pod.name), [])
    cells: dict[str, list[str]] = {kind: [] for kind in TIER_KINDS}
    left_rows: list[LeftRow] = []
    unconfirmed_rows: list[UnconfirmedRow] = []
    reset_reason = "; ".join(messages) if reset_state in ("not emptied", "unconfirmed") else ""
    for effect in plan.effects:
        tier = effect.tier
        action = step_of.get(id(tier))
        lt = left_ids.get(id(tier))
        state: str
        if lt is not None or action is None:
            state = "left"
            reason = lt.reason if lt is not None else effect.reason
            flag = lt.flag if lt is not None else None
            left_rows.append(LeftRow(tier_label(tier), reason, flag))
            if reset_state != "not emptied":  # after a failed call, the failure is the message
                messages.append(f"{tier_label(tier)} left: {reason}" + (f"; to empty it: {flag}" if flag else ""))
        elif action == "api-reset":
            state = reset_state or "not emptied"
            why = reset_reason
            if state == "emptied" and any(tier is t for t in plan.unconfirmed):
                state, unconfirmed, why = "unconfirmed", True, effect.reason
                messages.append(f"{tier_label(tier)}: {effect.reason}")
            if state == "not emptied":
                left_rows.append(LeftRow(tier_label(tier), reset_reason or "the reset did not run",
                                         RESET_REMEDIES.get(failure_result or "", RESET_REMEDY)))
            elif state == "unconfirmed":
                unconfirmed_rows.append(UnconfirmedRow(tier_label(tier), why))
        elif action == "clear-fs":
            state, fs_text = fs_state(tier, fs_results)
            if fs_text:
                messages.append(fs_text)
            if state == "unconfirmed":
                unconfirmed = True
                unconfirmed_rows.append(UnconfirmedRow(tier_label(tier), fs_text or "the deletion was not confirmed"))
            elif state != "emptied":
                # directories kept for consent (pods outside the targets serve that model on the
                # volume) are left as a store held back is: partial, with the flag as the remedy
                held = [r for r in fs_results if r.result == "left" and r.target.held is not None
                        and (r.target.root == tier.root_dir or len(fs_results) == 1)]
                if tier.tier_type != "lmcache_local_disk" and not held:  # the disk is left to the store step: partial
                    failure_result = failure_result or "failed"
                left_rows.append(LeftRow(tier_label(tier), fs_text or "the deletion did not empty it",
                                         "kubectl kvreset clear-store" if tier.tier_type == "lmcache_local_disk"
                                         else f"{SHARED_FLAG} (or --whole-tier)" if held else FS_REMEDY))
        else:
            state = owner_state or "not emptied"
            if state == "not emptied":
                left_rows.append(LeftRow(tier_label(tier), owner_result_message(owner_res) if owner_res is not None
                                         else "the restart or dev-mode rollout did not run",
                                         f"check kubectl rollout status {pod.owner.ref()}, then run clear again"))
            elif state == "unconfirmed":
                unconfirmed_rows.append(UnconfirmedRow(tier_label(tier), owner_result_message(owner_res)
                                                       if owner_res is not None else "the rollout was not waited for"))
        cells[tier.kind.value].append(state)
    if pod.serve.config_error is not None:
        # the port or tiers its --config file sets are not established: never "emptied"
        failure_result = "config unread" if failure_result in (None, "failed") else failure_result
        messages.append(f"--config {pod.serve.config_file}: {pod.serve.config_error}; what it sets "
                        "(port, kv-transfer-config) is not known, so this pod is not reported emptied")
    states = [st for v in cells.values() for st in v]
    all_done = all(st in ("emptied", "unconfirmed", "replaced") for st in states)
    if gone and failure_result is None:
        result, code = ("replaced" if results.successors.get((pod.namespace, pod.owner)) else "gone"), ExitCode.OK
    elif failure_result is None and all_done:
        result = "unconfirmed" if unconfirmed else "emptied"
        code = ExitCode.UNCONFIRMED if unconfirmed else ExitCode.OK
    else:
        code = ExitCode.FAILED
        result = failure_result or "partial"
    if result == "emptied" and (left_rows or unconfirmed_rows):
        # never emptied while a tier is left or unconfirmed
        result, code = ("partial", ExitCode.FAILED) if left_rows else ("unconfirmed", ExitCode.UNCONFIRMED)
    if plan.probe_failure is not None and plan.version is None and reset_state in ("emptied", "unconfirmed"):
        messages.append(f"version unknown ({plan.probe_failure.message}): assumed the oldest behaviour")
    return PortOutcome(
        namespace=pod.namespace, pod=pod.name, container=pod.container, port=port.port if port is not None else None,
        role=pod.role, owner=pod.owner.ref(), version=plan.version,
        tiers={kind: tuple(v) for kind, v in cells.items() if v}, result=result, messages=tuple(messages),
        steps=plan.steps.actions(), calls=sum(r.calls for r in resets) if resets else 0,
        busy_answers=resets[0].busy_answers if resets else 0, left=tuple(left_rows), code=code,
        unconfirmed=tuple(unconfirmed_rows), reset_busy=reset_busy, engines_emptied=engines_emptied)


def skipped_outcome(pod: VllmPod, port: ApiPort | None, container: str | None) -> PortOutcome:
    """The row of a vLLM container ``--container`` left out: result ``skipped``, nothing done,
    exit 0 (it was not a target)."""
    return PortOutcome(
        namespace=pod.namespace, pod=pod.name, container=pod.container, port=port.port if port is not None else None,
        role=pod.role, owner=pod.owner.ref(), version=pod.version, tiers={}, result="skipped",
        messages=(f"container {pod.container} not targeted (--container {container}): nothing was reset",),
        steps=(), calls=0, busy_answers=0, left=(), code=ExitCode.OK)


def engine_zero_only(version: str | None, engines: int, port: ApiPort | None,
                     labels: tuple[str, ...] = (), *, unknown: str | None = None, secret: bool = False) -> str | None:
    """Why a successful reset answer does not confirm every data-parallel engine behind
    ``port`` (None when it does: one engine established, or a version that ANDs every engine's
    result, :func:`~kubectl_kvreset.engines.vllm.api.reset_answers_for_every_engine`). ``labels``: the
    engines' ``engine`` labels from ``/metrics`` when they gave the count (the first one, the
    lowest rank the server manages, is the one that answers; ``vllm/v1/engine/core_client.py``
    ``call_utility_async``), else ``()`` and the count is the serve flags'. ``unknown``: why
    neither source established the count (then the answer vouches for engine 0 alone, whatever
    ``engines`` says); ``secret``: the flags' count was read from a Secret and is not written."""
    if reset_answers_for_every_engine(parse_version(version)) or (engines <= 1 and unknown is None):
        return None
    who = f"vLLM {version}" if version else "vLLM of unknown version"
    where = f" behind port {port.port}" if port is not None else ""
    tail = " (vLLM 0.32.0 and later answer for every engine)"
    if unknown is not None:
        return (f"{who} answers the reset for engine 0 only, and the number of data-parallel engines{where} is not "
                f"known ({unknown}): any other engine is not confirmed{tail}")
    counted = len(labels) == engines
    if secret and not counted:
        return (f"{who} answers the reset for engine 0 only: the other data-parallel engines{where} (their count "
                f"is read from a Secret, not shown) are not confirmed{tail}")
    first = labels[0] if counted else "0"
    others = engine_list(labels[1:]) if counted else ("engine 1" if engines == 2 else f"engines 1-{engines - 1}")
    source = "the engine labels of GET /metrics" if counted else "the serve flags"
    return (f"{who} answers the reset for engine {first} only: {others} of the {engines} data-parallel "
            f"engines{where} ({source}) are not confirmed{tail}")


def not_running_outcome(plan: PodPlan, port: ApiPort | None) -> PortOutcome:
    """The :class:`PortOutcome` of a pod with no running vLLM container: result ``not
    running``, every tier ``left`` with the pod's state and cause as the reason, nothing sent,
    exit code 1."""
    pod, down = plan.pod, plan.not_running
    assert down is not None
    cells: dict[str, list[str]] = {}
    for effect in plan.effects:
        cells.setdefault(effect.tier.kind.value, []).append("left")
    return PortOutcome(
        namespace=pod.namespace, pod=pod.name, container=pod.container, port=port.port if port is not None else None,
        role=pod.role, owner=pod.owner.ref(), version=None, tiers={k: tuple(v) for k, v in cells.items()},
        result="not running", messages=(down.describe() + ": nothing was sent to it",), steps=(), calls=0,
        busy_answers=0, left=tuple(LeftRow(tier_label(lt.tier), lt.reason, None) for lt in plan.steps.left),
        code=ExitCode.FAILED)


def describe_reset_failure(pod: VllmPod, first: ResetResult) -> tuple[str, str]:
    """``(result, message)`` for an API reset that did not empty the cache."""
    if first.failure is not None:
        result = {"forbidden": "forbidden", "pod-gone": "pod gone", "unreachable": "unreachable",
                  "refused": "unreachable", "timeout": "unreachable",
                  "interrupted": "interrupted"}.get(first.failure.kind, "failed")
        return result, first.failure.message
    if first.outcome is ResetOutcome.BUSY:
        return "busy", (f"vLLM kept answering success:false for {first.elapsed_s:.1f}s ({first.busy_answers} answers; "
                        "blocks held by running requests or transfers): retry later, raise --busy-timeout, "
                        "or use --preempt-running")
    if first.outcome is ResetOutcome.DEV_MODE_OFF:
        return "dev mode off", dev_mode_hint(pod)
    return "failed", first.answer.detail if first.answer else "no answer"


def fs_state(tier: Tier, results: list[FsClearResult]) -> tuple[str, str | None]:
    """The state of an FS tier from the volume deletions covering it, and a message.

    LMCache's local disk is never one of clear-fs's deletions (``fs.FS_TIER_TYPES``): the
    store step deletes its ``*.pt`` files and says so in its own ``StoreClear`` row, so here it
    is not emptied whatever other FS tier of the pod was."""
    if tier.tier_type == "lmcache_local_disk":
        return "not emptied", (f"{tier_label(tier)}: LMCache's local disk is emptied by the store step "
                               "(clear-store, chained by clear), not here: see its StoreClear row")
    mine = [r for r in results if r.target.root == tier.root_dir] or results
    if not mine:
        return "not emptied", f"{tier_label(tier)}: no deletion ran"
    for r in mine:
        if r.result not in ("emptied", "unconfirmed"):
            return "not emptied", f"{tier_label(tier)}: {r.message or 'the deletion ' + r.result}"
    for r in mine:
        if r.result == "unconfirmed":
            return "unconfirmed", f"{tier_label(tier)}: {r.message or 'the deletion was not confirmed'}"
    shared = [text for r in mine if (text := sharing_message(r.target, r)) is not None]
    return "emptied", "; ".join(shared) or None


def owner_result_ok(res: RestartResult | DevModeResult) -> bool:
    """True when an owner's pods were replaced: a restart whose rollout completed, or a
    dev-mode patch that rolled the pods (``unchanged`` rolled nothing, so it empties nothing)."""
    if isinstance(res, DevModeResult) and res.action == "enable":
        return res.ok and res.result == "enabled"
    return res.ok


def owner_result_message(res: RestartResult | DevModeResult) -> str:
    """What an owner's failed rollout reported."""
    if isinstance(res, DevModeResult) and res.action == "enable" and res.result == "unchanged":
        return (f"{res.owner.ref()} already sets VLLM_SERVER_DEV_MODE=1 in its template, so nothing was rolled: "
                "the pods differ from their template; use --fallback=restart")
    return str(res.message or res.result)


def _join(states: list[str]) -> str | None:
    return ",".join(dict.fromkeys(states)) if states else None


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
    from .storedisk import DiskCall

    emptied: dict[tuple[str, str], list[tuple[str, StoreDone]]] = {}
    for d in done:
        if isinstance(d.target, DiskCall):
            # LMCache's local disk (job/storedisk.py): emptied, or gone with its replaced pod's emptyDir
            if d.result not in ("emptied", "replaced"):
                continue
            name = LMCACHE_DISK_ROW
        elif d.result == "emptied" or (d.result == "replaced" and d.store == LMCACHE_SERVER_ROW):
            # an LMCache server (lm://) is emptied only by the restart of its pod (--fallback restart)
            name = _TIER_STORE.get(d.store, d.store)
        else:
            continue
        for pod in d.tier_pods():
            emptied.setdefault(pod, []).append((name, d))
    if not emptied:
        return outcome
    plans = {(p.pod.namespace, p.pod.name, p.pod.container): p for p in plan.pods}
    report = Report(outcome.report.kind, outcome.report.columns)
    ports: list[PortOutcome] = []
    for po in outcome.ports:
        pod_plan = plans.get((po.namespace, po.pod, po.container))
        got = emptied.get((po.namespace, po.pod))
        if pod_plan is not None and got:
            po = _store_emptied(po, pod_plan, got)
        ports.append(po)
        report.add(po.row(), po.code)
    return replace(outcome, ports=tuple(ports), report=outcome.add_others(report))


def _after_store(po: PortOutcome, tiers: Mapping[str, Sequence[str]], left: Sequence[Any],
                 unconfirmed: bool) -> tuple[str, ExitCode]:
    """The row's result once the store step changed some of its tiers: a row ``partial`` only
    for tiers that are now done becomes ``emptied`` (``unconfirmed`` where a tier or an entry
    is); any other result stays (the rule of :func:`port_outcome`: never ``emptied`` while a
    tier is left)."""
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
    rule as :func:`port_outcome` (never ``emptied`` while another tier is left). Other rows are
    unchanged.

    LMCache's vLLM connectors have no ``reset_cache`` (plan.py's LMCache rule), so this is the
    only step that empties that tier short of a restart.
    """
    if not cleared:
        return outcome
    from ..engines.vllm.kvconfig import LMCACHE_CONNECTORS
    from ..tiers import TierKind

    plans = {(p.pod.namespace, p.pod.name, p.pod.container): p for p in plan.pods}
    report = Report(outcome.report.kind, outcome.report.columns)
    ports: list[PortOutcome] = []
    for po in outcome.ports:
        hit = cleared.get((po.namespace, po.pod))
        pplan = plans.get((po.namespace, po.pod, po.container))
        if hit is not None and pplan is not None and pplan.not_running is None:
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
            if drop:
                remaining = tuple(lt for k, lt in enumerate(left) if k not in drop)
                result, code = _after_store(po, cells, remaining, bool(unconfirmed))
                po = dataclasses.replace(po, tiers={k: tuple(v) for k, v in cells.items()}, left=remaining,
                                         messages=tuple(messages), unconfirmed=tuple(unconfirmed),
                                         result=result, code=code)
        ports.append(po)
        report.add(po.row(), po.code)
    return replace(outcome, ports=tuple(ports), report=outcome.add_others(report))
