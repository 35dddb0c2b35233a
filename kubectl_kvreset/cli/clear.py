"""``kubectl kvreset clear``: empty the KV cache tiers of the targeted vLLM pods."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from .clear_store import force_mp_option, shared_option
from .options import (
    EXIT_CODES_HELP,
    INTERRUPTED,
    concurrency_option,
    emit,
    handle_errors,
    info,
    kube_flags,
    model_only_option,
    output_option,
    rollout_timeout_option,
    target_options,
    transport_option,
    whole_tier_option,
    yes_option,
)

if TYPE_CHECKING:
    from ..job import Plan
    from ..pods import VllmPod
    from ..report import Report

__all__ = ["command", "confirm", "dev_mode_on"]


def dev_mode_on(pod: VllmPod) -> bool | None:
    """:func:`kubectl_kvreset.job.planning.dev_mode_on` (imported on use, so that ``clear --help``
    loads no part of the job)."""
    from ..job.planning import dev_mode_on as read

    return read(pod)


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
        "no curl is needed in the image. A MooncakeStoreConnector pod, whose reset empties its whole "
        "Mooncake store, gets reset_external=false where pods outside the targets use that store, "
        "unless --shared-stores. Each row says which tiers were emptied and which were "
        "left, with the step that would empty them. Then the shared stores the targets use are "
        "cleared as clear-store does (StoreClear rows after the CacheReset rows). " + EXIT_CODES_HELP
    ),
)
@target_options
@click.option("--container", default=None, metavar="NAME",
              help="Reset only this vLLM container of each targeted pod (default: every vLLM container; "
                   "the others' rows say skipped).")
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
@whole_tier_option
@shared_option
@force_mp_option
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
    from ..job import ClearOptions, plan, plan_report, replan, run
    from ..job.outcome import with_lmcache_clears, with_store_results
    from ..job.resetconsent import reset_holds
    from ..job.storeclear import ChainedReport, lmcache_cpu_cleared, lmcache_cpu_planned, plan_store, run_store
    from ..kube import parse_duration
    from ..report import ExitCode
    from .context import complete, exit_if_empty

    if params["model_only"] and params["whole_tier"]:
        raise click.UsageError("--model-only keeps to the targets' models and --whole-tier deletes every model's "
                               "files: give one of them")
    interactive = sys.stdin.isatty() and not params["yes"] and not params["dry_run"]
    chosen = params["fallback"]
    options = ClearOptions(
        fallback=chosen or "none", preempt_running=params["preempt_running"],
        busy_timeout_s=parse_duration(params["busy_timeout"], default=30.0) or 0.0,
        rollout_timeout_s=parse_duration(params["timeout"], default=300.0) or 0.0,
        model_only=params["model_only"], whole_tier=params["whole_tier"], max_concurrency=params["max_concurrency"],
        shared_stores=params["shared"])
    from ..job.scope import narrow_containers

    ctx = narrow_containers(complete(params, default_all=False), params["container"])
    exit_if_empty(ctx, required=True, output=params["output"])
    stores = plan_store(ctx, shared=params["shared"], force_mp=params["force_mp"])
    holds = reset_holds(ctx.pods, stores.calls, stores.unknown, shared=params["shared"])
    the_plan = plan(ctx, options, cancel=INTERRUPTED, fallback_chosen=chosen, holds=holds)
    for note in stores.notes:
        if note.startswith("note:"):
            info(note)
    covered = lmcache_cpu_planned(stores)
    if covered and (interactive or params["dry_run"]):
        info(f"note: the LMCache CPU tier of {', '.join(covered)} is emptied by the store step "
             "(lmcache-controller / lmcache-worker rows), though the reset plan lists it as left")
    if params["dry_run"]:
        store_rows = run_store(stores, dry_run=True, max_concurrency=params["max_concurrency"], cancel=INTERRUPTED)
        emit(ChainedReport([plan_report(the_plan), store_rows]), params["output"], empty_message="Nothing to do.")
    if interactive:
        if not stores.empty:
            info(stores.report().render("table").rstrip())
        confirmed = confirm(the_plan, replan, plan_report)
        if confirmed is None:
            info("nothing changed")
            sys.exit(int(ExitCode.FAILED))
        the_plan = confirmed
    else:  # stated before anything changes (a terminal showed them in the plan)
        for note in the_plan.devmode_notes() if not params["dry_run"] else ():
            info(note)
    outcome = run(the_plan, INTERRUPTED, progress=info if sys.stderr.isatty() else None)
    for note in outcome.notes:
        info(note)
    store_rows = run_store(stores, max_concurrency=params["max_concurrency"], cancel=INTERRUPTED,
                           replaced=outcome.replaced)
    outcome = with_store_results(outcome, the_plan, stores.calls, store_rows.rows)
    outcome = with_lmcache_clears(the_plan, outcome, lmcache_cpu_cleared(store_rows))
    emit(ChainedReport([outcome.report, store_rows]), params["output"], empty_message="No vLLM server pods targeted.")


def confirm(the_plan: Plan, replan: Callable[[Plan, str], Plan], plan_report: Callable[[Plan], Report]) -> Plan | None:
    """Show the plan on stderr, offer a fallback where the plan needs one and none was named,
    and ask once. Returns the plan to run, or None when the user said no."""
    info(plan_report(the_plan).render("table").rstrip())
    needs = the_plan.needs()
    unknown = the_plan.dev_mode_unknown()
    if (needs or unknown) and the_plan.fallback_chosen is None:
        if needs:
            info("Some tiers are emptied only by replacing pods: " + ", ".join(needs) + " would empty them.")
        if unknown:
            info(f"{len(unknown)} pod(s) do not set VLLM_SERVER_DEV_MODE in their spec: if vLLM answers 404 "
                 "(dev mode off), only replacing them empties their caches.")
        chosen = click.prompt("Fallback (restart: restart the owners; devmode: turn dev mode on, which rolls "
                              "the pods; none: leave those tiers)", type=click.Choice(["restart", "devmode", "none"]),
                              default="none", err=True)
        the_plan = replan(the_plan, chosen)
        info(plan_report(the_plan).render("table").rstrip())
    where = the_plan.scope.kube.where(all_namespaces=the_plan.scope.namespace is None)
    if not click.confirm(f"Run these steps on {where}?", default=False, err=True):
        return None
    return the_plan
