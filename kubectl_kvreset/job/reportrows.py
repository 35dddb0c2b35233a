"""The clear job's tables: the columns of the ``CacheReset`` rows a run gives
(:class:`~kubectl_kvreset.job.outcometypes.PortOutcome`), and the plan as ``PlannedReset`` rows
(what ``--dry-run`` prints).
"""

from __future__ import annotations

from urllib.parse import urlencode

from ..report import Column, Report, step_codes
from .others import other_plan_row
from .outcometypes import tier_label
from .planning import Plan, dev_mode_on
from .verify import planned_steps, verify_codes


def result_columns(scope: str | None) -> list[Column]:
    """Columns of the ``CacheReset`` table (tiers as columns; NAMESPACE only with ``-A``)."""
    cols = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("PORT", "port"),
            Column("ROLE", "role"), Column("OWNER", "owner", wide=True), Column("CONTAINER", "container", wide=True),
            Column("VERSION", "version"), Column("GPU", "gpu"), Column("CPU", "cpu"), Column("FS", "fs"),
            Column("SHARED", "shared"),
            Column("RESULT", "result"), Column("STEPS", "steps", wide=True), Column("CALLS", "calls", wide=True),
            Column("MESSAGE", "message", notes=True)]
    return cols[1:] if scope is not None else cols


def engine_column(report: Report) -> None:
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
            "engine": p.pod.engine.name, "ports": [port.port for port in p.pod.ports],
            "version": p.version or "unknown",
            "steps": steps,
            "empties": [tier_label(t) for step in p.steps.steps for t in step.empties],
            "leaves": [f"{tier_label(lt.tier)} "
                       f"({lt.flag or ('pod not running' if p.not_running else 'outside the pods')})"
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
    engine_column(report)
    return report

