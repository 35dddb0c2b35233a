"""The completed context of a sub-command: a connection, the vLLM pods in scope and the ones
targeted (kubectl's Complete/Validate phases, ``k8s.io/kubectl/pkg/cmd/...``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from ..report import ExitCode
from .options import fail, flags_from, info


@dataclass
class RunContext:
    """``kube``: the connection; ``scope``: the namespace listed (None with ``-A``);
    ``universe``: every vLLM pod in scope; ``pods``: the targeted ones."""

    kube: Any
    scope: str | None
    universe: list[Any]
    pods: list[Any]
    caller: Any = None

    @staticmethod
    def ref(pod: Any) -> Any:
        """The :class:`~kubectl_kvreset.podapi.PodRef` of a discovered pod."""
        from ..podapi import PodRef

        return PodRef(pod.namespace, pod.name, pod.container)


def complete(params: dict[str, Any], *, default_all: bool, pair_note: bool = True) -> RunContext:
    """Validate the targets, connect, discover and select.

    ``default_all``: with no target at all, act on every vLLM pod (read-only commands) instead
    of refusing with a usage error (exit 2). ``pair_note``: say when the targets hold one role
    of a prefill/decode pair (commands that change something).

    Raises:
        SystemExit: 2 on a usage error; the adapter's errors propagate to ``handle_errors``.
    """
    from ..discovery import Targets, discover, missing_pair_roles, parse_owner_ref, select
    from ..kube import Kube

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
    scope = None if flags.all_namespaces else kube.namespace
    universe = discover(kube, scope, selector=targets.selector)
    pods = select(universe, targets)
    if targets.selector and targets.owners:
        pods = [p for p in pods if p in universe]
    pairs = missing_pair_roles(pods, universe if not targets.selector else discover(kube, scope)) if pair_note else []
    for mine, other in pairs:
        info(f"note: {mine.ref()} is one role of a prefill/decode pair; its other role, {other.ref()}, "
             "is not targeted")
    from ..podapi import PodCaller, Transports
    from .options import INTERRUPTED

    caller = PodCaller(kube, Transports(str(params.get("transport") or "auto")), stop=INTERRUPTED.is_set)
    return RunContext(kube, scope, universe, pods, caller)


def nothing_found(ctx: RunContext) -> str:
    """The message for a table with no rows: ``No vLLM server pods found in namespace 'x'.``"""
    where = "any namespace" if ctx.scope is None else f"namespace {ctx.scope!r}"
    return f"No vLLM server pods found in {where}."


def exit_if_empty(ctx: RunContext, *, required: bool, output: str = "table") -> None:
    """Exit 1 when a command that must act found nothing to act on (``[]`` on stdout first for
    json/yaml, so scripts still read a list)."""
    if required and not ctx.pods:
        if output in ("json", "yaml"):
            click.echo("[]")
        where = "any namespace" if ctx.scope is None else f"namespace {ctx.scope!r}"
        fail(f"no vLLM server pods to act on in {where}", ExitCode.FAILED)
