"""``kubectl kvreset clear-fs``: empty the FS offload tier, once per backing volume."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from ..report import Report
from .options import (
    EXIT_CODES_HELP,
    NotRun,
    concurrency_option,
    emit,
    handle_errors,
    info,
    kube_flags,
    model_only_option,
    output_option,
    parallel,
    target_options,
    yes_option,
)

if TYPE_CHECKING:
    from ..fstier import FsClearResult, FsVolumeTarget
    from ..report import Column, ExitCode


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
        "refused. vLLM never deletes these files itself. " + EXIT_CODES_HELP
    ),
)
@target_options
@model_only_option("Delete only the served model's directories (<model>_<hash12> and <model>_<hash12>_r<N>).")
@click.option("--timeout", "exec_timeout", default="120s", show_default=True, metavar="DURATION",
              help="Bound on each exec in a pod; a deletion cut short is reported as failed (not emptied).")
@click.option("--dry-run", is_flag=True, help="Print one row per volume (what would be emptied); change nothing.")
@yes_option
@output_option
@concurrency_option
@kube_flags
@handle_errors
def command(**params: Any) -> None:
    """Empty the FS offload tier of the targeted vLLM pods: one deletion per backing volume.

    Targets are OWNER arguments (deployment/NAME, leaderworkerset/NAME, pod/NAME; a bare name
    is a Deployment), --all or -l SELECTOR. Pods outside the targets that mount the same volume
    are named in a warning: their cache is emptied too.
    """
    from ..fstier import plan_fs_clear, run_fs_clear
    from ..kube import parse_duration
    from ..report import ExitCode
    from .context import complete, exit_if_empty

    timeout = parse_duration(params["exec_timeout"], default=120.0) or 120.0
    ctx = complete(params, default_all=False)
    exit_if_empty(ctx, required=True, output=params["output"])
    others = other_pod_objects(ctx.kube, sorted({p.namespace for p in ctx.pods}))
    targets = plan_fs_clear(ctx.pods, ctx.universe, model_only=params["model_only"], other_pod_objects=others)
    for target in targets:
        if target.other_pods and target.refusal is None:
            scope = (f"only the directories of {', '.join(target.models) or 'no model'} are deleted"
                     if target.model_only else "their FS tier is emptied too")
            info(f"warning: {target.volume} ({shown(target.root)}) is also mounted by pods outside the targets "
                 f"({', '.join(target.other_pods)}): {scope}")
    if not targets:
        info("The targeted pods have no FS tier (no fs/fs_python secondary tier, no shared_storage_path).")

    if params["dry_run"] or (sys.stdin.isatty() and not params["yes"] and targets):
        plan = FsReport("FsTierClear", columns(ctx.scope))
        for target in targets:
            plan.add(fs_row(target), ExitCode.FAILED if target.refusal else ExitCode.OK)
        if params["dry_run"]:
            emit(plan, params["output"], empty_message="Nothing to do.")
        info(plan.render("table").rstrip())
        if not click.confirm("Delete the contents of these FS tier roots?", default=False, err=True):
            info("nothing changed")
            sys.exit(int(ExitCode.FAILED))

    results = list(parallel(targets, lambda t: run_fs_clear(ctx.kube, t, timeout_s=timeout),
                            params["max_concurrency"]))
    report = FsReport("FsTierClear", columns(ctx.scope))
    for target, outcome in zip(targets, results, strict=True):
        if isinstance(outcome, NotRun):
            row = fs_row(target, None)
            row.update(result="interrupted", message="not run: interrupted")
            report.add(row, ExitCode.INTERRUPTED)
            continue
        report.add(fs_row(target, outcome), row_code(outcome))
    emit(report, params["output"], empty_message="Nothing to do.")


def shown(text: str | None) -> str | None:
    """``text`` for a table cell or a message: quoted with JSON escapes when it holds a control
    character (a root may hold a newline), else unchanged."""
    if text is not None and any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        return json.dumps(text)
    return text


class FsReport(Report):
    """A :class:`~kubectl_kvreset.report.Report` whose table shows roots and messages with
    control characters escaped (JSON and YAML keep every byte)."""

    def render(self, fmt: str) -> str:
        """As :meth:`Report.render`; ``table``/``wide`` cells are passed through :func:`shown`."""
        if fmt not in ("table", "wide"):
            return super().render(fmt)
        safe = Report(self.kind, self.columns)
        safe.rows = [{k: shown(v) if isinstance(v, str) else v for k, v in row.items()} for row in self.rows]
        return safe.render(fmt)


def other_pod_objects(kube: Any, namespaces: Sequence[str]) -> list[Mapping[str, Any]]:
    """Every pod object of ``namespaces`` (one list per namespace), to find non-vLLM pods that
    mount an FS tier's volume; a namespace that cannot be listed is skipped with a note."""
    from ..kube import KubeApiError

    found: list[Mapping[str, Any]] = []
    for ns in namespaces:
        try:
            found.extend(kube.list_items("v1", "pods", ns))
        except KubeApiError as exc:
            info(f"note: cannot list the pods of {ns} to find other users of the volumes: {exc}")
    return found


def columns(scope: str | None) -> list[Column]:
    """Columns of the ``FsTierClear`` table (NAMESPACE only with ``-A``)."""
    from ..report import Column

    cols = [Column("NAMESPACE", "namespace"), Column("VOLUME", "volume"), Column("ROOT", "root"),
            Column("PODS", "pod_count"), Column("POD NAMES", "pods", wide=True),
            Column("EXEC POD", "exec_pod", wide=True), Column("CONTAINER", "container", wide=True),
            Column("FILES BEFORE", "files_before"), Column("BYTES BEFORE", "bytes_before"),
            Column("FILES AFTER", "files_after"), Column("BYTES AFTER", "bytes_after"),
            Column("RESULT", "result"), Column("OTHER PODS", "other_pods", wide=True),
            Column("MESSAGE", "message")]
    return cols[1:] if scope is not None else cols


def fs_row(target: FsVolumeTarget, outcome: FsClearResult | None = None) -> dict[str, Any]:
    """One ``FsTierClear`` row: the plan (``result`` ``planned`` or ``refused``) or, with
    ``outcome``, what happened (``emptied``, ``refused``, ``failed``).

    Keys: namespace, volume, volume_path, root, pods, pod_count, exec_pod, container,
    files_before, bytes_before, files_after, bytes_after, result, message, other_pods,
    model_only, models, method, other_files, skipped_mounts.
    """
    messages: list[str] = []
    if outcome is None:
        result = "refused" if target.refusal else "planned"
        if target.refusal:
            messages.append(target.refusal)
    else:
        result = outcome.result
        if outcome.message:
            messages.append(outcome.message)
    if target.other_pods and not target.refusal:
        messages.append(f"also mounted by {len(target.other_pods)} pod(s) outside the targets")
    messages.extend(target.notes)
    return {
        "namespace": target.namespace,
        "volume": target.volume,
        "volume_path": target.volume_path,
        "root": target.root,
        "pods": list(target.pods),
        "pod_count": len(target.pods),
        "exec_pod": outcome.exec_pod if outcome is not None and outcome.exec_pod else target.exec_pod,
        "container": outcome.container if outcome is not None and outcome.container else target.container,
        "files_before": outcome.files_before if outcome else None,
        "bytes_before": outcome.bytes_before if outcome else None,
        "files_after": outcome.files_after if outcome else None,
        "bytes_after": outcome.bytes_after if outcome else None,
        "result": result,
        "message": "; ".join(messages) or None,
        "other_pods": list(target.other_pods),
        "model_only": target.model_only,
        "models": list(target.models),
        "method": outcome.method if outcome else None,
        "other_files": outcome.other_files if outcome else None,
        "skipped_mounts": list(outcome.skipped_mounts) if outcome else [],
    }


def row_code(outcome: FsClearResult) -> ExitCode:
    """0 when emptied, 1 when refused or failed (the tier may be left full)."""
    from ..report import ExitCode

    return ExitCode.OK if outcome.result == "emptied" else ExitCode.FAILED
