"""Whether a pod's vLLM container runs at all, from the pod's ``status`` alone (pure).

A pod that is Pending (not scheduled, containers still being created) or whose vLLM container
waits in ``CrashLoopBackOff`` has no server to call: sending a request through a transport then
only hides the real state behind the transport's error (``400 BadRequest: unable to upgrade
connection: container not found`` from the exec fallback). :func:`not_running` says which state
the pod is in and why, as ``kubectl describe pod`` shows it:

* not scheduled: the ``PodScheduled`` condition ``False`` with the scheduler's reason
  (``Unschedulable``) and message (``0/3 nodes are available: 3 Insufficient
  nvidia.com/gpu.``), kube-scheduler ``pkg/scheduler/schedule_one.go`` (``FitError``);
* a container ``state.waiting`` ``reason`` and ``message`` (``ContainerCreating``,
  ``ImagePullBackOff``, ``CreateContainerConfigError``, ``CrashLoopBackOff``) and, for a crash
  loop, ``lastState.terminated`` (exit code, reason) and ``restartCount``, as the kubelet
  reports them (``k8s.io/api/core/v1`` ``ContainerStatus``);
* phase ``Succeeded`` or ``Failed`` (the pod's containers have ended).

A Running pod whose vLLM container runs but is not Ready is *not* reported here: its server
may be loading the model, and the callers keep their bounded wait for Ready.

:func:`metrics_500_hint` reads the same pod for the known cause of a ``/metrics`` 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .pods import DEV_MODE_ENV, DevMode

__all__ = ["MULTIPROC_ENV", "NotRunning", "ResolvedDevMode", "metrics_500_hint", "not_running"]


class ResolvedDevMode(Protocol):
    """``VLLM_SERVER_DEV_MODE`` as the kubelet resolves it (what
    :class:`kubectl_kvreset.devmode.DevModeReading` holds): the ``value`` (None: unset or
    unread), its ``source`` (``env``, ``configMapKeyRef ConfigMap/NAME``, ``secretKeyRef
    Secret/NAME``, ``envFrom ConfigMap/NAME``, ...; None when unset or when an ``envFrom``
    source that may hold it could not be read), the ConfigMap/Secret ``key``, whether vLLM
    ``accepted`` it (``int()`` parses it) and why it is unknown (``detail``)."""

    @property
    def value(self) -> str | None: ...

    @property
    def source(self) -> str | None: ...

    @property
    def key(self) -> str | None: ...

    @property
    def accepted(self) -> bool | None: ...

    @property
    def detail(self) -> str | None: ...


@dataclass(frozen=True)
class NotRunning:
    """Why a pod has no vLLM server to call: ``state`` is one word kubectl would show
    (``Unschedulable``, ``Pending``, ``ContainerCreating``, ``CrashLoopBackOff``, ``Failed``,
    ...), ``cause`` the explanation from the pod's status (never empty)."""

    state: str
    cause: str

    def describe(self) -> str:
        """``pod not running: CrashLoopBackOff: last exit code 1 (Error) ...`` for a row."""
        return f"pod not running: {self.state}: {self.cause}"


def _status_of(statuses: Any, container: str) -> Mapping[str, Any] | None:
    for st in statuses or []:
        if isinstance(st, Mapping) and st.get("name") == container:
            return st
    return None


def _referenced(resolved: ResolvedDevMode) -> str:
    """``ConfigMap flags key dev`` / ``Secret s key dev`` / ``envFrom ConfigMap vllm-env key
    VLLM_SERVER_DEV_MODE``: where a referenced value comes from, for a row."""
    source = resolved.source or ""
    how, _, obj = source.partition(" ")
    kind, _, name = obj.partition("/")
    where = f"{kind} {name}" if kind else "an envFrom source"
    if how == "envFrom":
        where = f"envFrom {where}"
    return where + (f" key {resolved.key}" if resolved.key else "")


def _referenced_cause(resolved: ResolvedDevMode, fix: str) -> str | None:
    """Why a crash loop comes from a ``valueFrom``/``envFrom`` value of the variable (vLLM
    refuses it), or that the value could not be read; None when the value is fine or unset."""
    if resolved.source == "env" or resolved.source == "fieldRef":
        return None
    if resolved.value is not None:
        if resolved.accepted is not False:
            return None
        return (f'{DEV_MODE_ENV}="{resolved.value}" from {_referenced(resolved)} is not an integer, so vLLM exits '
                f"at start-up (vllm/envs.py reads it with int()){fix}")
    if resolved.detail is None:
        return None
    return f"{DEV_MODE_ENV}: value from {_referenced(resolved)} unread: {resolved.detail}"


def _crash_cause(st: Mapping[str, Any], dev_mode: DevMode | None, owner_ref: str | None,
                 namespace: str, resolved: ResolvedDevMode | None = None) -> str:
    parts: list[str] = []
    last = ((st.get("lastState") or {}).get("terminated") or {})
    if last:
        code = last.get("exitCode")
        reason = last.get("reason")
        parts.append(f"last exit code {code}" + (f" ({reason})" if reason else "") if code is not None
                     else f"last terminated: {reason or 'no exit code reported'}")
    restarts = st.get("restartCount")
    if restarts:
        parts.append(f"{restarts} restart{'s' if int(restarts) != 1 else ''}")
    fix = (f"; fix it with: kubectl kvreset devmode --enable {owner_ref} -n {namespace}" if owner_ref else "")
    if dev_mode is not None and dev_mode.source == "env" and dev_mode.accepted is False:
        parts.append(f'{DEV_MODE_ENV}="{dev_mode.value}" is not an integer, so vLLM exits at start-up '
                     f"(vllm/envs.py reads it with int()){fix}")
    elif resolved is not None and (dev_mode is None or dev_mode.source != "env"):
        referenced = _referenced_cause(resolved, fix)
        if referenced is not None:
            parts.append(referenced)
    return ", ".join(parts) or "the container keeps exiting"


def not_running(pod: Mapping[str, Any], container: str, *, dev_mode: DevMode | None = None,
                owner_ref: str | None = None, resolved: ResolvedDevMode | None = None) -> NotRunning | None:
    """The state of a pod (the object as the API returned it) whose vLLM ``container`` does not
    run, or None when it runs (Ready or not: a running server that is not Ready yet is waited
    for by the callers).

    ``dev_mode``: the container's ``VLLM_SERVER_DEV_MODE`` as the spec sets it; a literal vLLM
    refuses explains a crash loop, and the cause says so (with the ``devmode --enable`` command
    for ``owner_ref``, e.g. ``deployment/x``). ``resolved``: the same variable as the kubelet
    resolved it, for a value the spec takes through ``valueFrom`` (a ConfigMap or Secret key)
    or ``envFrom``: a value vLLM refuses is named with its ConfigMap/Secret and key, and a
    source that could not be read is said to be unread, with the reason (never guessed).
    vLLM 0.32.0 ``vllm/envs.py`` reads the variable as ``bool(int(os.getenv(...)))``: any
    text ``int()`` parses (``" 1"``, ``"+2"``, ``"0"``) starts the server, anything else
    (``"true"``, ``"yes"``, ``""``) raises at start-up. Never raises for an odd status
    (missing fields give ``Pending`` with the phase as the cause).
    """
    status = pod.get("status") or {}
    namespace = str((pod.get("metadata") or {}).get("namespace", ""))
    phase = str(status.get("phase") or "Pending")
    if phase in ("Succeeded", "Failed"):
        why = status.get("message") or status.get("reason") or "every container of the pod has ended"
        return NotRunning(phase, str(why))
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return NotRunning(str(cond.get("reason") or "Pending"),
                              str(cond.get("message") or "the pod is not scheduled to a node yet"))
    st = _status_of(status.get("containerStatuses"), container)
    state = (st or {}).get("state") or {}
    waiting = state.get("waiting")
    if isinstance(waiting, Mapping) and st is not None:
        reason = str(waiting.get("reason") or "Waiting")
        if reason == "CrashLoopBackOff" or (st.get("lastState") or {}).get("terminated"):
            return NotRunning(reason, _crash_cause(st, dev_mode, owner_ref, namespace, resolved))
        message = waiting.get("message")
        return NotRunning(reason, str(message) if message else
                          f"container {container} is not started yet (phase {phase})")
    terminated = state.get("terminated")
    if isinstance(terminated, Mapping) and st is not None:
        code = terminated.get("exitCode")
        return NotRunning("Terminated", f"container {container} exited"
                          + (f" with code {code}" if code is not None else "")
                          + (f" ({terminated['reason']})" if terminated.get("reason") else ""))
    if phase == "Pending":
        return NotRunning("Pending", f"container {container} is not started yet")
    return None


#: The variable prometheus_client's multiprocess mode reads (vLLM sets it to a temporary
#: directory under ``/tmp`` when several processes serve metrics and it is unset).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def metrics_500_hint(pod: Mapping[str, Any], container: str) -> str | None:
    """The hint for a ``GET /metrics`` that answers 500 on a pod whose vLLM ``container``
    mounts a volume on ``/tmp`` or sets ``PROMETHEUS_MULTIPROC_DIR``: vLLM's multiprocess
    metrics directory (by default under ``/tmp``) fails on a mounted, network-backed volume and
    ``/metrics`` answers 500 while inference works (vLLM issue #49983). None when the spec shows
    neither."""
    spec = pod.get("spec") or {}
    c = next((x for x in spec.get("containers") or [] if x.get("name") == container), None)
    if c is None:
        return None
    mounts = {str(m.get("mountPath", "")).rstrip("/") or "/": str(m.get("name", ""))
              for m in c.get("volumeMounts") or []}
    entry = next((e for e in reversed(c.get("env") or []) if e.get("name") == MULTIPROC_ENV), None)
    why: list[str] = []
    if "/tmp" in mounts:
        why.append(f"/tmp is the volume {mounts['/tmp']}")
    if entry is not None:
        value = entry.get("value")
        why.append(f"{MULTIPROC_ENV} is set" + (f" to {value}" if value else " (from a reference)"))
    if not why:
        return None
    return (f"hint: {' and '.join(why)}; vLLM's Prometheus multiprocess directory ({MULTIPROC_ENV}, by default "
            "under /tmp) fails on a mounted volume and /metrics then answers 500 (vLLM issue #49983): point "
            f"{MULTIPROC_ENV} at a local emptyDir (or leave /tmp unmounted)")
