"""Restarts: one owner as ``kubectl rollout restart`` does it, then its rollout waited for;
several owners phase by phase (prefill, decode, the rest); and the note for a namespace whose
llm-d scheduler may still route by the old engines' blocks (the rules are in
:mod:`kubectl_kvreset.rollout`)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..devmode import managing_controllers
from ..kube import Kube, KubeError
from ..pods import Owner
from ..pool import Cancel
from .owners import Refused, get_owner, object_generation, paused_refusal, pod_uids, refusal_text, send_patch
from .patches import RESTARTED_AT, deployment_restart_patch, lws_restart_patch, restart_stamped, restart_timestamp
from .phases import NOT_STARTED, run_phased
from .wait import Progress, wait_rollout

__all__ = ["RestartResult", "detect_schedulers", "restart_owner", "restart_owners", "scheduler_note"]

#: Images of the llm-d scheduler (EPP) of every era (llm-d-inference-scheduler, llm-d-router,
#: gateway-api-inference-extension's ``epp``).
_SCHEDULER_IMAGE = re.compile(r"(inference-scheduler|llm-d-router|/epp[:@]|/epp$|inference-extension/epp)", re.I)


@dataclass(frozen=True)
class RestartResult:
    """The end of one owner's restart.

    ``result``: ``restarted`` (rollout complete), ``timeout`` (``--timeout`` hit; ``message``
    names the cause), ``failed`` (API error, progress deadline), ``refused`` (paused, managed by
    a controller, a kind this tool cannot restart safely), ``skipped`` (decode whose prefill
    did not come back) or ``interrupted`` (the run was cancelled: before the patch, nothing was
    sent; after it, the restart was requested and its rollout not waited for, as ``requested``
    says). ``seconds`` is the time from patch to the end of the wait.
    """

    namespace: str
    owner: Owner
    role: str | None
    result: str
    message: str
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    requested: bool = False

    @property
    def ok(self) -> bool:
        """True when the owner was restarted and its rollout completed."""
        return self.result == "restarted"

    def row(self) -> dict[str, Any]:
        """The ``Restart`` row: namespace, owner, role, result, seconds, message, notes."""
        return {"namespace": self.namespace, "owner": self.owner.ref(), "role": self.role, "result": self.result,
                "seconds": round(self.seconds, 1), "message": self.message, "notes": list(self.notes)}


def restart_owner(kube: Kube, namespace: str, owner: Owner, role: str | None = None, *, timeout_s: float,
                  progress: Progress | None = None, clock: Callable[[], float] = time.monotonic,
                  stop: Callable[[], bool] = lambda: False) -> RestartResult:
    """Restart one Deployment or LeaderWorkerSet and wait for its rollout (see the
    :mod:`kubectl_kvreset.rollout` docstring for the patches and completion rules). Once
    ``stop()`` is True (a cancelled run) no patch is sent and a wait under way ends: the result
    is ``interrupted``.

    Refused (never guessed at): another kind (a ReplicaSet of the dual-pod controller, a bare
    Pod, a StatefulSet), a paused Deployment, an owner whose template a controller rewrites
    (a controller ownerReference: KServe, DisaggregatedSet). API failures become ``failed``
    rows; nothing raises except KeyboardInterrupt.
    """
    start = clock()
    try:
        obj = get_owner(kube, namespace, owner)
        paused = paused_refusal(obj, owner)
        if paused:
            raise Refused(paused)
        controllers = [m for m in managing_controllers(obj) if m.via.endswith("ownerReference")]
        if controllers:
            raise Refused(f"managed by {', '.join(m.describe() for m in controllers)}: it would revert a template "
                          "patch; restart it through that controller")
        old = pod_uids(kube, namespace, obj)
        stamp = restart_timestamp()
        if restart_stamped(obj, stamp):  # kubectl: "already triggered within the past second"
            time.sleep(1.0)
            stamp = restart_timestamp()

        def build(cur: Mapping[str, Any]) -> tuple[Any, str] | None:
            if restart_stamped(cur, stamp):
                return None
            if owner.kind == "LeaderWorkerSet":
                return lws_restart_patch(cur, stamp), "application/merge-patch+json"
            return deployment_restart_patch(stamp), "application/strategic-merge-patch+json"

        if stop():
            return RestartResult(namespace, owner, role, "interrupted", NOT_STARTED, clock() - start)
        after = send_patch(kube, namespace, owner, obj, build)[0] or obj
        if progress is not None:
            progress(f"{owner.ref()}: restart requested ({RESTARTED_AT}={stamp})")
        state = wait_rollout(kube, namespace, owner, generation=object_generation(after), old_uids=old,
                             timeout_s=timeout_s, progress=progress, stop=stop)
    except Refused as exc:
        return RestartResult(namespace, owner, role, "refused", str(exc), clock() - start)
    except KubeError as exc:
        return RestartResult(namespace, owner, role, "failed", refusal_text(exc), clock() - start)
    seconds = clock() - start
    if state.done:
        return RestartResult(namespace, owner, role, "restarted",
                             "rolled out: every pod was replaced, so its in-pod KV caches (GPU, and CPU offload "
                             "where configured) start empty", seconds)
    if state.interrupted:
        return RestartResult(namespace, owner, role, "interrupted",
                             f"restart requested ({RESTARTED_AT}={stamp}), so its pods are being replaced, but the "
                             f"rollout was {state.message}; check kubectl rollout status {owner.ref()} -n {namespace}",
                             seconds, requested=True)
    return RestartResult(namespace, owner, role, "timeout" if state.timed_out else "failed", state.message, seconds)


def detect_schedulers(kube: Kube, namespace: str) -> list[str]:
    """``deployment/NAME`` of every llm-d scheduler (EPP) Deployment in ``namespace``, known by
    its image (``llm-d-inference-scheduler``, ``llm-d-router``, the inference extension's
    ``epp``). An empty list when there is none or the list is not permitted."""
    try:
        deployments = kube.list_items("apps/v1", "deployments", namespace)
    except KubeError:
        return []
    found: list[str] = []
    for dep in deployments:
        spec = ((dep.get("spec") or {}).get("template") or {}).get("spec") or {}
        if any(_SCHEDULER_IMAGE.search(str(c.get("image", ""))) for c in spec.get("containers") or []):
            found.append(f"deployment/{(dep.get('metadata') or {}).get('name', '')}")
    return found


def scheduler_note(schedulers: Sequence[str]) -> str:
    """The warning given after a restart in a namespace that runs an llm-d scheduler."""
    return (f"the llm-d scheduler ({', '.join(schedulers)}) may still route by the old engines' cached blocks: "
            "its prefix index keeps a restarted engine's entries when KV event replay is off, the default "
            "(llm-d-router #2853); restart the scheduler too for cold routing")


def restart_owners(kube: Kube, owners: Sequence[tuple[str, Owner, str | None]], *, timeout_s: float,
                   progress: Callable[[str], None] | None, cancel: Cancel | None = None) -> list[RestartResult]:
    """Restart ``(namespace, owner, role)`` owners: prefill first and wait, then decode (only
    where prefill came back), then the rest; owners of one phase in parallel, each wait bounded
    by ``timeout_s`` from its own patch. Restarted rows of a namespace that runs an llm-d
    scheduler carry :func:`scheduler_note`. Once ``cancel`` is set, no patch is sent and the
    waits end (``interrupted`` rows). Never raises for an owner's failure: see each
    :class:`RestartResult`."""
    stop = cancel.is_set if cancel is not None else (lambda: False)
    lock = threading.Lock()

    def say(text: str) -> None:
        if progress is not None:
            with lock:
                progress(text)

    def act(ns: str, owner: Owner, role: str | None) -> RestartResult:
        return restart_owner(kube, ns, owner, role, timeout_s=timeout_s, progress=say, stop=stop)

    def skip(ns: str, owner: Owner, role: str | None, why: str) -> RestartResult:
        return RestartResult(ns, owner, role, "skipped", why)

    def not_started(ns: str, owner: Owner, role: str | None) -> RestartResult:
        return RestartResult(ns, owner, role, "interrupted", NOT_STARTED)

    results: list[RestartResult] = run_phased(owners, act, skip, ok=lambda r: bool(r.ok), cancel=cancel,
                                              interrupted=not_started)
    notes: dict[str, tuple[str, ...]] = {}
    for ns in sorted({r.namespace for r in results if r.ok}):
        schedulers = detect_schedulers(kube, ns)
        notes[ns] = (scheduler_note(schedulers),) if schedulers else ()
    return [RestartResult(r.namespace, r.owner, r.role, r.result, r.message, r.seconds,
                          r.notes + notes.get(r.namespace, ()))
            if r.ok else r for r in results]
