"""The clear job's outcome: one typed :class:`PortOutcome` per pod and API port (tiers as
states), built here from the plan and what the run gave, and the rows and exit code derived
from them. Rows are built in this one place; the command line only chooses how to print them.

The pieces, each in its own module and all importable from here: the types
(:mod:`~kubectl_kvreset.job.outcometypes`), one pod and port's outcome
(:mod:`~kubectl_kvreset.job.portoutcome`), the tables' columns and the plan's rows
(:mod:`~kubectl_kvreset.job.reportrows`) and the store step's results merged into the rows
(:mod:`~kubectl_kvreset.job.storemerge`). :func:`build_outcome` puts them together.

Tier states: ``emptied``, ``unconfirmed`` (vLLM < 0.26 answers an empty 200; an exec without
an exit status), ``replaced``
(the pod vanished and its successor starts cold), ``not emptied`` (a step failed) and ``left``
(no planned step empties it). Never ``emptied`` for a tier that was not.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..pods import ApiPort
from ..report import Report
from .others import other_outcome_row, other_skipped_row
from .outcometypes import (
    TIER_KINDS,
    LeftRow,
    Outcome,
    OwnerKey,
    PortKey,
    PortOutcome,
    RunResults,
    UnconfirmedRow,
    tier_label,
)
from .planning import Plan
from .portoutcome import (
    FS_REMEDY,
    RESET_REMEDIES,
    RESET_REMEDY,
    describe_reset_failure,
    dev_mode_hint,
    engine_zero_only,
    fs_state,
    not_running_outcome,
    owner_result_message,
    owner_result_ok,
    port_outcome,
    skipped_outcome,
)
from .reportrows import engine_column, plan_report, result_columns
from .storemerge import (
    EMPTIED_BY_CLEAR_STORE,
    LMCACHE_DISK_ROW,
    LMCACHE_SERVER_ROW,
    with_lmcache_clears,
    with_store_results,
)

__all__ = [
    "EMPTIED_BY_CLEAR_STORE", "FS_REMEDY", "LMCACHE_DISK_ROW", "LMCACHE_SERVER_ROW", "RESET_REMEDIES", "RESET_REMEDY",
    "TIER_KINDS", "LeftRow", "Outcome", "OwnerKey", "PortKey", "PortOutcome", "RunResults", "UnconfirmedRow",
    "build_outcome", "describe_reset_failure", "dev_mode_hint", "dev_mode_note", "engine_zero_only", "fs_state",
    "not_running_outcome", "owner_result_message", "owner_result_ok", "plan_report", "port_outcome", "refusal_notes",
    "result_columns", "skipped_outcome", "successors_by_pod", "tier_label", "with_lmcache_clears",
    "with_store_results",
]


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
    engine_column(report)
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
