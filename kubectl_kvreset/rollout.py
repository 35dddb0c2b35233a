"""Restart owners and wait for their rollouts; set or remove ``VLLM_SERVER_DEV_MODE``.

Pure parts (unit-tested on plain dicts): :func:`deployment_rollout_state` (kubectl's rule),
:func:`lws_rollout_state` (the LeaderWorkerSet rule below), the restart patch builders,
:func:`role_phases` and :func:`pod_problems`. The rest talks to the API server through
:class:`~kubectl_kvreset.kube.Kube` (``get_object``, ``list_items``, ``send_json``).

Rules and where they come from:

* **Deployment restart** as ``kubectl rollout restart`` (``k8s.io/kubectl``
  ``pkg/polymorphichelpers/objectrestarter.go``): refused when ``spec.paused``; sets the pod
  template annotation ``kubectl.kubernetes.io/restartedAt`` to the local time in RFC 3339 with
  seconds, as a strategic-merge patch.
* **Deployment completion** as ``kubectl rollout status`` (``pkg/polymorphichelpers/
  rollout_status.go`` ``DeploymentStatusViewer``): observed generation caught up, no
  ``ProgressDeadlineExceeded``, every replica updated, no old replica left, every updated
  replica available. The generation compared is the one the patch answer carried.
* **LeaderWorkerSet** (``leaderworkerset.x-k8s.io/v1``, ``sigs.k8s.io/lws``): the custom
  resource refuses strategic-merge patches (415), so a restart is a JSON merge patch of the
  annotation into ``workerTemplate`` and, when present, ``leaderTemplate`` (a merge patch that
  named an absent ``leaderTemplate`` would create one without a spec). Its status has no
  ``kubectl rollout status`` rule; this module's rule: ``status.observedGeneration`` (when the
  LWS version writes it) caught up, condition ``UpdateInProgress`` not True,
  ``updatedReplicas`` and ``readyReplicas`` at ``spec.replicas``, and, because older LWS
  versions write neither ``observedGeneration`` nor a prompt ``updatedReplicas``, every pod of
  the set (label ``leaderworkerset.sigs.k8s.io/name``) ready, ``replicas x size`` of them, and
  none of the pods that existed before the patch left.
* **Order**: prefill owners first; decode owners only once every prefill owner of their
  namespace is ready again, because a prefill restart can leave decode engines with stale
  NIXL agent state (vLLM #49238; llm-d #2187 documents the segfault); the rest last.
* **EPP**: an llm-d scheduler's prefix index may keep routing by a restarted engine's blocks
  when KV event replay is off, the default (llm-d-router #2853): said, not fixed.
* A PATCH that timed out or got a 5xx is never re-sent blindly: the object is read again and
  the patch rebuilt from what it holds; nothing is sent when it already holds the change.
* A dev-mode patch carries the resourceVersion it was built from, so two runs at once cannot
  both add the variable: the second gets 409 ``Conflict``, reads the owner again, finds the
  change made and reports ``unchanged`` (it sends nothing and waits for that rollout).
"""

from __future__ import annotations

import base64
import binascii
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .devmode import (
    DEV_MODE_ENV,
    DevModeReading,
    Manager,
    blocking,
    describe_replacements,
    dev_mode_patch,
    managing_controllers,
    owner_templates,
    read_template_dev_mode,
    read_template_dev_modes,
)
from .kube import Kube, KubeApiError, KubeConnectionError, KubeError, resource_path
from .permissions import from_forbidden
from .pods import Owner
from .pool import Cancel

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "DevModeResult",
    "LWS_GROUP_VERSION",
    "POLL_S",
    "RESTARTED_AT",
    "RestartResult",
    "RolloutState",
    "deployment_restart_patch",
    "deployment_rollout_state",
    "detect_schedulers",
    "lws_restart_patch",
    "lws_rollout_state",
    "pod_problems",
    "dev_mode_changes",
    "pod_dev_modes",
    "read_dev_mode",
    "restart_owner",
    "restart_owners",
    "restart_timestamp",
    "role_phases",
    "set_dev_mode",
    "wait_rollout",
]

#: ``--timeout`` default of ``restart`` and ``devmode --enable/--disable``, seconds.
DEFAULT_TIMEOUT_S = 300.0
#: Interval between two status reads while waiting, seconds.
POLL_S = 0.5
#: Pod template annotation written by ``kubectl rollout restart``.
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
LWS_GROUP_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
#: The message of an owner a cancelled run did not act on.
NOT_STARTED = "not restarted: the run was interrupted before its patch was sent"
#: ``fieldManager`` of this tool's patches (kubectl uses ``kubectl-rollout``).
FIELD_MANAGER = "kubectl-kvreset"
#: Images of the llm-d scheduler (EPP) of every era (llm-d-inference-scheduler, llm-d-router,
#: gateway-api-inference-extension's ``epp``).
_SCHEDULER_IMAGE = re.compile(r"(inference-scheduler|llm-d-router|/epp[:@]|/epp$|inference-extension/epp)", re.I)

_RESOURCES: dict[str, tuple[str, str]] = {
    "Deployment": ("apps/v1", "deployments"),
    "LeaderWorkerSet": (LWS_GROUP_VERSION, "leaderworkersets"),
}

Progress = Callable[[str], None]
Triple = tuple[str, Owner, "str | None"]


# --------------------------------------------------------------------------------------------
# Pure status readers
# --------------------------------------------------------------------------------------------


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


def _int(value: Any) -> int:
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
    want_gen = generation if generation is not None else _int(meta.get("generation"))
    if _int(status.get("observedGeneration")) < want_gen:
        return RolloutState(False, "waiting for deployment spec update to be observed")
    progressing = _condition(status, "Progressing")
    if progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded":
        return RolloutState(False, f'deployment "{name}" exceeded its progress deadline', failed=True)
    replicas = _int(spec.get("replicas", 1)) if "replicas" in spec else None
    updated = _int(status.get("updatedReplicas"))
    total = _int(status.get("replicas"))
    available = _int(status.get("availableReplicas"))
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
    """Whether a LeaderWorkerSet's rollout is complete, by the rule in the module docstring.

    ``pods`` are the pods labelled ``leaderworkerset.sigs.k8s.io/name=NAME`` (None skips the
    pod checks); ``old_uids`` the UIDs of its pods before the patch; ``generation`` the
    generation the patch answer carried.
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    replicas = _int(spec.get("replicas", 1)) if "replicas" in spec else 1
    size = _int((spec.get("leaderWorkerTemplate") or {}).get("size", 1)) or 1
    want_gen = generation if generation is not None else _int(meta.get("generation"))
    if "observedGeneration" in status and _int(status.get("observedGeneration")) < want_gen:
        return RolloutState(False, "waiting for the LeaderWorkerSet update to be observed")
    updating = _condition(status, "UpdateInProgress")
    if updating is not None and updating.get("status") == "True":
        return RolloutState(False, f"rolling update in progress: {updating.get('message') or 'groups are being replaced'}")
    updated = _int(status.get("updatedReplicas"))
    ready = _int(status.get("readyReplicas"))
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


# --------------------------------------------------------------------------------------------
# Pure patch builders and ordering
# --------------------------------------------------------------------------------------------


def restart_timestamp(now: datetime | None = None) -> str:
    """The ``restartedAt`` value: local time with its UTC offset, RFC 3339, seconds
    (kubectl ``time.Now().Format(time.RFC3339)``), e.g. ``2026-09-01T10:00:00+02:00``."""
    when = now or datetime.now()
    if when.tzinfo is None:
        when = when.astimezone()
    return when.isoformat(timespec="seconds")


def deployment_restart_patch(timestamp: str) -> dict[str, Any]:
    """Strategic-merge patch body that sets the restart annotation on ``spec.template``."""
    return {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: timestamp}}}}}


def lws_restart_patch(obj: Mapping[str, Any], timestamp: str) -> dict[str, Any]:
    """JSON merge patch body (RFC 7386) that sets the restart annotation on the worker template
    and, only when the LeaderWorkerSet has one, the leader template."""
    lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
    stamp = {"metadata": {"annotations": {RESTARTED_AT: timestamp}}}
    body: dict[str, Any] = {"workerTemplate": stamp}
    if isinstance(lwt.get("leaderTemplate"), Mapping):
        body["leaderTemplate"] = stamp
    return {"spec": {"leaderWorkerTemplate": body}}


def _restart_stamped(obj: Mapping[str, Any], timestamp: str) -> bool:
    return all(((ref.template.get("metadata") or {}).get("annotations") or {}).get(RESTARTED_AT) == timestamp
               for ref in owner_templates(obj)) and bool(owner_templates(obj))


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


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class DevModeResult:
    """The dev-mode state of one owner, after ``set_dev_mode`` or as read by ``read_dev_mode``.

    ``result``: ``enabled``, ``disabled``, ``unchanged`` (the templates already held what was
    asked: nothing sent), ``refused`` (managed by a controller, paused, unsupported kind),
    ``failed``, ``timeout``, ``skipped``, ``interrupted`` (the run was cancelled: before the
    patch nothing was sent; after it, ``requested`` is True and the rollout was not waited for);
    for a status read: ``read`` or ``failed``.
    ``state``: ``on``, ``off``, ``invalid``, ``unknown``, ``mixed`` (templates differ) or
    ``none`` (no vLLM container). ``readings`` has one entry per vLLM container of each template.
    """

    namespace: str
    owner: Owner
    role: str | None
    action: str
    result: str
    readings: tuple[DevModeReading, ...] = ()
    managers: tuple[Manager, ...] = ()
    message: str = ""
    seconds: float = 0.0
    requested: bool = False

    @property
    def ok(self) -> bool:
        """True unless the result is ``failed``, ``timeout``, ``refused`` or ``skipped``."""
        return self.result in ("enabled", "disabled", "unchanged", "read")

    @property
    def state(self) -> str:
        """The combined state of the templates (see the class docstring)."""
        states = {r.state for r in self.readings if r.state != "none"}
        if not states:
            return "none" if self.readings else "unknown"
        return states.pop() if len(states) == 1 else "mixed"

    def _key(self, reading: DevModeReading) -> str:
        # the template label; ``label/container`` when the template runs several vLLM containers
        several = sum(1 for r in self.readings if r.template == reading.template) > 1
        return f"{reading.template}/{reading.container}" if several else reading.template

    def row(self) -> dict[str, Any]:
        """The ``DevMode`` row: namespace, owner, role, action, result, dev_mode, value, source,
        templates (label, or ``label/container`` when a template runs several vLLM
        containers -> description), managed_by, seconds, message."""
        values = {r.value for r in self.readings if r.container is not None}
        sources = {r.source for r in self.readings if r.container is not None and r.source}
        return {
            "namespace": self.namespace, "owner": self.owner.ref(), "role": self.role, "action": self.action,
            "result": self.result, "dev_mode": self.state,
            "value": values.pop() if len(values) == 1 else None,
            "source": sources.pop() if len(sources) == 1 else (sorted(sources) or None),
            "accepted": all(r.accepted is not False for r in self.readings),
            "templates": {self._key(r): r.describe() for r in self.readings},
            "containers": {self._key(r): r.container for r in self.readings},
            "managed_by": [m.describe() for m in self.managers],
            "seconds": round(self.seconds, 1), "message": self.message,
        }


# --------------------------------------------------------------------------------------------
# API helpers
# --------------------------------------------------------------------------------------------


class _Refused(Exception):
    """The owner cannot be acted on safely; the message says why."""


def _resource(owner: Owner) -> tuple[str, str]:
    res = _RESOURCES.get(owner.kind)
    if res is None:
        raise _Refused(
            f"{owner.ref()}: a {owner.kind} is not restarted or patched by this tool (only Deployments and "
            "LeaderWorkerSets): act on the controller that owns it"
        )
    return res


def _get(kube: Kube, namespace: str, owner: Owner) -> dict[str, Any]:
    gv, plural = _resource(owner)
    obj: dict[str, Any] = kube.get_object(gv, plural, namespace, owner.name)
    obj.setdefault("kind", owner.kind)
    return obj


def _object_path(namespace: str, owner: Owner) -> str:
    gv, plural = _resource(owner)
    from urllib.parse import quote

    return resource_path(gv, plural, namespace) + "/" + quote(owner.name, safe="")


def _owner_pods(kube: Kube, namespace: str, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods of a Deployment (its ``matchLabels``) or LeaderWorkerSet (its name label)."""
    selector = _selector(obj)
    if selector is None:
        return []
    pods: list[dict[str, Any]] = kube.list_items("v1", "pods", namespace, label_selector=selector)
    return pods


def _selector(obj: Mapping[str, Any]) -> str | None:
    if obj.get("kind") == "LeaderWorkerSet":
        return f"{LWS_NAME_LABEL}={(obj.get('metadata') or {}).get('name', '')}"
    match = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(match.items())) or None


PatchBuilder = Callable[[Mapping[str, Any]], "tuple[Any, str] | None"]


#: How many times a PATCH refused with 409 ``Conflict`` (the object changed since it was read:
#: another writer came first) is rebuilt from a fresh read and sent again.
CONFLICT_RETRIES = 5


def _patch(kube: Kube, namespace: str, owner: Owner, obj: Mapping[str, Any],
           build: PatchBuilder) -> tuple[dict[str, Any] | None, bool]:
    """Send the patch ``build(obj)`` returns (body, content type); ``(None, False)`` when it
    returns None.

    On a 409 ``Conflict`` (a resourceVersion precondition failed: another writer changed the
    object since it was read) the object is read again and the patch rebuilt from it, up to
    :data:`CONFLICT_RETRIES` times: nothing is sent when it now holds the change. On a 5xx, a
    422 (a ``test`` failed) or no answer in time, the same re-read happens once (the patch may
    have been applied: it is never re-sent blindly).

    Returns ``(the object as it stands after, applied)``: ``applied`` is False when, after a
    conflict, a re-read found the change already made by another writer and nothing more was
    sent (after a lost answer the change found counts as this call's own).

    Raises:
        KubeApiError: a 4xx refusal (403, 404, 415...), or the attempt after a re-read failed.
        KubeConnectionError: the re-read failed too (the message says the state is unknown).
    """
    planned = build(obj)
    if planned is None:
        return None, False
    path = _object_path(namespace, owner)
    query = [("fieldManager", FIELD_MANAGER)]
    first: KubeError | None = None
    conflicts = 0
    while True:
        body, ctype = planned
        try:
            answer: dict[str, Any] = kube.send_json("PATCH", path, body, content_type=ctype, query=query)
            return answer, True
        except KubeApiError as exc:
            if exc.status == 409 and conflicts < CONFLICT_RETRIES:
                conflicts += 1
            elif first is None and (exc.status >= 500 or exc.status in (409, 422)):
                first = exc
            elif first is not None:
                raise KubeApiError(exc.status, exc.reason,
                                   f"PATCH {owner.ref()} failed twice: first {first}; after re-reading it, {exc}") from exc
            else:
                raise
        except KubeConnectionError as exc:
            if first is not None:
                raise KubeApiError(500, "Error",
                                   f"PATCH {owner.ref()} failed twice: first {first}; after re-reading it, {exc}") from exc
            first = exc
        try:
            current = _get(kube, namespace, owner)
        except KubeError as exc:
            cause = first if first is not None else f"{conflicts} conflict(s)"
            raise KubeConnectionError(
                f"PATCH {owner.ref()} got no clear answer ({cause}) and reading it again failed ({exc}): "
                "whether it changed is unknown; nothing was re-sent"
            ) from exc
        planned = build(current)
        if planned is None:
            # after an unclear answer the change found is most likely this run's own patch
            return current, first is not None


def wait_rollout(kube: Kube, namespace: str, owner: Owner, *, generation: int | None, old_uids: Iterable[str] = (),
                 timeout_s: float, progress: Progress | None = None, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 stop: Callable[[], bool] = lambda: False) -> RolloutState:
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
            obj = _get(kube, namespace, owner)
            if owner.kind == "LeaderWorkerSet":
                state = lws_rollout_state(obj, _owner_pods(kube, namespace, obj), generation=generation, old_uids=old)
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
        problems = pod_problems(_owner_pods(kube, namespace, obj))
    except KubeError:
        problems = []
    if problems:
        state = RolloutState(False, state.message + "; " + "; ".join(problems), state.failed, state.timed_out)
    return state


def _pod_uids(kube: Kube, namespace: str, obj: Mapping[str, Any]) -> frozenset[str]:
    if obj.get("kind") != "LeaderWorkerSet":
        return frozenset()
    return frozenset(str((p.get("metadata") or {}).get("uid")) for p in _owner_pods(kube, namespace, obj))


def _paused(obj: Mapping[str, Any], owner: Owner) -> str | None:
    if owner.kind == "Deployment" and (obj.get("spec") or {}).get("paused"):
        return (f"can't restart paused deployment (run 'kubectl rollout resume {owner.ref()}' first): "
                "its pods would not be replaced")
    return None


def refusal_text(exc: KubeError) -> str:
    """An API error for a row: a 403 also names the permission and the Role rule that allows it."""
    text = str(exc)
    if isinstance(exc, KubeApiError) and exc.status == 403:
        perm = from_forbidden(exc.message or text)
        if perm is not None:
            text += f"; {perm.refused('for this step')}"
    return text


def _generation(obj: Mapping[str, Any]) -> int | None:
    gen = (obj.get("metadata") or {}).get("generation")
    return _int(gen) if gen is not None else None


# --------------------------------------------------------------------------------------------
# Restart
# --------------------------------------------------------------------------------------------


def restart_owner(kube: Kube, namespace: str, owner: Owner, role: str | None = None, *, timeout_s: float,
                  progress: Progress | None = None, clock: Callable[[], float] = time.monotonic,
                  stop: Callable[[], bool] = lambda: False) -> RestartResult:
    """Restart one Deployment or LeaderWorkerSet and wait for its rollout (see the module
    docstring for the patches and completion rules). Once ``stop()`` is True (a cancelled run)
    no patch is sent and a wait under way ends: the result is ``interrupted``.

    Refused (never guessed at): another kind (a ReplicaSet of the dual-pod controller, a bare
    Pod, a StatefulSet), a paused Deployment, an owner whose template a controller rewrites
    (a controller ownerReference: KServe, DisaggregatedSet). API failures become ``failed``
    rows; nothing raises except KeyboardInterrupt.
    """
    start = clock()
    try:
        obj = _get(kube, namespace, owner)
        paused = _paused(obj, owner)
        if paused:
            raise _Refused(paused)
        controllers = [m for m in managing_controllers(obj) if m.via.endswith("ownerReference")]
        if controllers:
            raise _Refused(f"managed by {', '.join(m.describe() for m in controllers)}: it would revert a template "
                           "patch; restart it through that controller")
        old = _pod_uids(kube, namespace, obj)
        stamp = restart_timestamp()
        if _restart_stamped(obj, stamp):  # kubectl: "already triggered within the past second"
            time.sleep(1.0)
            stamp = restart_timestamp()

        def build(cur: Mapping[str, Any]) -> tuple[Any, str] | None:
            if _restart_stamped(cur, stamp):
                return None
            if owner.kind == "LeaderWorkerSet":
                return lws_restart_patch(cur, stamp), "application/merge-patch+json"
            return deployment_restart_patch(stamp), "application/strategic-merge-patch+json"

        if stop():
            return RestartResult(namespace, owner, role, "interrupted", NOT_STARTED, clock() - start)
        after = _patch(kube, namespace, owner, obj, build)[0] or obj
        if progress is not None:
            progress(f"{owner.ref()}: restart requested ({RESTARTED_AT}={stamp})")
        state = wait_rollout(kube, namespace, owner, generation=_generation(after), old_uids=old,
                             timeout_s=timeout_s, progress=progress, stop=stop)
    except _Refused as exc:
        return RestartResult(namespace, owner, role, "refused", str(exc), clock() - start)
    except KubeError as exc:
        return RestartResult(namespace, owner, role, "failed", refusal_text(exc), clock() - start)
    seconds = clock() - start
    if state.done:
        return RestartResult(namespace, owner, role, "restarted",
                             "rolled out: every pod was replaced, so its in-pod KV caches (GPU, and CPU offload where configured) start empty", seconds)
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
    return [RestartResult(r.namespace, r.owner, r.role, r.result, r.message, r.seconds, r.notes + notes.get(r.namespace, ()))
            if r.ok else r for r in results]


# --------------------------------------------------------------------------------------------
# Dev mode
# --------------------------------------------------------------------------------------------


def source_lookup(kube: Kube, namespace: str) -> Callable[[str, str], Mapping[str, str] | None]:
    """A :data:`kubectl_kvreset.devmode.SourceLookup` over the API: ConfigMap ``data`` (and
    ``binaryData`` skipped), Secret ``data`` base64-decoded and ``stringData``; None on 404,
    ``PermissionError`` on 403. Answers are cached per (kind, name)."""
    cache: dict[tuple[str, str], Mapping[str, str] | None] = {}

    def lookup(kind: str, name: str) -> Mapping[str, str] | None:
        key = (kind, name)
        if key in cache:
            return cache[key]
        plural = "configmaps" if kind == "ConfigMap" else "secrets"
        try:
            obj = kube.get_object("v1", plural, namespace, name)
        except KubeApiError as exc:
            if exc.status == 404:
                cache[key] = None
                return None
            if exc.status in (401, 403):
                raise PermissionError(str(exc)) from exc
            raise
        data: dict[str, str] = {}
        if kind == "Secret":
            for k, v in (obj.get("data") or {}).items():
                try:
                    data[k] = base64.b64decode(str(v)).decode("utf-8", "replace")
                except (binascii.Error, ValueError):
                    continue
            data.update({k: str(v) for k, v in (obj.get("stringData") or {}).items()})
        else:
            data = {k: str(v) for k, v in (obj.get("data") or {}).items()}
        cache[key] = data
        return data

    return lookup


def _readings(kube: Kube, namespace: str, obj: Mapping[str, Any],
              lookup: Callable[[str, str], Mapping[str, str] | None] | None = None) -> tuple[DevModeReading, ...]:
    lookup = lookup or source_lookup(kube, namespace)

    def safe(kind: str, name: str) -> Mapping[str, str] | None:
        try:
            return lookup(kind, name)
        except KubeError as exc:
            raise PermissionError(str(exc)) from exc

    return tuple(r for ref in owner_templates(obj) for r in read_template_dev_modes(ref, safe))


def read_dev_mode(kube: Kube, namespace: str, owner: Owner, role: str | None = None,
                  pod: Mapping[str, Any] | None = None) -> DevModeResult:
    """Read the dev mode of an owner's templates (``result`` ``read``), ConfigMaps and Secrets
    included where readable. For a kind other than Deployment/LeaderWorkerSet, ``pod`` (one of
    its pods, as the API returned it) is read instead. API failures give ``failed``."""
    try:
        if owner.kind not in _RESOURCES:
            if pod is None:
                return DevModeResult(namespace, owner, role, "status", "failed", message=f"cannot read a {owner.kind}")
            tmpl = {"kind": "Deployment", "spec": {"template": {"metadata": pod.get("metadata") or {},
                                                                "spec": pod.get("spec") or {}}}}
            return DevModeResult(namespace, owner, role, "status", "read", _readings(kube, namespace, tmpl),
                                 message=f"read from pod {(pod.get('metadata') or {}).get('name', '')}")
        obj = _get(kube, namespace, owner)
        readings = _readings(kube, namespace, obj)
        managers = tuple(managing_controllers(obj))
    except KubeError as exc:
        return DevModeResult(namespace, owner, role, "status", "failed", message=str(exc))
    message = ""
    if any(r.accepted is False for r in readings):
        message = (f"{DEV_MODE_ENV} must be an integer: vLLM crashes at start with this value; "
                   f"fix it with: kubectl kvreset devmode --enable {owner.ref()} -n {namespace}")
    return DevModeResult(namespace, owner, role, "status", "read", readings, managers, message)


def dev_mode_changes(kube: Kube, namespace: str, owner: Owner, *, enable: bool,
                     lookup: Callable[[str, str], Mapping[str, str] | None] | None = None) -> list[str]:
    """The sentences of :func:`kubectl_kvreset.devmode.describe_replacements` for an owner
    (Deployment or LeaderWorkerSet) as it is now: which ``valueFrom`` entry ``devmode``
    replaces or removes and which ``envFrom`` value a literal overrides. Shown in the plan and
    the prompt before the patch; empty for other kinds or when the owner cannot be read (the
    patch then reports that failure itself). ``lookup``: a :func:`source_lookup` of
    ``namespace`` shared with other reads of the run (what it already read is not read again)."""
    if owner.kind not in _RESOURCES:
        return []
    try:
        obj = _get(kube, namespace, owner)
        return describe_replacements(obj, _readings(kube, namespace, obj, lookup), enable=enable)
    except KubeError:
        return []


def pod_dev_modes(kube: Kube, pods: Sequence[Mapping[str, Any]],
                  lookups: dict[str, Callable[[str, str], Mapping[str, str] | None]] | None = None,
                  containers: Sequence[str | None] | None = None) -> list[DevModeReading]:
    """``VLLM_SERVER_DEV_MODE`` of each pod's vLLM container (the pods as the API returned
    them; ``containers``: the container of each, by name, default the pod's first vLLM
    container), resolved exactly as :func:`read_dev_mode` resolves an owner's templates:
    literal ``env``, ``valueFrom`` ConfigMap/Secret keys and ``envFrom`` sources (read once per
    namespace and name), so ``detect`` and ``devmode`` report the same value for the same pod.
    ``lookups``: namespace -> :func:`source_lookup`, shared with the run's other reads (filled
    in here for a namespace it lacks). A source that cannot be read gives a reading whose
    ``detail`` says why; never raises."""
    lookups = {} if lookups is None else lookups
    names = list(containers) if containers is not None else [None] * len(pods)
    out: list[DevModeReading] = []
    for pod, container in zip(pods, names, strict=True):
        ns = str((pod.get("metadata") or {}).get("namespace", ""))
        if ns not in lookups:
            lookups[ns] = source_lookup(kube, ns)
        lookup = lookups[ns]

        def safe(kind: str, name: str, lookup: Callable[[str, str], Mapping[str, str] | None] = lookup
                 ) -> Mapping[str, str] | None:
            try:
                return lookup(kind, name)
            except KubeError as exc:
                raise PermissionError(str(exc)) from exc

        tmpl = {"kind": "Deployment", "spec": {"template": {"metadata": pod.get("metadata") or {},
                                                            "spec": pod.get("spec") or {}}}}
        out.append(read_template_dev_mode(owner_templates(tmpl)[0], safe, container))
    return out


def set_dev_mode(kube: Kube, namespace: str, owner: Owner, *, enable: bool, ignore_owner: bool = False,
                 timeout_s: float, progress: Callable[[str], None] | None = None,
                 role: str | None = None, stop: Callable[[], bool] = lambda: False) -> DevModeResult:
    """Set ``VLLM_SERVER_DEV_MODE="1"`` (``enable``) or remove it in the vLLM container of every
    template of a Deployment or LeaderWorkerSet with one JSON patch
    (:func:`kubectl_kvreset.devmode.dev_mode_patch`), then wait for the rollout.

    Nothing is sent when the templates already hold what is asked (``unchanged``). Refused: a
    kind other than the two, a paused Deployment, and, unless ``ignore_owner``, an owner that a
    controller or GitOps tool would revert (:func:`kubectl_kvreset.devmode.managing_controllers`).
    The message says that the restart emptied the caches, that dev endpoints are
    unauthenticated, and how to turn dev mode off. Once ``stop()`` is True (a cancelled run) no
    patch is sent and a wait under way ends (``interrupted``). Never raises for API failures.
    """
    action = "enable" if enable else "disable"
    start = time.monotonic()
    managers: tuple[Manager, ...] = ()
    try:
        obj = _get(kube, namespace, owner)
        managers = tuple(managing_controllers(obj))
        reverting = blocking(managers)
        if reverting and not ignore_owner:
            raise _Refused(f"managed by {', '.join(m.describe() for m in reverting)}, which would revert the patch: "
                           "change the variable in that controller's source, or pass --ignore-owner to patch anyway")
        try:
            if not dev_mode_patch(obj, enable=enable):
                return DevModeResult(namespace, owner, role, action, "unchanged", _readings(kube, namespace, obj),
                                     managers, f"{DEV_MODE_ENV} is already {'set to 1' if enable else 'absent'}: "
                                     "nothing sent, no restart", time.monotonic() - start)
        except ValueError as exc:
            return DevModeResult(namespace, owner, role, action, "failed", (), managers, str(exc))
        paused = _paused(obj, owner)
        if paused:
            raise _Refused(paused.replace("can't restart", "won't patch"))
        replaced = describe_replacements(obj, _readings(kube, namespace, obj), enable=enable)
        old = _pod_uids(kube, namespace, obj)

        def build(cur: Mapping[str, Any]) -> tuple[Any, str] | None:
            ops = dev_mode_patch(cur, enable=enable)
            return (ops, "application/json-patch+json") if ops else None

        if stop():
            return DevModeResult(namespace, owner, role, action, "interrupted", (), managers,
                                 NOT_STARTED.replace("restarted", "patched"), time.monotonic() - start)
        patched, applied = _patch(kube, namespace, owner, obj, build)
        after = patched or obj
        if progress is not None:
            progress(f"{owner.ref()}: {DEV_MODE_ENV} {'set to 1' if enable else 'removed'}"
                     f"{'' if applied else ' meanwhile by another writer'}; waiting for the rollout")
        state = wait_rollout(kube, namespace, owner, generation=_generation(after), old_uids=old,
                             timeout_s=timeout_s, progress=progress, stop=stop)
        readings = _readings(kube, namespace, after)
    except _Refused as exc:
        return DevModeResult(namespace, owner, role, action, "refused", (), managers, str(exc), time.monotonic() - start)
    except KubeError as exc:
        return DevModeResult(namespace, owner, role, action, "failed", (), managers, refusal_text(exc),
                             time.monotonic() - start)
    seconds = time.monotonic() - start
    if state.interrupted:
        return DevModeResult(namespace, owner, role, action, "interrupted", readings, managers,
                             f"{DEV_MODE_ENV} {'set to 1' if enable else 'removed'}, so its pods are being replaced, "
                             f"but the rollout was {state.message}; check kubectl rollout status {owner.ref()} "
                             f"-n {namespace}", seconds, requested=True)
    if not state.done:
        return DevModeResult(namespace, owner, role, action, "timeout" if state.timed_out else "failed", readings,
                             managers, state.message, seconds)
    if enable:
        message = (f"{DEV_MODE_ENV}=1 set and rolled out: the pods were replaced, so their KV caches are empty. "
                   "The dev endpoints (/reset_prefix_cache, /sleep, /collective_rpc ...) answer anyone who reaches "
                   "the pod's port, without authentication. Turn dev mode off with: kubectl kvreset devmode "
                   f"--disable {owner.ref()} -n {namespace}")
    else:
        message = (f"{DEV_MODE_ENV} removed and rolled out: the pods were replaced, so their KV caches are empty")
        still = [r for r in readings if r.enabled]
        if still:
            message += f"; still on through {', '.join(sorted({str(r.source) for r in still}))}: edit that source"
    if not applied:
        # another writer's patch came first (a 409 and a re-read showed the change made): this
        # run sent nothing and waited for that rollout
        return DevModeResult(namespace, owner, role, action, "unchanged", readings, managers,
                             f"{DEV_MODE_ENV} was {'set to 1' if enable else 'removed'} meanwhile by another writer "
                             "(its patch came first): nothing sent by this run; waited for its rollout", seconds)
    if replaced:
        message = "; ".join(replaced) + ". " + message
    return DevModeResult(namespace, owner, role, action, "enabled" if enable else "disabled", readings, managers,
                         message, seconds)

