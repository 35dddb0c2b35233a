"""Running one planned store call through the API server (DESIGN §6 "Reaching them").

Redis/Valkey over ``pods/portforward`` to a ready endpoint pod of the Service (as
``kubectl port-forward svc/...`` picks one), the Mooncake master's admin port over the pod
proxy. Each result carries the store's own counts before and after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..kube import Kube, KubeApiError, KubeConnectionError, status_message
from .calls import StoreCall
from .config import StoreKind
from .mooncake import MooncakeError, clear_master
from .redisclear import RedisStoreError, clear_model_keys
from .resolve import Endpoint, admin_port

__all__ = ["StoreResult", "run_call"]


@dataclass(frozen=True)
class StoreResult:
    """What one call did.

    Attributes:
        result: ``emptied`` (after is 0), ``left`` (not made, or something remains),
            ``failed`` (the store or the API refused), ``planned`` (dry run).
        unit: what ``before``/``after`` count (``keys``).
        via: the pod and port the call went to (``ns/pod:port``).
        message: why, and what would clear it.
    """

    result: str
    before: int | None = None
    after: int | None = None
    unit: str = "keys"
    via: str | None = None
    message: str | None = None


def _endpoint(call: StoreCall) -> Endpoint | None:
    eps = call.store.resolution.endpoints
    return next((e for e in eps if e.ready), None)


def run_call(kube: Kube, call: StoreCall, *, dry_run: bool = False, timeout_s: float = 30.0) -> StoreResult:
    """Make ``call`` (or, with ``dry_run``, only count). Never raises for the store's answer:
    the result says it."""
    if call.blocked is not None:
        return StoreResult("left", message=call.blocked)
    ep = _endpoint(call)
    if ep is None:
        return StoreResult("failed", message=f"{call.store.resolution.describe()} has no ready pod")
    store = call.store
    try:
        if store.kind in (StoreKind.REDIS, StoreKind.VALKEY):
            port = ep.port or (store.address.port if store.address else None) or 6379
            via = f"{ep.namespace}/{ep.name}:{port}"
            extra = store.users[0].use.extra or {}
            done = clear_model_keys(lambda: kube.port_forward_socket(ep.namespace, ep.name, port, timeout_s=timeout_s),
                                    store.address, call.model or "",  # type: ignore[arg-type]
                                    password=extra.get("valkey_password") if store.kind is StoreKind.VALKEY else None,
                                    username=extra.get("valkey_username") if store.kind is StoreKind.VALKEY else None,
                                    cluster=str(extra.get("valkey_mode", "")).lower() == "cluster",
                                    dry_run=dry_run, timeout_s=timeout_s)
            if dry_run:
                return StoreResult("planned", done.before, done.after, via=via)
            result = "emptied" if done.after == 0 else "left"
            msg = None if result == "emptied" else f"{done.after} key(s) of {call.model} remain (written meanwhile?)"
            return StoreResult(result, done.before, done.after, via=via, message=msg)
        if store.kind is StoreKind.MOONCAKE:
            port = admin_port(StoreKind.MOONCAKE, _pod_object(kube, ep)) or 9003
            via = f"{ep.namespace}/{ep.name}:{port}"

            def http(method: str, path: str, query: Sequence[tuple[str, str]]) -> tuple[int, bytes]:
                ans = kube.pod_proxy(ep.namespace, ep.name, port, method, path, list(query),
                                     timeout_s=timeout_s)
                if ans.from_apiserver:
                    reason, message = status_message(ans.body)
                    raise KubeApiError(ans.status, reason, message or ans.text()[:300])
                return ans.status, ans.body

            mc = clear_master(http, dry_run=dry_run)
            if dry_run:
                return StoreResult("planned", mc.before, mc.after, via=via)
            if mc.left:
                return StoreResult("left", mc.before, mc.after, via=via, message=mc.left)
            result = "emptied" if mc.after == 0 else "left"
            msg = None if result == "emptied" else (
                f"{mc.after} key(s) remain (objects with pending replication, or written meanwhile)")
            return StoreResult(result, mc.before, mc.after, via=via, message=msg)
    except (RedisStoreError, MooncakeError) as exc:
        return StoreResult("failed", message=str(exc))
    except KubeApiError as exc:
        return StoreResult("failed", message=f"the API server refused the call: {exc}")
    except KubeConnectionError as exc:
        return StoreResult("failed", message=str(exc))
    return StoreResult("left", message="not cleared by this version")


def _pod_object(kube: Kube, ep: Endpoint) -> dict[str, object] | None:
    try:
        return kube.get_object("v1", "pods", ep.namespace, ep.name)
    except KubeApiError:
        return None
