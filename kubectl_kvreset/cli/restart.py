"""``kubectl kvreset restart``: restart the owners of the targeted vLLM pods, prefill first."""

from __future__ import annotations

import sys
from typing import Any

import click

from .options import (
    EXIT_CODES_HELP,
    emit,
    handle_errors,
    info,
    kube_flags,
    output_option,
    rollout_timeout_option,
    target_options,
    yes_option,
)


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
        "On a terminal it asks first unless --yes; without a terminal it runs. " + EXIT_CODES_HELP
    ),
)
@target_options
@rollout_timeout_option("How long to wait for each owner's rollout.")
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
    from ..report import Column, ExitCode, Report
    from ..rollout import restart_owners
    from .context import complete, exit_if_empty

    timeout_s = parse_duration(params["timeout"], default=300.0) or 300.0
    ctx = complete(params, default_all=False)
    exit_if_empty(ctx, required=True, output=params["output"])
    owners: list[tuple[str, Any, str | None]] = []
    for pod in ctx.pods:
        if not any(ns == pod.namespace and o == pod.owner for ns, o, _ in owners):
            owners.append((pod.namespace, pod.owner, pod.role))
    if sys.stdin.isatty() and not params["yes"]:
        info("This will restart (every pod replaced; prefill before decode):")
        for ns, owner, role in owners:
            info(f"  {ns}/{owner.ref()}" + (f" ({role})" if role else ""))
        if not click.confirm("Continue?", default=False, err=True):
            info("nothing changed")
            sys.exit(int(ExitCode.FAILED))
    progress = info if sys.stderr.isatty() else None
    results = restart_owners(ctx.kube, owners, timeout_s=timeout_s, progress=progress)
    columns = [Column("NAMESPACE", "namespace"), Column("OWNER", "owner"), Column("ROLE", "role"),
               Column("RESULT", "result"), Column("SECONDS", "seconds"), Column("MESSAGE", "message"),
               Column("NOTES", "notes", wide=True)]
    if ctx.namespace is not None:
        columns = columns[1:]
    report = Report("Restart", columns)
    notes: list[str] = []
    for res in results:
        report.add(res.row(), ExitCode.OK if res.ok else ExitCode.FAILED)
        if not res.ok:
            info(f"error: {res.namespace}/{res.owner.ref()}: {res.result}: {res.message}")
        notes.extend(n for n in res.notes if n not in notes)
    for note in notes:
        info(f"note: {note}")
    emit(report, params["output"], empty_message="No vLLM server pods targeted.")
