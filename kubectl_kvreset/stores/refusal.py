"""What a store row says when the API server refuses the way to the store. Pure: no I/O.

A 403 from the API server on the pod/service proxy or on port-forward means the clear never
reached the store: the row names the permission as the rest of the plugin does (verb, resource,
namespace, and that the Role in ``rbac/`` grants it) and what would empty the store anyway
(:func:`~.resolve.remedy`). The permission is read from the API server's own message, which the
RBAC authorizer words as ``User "U" cannot VERB resource "RES" in API group "G" in the
namespace "NS"`` (k8s.io/kubernetes ``plugin/pkg/auth/authorizer/rbac/rbac.go``, via
``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go::forbiddenMessage``).
"""

from __future__ import annotations

import re

from ..kube import KubeApiError
from ..permissions import from_forbidden
from .calls import StoreCall
from .resolve import remedy

__all__ = ["api_refusal", "needed_permission"]

_FORBIDDEN = re.compile(r'cannot (?P<verb>[a-z]+) resource "(?P<resource>[^"]+)" in API group "(?P<group>[^"]*)"'
                        r'(?: in the namespace "(?P<namespace>[^"]+)"| at the cluster scope)')

#: The verbs each way to a store needs in all: GET and POST through a proxy, the WebSocket
#: upgrade of port-forward (``get`` on v1.32, ``create`` from 1.35).
_BOTH = {"pods/proxy": "get and create", "services/proxy": "get and create", "pods/portforward": "get and create"}


def needed_permission(message: str) -> str | None:
    """``VERB on RESOURCE in namespace NS`` from a Forbidden message (``at the cluster scope``
    when it names no namespace; the group is named unless it is the core group), or None when
    the message is not the RBAC authorizer's."""
    m = _FORBIDDEN.search(message)
    if m is None:
        return None
    resource = m["resource"] if not m["group"] else f"{m['resource']}.{m['group']}"
    where = f"in namespace {m['namespace']}" if m["namespace"] else "at the cluster scope"
    return f"{m['verb']} on {resource} {where}"


def api_refusal(call: StoreCall, exc: KubeApiError) -> str:
    """The row message for an API-server refusal of a store call: the refusal, and for a 403
    the missing permission (and every verb that way needs) plus what would empty the store
    from where it is reachable."""
    text = f"the API server refused the call: {exc}"
    if exc.status != 403:
        return text
    need = needed_permission(exc.message or str(exc))
    if need is not None:
        resource = need.split(" on ", 1)[1].split(" ", 1)[0]
        both = _BOTH.get(resource)
        text += f"; needs {need}" + (f" (the clear uses {both} on {resource})" if both else "")
        text += " - the Role in rbac/ grants it"
        perm = from_forbidden(exc.message or str(exc))
        if perm is not None:
            text += f" (rule {perm.rule()})"
    store = call.store
    text += f"; what would empty it: {remedy(store.kind, store.address, model=call.model)}"
    return text
