"""``kubectl kvreset clear-fs``: empty the FS offload tier, once per backing volume."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..job.fsclear import FsReport, columns, fs_row, row_code, shown
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
    target_options,
    whole_tier_option,
    yes_option,
)
from .prompt import ask_yes_no
from .signals import changing

__all__ = ["FsReport", "columns", "command", "fs_row", "row_code", "shown"]


@click.command(
    "clear-fs",
    epilog=(
        "\b\nExamples:\n"
        "  kubectl kvreset clear-fs -n llm-d --all\n"
        "  kubectl kvreset clear-fs deployment/ms-decode --model-only --yes\n"
        "  kubectl kvreset clear-fs -n llm-d --all --dry-run -o yaml\n\n"
        "The FS tier roots come from --kv-transfer-config (secondary_tiers of type fs or "
        "fs_python, or the legacy shared_storage_path). Each root is mapped to the volume the "
        "vLLM container mounts there (PVC with subPath, emptyDir, hostPath); the root's children "
        "are deleted, never the root, once per volume, through pods/exec (python3 in the "
        "container, else find -P -xdev). Roots that are empty, relative, hold '..', are a system "
        "directory, /dev/shm itself or under /dev/shm/vllm_offload*, or lie on no volume are "
        "refused. A root the plugin cannot evaluate from the pod spec ($(...) in a script, a variable "
        "the spec does not set literally) is reported left, never deleted at a guessed path; a root "
        "that does not exist in the pod is unconfirmed. vLLM never deletes these files itself. " + EXIT_CODES_HELP
    ),
)
@target_options
@model_only_option("Delete only the targets' models' directories (<model>_<hash12>[_r<N>] whose config.json "
                   "records the model; never by --served-model-name).")
@whole_tier_option
@click.option("--shared-stores", "shared", is_flag=True,
              help="Also delete a target model's directories on a volume where pods outside the targets serve "
                   "the same model (or may: a model that cannot be read, namespaces that cannot be listed); "
                   "without it those directories are kept and the row is left.")
@click.option("--timeout", "exec_timeout", default="120s", show_default=True, metavar="DURATION",
              help="Bound on each exec in a pod; a deletion cut short is reported as failed (not emptied).")
@dry_run_option("Print one row per volume (what would be emptied); change nothing.")
@yes_option
@output_option
@concurrency_option
@kube_flags
@handle_errors
def command(**params: Any) -> None:
    """Empty the FS offload tier of the targeted vLLM pods: one deletion per backing volume.

    Targets are OWNER arguments (deployment/NAME, leaderworkerset/NAME, pod/NAME; a bare name
    is a Deployment), --all or -l SELECTOR. On a volume that pods outside the targets also
    mount, only the directories of the targets' models are deleted (the row names what was
    kept and whose it is) unless --whole-tier.
    """
    from ..job.fsclear import plan_fs, run_fs
    from ..kube import parse_duration
    from ..report import ExitCode
    from .context import complete, exit_if_empty

    if params["model_only"] and params["whole_tier"]:
        raise click.UsageError("--model-only keeps to the targets' models and --whole-tier deletes every model's "
                               "files: give one of them")
    timeout = parse_duration(params["exec_timeout"], default=120.0) or 120.0
    ctx = complete(params, default_all=False)
    exit_if_empty(ctx, required=True, output=params["output"])
    plan = plan_fs(ctx, model_only=params["model_only"], whole_tier=params["whole_tier"],
                   shared_stores=params["shared"])
    for note in plan.notes:
        info(note)
    if params["dry_run"] or (sys.stdin.isatty() and not params["yes"] and plan.targets):
        shown_plan = plan.report()
        if params["dry_run"]:
            emit(shown_plan, params["output"], empty_message="Nothing to do.")
        info(shown_plan.render("table").rstrip())
        where = ctx.kube.where(all_namespaces=ctx.namespace is None)
        if not params["dry_run"] and not ask_yes_no(f"Delete the contents of these FS tier roots on {where}?"):
            info("nothing changed")
            sys.exit(int(ExitCode.FAILED))
    with changing():  # a signal from here on stops new deletions and prints the rows of those done
        report = run_fs(plan, timeout_s=timeout, max_concurrency=params["max_concurrency"], cancel=INTERRUPTED)
        emit(report, params["output"], empty_message="Nothing to do.")
