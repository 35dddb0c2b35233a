"""``kubectl kvreset restart``: restart the owners of the targeted vLLM pods, prefill first."""

from __future__ import annotations

import sys
from typing import Any

import click

from .options import (
    EXIT_CODES_ROLLOUT,
    INTERRUPTED,
    dry_run_option,
    emit,
    handle_errors,
    info,
    kube_flags,
    output_option,
    rollout_timeout_option,
    target_options,
    yes_option,
)
from .prompt import ask_yes_no
from .signals import changing


@click.command(
    "restart",
    epilog=(
        "\b\nExamples:\n"
        "  kubectl kvreset restart -n llm-d --all\n"
        "  kubectl kvreset restart deployment/ms-prefill deployment/ms-decode --yes\n"
        "  kubectl kvreset restart leaderworkerset/wide-ep-decode --timeout 15m\n\n"
        "Deployments are restarted as 'kubectl rollout restart' does (the "
        "kubectl.kubernetes.io/restartedAt pod template annotation) and waited on with "
        "'kubectl rollout status' rules; LeaderWorkerSets get the same annotation in their "
        "templates (a merge patch) and are waited on until every group is updated and ready. "
        "Prefill owners go first; decode owners only once prefill is ready again (a prefill "
        "restart can leave decode with stale NIXL state: vLLM #49238, llm-d #2187). A restart "
        "empties the GPU and CPU KV tiers of every pod; FS tiers and shared stores stay. "
        "On a terminal it asks first unless --yes; without a terminal it runs. " + EXIT_CODES_ROLLOUT
    ),
)
@target_options
@rollout_timeout_option("How long to wait for each owner's rollout.")
@dry_run_option("Print one row per owner, in the order they would be restarted; change nothing.")
@yes_option
@output_option
@kube_flags
@handle_errors
def command(**params: Any) -> None:
    """Restart the Deployments and LeaderWorkerSets of the targeted vLLM pods and wait.

    One row per owner. A paused Deployment, or an owner another controller rewrites, is
    refused; a kind this tool cannot restart safely is reported, not guessed at.
    """
    from ..kube import parse_duration
    from ..report import ExitCode
    from .context import complete, exit_if_empty, say_where

    timeout_s = parse_duration(params["timeout"], default=300.0) or 300.0
    ctx = complete(params, default_all=False)
    exit_if_empty(ctx, required=True, output=params["output"])
    from ..rollout import role_phases

    listed: list[tuple[str, Any, str | None]] = [(pod.namespace, pod.owner, pod.role) for pod in ctx.pods]
    owners = [triple for phase in role_phases(listed) for triple in phase]  # the order they run in
    where = ctx.kube.where(all_namespaces=ctx.namespace is None)
    if params["dry_run"]:
        say_where(ctx, dry_run=True)
        _emit_planned(ctx, owners, params["output"])
    if sys.stdin.isatty() and not params["yes"]:
        info(f"This will restart, in this order (every pod replaced; prefill ready before decode starts), on {where}:")
        for ns, owner, role in owners:
            info(f"  {ns}/{owner.ref()}" + (f" ({role})" if role else ""))
        if not ask_yes_no("Continue?"):
            info("nothing changed")
            sys.exit(int(ExitCode.FAILED))
    else:
        say_where(ctx, dry_run=False)
    progress = info if sys.stderr.isatty() else None
    with changing():  # a signal from here on sends no more patches, ends the waits and prints the rows
        _run(ctx, owners, timeout_s, progress, params["output"])


def _columns(ctx: Any) -> list[Any]:
    from ..report import Column

    columns = [Column("NAMESPACE", "namespace"), Column("OWNER", "owner"), Column("ROLE", "role"),
               Column("RESULT", "result"), Column("SECONDS", "seconds"), Column("MESSAGE", "message", notes=True),
               Column("NOTES", "notes", wide=True)]
    return columns[1:] if ctx.namespace is not None else columns


def _emit_planned(ctx: Any, owners: list[tuple[str, Any, str | None]], output: str) -> None:
    """``--dry-run``: one ``Restart`` row per owner (result ``planned``), in the order of the run."""
    from ..report import Report

    report = Report("Restart", _columns(ctx))
    for step, (ns, owner, role) in enumerate(owners, 1):
        report.add({"namespace": ns, "owner": owner.ref(), "role": role, "result": "planned", "seconds": None,
                    "message": f"step {step} of {len(owners)}: rollout restart, then wait for it", "notes": []})
    emit(report, output, empty_message="No vLLM server pods targeted.")


def _run(ctx: Any, owners: list[tuple[str, Any, str | None]], timeout_s: float, progress: Any, output: str) -> None:
    """Restart the owners, print their rows and exit with their code."""
    from ..report import ExitCode, Report
    from ..rollout import restart_owners

    results = restart_owners(ctx.kube, owners, timeout_s=timeout_s, progress=progress, cancel=INTERRUPTED)
    report = Report("Restart", _columns(ctx))
    notes: list[str] = []
    for res in results:
        report.add(res.row(), ExitCode.OK if res.ok else ExitCode.FAILED)
        if not res.ok:
            info(f"error: {res.namespace}/{res.owner.ref()}: {res.result}: {res.message}")
        notes.extend(n for n in res.notes if n not in notes)
    for note in notes:
        info(f"note: {note}")
    emit(report, output, empty_message="No vLLM server pods targeted.")
