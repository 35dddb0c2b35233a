"""The order owners are acted on (pure): prefill, then decode once prefill is back, then the
rest (why: :mod:`kubectl_kvreset.rollout`); the owners of one phase in parallel, and what a
cancelled run reports for the owners it did not reach."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from ..pods import Owner
from ..pool import Cancel

__all__ = ["NOT_STARTED", "Triple", "role_phases", "run_phased"]

#: The message of an owner a cancelled run did not act on.
NOT_STARTED = "not restarted: the run was interrupted before its patch was sent"

Triple = tuple[str, Owner, "str | None"]


def role_phases(owners: Sequence[Triple]) -> list[list[Triple]]:
    """Split ``(namespace, owner, role)`` triples into the phases run one after the other:
    prefill, then decode, then every other role. Duplicates are dropped; empty phases too."""
    seen: set[tuple[str, Owner]] = set()
    phases: list[list[Triple]] = [[], [], []]
    for ns, owner, role in owners:
        if (ns, owner) in seen:
            continue
        seen.add((ns, owner))
        index = {"prefill": 0, "decode": 1}.get((role or "").lower(), 2)
        phases[index].append((ns, owner, role))
    return [p for p in phases if p]


def run_phased(owners: Sequence[Triple], act: Callable[[str, Owner, str | None], Any],
               skipped: Callable[[str, Owner, str | None, str], Any], *, ok: Callable[[Any], bool],
               max_workers: int = 8, cancel: Cancel | None = None,
               interrupted: Callable[[str, Owner, str | None], Any] | None = None) -> list[Any]:
    """Run ``act`` on the owners phase by phase (:func:`role_phases`: prefill, decode, rest),
    the owners of one phase in parallel. A decode owner whose namespace had a prefill owner
    that did not end ``ok`` is not acted on: ``skipped(ns, owner, role, reason)`` gives its
    result. Once ``cancel`` is set no further phase starts: ``interrupted(ns, owner, role)``
    gives the result of each owner not acted on (``act`` itself must watch the cancel to end
    a wait under way). Results come back in phase order."""
    results: list[Any] = []
    failed_prefill: dict[str, list[str]] = {}
    for phase in role_phases(owners):
        todo: list[Triple] = []
        for ns, owner, role in phase:
            if cancel is not None and cancel.is_set() and interrupted is not None:
                results.append(interrupted(ns, owner, role))
            elif (role or "").lower() == "decode" and failed_prefill.get(ns):
                names = ", ".join(failed_prefill[ns])
                results.append(skipped(ns, owner, role, f"not acted on: prefill {names} did not end ready, and "
                                       "decode is restarted only once prefill is ready (stale NIXL state: vLLM #49238, "
                                       "llm-d #2187)"))
            else:
                todo.append((ns, owner, role))
        if not todo:
            continue
        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(todo)))) as pool:
            futures = [pool.submit(act, *t) for t in todo]
            if cancel is not None:
                _notice(cancel, futures)
            done = [f.result() for f in futures]
        for (ns, owner, role), res in zip(todo, done, strict=True):
            if (role or "").lower() == "prefill" and not ok(res):
                failed_prefill.setdefault(ns, []).append(f"{owner.ref()} ({getattr(res, 'result', 'failed')})")
            results.append(res)
    return results


def _notice(cancel: Cancel, futures: Sequence[Future[Any]]) -> None:
    """Wait for ``futures``, telling ``cancel`` (its ``on_cancel``, once) how many still run when
    it is set meanwhile."""
    pending = set(futures)
    while pending:
        _, pending = wait(pending, timeout=0.2)
        if pending and cancel.is_set():
            cancel.notify(len(pending))
