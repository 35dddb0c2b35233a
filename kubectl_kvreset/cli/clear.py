"""``kubectl kvreset clear``: empty the KV cache tiers of the targeted vLLM pods."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import click

from .options import (
    EXIT_CODES_HELP,
    INTERRUPTED,
    NOT_RUN,
    NotRun,
    concurrency_option,
    emit,
    handle_errors,
    info,
    kube_flags,
    model_only_option,
    output_option,
    parallel,
    rollout_timeout_option,
    target_options,
    transport_option,
    yes_option,
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
@click.option("--fallback", type=click.Choice(["restart", "devmode", "none"]), default=None,
              help="The disruptive step allowed for tiers only replacing pods empties (a CPU tier the version's API "
                   "reset leaves, or dev mode off): restart the owner, or turn dev mode on (a rollout). "
                   "Default: none, except that a terminal offers the choice.")
@rollout_timeout_option("How long to wait for a restart or dev-mode rollout to complete.")
@model_only_option("clear-fs step: delete only the served model's directories in an FS tier.")
@click.option("--dry-run", is_flag=True, help="Print each pod's plan (steps, tiers emptied and left); change nothing.")
@yes_option
@output_option
@concurrency_option
@transport_option
@kube_flags
@handle_errors
def command(**params: Any) -> None:
    """Empty the KV cache tiers of the targeted vLLM pods and say what was left.

    Targets are OWNER arguments (deployment/NAME, leaderworkerset/NAME, pod/NAME; a bare name
    is a Deployment), --all or -l SELECTOR. Per pod the plan chains: the API reset on every
    port (in parallel), clear-fs where an FS tier remains, and, where a tier remains that only
    a restart empties or dev mode is off, the disruptive fallback the user allowed.
    """
    from ..kube import parse_duration
    from ..podapi import CallFailure, probe_version
    from ..report import ExitCode
    from .context import complete, exit_if_empty

    busy_timeout = parse_duration(params["busy_timeout"], default=30.0) or 0.0
    rollout_timeout = parse_duration(params["timeout"], default=300.0) or 0.0
    ctx = complete(params, default_all=False)
    exit_if_empty(ctx, required=True, output=params["output"])
    pods = ctx.pods

    def probe(pod: Any) -> Any:
        if not pod.ports:
            return CallFailure("no-port", "no API port found in the vLLM command")
        return probe_version(ctx.caller, ctx.ref(pod), pod.ports[0].port, scheme=pod.ports[0].scheme)

    interactive = sys.stdin.isatty() and not params["yes"] and not params["dry_run"]
    # the version decides the plan only where a CPU tier or a shared store is at stake; elsewhere
    # (and not when the plan is shown first) /version is read alongside the resets, saving a round
    early = [p for p in pods if interactive or params["dry_run"] or version_matters(p)]
    early_probes = dict(zip((p.uid or p.name for p in early), parallel(early, probe, params["max_concurrency"]),
                            strict=True))
    probed = [early_probes.get(p.uid or p.name, DEFERRED) for p in pods]
    chosen = params["fallback"]
    plans = build_plans(pods, probed, chosen or "none", params["preempt_running"])
    if params["dry_run"]:
        emit(plan_rows(plans, ctx.scope, chosen), params["output"], empty_message="Nothing to do.")
    if interactive:
        info(plan_rows(plans, ctx.scope, chosen).render("table").rstrip())
        needs = sorted({p.steps.needs for p in plans if p.steps.needs})
        unknown = [p for p in plans if p.has("api-reset") and dev_mode_on(p.pod) is None]
        if (needs or unknown) and chosen is None:
            if needs:
                info("Some tiers are emptied only by replacing pods: " + ", ".join(needs) + " would empty them.")
            if unknown:
                info(f"{len(unknown)} pod(s) do not set VLLM_SERVER_DEV_MODE in their spec: if vLLM answers 404 "
                     "(dev mode off), only replacing them empties their caches.")
            chosen = click.prompt("Fallback (restart: restart the owners; devmode: turn dev mode on, which rolls "
                                  "the pods; none: leave those tiers)", type=click.Choice(["restart", "devmode", "none"]),
                                  default="none", err=True)
            plans = build_plans(pods, probed, chosen, params["preempt_running"])
            info(plan_rows(plans, ctx.scope, chosen).render("table").rstrip())
        if not click.confirm("Run these steps?", default=False, err=True):
            info("nothing changed")
            sys.exit(int(ExitCode.FAILED))
    outcome = run_plans(ctx, plans, busy_timeout=busy_timeout, rollout_timeout=rollout_timeout,
                        model_only=params["model_only"], max_workers=params["max_concurrency"],
                        fallback=chosen or "none")
    emit(outcome, params["output"], empty_message="No vLLM server pods targeted.")


def dev_mode_on(pod: Any) -> bool | None:
    """Whether the pod's vLLM serves the dev routes, as far as its spec tells.

    True for a literal non-zero integer, False for a literal ``"0"`` or a value vLLM refuses
    (``int()`` fails: the server crash-loops); a value the container's script sets
    (``VLLM_SERVER_DEV_MODE=1 vllm serve``, ``export``) counts the same. None when the spec does
    not say (unset: the image's ENV or a webhook may still set it; ``valueFrom``/``envFrom``):
    the reset is then sent and a 404 decides.
    """
    dm = pod.dev_mode
    if dm.source == "env":
        return bool(dm.enabled)
    if dm.source is None:
        script_value = pod.serve.env.get("VLLM_SERVER_DEV_MODE") if pod.serve.env else None
        if script_value is not None:
            try:
                return int(script_value) != 0
            except ValueError:
                return False
    return None


#: Marks a pod whose version is read alongside its resets (see :func:`version_matters`).
DEFERRED = object()

#: Every reset route; a version that lacks one answers 404 there, read as "not on this version".
ALL_RESET_ROUTES = ("/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache")


def version_matters(pod: Any) -> bool:
    """True when the pod's plan depends on its vLLM version before anything is sent: a CPU
    offload tier or a shared store (whether the API reset empties them changes by version).
    The GPU prefix cache is reset on every version, the FS tier never, and the answers read
    themselves (an empty 200 before 0.26, ``{"success": ...}`` after)."""
    from ..tiers import TierKind

    return any(t.kind in (TierKind.CPU, TierKind.SHARED) for t in pod.layout.tiers)


@dataclass
class PodPlan:
    """What ``clear`` will do on one pod: the routes to call with ``query`` on each port, what
    the API reset empties (``effects``) and the chained ``steps``
    (:func:`kubectl_kvreset.plan.plan_pod_steps`). ``probe_failure`` says why the version is
    unknown."""

    pod: Any
    version: str | None
    probe_failure: Any
    effects: Any
    query: list[tuple[str, str]]
    routes: tuple[str, ...]
    steps: Any
    version_deferred: bool = False

    def has(self, action: str) -> bool:
        """True when the plan holds the step ``action``."""
        return action in self.steps.actions()


def build_plans(pods: list[Any], probed: list[Any], fallback: str, preempt: bool) -> list[PodPlan]:
    """One :class:`PodPlan` per pod. A disruptive step acts on the owner, so when one pod of an
    owner needs it, every targeted pod of that owner gets it (their API reset is dropped: the
    new pods start cold)."""
    from ..plan import DISRUPTIVE_STEPS, api_reset_effects, plan_pod_steps
    from ..podapi import CallFailure
    from ..vllm_api import extra_reset_routes, parse_version, reset_query

    plans: list[PodPlan] = []
    for pod, got in zip(pods, probed, strict=True):
        deferred = got is DEFERRED
        version_text = got if isinstance(got, str) else None
        version = parse_version(version_text)
        effects = api_reset_effects(pod.layout, version, reset_external=True)
        query = reset_query(version, reset_external=True, reset_running_requests=preempt)
        steps = plan_pod_steps(effects, dev_mode_on=dev_mode_on(pod), fallback=fallback)
        routes = ALL_RESET_ROUTES if deferred else ("/reset_prefix_cache",) + extra_reset_routes(version)
        plans.append(PodPlan(pod, version_text, got if isinstance(got, CallFailure) else None, effects, query,
                             routes, steps, version_deferred=deferred))
    owner_step: dict[tuple[str, Any], str] = {}
    for plan in plans:
        for step in plan.steps.steps:
            if step.action in DISRUPTIVE_STEPS:
                key = (plan.pod.namespace, plan.pod.owner)
                owner_step[key] = "restart" if "restart" in (owner_step.get(key), step.action) else step.action
    promote(plans, owner_step)
    return plans


def promote(plans: list[PodPlan], owner_step: dict[tuple[str, Any], str]) -> None:
    """Give every pod of an owner in ``owner_step`` that owner's disruptive step (``restart``
    or ``devmode``): it acts on the owner, whose new pods start cold, so their API reset is
    dropped and only clear-fs stays before it."""
    from ..plan import STEP_CLEAR_FS, LeftTier, PodSteps, Step
    from ..tiers import TierKind

    for plan in plans:
        action = owner_step.get((plan.pod.namespace, plan.pod.owner))
        if action is None or plan.has(action):
            continue
        local = tuple(e.tier for e in plan.effects if e.tier.kind in (TierKind.GPU, TierKind.CPU))
        kept = tuple(s for s in plan.steps.steps if s.action == STEP_CLEAR_FS)
        left = tuple(lt for lt in plan.steps.left if lt.tier.kind is TierKind.SHARED)
        left += tuple(LeftTier(e.tier, "the owner is replaced, and " + e.reason, None)
                      for e in plan.effects if e.tier.kind is TierKind.SHARED and e.emptied_by_api_reset)
        plan.steps = PodSteps(kept + (Step(action, local),), left, None)


class RunOutcome:
    """Results of every step of a run, keyed for the rows: API resets per (pod, port), FS
    volume results per pod name, owner results per (namespace, owner)."""

    def __init__(self) -> None:
        self.resets: dict[tuple[str, str, int], list[Any] | NotRun] = {}
        self.fs: dict[tuple[str, str], list[Any]] = {}
        self.owners: dict[tuple[str, Any], Any] = {}
        self.successors: dict[tuple[str, Any], list[str]] = {}


def run_plans(ctx: Any, plans: list[PodPlan], *, busy_timeout: float, rollout_timeout: float,
              model_only: bool, max_workers: int, fallback: str = "none") -> Any:
    """Run the steps in order: API resets (parallel), FS tiers (one deletion per volume,
    parallel), then owner rollouts (devmode, restart; prefill before decode). Returns the
    ``CacheReset`` report."""
    from ..plan import STEP_API_RESET, STEP_CLEAR_FS, STEP_DEVMODE, STEP_RESTART
    from ..vllm_api import ResetOutcome

    outcome = RunOutcome()
    # every route of every port at once: the caches are independent, and a route the version
    # lacks is not called (the plan's routes follow the version)
    units = [(plan, port, route) for plan in plans if plan.has(STEP_API_RESET) for port in plan.pod.ports
             for route in plan.routes]
    units += [(plan, plan.pod.ports[0], VERSION_ROUTE) for plan in plans if plan.version_deferred and plan.pod.ports]
    results = parallel(units, lambda u: reset_route(ctx.caller, u[0], u[1], u[2], busy_timeout), max_workers)
    by_port: dict[tuple[str, str, int], list[Any]] = {}
    for (plan, port, route), result in zip(units, results, strict=True):
        if route == VERSION_ROUTE:
            if isinstance(result, str):
                plan.version = result
            elif not isinstance(result, NotRun):
                plan.probe_failure = result
            continue
        by_port.setdefault((plan.pod.namespace, plan.pod.name, port.port), []).append(result)
    for key, port_results in by_port.items():
        # the prefix-cache reset comes first; after Ctrl-C an extra route that did not run is dropped
        outcome.resets[key] = (NOT_RUN if isinstance(port_results[0], NotRun)
                               else [r for r in port_results if not isinstance(r, NotRun)])
    if fallback in ("devmode", "restart"):
        # dev mode the spec did not show: the 404 decided it, so the allowed fallback applies now
        off = {(p.pod.namespace, p.pod.owner): fallback for p in plans
               if any(isinstance(r, list) and r and r[0].outcome is ResetOutcome.DEV_MODE_OFF
                      for (ns, name, _), r in outcome.resets.items() if (ns, name) == (p.pod.namespace, p.pod.name))}
        promote(plans, off)

    fs_pods = [plan.pod for plan in plans if plan.has(STEP_CLEAR_FS)]
    if fs_pods and not INTERRUPTED.is_set():
        from ..fstier import plan_fs_clear, run_fs_clear

        targets = plan_fs_clear(fs_pods, ctx.universe, model_only=model_only)
        fs_results = parallel(targets, lambda t: run_fs_clear(ctx.kube, t), max_workers)
        for target, fs_result in zip(targets, fs_results, strict=True):
            if isinstance(fs_result, NotRun):
                continue
            for name in fs_result_pods(target):
                outcome.fs.setdefault((target.namespace, name), []).append(fs_result)
            if getattr(target, "other_pods", None):
                info(f"warning: {fs_volume_label(target)} is also mounted by pods outside the targets "
                     f"({', '.join(target.other_pods)}): files they share under {target.root} were deleted too")

    progress = info if sys.stderr.isatty() else None
    devmode_owners = _owners(plans, STEP_DEVMODE) if not INTERRUPTED.is_set() else []
    if devmode_owners:
        from ..rollout import DevModeResult, run_phased, set_dev_mode

        def enable(ns: str, owner: Any, role: str | None) -> Any:
            return set_dev_mode(ctx.kube, ns, owner, enable=True, timeout_s=rollout_timeout, progress=progress, role=role)

        def skip(ns: str, owner: Any, role: str | None, why: str) -> Any:
            return DevModeResult(ns, owner, role, "enable", "skipped", message=why)

        for dm in run_phased(devmode_owners, enable, skip, ok=lambda r: bool(r.ok)):
            outcome.owners[(dm.namespace, dm.owner)] = dm
            if dm.result == "enabled":
                info(f"warning: dev mode is now on for {dm.owner.ref()}: vLLM's dev routes (cache resets, sleep, "
                     "collective_rpc, weight updates) are unauthenticated; turn it off when done with "
                     f"'kubectl kvreset devmode --disable {dm.owner.ref()} -n {dm.namespace}'")
    restart_owners_ = _owners(plans, STEP_RESTART) if not INTERRUPTED.is_set() else []
    if restart_owners_:
        from ..rollout import restart_owners

        for owner_result in restart_owners(ctx.kube, restart_owners_, timeout_s=rollout_timeout, progress=progress):
            outcome.owners[(owner_result.namespace, owner_result.owner)] = owner_result
    find_successors(ctx, plans, outcome)
    return build_report(ctx, plans, outcome)


def find_successors(ctx: Any, plans: list[PodPlan], outcome: RunOutcome) -> None:
    """For owners with a pod that vanished during the run (the reset answered 404 for the pod),
    list the owner's pods again: the new names are its successors, which start cold."""
    from ..discovery import discover
    from ..kube import KubeError

    gone_ns: set[str] = set()
    for (ns, _pod, _port), got in outcome.resets.items():
        if isinstance(got, list) and got and got[0].failure is not None and got[0].failure.kind == "pod-gone":
            gone_ns.add(ns)
    known = {(p.namespace, p.name) for p in ctx.universe}
    for ns in sorted(gone_ns):
        try:
            now = discover(ctx.kube, ns)
        except KubeError:
            continue
        for pod in now:
            if (pod.namespace, pod.name) not in known:
                outcome.successors.setdefault((ns, pod.owner), []).append(pod.name)


def _owners(plans: list[PodPlan], action: str) -> list[tuple[str, Any, str | None]]:
    seen: dict[tuple[str, Any], str | None] = {}
    for plan in plans:
        if plan.has(action):
            seen.setdefault((plan.pod.namespace, plan.pod.owner), plan.pod.role)
    return [(ns, owner, role) for (ns, owner), role in seen.items()]


def tier_label(tier: Any) -> str:
    """``gpu``, ``cpu``, ``fs:/root/dir`` or ``shared:store`` for a tier."""
    kind = tier.kind.value
    if tier.root_dir:
        return f"{kind}:{tier.root_dir}"
    if tier.store:
        return f"{kind}:{tier.store}"
    return str(kind)


def plan_rows(plans: list[PodPlan], scope: str | None, fallback: str | None = None) -> Any:
    """The plan as a report: one ``PlannedReset`` row per pod (steps, tiers each empties,
    tiers left with the flag that would empty them)."""
    from urllib.parse import urlencode

    from ..report import Column, Report

    cols = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("PORTS", "ports", wide=True),
            Column("VERSION", "version"), Column("STEPS", "steps"), Column("EMPTIES", "empties"),
            Column("LEAVES", "leaves")]
    if scope is not None:
        cols = cols[1:]
    report = Report("PlannedReset", cols)
    for plan in plans:
        steps: list[str] = []
        for step in plan.steps.steps:
            if step.action == "api-reset":
                q = "?" + urlencode(plan.query) if plan.query else ""
                steps += [f"POST {plan.routes[0]}{q}"] + [f"POST {r}" for r in plan.routes[1:]]
                if fallback in ("devmode", "restart") and dev_mode_on(plan.pod) is None:
                    verb = "restart" if fallback == "restart" else "devmode --enable"
                    steps.append(f"if vLLM answers 404 (dev mode off): {verb} {plan.pod.owner.ref()}")
            elif step.action == "clear-fs":
                steps.append("clear-fs " + ",".join(t.root_dir or "" for t in step.empties))
            elif step.action == "restart":
                steps.append(f"restart {plan.pod.owner.ref()}")
            else:
                steps.append(f"devmode --enable {plan.pod.owner.ref()}")
        report.add({
            "namespace": plan.pod.namespace, "pod": plan.pod.name, "owner": plan.pod.owner.ref(),
            "ports": [p.port for p in plan.pod.ports], "version": plan.version or "unknown",
            "steps": steps,
            "empties": [tier_label(t) for step in plan.steps.steps for t in step.empties],
            "leaves": [f"{tier_label(lt.tier)} ({lt.flag or 'outside the pods'})" for lt in plan.steps.left]
            + ([f"every pod tier if vLLM answers 404 (VLLM_SERVER_DEV_MODE is not in the spec): "
                f"{'then ' + fallback if fallback in ('devmode', 'restart') else '--fallback=devmode|restart'}"]
               if plan.has("api-reset") and dev_mode_on(plan.pod) is None else []),
            "disruptive": [s.action for s in plan.steps.steps if s.disruptive],
        })
    return report


VERSION_ROUTE = "GET /version"


def reset_route(caller: Any, plan: PodPlan, port: Any, route: str, busy_timeout: float) -> Any:
    """Call one reset route of the plan on one port (the prefix-cache reset with the plan's
    query); returns its :class:`~kubectl_kvreset.podapi.ResetResult`. ``VERSION_ROUTE`` reads
    ``GET /version`` instead (the version string or a ``CallFailure``)."""
    from ..podapi import PodRef, probe_version, reset

    ref = PodRef(plan.pod.namespace, plan.pod.name, plan.pod.container)
    if route == VERSION_ROUTE:
        return probe_version(caller, ref, port.port, scheme=port.scheme)
    query = plan.query if route == plan.routes[0] else ()
    return reset(caller, ref, port.port, route, query, scheme=port.scheme, busy_timeout_s=busy_timeout)


def result_columns(scope: str | None) -> list[Any]:
    """Columns of the ``CacheReset`` table (tiers as columns)."""
    from ..report import Column

    cols = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("PORT", "port"),
            Column("ROLE", "role"), Column("OWNER", "owner", wide=True), Column("VERSION", "version"),
            Column("GPU", "gpu"), Column("CPU", "cpu"), Column("FS", "fs"), Column("SHARED", "shared"),
            Column("RESULT", "result"), Column("STEPS", "steps", wide=True), Column("CALLS", "calls", wide=True),
            Column("MESSAGE", "message")]
    return cols[1:] if scope is not None else cols


def dev_mode_hint(pod: Any) -> str:
    """The row's short hint for a pod whose vLLM has dev mode off (the long one is printed once
    on stderr by :func:`dev_mode_note`)."""
    return f"dev mode off: rerun with --fallback=devmode|restart, or kubectl kvreset devmode --enable {pod.owner.ref()}"


def dev_mode_note() -> str:
    """The explanation printed once when some pod answered 404 for the reset routes."""
    return ("note: vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1 (stock llm-d and KServe do not "
            "set it). --fallback=devmode sets it and rolls the pods (which empties their caches; later runs can use "
            "the API); --fallback=restart only restarts them. The dev routes are unauthenticated: turn dev mode off "
            "when done (kubectl kvreset devmode --disable OWNER).")


def fs_result_pods(target: Any) -> list[str]:
    """Names of the targeted pods whose FS tier a volume deletion covers."""
    return [str(p) for p in target.pods]


def fs_volume_label(target: Any) -> str:
    """How a report names a backing volume (``pvc/NAME`` ...)."""
    return str(target.volume)


def build_report(ctx: Any, plans: list[PodPlan], outcome: RunOutcome) -> Any:
    """The ``CacheReset`` report: one row per pod and API port (one per pod without ports)."""
    from ..report import Report

    report = Report("CacheReset", result_columns(ctx.scope))
    for plan in plans:
        ports = list(plan.pod.ports) or [None]
        for port in ports:
            row, code = result_row(plan, port, outcome)
            report.add(row, code)
    if any(r.get("result") == "dev mode off" for r in report.rows):
        info(dev_mode_note())
    return report


def result_row(plan: PodPlan, port: Any, outcome: RunOutcome) -> tuple[dict[str, Any], Any]:
    """One ``CacheReset`` row and the exit code it earns."""
    from ..report import ExitCode
    from ..vllm_api import ResetOutcome

    pod = plan.pod
    messages: list[str] = []
    failure_result: str | None = None
    unconfirmed = False
    gone = False
    step_of: dict[int, str] = {}
    for step in plan.steps.steps:
        for tier in step.empties:
            step_of.setdefault(id(tier), step.action)
    left_ids = {id(lt.tier): lt for lt in plan.steps.left}
    got = outcome.resets.get((pod.namespace, pod.name, port.port)) if port is not None else None
    resets = None if isinstance(got, NotRun) else got
    reset_state: str | None = None
    if plan.has("api-reset"):
        if isinstance(got, NotRun) or (got is None and INTERRUPTED.is_set() and port is not None):
            reset_state, failure_result = "not emptied", "interrupted"
            messages.append("not reset: the run was interrupted before this call finished")
        elif not resets:
            reset_state, failure_result = "not emptied", "failed"
            messages.append("no API port found in the vLLM command")
        else:
            first = resets[0]
            if first.outcome is ResetOutcome.CLEARED:
                reset_state = "emptied"
            elif first.outcome is ResetOutcome.UNCONFIRMED:
                reset_state, unconfirmed = "unconfirmed", True
                messages.append("vLLM < 0.26 answers an empty 200: the reset ran but its result is not known")
            elif first.failure is not None and first.failure.kind == "pod-gone":
                successors = outcome.successors.get((pod.namespace, pod.owner), [])
                reset_state, gone = "replaced", True
                messages.append(f"pod {pod.name} was deleted during the run"
                                + (f"; its successor {', '.join(successors)} is a new pod and starts cold" if successors
                                   else " and has no successor: nothing is left to empty"))
            else:
                reset_state = "not emptied"
                failure_result, reset_text = describe_reset_failure(pod, first)
                messages.append(reset_text)
            for extra in resets[1:] if reset_state in ("emptied", "unconfirmed") else []:
                if plan.version_deferred and extra.outcome is ResetOutcome.DEV_MODE_OFF:
                    continue  # sent without knowing the version: a 404 here means this version lacks the route
                if extra.outcome not in (ResetOutcome.CLEARED, ResetOutcome.UNCONFIRMED):
                    messages.append(f"{extra.route}: {extra.answer.detail if extra.answer else extra.failure.message}")
                    failure_result = failure_result or "failed"
    owner_res = outcome.owners.get((pod.namespace, pod.owner))
    owner_state: str | None = None
    if owner_res is not None:
        if owner_result_ok(owner_res):
            owner_state = "emptied"
            verb = "restarted" if plan.has("restart") else "dev mode turned on, which rolled"
            messages.append(f"{pod.owner.ref()} {verb}: its new pods start cold")
        else:
            owner_state = "not emptied"
            failure_result = failure_result or "failed"
            messages.append(owner_result_message(owner_res))
    if INTERRUPTED.is_set() and owner_res is None and any(st.disruptive for st in plan.steps.steps):
        failure_result = failure_result or "interrupted"
        messages.append("the restart or dev-mode rollout was not started: the run was interrupted")
    if not plan.has("api-reset") and owner_res is None and dev_mode_on(pod) is False:
        failure_result = failure_result or "dev mode off"
        messages.append(dev_mode_hint(pod))
    fs_results = outcome.fs.get((pod.namespace, pod.name), [])
    cells: dict[str, list[str]] = {"gpu": [], "cpu": [], "fs": [], "shared": []}
    left_rows: list[dict[str, Any]] = []
    for effect in plan.effects:
        tier = effect.tier
        action = step_of.get(id(tier))
        lt = left_ids.get(id(tier))
        state: str
        if lt is not None or action is None:
            state = "left"
            reason = lt.reason if lt is not None else effect.reason
            flag = lt.flag if lt is not None else None
            left_rows.append({"tier": tier_label(tier), "reason": reason, "remedy": flag})
            if reset_state != "not emptied":  # after a failed call, the failure is the message
                messages.append(f"{tier_label(tier)} left: {reason}" + (f"; to empty it: {flag}" if flag else ""))
        elif action == "api-reset":
            state = reset_state or "not emptied"
        elif action == "clear-fs":
            state, fs_text = fs_state(tier, fs_results)
            if fs_text:
                messages.append(fs_text)
            if state != "emptied":
                failure_result = failure_result or "failed"
        else:
            state = owner_state or "not emptied"
        cells[tier.kind.value].append(state)
    states = [st for v in cells.values() for st in v]
    all_done = all(st in ("emptied", "unconfirmed", "replaced") for st in states)
    if gone and failure_result is None:
        result, code = ("replaced" if outcome.successors.get((pod.namespace, pod.owner)) else "gone"), ExitCode.OK
    elif failure_result is None and all_done:
        result = "unconfirmed" if unconfirmed else "emptied"
        code = ExitCode.UNCONFIRMED if unconfirmed else ExitCode.OK
    else:
        code = ExitCode.FAILED
        result = failure_result or "partial"
    if plan.probe_failure is not None and plan.version is None and reset_state in ("emptied", "unconfirmed"):
        messages.append(f"version unknown ({plan.probe_failure.message}): assumed the oldest behaviour")
    row = {
        "namespace": pod.namespace, "pod": pod.name, "port": port.port if port is not None else None,
        "role": pod.role, "owner": pod.owner.ref(), "container": pod.container, "version": plan.version,
        "gpu": _join(cells["gpu"]), "cpu": _join(cells["cpu"]), "fs": _join(cells["fs"]),
        "shared": _join(cells["shared"]), "result": result, "message": "; ".join(messages) or None,
        "steps": list(plan.steps.actions()),
        "calls": sum(r.calls for r in resets) if resets else 0,
        "busy_answers": resets[0].busy_answers if resets else 0, "left": left_rows,
    }
    return row, code


def describe_reset_failure(pod: Any, first: Any) -> tuple[str, str]:
    """``(result, message)`` for an API reset that did not empty the cache."""
    from ..vllm_api import ResetOutcome

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


def fs_state(tier: Any, results: list[Any]) -> tuple[str, str | None]:
    """The state of an FS tier from the volume deletions covering it, and a message."""
    mine = [r for r in results if getattr(r.target, "root", None) == tier.root_dir] or results
    if not mine:
        return "not emptied", f"{tier_label(tier)}: no deletion ran"
    for r in mine:
        if r.result != "emptied":
            return "not emptied", f"{tier_label(tier)}: {r.message}"
    return "emptied", None


def owner_result_ok(res: Any) -> bool:
    """True when an owner's pods were replaced: a restart whose rollout completed, or a
    dev-mode patch that rolled the pods (``unchanged`` rolled nothing, so it empties nothing)."""
    if getattr(res, "action", None) == "enable":
        return bool(res.ok) and res.result == "enabled"
    return bool(res.ok)


def owner_result_message(res: Any) -> str:
    """What an owner's failed rollout reported."""
    if getattr(res, "action", None) == "enable" and res.result == "unchanged":
        return (f"{res.owner.ref()} already sets VLLM_SERVER_DEV_MODE=1 in its template, so nothing was rolled: "
                "the pods differ from their template; use --fallback=restart")
    return str(res.message or res.result)


def _join(states: list[str]) -> str | None:
    return ",".join(dict.fromkeys(states)) if states else None
