"""The owners this tool restarts and patches, Deployments and LeaderWorkerSets, over the API:
read one, list its pods, send a patch that is never re-sent blindly (the rules are in
:mod:`kubectl_kvreset.rollout`), and the text of a refusal."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from ..kube import Kube, KubeApiError, KubeConnectionError, KubeError, resource_path
from ..permissions import from_forbidden
from ..pods import Owner
from .status import int_field

__all__ = [
    "CONFLICT_RETRIES",
    "FIELD_MANAGER",
    "LWS_GROUP_VERSION",
    "LWS_NAME_LABEL",
    "OWNER_RESOURCES",
    "PatchBuilder",
    "Refused",
    "get_owner",
    "object_generation",
    "owner_pods",
    "paused_refusal",
    "pod_uids",
    "refusal_text",
    "send_patch",
]

LWS_GROUP_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
#: ``fieldManager`` of this tool's patches (kubectl uses ``kubectl-rollout``).
FIELD_MANAGER = "kubectl-kvreset"

#: The kinds acted on: kind -> (group/version, plural).
OWNER_RESOURCES: dict[str, tuple[str, str]] = {
    "Deployment": ("apps/v1", "deployments"),
    "LeaderWorkerSet": (LWS_GROUP_VERSION, "leaderworkersets"),
}


class Refused(Exception):
    """The owner cannot be acted on safely; the message says why."""


def _resource(owner: Owner) -> tuple[str, str]:
    res = OWNER_RESOURCES.get(owner.kind)
    if res is None:
        raise Refused(
            f"{owner.ref()}: a {owner.kind} is not restarted or patched by this tool (only Deployments and "
            "LeaderWorkerSets): act on the controller that owns it"
        )
    return res


def get_owner(kube: Kube, namespace: str, owner: Owner) -> dict[str, Any]:
    """GET the owner (``kind`` filled in when the answer lacks it).

    Raises:
        Refused: a kind other than Deployment and LeaderWorkerSet.
        KubeError: the read failed.
    """
    gv, plural = _resource(owner)
    obj: dict[str, Any] = kube.get_object(gv, plural, namespace, owner.name)
    obj.setdefault("kind", owner.kind)
    return obj


def _object_path(namespace: str, owner: Owner) -> str:
    gv, plural = _resource(owner)
    return resource_path(gv, plural, namespace) + "/" + quote(owner.name, safe="")


def owner_pods(kube: Kube, namespace: str, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
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


def send_patch(kube: Kube, namespace: str, owner: Owner, obj: Mapping[str, Any],
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
                                   f"PATCH {owner.ref()} failed twice: first {first}; "
                                   f"after re-reading it, {exc}") from exc
            else:
                raise
        except KubeConnectionError as exc:
            if first is not None:
                raise KubeApiError(500, "Error",
                                   f"PATCH {owner.ref()} failed twice: first {first}; "
                                   f"after re-reading it, {exc}") from exc
            first = exc
        try:
            current = get_owner(kube, namespace, owner)
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


def pod_uids(kube: Kube, namespace: str, obj: Mapping[str, Any]) -> frozenset[str]:
    """The UIDs of a LeaderWorkerSet's pods (the ones its rollout must replace); empty for a
    Deployment, whose status alone says when it is rolled out."""
    if obj.get("kind") != "LeaderWorkerSet":
        return frozenset()
    return frozenset(str((p.get("metadata") or {}).get("uid")) for p in owner_pods(kube, namespace, obj))


def paused_refusal(obj: Mapping[str, Any], owner: Owner) -> str | None:
    """Why a paused Deployment is not restarted (kubectl's words), None when it is not paused."""
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


def object_generation(obj: Mapping[str, Any]) -> int | None:
    """``metadata.generation`` of an API object, None when absent."""
    gen = (obj.get("metadata") or {}).get("generation")
    return int_field(gen) if gen is not None else None
