"""The restart patches (pure): the ``restartedAt`` stamp ``kubectl rollout restart`` writes, the
strategic-merge body for a Deployment and the JSON merge body for a LeaderWorkerSet (why each
is in :mod:`kubectl_kvreset.rollout`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..devmode import owner_templates

__all__ = ["RESTARTED_AT", "deployment_restart_patch", "lws_restart_patch", "restart_stamped", "restart_timestamp"]

#: Pod template annotation written by ``kubectl rollout restart``.
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


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


def restart_stamped(obj: Mapping[str, Any], timestamp: str) -> bool:
    """Whether every pod template of the owner (it has at least one) already carries
    ``restartedAt=timestamp``."""
    return all(((ref.template.get("metadata") or {}).get("annotations") or {}).get(RESTARTED_AT) == timestamp
               for ref in owner_templates(obj)) and bool(owner_templates(obj))
