"""Waiting for an owner's rollout: its status (and a LeaderWorkerSet's pods, until the ones
that existed before the patch are gone and their successors ready) read until the rollout
completes, fails, the bound passes or the run is cancelled."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from ..kube import Kube, KubeApiError, KubeConnectionError, KubeError
from ..pods import Owner
from .owners import get_owner, owner_pods
from .status import RolloutState, deployment_rollout_state, lws_rollout_state, pod_problems

__all__ = ["DEFAULT_TIMEOUT_S", "POLL_S", "Progress", "wait_rollout"]

#: ``--timeout`` default of ``restart`` and ``devmode --enable/--disable``, seconds.
DEFAULT_TIMEOUT_S = 300.0
#: Interval between two status reads while waiting, seconds.
POLL_S = 0.5

Progress = Callable[[str], None]


def wait_rollout(kube: Kube, namespace: str, owner: Owner, *, generation: int | None,
                 old_uids: Iterable[str] = (), timeout_s: float, progress: Progress | None = None,
                 poll_s: float = POLL_S, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, stop: Callable[[], bool] = lambda: False) -> RolloutState:
    """Poll the owner (and, for a LeaderWorkerSet, its pods) every ``poll_s`` seconds until its
    rollout completes, fails, ``timeout_s`` passes or ``stop()`` turns True (a cancelled run:
    ``interrupted``). On a timeout or failure the message names what was still missing and why
    the unready pods are not ready (:func:`pod_problems`).
    ``progress`` receives each new status message.

    Transient API errors (5xx, no answer) are retried until the bound; a 404 ends the wait
    (the owner was deleted), other 4xx propagate.
    """
    deadline = clock() + timeout_s
    old = frozenset(old_uids)
    last = ""
    state = RolloutState(False, "waiting for the first status read")
    obj: dict[str, Any] | None = None
    while True:
        try:
            obj = get_owner(kube, namespace, owner)
            if owner.kind == "LeaderWorkerSet":
                pods = owner_pods(kube, namespace, obj)
                state = lws_rollout_state(obj, pods, generation=generation, old_uids=old)
            else:
                state = deployment_rollout_state(obj, generation)
        except KubeApiError as exc:
            if exc.status == 404:
                return RolloutState(False, f"{owner.ref()} was deleted while waiting", failed=True)
            if exc.status < 500:
                raise
            state = RolloutState(False, f"status read failed: {exc}")
        except KubeConnectionError as exc:
            state = RolloutState(False, f"status read failed: {exc}")
        if state.message != last and progress is not None:
            progress(f"{owner.ref()}: {state.message}")
        last = state.message
        if state.done or state.failed:
            break
        if stop():
            return RolloutState(False, f"not waited for (interrupted): {state.message}", interrupted=True)
        if clock() >= deadline:
            state = RolloutState(False, f"not rolled out within {timeout_s:g} s: {state.message}", timed_out=True)
            break
        sleep(max(0.0, min(poll_s, deadline - clock())))
    if state.done or obj is None:
        return state
    try:
        problems = pod_problems(owner_pods(kube, namespace, obj))
    except KubeError:
        problems = []
    if problems:
        state = RolloutState(False, state.message + "; " + "; ".join(problems), state.failed, state.timed_out)
    return state
