"""Where a rollout stands, read from plain dicts (pure): kubectl's Deployment rule
(:func:`deployment_rollout_state`), the LeaderWorkerSet rule (:func:`lws_rollout_state`; both
rules and their sources are in :mod:`kubectl_kvreset.rollout`) and why pods are not ready
(:func:`pod_problems`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["RolloutState", "deployment_rollout_state", "int_field", "lws_rollout_state", "pod_problems"]


@dataclass(frozen=True)
class RolloutState:
    """Where a rollout stands: ``done`` (complete), ``message`` (kubectl-style text such as
    ``1 of 2 updated replicas are available``), ``failed`` (it cannot complete by itself:
    ``ProgressDeadlineExceeded``, the object is gone), ``timed_out`` (the wait's bound hit) and
    ``interrupted`` (the run was cancelled while waiting: the rollout goes on without us)."""

    done: bool
    message: str
    failed: bool = False
    timed_out: bool = False
    interrupted: bool = False


def int_field(value: Any) -> int:
    """An integer field of an API object: absent, null or not a number count as 0 (the API
    omits zeros)."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _condition(status: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def deployment_rollout_state(obj: Mapping[str, Any], generation: int | None = None) -> RolloutState:
    """``kubectl rollout status`` for a Deployment dict (``DeploymentStatusViewer.Status``).

    ``generation`` is the one to have been observed (the PATCH answer's); default
    ``metadata.generation``. Absent integer status fields count as 0, as the API omits zeros.
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = meta.get("name", "")
    want_gen = generation if generation is not None else int_field(meta.get("generation"))
    if int_field(status.get("observedGeneration")) < want_gen:
        return RolloutState(False, "waiting for deployment spec update to be observed")
    progressing = _condition(status, "Progressing")
    if progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded":
        return RolloutState(False, f'deployment "{name}" exceeded its progress deadline', failed=True)
    replicas = int_field(spec.get("replicas", 1)) if "replicas" in spec else None
    updated = int_field(status.get("updatedReplicas"))
    total = int_field(status.get("replicas"))
    available = int_field(status.get("availableReplicas"))
    if replicas is not None and updated < replicas:
        return RolloutState(False, f"{updated} out of {replicas} new replicas have been updated")
    if total > updated:
        return RolloutState(False, f"{total - updated} old replicas are pending termination")
    if available < updated:
        return RolloutState(False, f"{available} of {updated} updated replicas are available")
    return RolloutState(True, f'deployment "{name}" successfully rolled out')


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def lws_rollout_state(obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] | None = None, *,
                      generation: int | None = None, old_uids: Iterable[str] = ()) -> RolloutState:
    """Whether a LeaderWorkerSet's rollout is complete, by the rule in the
    :mod:`kubectl_kvreset.rollout` docstring.

    ``pods`` are the pods labelled ``leaderworkerset.sigs.k8s.io/name=NAME`` (None skips the
    pod checks); ``old_uids`` the UIDs of its pods before the patch; ``generation`` the
    generation the patch answer carried.
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    replicas = int_field(spec.get("replicas", 1)) if "replicas" in spec else 1
    size = int_field((spec.get("leaderWorkerTemplate") or {}).get("size", 1)) or 1
    want_gen = generation if generation is not None else int_field(meta.get("generation"))
    if "observedGeneration" in status and int_field(status.get("observedGeneration")) < want_gen:
        return RolloutState(False, "waiting for the LeaderWorkerSet update to be observed")
    updating = _condition(status, "UpdateInProgress")
    if updating is not None and updating.get("status") == "True":
        why = updating.get("message") or "groups are being replaced"
        return RolloutState(False, f"rolling update in progress: {why}")
    updated = int_field(status.get("updatedReplicas"))
    ready = int_field(status.get("readyReplicas"))
    if updated < replicas:
        return RolloutState(False, f"{updated} of {replicas} groups updated")
    if ready < replicas:
        return RolloutState(False, f"{ready} of {replicas} groups ready")
    if pods is not None:
        live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
        old = set(old_uids)
        left = [p for p in pods if (p.get("metadata") or {}).get("uid") in old]
        if left:
            return RolloutState(False, f"{len(left)} old pods pending replacement")
        n_ready = sum(1 for p in live if _pod_ready(p))
        if n_ready < replicas * size or len(live) > replicas * size:
            return RolloutState(False, f"{n_ready} of {replicas * size} pods ready ({len(live)} pods)")
    return RolloutState(True, f'leaderworkerset "{meta.get("name", "")}" successfully rolled out')


def pod_problems(pods: Sequence[Mapping[str, Any]], limit: int = 3) -> list[str]:
    """Why pods are not ready, one line per unready pod (at most ``limit``): a waiting
    container's reason and message (``CrashLoopBackOff``, ``ImagePullBackOff``), the last
    termination's exit code, else the scheduler's reason and message for a pod it could not
    place (``Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu``, as
    ``clear`` names the same pod), else the Ready condition's message, else the phase."""
    out: list[str] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or _pod_ready(pod):
            continue
        status = pod.get("status") or {}
        why: list[str] = []
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            waiting = (cs.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
                text = f"container {cs.get('name')} {waiting.get('reason')}"
                last = (cs.get("lastState") or {}).get("terminated")
                if last and last.get("exitCode") is not None:
                    text += f" (last exit code {last.get('exitCode')}, {cs.get('restartCount', 0)} restarts)"
                why.append(text)
        unscheduled = next((c for c in status.get("conditions") or []
                            if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
        if not why and unscheduled is not None:
            why.append(f"{unscheduled.get('reason') or 'Pending'}: "
                       f"{unscheduled.get('message') or 'the pod is not scheduled to a node yet'}")
        if not why:
            ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
            if ready and ready.get("message"):
                why.append(str(ready["message"]))
            else:
                why.append(f"phase {status.get('phase', 'Unknown')}, not ready")
        out.append(f"pod {meta.get('name', '')}: " + "; ".join(why))
        if len(out) >= limit:
            break
    return out
