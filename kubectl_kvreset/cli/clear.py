"""``kubectl kvreset clear``: empty the KV cache tiers of the targeted vLLM pods."""

from __future__ import annotations

import sys
from typing import Any

import click

from .options import (
    EXIT_CODES_HELP,
    concurrency_option,
    emit,
    handle_errors,
    info,
    kube_flags,
    output_option,
    parallel,
    target_options,
    transport_option,
)


@click.command(
    "clear",
    epilog=(
        "\b\nExamples:\n"
        "  kubectl kvreset clear -n llm-d --all\n"
        "  kubectl kvreset clear deployment/ms-decode deployment/ms-prefill --yes\n"
        "  kubectl kvreset clear -l llm-d.ai/role=decode --preempt-running\n"
        "  kubectl kvreset clear -n llm-d --all --dry-run -o yaml\n\n"
        "Each API port gets POST /reset_prefix_cache?reset_external=true (and /reset_mm_cache, "
        "/reset_encoder_cache where the version has them) through the API server's pod proxy; "
        "no curl is needed in the image. Each row says which tiers were emptied and which were "
        "left, with the step that would empty them. " + EXIT_CODES_HELP
    ),
)
@target_options
@click.option("--preempt-running", is_flag=True,
              help="Also send reset_running_requests=true: running requests are preempted and recomputed.")
@click.option("--busy-timeout", default="30s", show_default=True, metavar="DURATION",
              help="How long to retry while vLLM answers success:false (blocks still held).")
@click.option("--dry-run", is_flag=True, help="Print each pod's plan (steps, tiers emptied and left); change nothing.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation on a terminal.")
@output_option
@concurrency_option
@transport_option
@kube_flags
@handle_errors
def command(**params: Any) -> None:
    """Empty the KV cache tiers of the targeted vLLM pods and say what was left.

    Targets are OWNER arguments (deployment/NAME, leaderworkerset/NAME, pod/NAME; a bare name
    is a Deployment), --all or -l SELECTOR. Every API port of every pod is reset, in parallel.
    """
    from ..kube import parse_duration
    from ..plan import api_reset_effects
    from ..podapi import CallFailure, probe_version
    from ..report import ExitCode, Report
    from ..vllm_api import extra_reset_routes, parse_version, reset_query
    from .context import complete, exit_if_empty

    busy_timeout = parse_duration(params["busy_timeout"], default=30.0) or 0.0
    ctx = complete(params, default_all=False)
    exit_if_empty(ctx, required=True)
    pods = ctx.pods

    def probe(pod: Any) -> Any:
        if not pod.ports:
            return CallFailure("no-port", "no API port found in the vLLM command")
        return probe_version(ctx.caller, ctx.ref(pod), pod.ports[0].port, scheme=pod.ports[0].scheme)

    probed = list(parallel(pods, probe, params["max_concurrency"]))
    plans = []
    for pod, got in zip(pods, probed, strict=True):
        version_text = got if isinstance(got, str) else None
        version = parse_version(version_text)
        effects = api_reset_effects(pod.layout, version, reset_external=True)
        query = reset_query(version, reset_external=True, reset_running_requests=params["preempt_running"])
        plans.append(PodPlan(pod, version_text, got if isinstance(got, CallFailure) else None, effects, query,
                             ("/reset_prefix_cache",) + extra_reset_routes(version)))

    if params["dry_run"] or (sys.stdin.isatty() and not params["yes"]):
        plan_report = plan_rows(plans, ctx.scope)
        if params["dry_run"]:
            emit(plan_report, params["output"], empty_message="Nothing to do.")
        info(plan_report.render("table").rstrip())
        if not click.confirm("Run these steps?", default=False, err=True):
            info("nothing changed")
            sys.exit(int(ExitCode.FAILED))

    units = [(plan, port) for plan in plans for port in plan.pod.ports]
    results = list(parallel(units, lambda u: reset_port(ctx.caller, u[0], u[1], busy_timeout), params["max_concurrency"]))
    report = Report("CacheReset", result_columns(ctx.scope))
    for (plan, port), outcome in zip(units, results, strict=True):
        row, code = result_row(plan, port, outcome)
        report.add(row, code)
    for plan in plans:
        if not plan.pod.ports:
            report.add({"namespace": plan.pod.namespace, "pod": plan.pod.name, "owner": plan.pod.owner.ref(),
                        "result": "failed", "message": "no API port found in the vLLM command"}, ExitCode.FAILED)
    emit(report, params["output"], empty_message="No vLLM server pods targeted.")


class PodPlan:
    """What ``clear`` will do on one pod: the routes to call with ``query`` on each port and
    what the API reset empties (``effects``, from :func:`kubectl_kvreset.plan.api_reset_effects`)."""

    def __init__(self, pod: Any, version: str | None, probe_failure: Any, effects: Any,
                 query: list[tuple[str, str]], routes: tuple[str, ...]) -> None:
        self.pod = pod
        self.version = version
        self.probe_failure = probe_failure
        self.effects = effects
        self.query = query
        self.routes = routes


def tier_label(tier: Any) -> str:
    """``gpu``, ``cpu``, ``fs:/root/dir`` or ``shared:store`` for a tier."""
    kind = tier.kind.value
    if tier.root_dir:
        return f"{kind}:{tier.root_dir}"
    if tier.store:
        return f"{kind}:{tier.store}"
    return str(kind)


def plan_rows(plans: list[PodPlan], scope: str | None) -> Any:
    """The ``--dry-run`` report: one ``PlannedReset`` row per pod."""
    from urllib.parse import urlencode

    from ..report import Column, Report

    cols = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("PORTS", "ports"),
            Column("VERSION", "version"), Column("STEPS", "steps"), Column("EMPTIES", "empties"),
            Column("LEAVES", "leaves")]
    if scope is not None:
        cols = cols[1:]
    report = Report("PlannedReset", cols)
    for plan in plans:
        q = "?" + urlencode(plan.query) if plan.query else ""
        steps = [f"POST {plan.routes[0]}{q}"] + [f"POST {r}" for r in plan.routes[1:]]
        report.add({
            "namespace": plan.pod.namespace, "pod": plan.pod.name, "owner": plan.pod.owner.ref(),
            "ports": [p.port for p in plan.pod.ports], "version": plan.version or "unknown",
            "steps": steps,
            "empties": [tier_label(e.tier) for e in plan.effects if e.emptied_by_api_reset],
            "leaves": [f"{tier_label(e.tier)} ({e.remedy or 'outside the pods'})" for e in plan.effects if not e.emptied_by_api_reset],
        })
    return report


def reset_port(caller: Any, plan: PodPlan, port: Any, busy_timeout: float) -> list[Any]:
    """Call every reset route of the plan on one port; the prefix-cache reset first, the
    others only once it was accepted. Returns the :class:`~kubectl_kvreset.podapi.ResetResult` list."""
    from ..podapi import PodRef, reset
    from ..vllm_api import ResetOutcome

    ref = PodRef(plan.pod.namespace, plan.pod.name, plan.pod.container)
    first = reset(caller, ref, port.port, plan.routes[0], plan.query, scheme=port.scheme, busy_timeout_s=busy_timeout)
    results = [first]
    if first.outcome in (ResetOutcome.CLEARED, ResetOutcome.UNCONFIRMED):
        for route in plan.routes[1:]:
            results.append(reset(caller, ref, port.port, route, (), scheme=port.scheme, busy_timeout_s=busy_timeout))
    return results


def result_columns(scope: str | None) -> list[Any]:
    """Columns of the ``CacheReset`` table (tiers as columns)."""
    from ..report import Column

    cols = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("PORT", "port"),
            Column("ROLE", "role"), Column("OWNER", "owner", wide=True), Column("VERSION", "version"),
            Column("GPU", "gpu"), Column("CPU", "cpu"), Column("FS", "fs"), Column("SHARED", "shared"),
            Column("RESULT", "result"), Column("CALLS", "calls", wide=True), Column("MESSAGE", "message")]
    return cols[1:] if scope is not None else cols


def dev_mode_hint(pod: Any) -> str:
    """How to turn dev mode on for the pod's owner (kubectl's own commands)."""
    target = pod.owner.ref()
    how = (f"kubectl set env {target} -c {pod.container} VLLM_SERVER_DEV_MODE=1"
           if pod.owner.kind == "Deployment" else f"set VLLM_SERVER_DEV_MODE=\"1\" on container {pod.container} of {target}")
    return (f"dev mode is off, so vLLM has no reset route: {how} (this rolls the pods, which empties "
            "their caches; the dev routes are unauthenticated, remove the variable afterwards)")


def result_row(plan: PodPlan, port: Any, results: list[Any]) -> tuple[dict[str, Any], Any]:
    """One ``CacheReset`` row and its exit code from the reset results of one port."""
    from ..report import ExitCode
    from ..vllm_api import ResetOutcome

    pod = plan.pod
    first = results[0]
    outcome = first.outcome
    reset_ok = outcome in (ResetOutcome.CLEARED, ResetOutcome.UNCONFIRMED)
    confirmed = outcome is ResetOutcome.CLEARED
    done_word = "emptied" if confirmed else "unconfirmed"
    cells: dict[str, list[str]] = {"gpu": [], "cpu": [], "fs": [], "shared": []}
    left: list[dict[str, Any]] = []
    for effect in plan.effects:
        kind = effect.tier.kind.value
        if not reset_ok:
            state = "not emptied"
        elif effect.emptied_by_api_reset:
            state = done_word
        else:
            state = "left"
            left.append({"tier": tier_label(effect.tier), "reason": effect.reason, "remedy": effect.remedy})
        cells.setdefault(kind, []).append(state)
    messages: list[str] = []
    code = ExitCode.OK
    if reset_ok:
        result = "emptied" if confirmed else "unconfirmed"
        if not confirmed:
            messages.append("vLLM < 0.26 answers an empty 200: the reset ran but its result is not known")
            code = ExitCode.UNCONFIRMED
        for extra in results[1:]:
            if extra.outcome not in (ResetOutcome.CLEARED, ResetOutcome.UNCONFIRMED):
                messages.append(f"{extra.route}: {extra.answer.detail if extra.answer else extra.failure.message}")
                code = ExitCode.FAILED
        if left:
            result = "partial"
            code = ExitCode.FAILED
            for item in left:
                messages.append(f"{item['tier']} left: {item['reason']}" + (f"; to empty it: {item['remedy']}" if item["remedy"] else ""))
    else:
        code = ExitCode.FAILED
        if first.failure is not None:
            result = {"forbidden": "forbidden", "pod-gone": "pod gone", "unreachable": "unreachable",
                      "refused": "unreachable"}.get(first.failure.kind, "failed")
            messages.append(first.failure.message)
        elif outcome is ResetOutcome.BUSY:
            result = "busy"
            messages.append(f"vLLM kept answering success:false for {first.elapsed_s:.0f}s (blocks held by running "
                            "requests or transfers): retry later, or use --preempt-running")
        elif outcome is ResetOutcome.DEV_MODE_OFF:
            result = "dev mode off"
            messages.append(dev_mode_hint(pod))
        else:
            result = "failed"
            messages.append(first.answer.detail if first.answer else "no answer")
    if plan.probe_failure is not None and plan.version is None and reset_ok:
        messages.append(f"version unknown ({plan.probe_failure.message}): assumed the oldest behaviour")
    row = {
        "namespace": pod.namespace, "pod": pod.name, "port": port.port, "role": pod.role,
        "owner": pod.owner.ref(), "container": pod.container, "version": plan.version,
        "gpu": _join(cells["gpu"]), "cpu": _join(cells["cpu"]), "fs": _join(cells["fs"]),
        "shared": _join(cells["shared"]), "result": result, "message": "; ".join(messages) or None,
        "calls": sum(r.calls for r in results), "busy_answers": first.busy_answers, "left": left,
    }
    return row, code


def _join(states: list[str]) -> str | None:
    return ",".join(dict.fromkeys(states)) if states else None
