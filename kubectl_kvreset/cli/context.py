"""The completed context of a sub-command: validated targets, a connection, the vLLM pods in
scope and the ones targeted (kubectl's Complete/Validate phases, ``k8s.io/kubectl/pkg/cmd/...``).
Discovery and selection are the job's (:func:`kubectl_kvreset.job.scope.select_targets`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..report import ExitCode
from .options import INTERRUPTED, fail, flags_from, info

if TYPE_CHECKING:
    from ..job.scope import Scope

def complete(params: dict[str, Any], *, default_all: bool, pair_note: bool = True) -> Scope:
    """Validate the targets, connect, discover and select; print the selection's notes.

    ``default_all``: with no target at all, act on every vLLM pod (read-only commands) instead
    of refusing with a usage error (exit 2). ``pair_note``: say when the targets hold one role
    of a prefill/decode pair (commands that change something).

    Raises:
        click.UsageError: bad targets (exit 2); the adapter's errors propagate to ``handle_errors``.
    """
    from ..job.scope import select_targets
    from ..kube import Kube
    from ..pods import Targets, parse_owner_ref

    targets = Targets(all=bool(params.get("all_targets")), selector=params.get("selector"),
                      owners=tuple(params.get("owners") or ()))
    if targets.is_empty():
        if not default_all:
            raise click.UsageError("name the targets: OWNER (e.g. deployment/NAME), --all, or -l SELECTOR")
        targets = Targets(all=True)
    if targets.all and targets.owners:
        raise click.UsageError("--all selects every vLLM pod: do not also name owners")
    for owner in targets.owners:
        try:
            parse_owner_ref(owner)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
    flags = flags_from(params)
    kube = Kube.connect(flags, pool_size=int(params.get("max_concurrency") or 16))
    if int(params.get("verbosity") or 0) >= 1:
        info(f"using {kube.where(flags.all_namespaces)}")
    scope = select_targets(kube, targets, all_namespaces=flags.all_namespaces,
                           transport=str(params.get("transport") or "auto"), cancel=INTERRUPTED, pair_note=pair_note)
    for note in scope.notes:
        info(note)
    return scope


def nothing_found(ctx: Scope) -> str:
    """The message for a table with no rows: ``No vLLM server pods found in namespace 'x'.``"""
    where = "any namespace" if ctx.namespace is None else f"namespace {ctx.namespace!r}"
    return f"No vLLM server pods found in {where}."


def exit_if_empty(ctx: Scope, *, required: bool, output: str = "table", others: bool = False) -> None:
    """Exit 1 when a command that must act found nothing to act on (``[]`` on stdout first for
    json/yaml, so scripts still read a list). ``others``: the targeted pods of engines this
    version cannot empty count (``clear`` gives them rows)."""
    if required and not ctx.pods and not (others and ctx.others):
        if output in ("json", "yaml"):
            click.echo("[]")
        where = "any namespace" if ctx.namespace is None else f"namespace {ctx.namespace!r}"
        fail(f"no vLLM server pods to act on in {where}", ExitCode.FAILED)


def say_where(ctx: Scope, *, dry_run: bool) -> None:
    """One line on stderr naming the context, cluster and namespace a run without a prompt
    (``--yes``, no terminal, ``--dry-run``) acts on, before it acts."""
    where = ctx.kube.where(all_namespaces=ctx.namespace is None)
    info(f"{'dry run (nothing changed) on' if dry_run else 'acting on'} {where}")
