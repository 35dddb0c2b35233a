"""``kubectl kvreset devmode``: show, enable or disable ``VLLM_SERVER_DEV_MODE`` per owner."""

from __future__ import annotations

import sys
from collections.abc import Sequence
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
    "devmode",
    epilog=(
        "\b\nExamples:\n"
        "  kubectl kvreset devmode -n llm-d                       # status of every owner\n"
        "  kubectl kvreset devmode --enable -n llm-d --all\n"
        "  kubectl kvreset devmode --disable deployment/ms-decode --yes\n\n"
        "vLLM reads VLLM_SERVER_DEV_MODE with int(): \"1\" turns the dev routes on (POST "
        "/reset_prefix_cache needs them), \"true\" or \"\" crash the server at start. --enable "
        "writes exactly \"1\" into the vLLM container of every pod template (Deployment; "
        "LeaderWorkerSet leader and worker) and waits for the rollout; the pods are replaced, "
        "so their caches are emptied. Prefill owners are done before decode owners. The dev "
        "endpoints are unauthenticated: turn dev mode off when done. "
        "On a terminal it asks first unless --yes; without a terminal it runs. " + EXIT_CODES_ROLLOUT
    ),
)
@target_options
@click.option("--enable", is_flag=True, help='Set VLLM_SERVER_DEV_MODE="1" (pods are replaced).')
@click.option("--disable", is_flag=True, help="Remove VLLM_SERVER_DEV_MODE (pods are replaced).")
@click.option("--ignore-owner", is_flag=True,
              help="Patch even when a controller or GitOps tool manages the owner (it may revert the patch).")
@rollout_timeout_option("How long to wait for each owner's rollout.")
@dry_run_option("With --enable/--disable: print each owner's status and what would change, in the order of the "
                "run; change nothing.")
@yes_option
@output_option
@kube_flags
@handle_errors
def command(**params: Any) -> None:
    """Show whether vLLM's dev mode is on per owner; --enable or --disable it.

    One row per owner (Deployment, LeaderWorkerSet). The status reads env and envFrom
    (ConfigMaps and Secrets, when permitted) and says whether vLLM would accept the value.
    """
    from ..kube import parse_duration
    from ..report import Column, ExitCode, Report
    from ..rollout import (
        NOT_STARTED,
        DevModeResult,
        dev_mode_changes,
        read_dev_mode,
        role_phases,
        run_phased,
        set_dev_mode,
    )
    from .context import complete, exit_if_empty, nothing_found, say_where

    if params["enable"] and params["disable"]:
        raise click.UsageError("--enable and --disable cannot be given together")
    mode = "enable" if params["enable"] else "disable" if params["disable"] else None
    timeout_s = parse_duration(params["timeout"], default=300.0) or 300.0
    ctx = complete(params, default_all=mode is None)
    owners = _owners(ctx.pods)
    if mode is not None:  # in the order they are run: prefill, decode, the rest
        first = {(ns, o): i for i, (ns, o, _) in enumerate(t for ph in role_phases([(n, o, r) for n, o, r, _ in owners])
                                                               for t in ph)}
        owners.sort(key=lambda t: first.get((t[0], t[1]), len(first)))
    columns = [Column("NAMESPACE", "namespace"), Column("OWNER", "owner"), Column("ROLE", "role"),
               Column("DEV MODE", "dev_mode"), Column("VALUE", "value"), Column("SOURCE", "source"),
               Column("RESULT", "result"), Column("TEMPLATES", "templates", wide=True),
               Column("MANAGED BY", "managed_by", wide=True), Column("MESSAGE", "message", wide=True)]
    if ctx.namespace is not None:
        columns = columns[1:]
    report = Report("DevMode", columns)

    if mode is None:
        for ns, owner, role, pod in owners:
            res = read_dev_mode(ctx.kube, ns, owner, role, pod)
            report.add(res.row(), ExitCode.OK if res.ok else ExitCode.FAILED)
            if res.message and params["output"] == "table":
                info(f"{'warning' if res.ok else 'error'}: {ns}/{owner.ref()}: {res.message}")
        emit(report, params["output"], empty_message=nothing_found(ctx))
        return

    exit_if_empty(ctx, required=True, output=params["output"])
    enable = mode == "enable"
    changes = {(ns, owner): dev_mode_changes(ctx.kube, ns, owner, enable=enable) for ns, owner, _, _ in owners}
    if params["dry_run"]:
        say_where(ctx, dry_run=True)
        for ns, owner, role, pod in owners:
            res = read_dev_mode(ctx.kube, ns, owner, role, pod)
            row = res.row()
            wanted = "on" if enable else "off"
            row["action"] = mode
            row["result"] = "unchanged" if res.state == wanted else f"would {mode}"
            row["message"] = "; ".join(changes[(ns, owner)]) or res.message
            report.add(row, ExitCode.OK if res.ok else ExitCode.FAILED)
        emit(report, params["output"], empty_message=nothing_found(ctx))
    prompt = sys.stdin.isatty() and not params["yes"]
    if not prompt:
        say_where(ctx, dry_run=False)
    if not prompt:  # the replaced sources are stated before anything changes, prompt or not
        for (ns, owner), lines in changes.items():
            for line in lines:
                info(f"note: {ns}/{owner.ref()}: {line}")
    if prompt:
        verb = 'set VLLM_SERVER_DEV_MODE="1" on' if enable else "remove VLLM_SERVER_DEV_MODE from"
        where = ctx.kube.where(all_namespaces=ctx.namespace is None)
        info(f"This will {verb}, in this order (prefill ready before decode starts), replacing every pod, on {where}:")
        for ns, owner, role, _ in owners:
            info(f"  {ns}/{owner.ref()}" + (f" ({role})" if role else ""))
            for line in changes[(ns, owner)]:
                info(f"    {line}")
        if not ask_yes_no("Continue?"):
            info("nothing changed")
            sys.exit(int(ExitCode.FAILED))
    progress = info if sys.stderr.isatty() else None

    def act(ns: str, owner: Any, role: str | None) -> DevModeResult:
        return set_dev_mode(ctx.kube, ns, owner, enable=enable, ignore_owner=params["ignore_owner"],
                            timeout_s=timeout_s, progress=progress, role=role, stop=INTERRUPTED.is_set)

    def skip(ns: str, owner: Any, role: str | None, why: str) -> DevModeResult:
        return DevModeResult(ns, owner, role, mode, "skipped", message=why)

    def not_started(ns: str, owner: Any, role: str | None) -> DevModeResult:
        return DevModeResult(ns, owner, role, mode, "interrupted", message=NOT_STARTED.replace("restarted", "patched"))

    with changing():  # a signal from here on sends no more patches, ends the waits and prints the rows
        results: list[DevModeResult] = run_phased([(ns, o, r) for ns, o, r, _ in owners], act, skip,
                                                  ok=lambda r: bool(r.ok), max_workers=1, cancel=INTERRUPTED,
                                                  interrupted=not_started)
        _report(report, results, params["output"])


def _report(report: Any, results: list[Any], output: str) -> None:
    """Print the rows and warnings of ``devmode --enable/--disable`` and exit with their code."""
    from ..report import ExitCode

    for res in results:
        report.add(res.row(), ExitCode.OK if res.ok else ExitCode.FAILED)
        if not res.ok:
            info(f"error: {res.namespace}/{res.owner.ref()}: {res.result}: {res.message}")
    for res in results:
        if res.result in ("enabled", "disabled") and res.managers:
            info(f"warning: {res.namespace}/{res.owner.ref()} is managed by "
                 f"{', '.join(m.describe() for m in res.managers)}: "
                 "its next sync or upgrade may revert this change")
    rolled = [r for r in results if r.result == "enabled"]  # patched, rollout waited for and complete
    unwaited = [r for r in results if r.result == "interrupted" and r.requested and r.action == "enable"]
    changed = [r for r in results if any(r is c for c in rolled + unwaited)]  # in the owners' order
    if changed:
        caches = []
        if rolled:
            caches.append(f"The rollout of {', '.join(r.owner.ref() for r in rolled)} replaced the pods, "
                          "which emptied their caches.")
        if unwaited:
            caches.append(f"The rollout of {', '.join(r.owner.ref() for r in unwaited)} was not waited for: "
                          "its pods may still be being replaced, and their caches are not known to be emptied.")
        undo: dict[str, list[str]] = {}  # one command per namespace, all of its owners
        for r in changed:
            undo.setdefault(r.namespace, []).append(r.owner.ref())
        info("warning: vLLM's dev endpoints (/reset_prefix_cache, /sleep, /collective_rpc ...) are now served "
             "without authentication to anyone who reaches the pods. " + " ".join(caches) + " "
             "Turn dev mode off with: " + "; ".join(f"kubectl kvreset devmode --disable {' '.join(refs)} -n {ns}"
                                                   for ns, refs in undo.items()))
    emit(report, output, empty_message="No vLLM server pods targeted.")


def _owners(pods: Sequence[Any]) -> list[tuple[str, Any, str | None, Any]]:
    """``(namespace, owner, role, raw pod)`` per owner of the pods, in the pods' order."""
    seen: dict[tuple[str, Any], tuple[str, Any, str | None, Any]] = {}
    for pod in pods:
        key = (pod.namespace, pod.owner)
        if key not in seen:
            seen[key] = (pod.namespace, pod.owner, pod.role, pod.raw)
    return list(seen.values())
