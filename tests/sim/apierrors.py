"""Errors of the simulated API server: ``Status`` objects as the real API server returns them
(k8s.io/apimachinery ``pkg/api/errors/errors.go``)."""

from __future__ import annotations

from typing import Any

from .resourcetypes import (
    Obj,
    ResourceType,
)


class ApiError(Exception):
    """An error answered as a ``Status`` object.

    ``code`` is the HTTP status, ``reason`` the StatusReason (``NotFound``, ``AlreadyExists``...),
    ``details`` the optional ``details`` dict (``name``, ``group``, ``kind``, ``causes``).
    """

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> Obj:
        """Return the ``Status`` object (apiVersion v1) for this error."""
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def _details(name: str, rtype: ResourceType | None) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name}
    if rtype is not None:
        if rtype.group:
            d["group"] = rtype.group
        d["kind"] = rtype.plural
    return d


def _qualified(rtype: ResourceType) -> str:
    return rtype.plural if not rtype.group else f"{rtype.plural}.{rtype.group}"


def not_found(rtype: ResourceType, name: str) -> ApiError:
    """404 ``NotFound``: message ``pods "x" not found`` (``deployments.apps "x" not found``)."""
    return ApiError(
        404, "NotFound", f'{_qualified(rtype)} "{name}" not found', _details(name, rtype)
    )


def already_exists(rtype: ResourceType, name: str) -> ApiError:
    """409 ``AlreadyExists``: message ``pods "x" already exists``."""
    return ApiError(
        409, "AlreadyExists", f'{_qualified(rtype)} "{name}" already exists', _details(name, rtype)
    )


def conflict(rtype: ResourceType, name: str) -> ApiError:
    """409 ``Conflict`` for a stale ``metadata.resourceVersion`` on update."""
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(rtype)} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        _details(name, rtype),
    )


def invalid(rtype: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 ``Invalid``; ``causes`` are ``(field, reason type, message)`` triples, e.g.
    ``("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")``.
    """
    text = ", ".join(f"{f}: {m}" for f, _r, m in causes)
    d = _details(name, rtype)
    d["kind"] = rtype.kind
    d["causes"] = [{"reason": r, "message": m, "field": f} for f, r, m in causes]
    return ApiError(422, "Invalid", f'{rtype.kind} "{name}" is invalid: {text}', d)


def bad_request(message: str) -> ApiError:
    """400 ``BadRequest``."""
    return ApiError(400, "BadRequest", message)


def unsupported_media_type(message: str) -> ApiError:
    """415 ``UnsupportedMediaType``."""
    return ApiError(415, "UnsupportedMediaType", message)


def method_not_allowed(message: str) -> ApiError:
    """405 ``MethodNotAllowed``."""
    return ApiError(405, "MethodNotAllowed", message)


def forbidden(
    user: str, verb: str, resource: str, group: str, namespace: str | None, name: str = ""
) -> ApiError:
    """403 ``Forbidden`` worded as the RBAC authorizer words it, e.g.
    ``pods "x" is forbidden: User "u" cannot create resource "pods/proxy" in API group "" in the
    namespace "ns"`` (k8s.io/apiserver ``endpoints/handlers/responsewriters/errors.go``).
    """
    base = resource.split("/")[0]
    subject = f'{base}{"." + group if group else ""} "{name}"' if name else (
        f"{base}{'.' + group if group else ''}"
    )
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    msg = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}"{where}'
    )
    d: dict[str, Any] = {"kind": base}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    return ApiError(403, "Forbidden", msg, d)
