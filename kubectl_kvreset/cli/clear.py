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
    dry_run_option,
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
from .prompt import ask_choice, ask_yes_no
from .signals import changing

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
        "no curl is needed in the image. A pod whose connector's reset empties a whole shared store "
        "(MooncakeStoreConnector: its Mooncake store; LMCacheMPConnector, LMCache's class: its MP "
        "server's L1) gets reset_external=false where pods outside the targets use that store, "
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
@click.option("--wait-idle", default=None, metavar="DURATION",
              help="Before the reset, wait up to DURATION until every targeted engine runs and queues no request "
                   "(a progress line names the busy ones); engines still busy then answer busy.")
@click.option("--fallback", type=click.Choice(["restart", "devmode", "none"]), default=None,
              help="The disruptive step allowed for tiers only replacing pods empties (a CPU tier the version's API "
                   "reset leaves, or dev mode off): restart the owner, or turn dev mode on (a rollout). "
                   "Default: none, except that a terminal offers the choice.")
@rollout_timeout_option("How long to wait for a restart or dev-mode rollout to complete.")
@model_only_option("clear-fs step: delete only the targets' models' directories in an FS tier "
                   "(by vLLM's config.json record).")
@whole_tier_option
@shared_option
@force_mp_option
@dry_run_option("Print each pod's plan (steps, tiers emptied and left); change nothing.")
@click.option("--verify", is_flag=True,
              help="Prove it: a salted canary per API port and engine, seeded before and probed after each step; "
                   "the VERIFY column says cold, warm (exit 1: the tier and remedy named) or not verifiable.")
@click.option("--certificate", default=None, metavar="FILE", type=click.Path(dir_okay=False),
              help="Write one JSON document of the run for a benchmark's records (when, where, the plugin "
                   "version, per pod, port, engine and tier what was done, the proof and the result).")
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
    from ..job import ClearOptions, plan_report
    from ..job.scope import narrow_containers
    from ..job.whole import execute, prepare
    from ..kube import parse_duration
    from ..report import ExitCode
    from .context import complete, exit_if_empty, say_where
    from .progress import live_progress

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
        shared_stores=params["shared"], verify=params["verify"], force_mp=params["force_mp"],
        wait_idle_s=parse_duration(params["wait_idle"], default=0.0) or 0.0)
    ctx = narrow_containers(complete(params, default_all=False), params["container"])
    exit_if_empty(ctx, required=True, output=params["output"], others=True)
    job = prepare(ctx, options, cancel=INTERRUPTED, fallback_chosen=chosen)
    for note in job.notes + (job.plan_notes if interactive or params["dry_run"] else []):
        info(note)
    if params["dry_run"]:
        say_where(ctx, dry_run=True)
        emit(job.preview(INTERRUPTED), params["output"], empty_message="Nothing to do.")
    if interactive:
        # per shared volume: who else uses it, what is to be deleted and what kept
        fs = job.fs_preview()
        if fs is not None:
            info(fs.render("table").rstrip())
        if not job.stores.empty:
            info(job.stores.report().render("table").rstrip())
        confirmed = confirm(job.plan, lambda p, f: job.with_fallback(f).plan,
                            lambda p: plan_report(p, store=not job.stores.empty))
        if confirmed is None:
            info("nothing changed")
            sys.exit(int(ExitCode.FAILED))
        job.plan = confirmed
    else:  # stated before anything changes (a terminal showed them in the plan)
        say_where(ctx, dry_run=False)
        for note in job.plan.devmode_notes():
            info(note)
    live = live_progress(params["output"], "clear")
    with changing():  # a signal from here on stops new work and prints the rows of what was done
        done = execute(job, INTERRUPTED, progress=info if sys.stderr.isatty() or params["wait_idle"] else None,
                       events=live.events if live is not None else None)
        for note in done.notes:
            info(note)
        final = done.report
        if params["certificate"]:
            from ..job.certificate import build_certificate, write_certificate

            try:
                write_certificate(params["certificate"], build_certificate(
                    ctx, options, done.outcome.report.rows, done.stores.rows, int(done.exit_code)))
            except OSError as exc:
                info(f"error: the certificate could not be written to {params['certificate']}: {exc.strerror or exc}")
                final.codes.append(ExitCode.FAILED)
        emit(final, params["output"], empty_message="No vLLM server pods targeted.", summary=live is not None)


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
        chosen = ask_choice("Fallback (restart: restart the owners; devmode: turn dev mode on, which rolls "
                            "the pods; none: leave those tiers)", ["restart", "devmode", "none"], default="none")
        the_plan = replan(the_plan, chosen)
        info(plan_report(the_plan).render("table").rstrip())
    where = the_plan.scope.kube.where(all_namespaces=the_plan.scope.namespace is None)
    if not ask_yes_no(f"Run these steps on {where}?"):
        return None
    return the_plan
