"""Running one planned store call through the API server (README "clear-store").

Redis/Valkey over ``pods/portforward`` to a ready endpoint pod of the Service (as
``kubectl port-forward svc/...`` picks one), the Mooncake master's admin port, the LMCache
controller's HTTP port (``--port``) and LMCache's worker API in the vLLM pod itself over the pod
proxy, the LMCache MP server's HTTP port over the pod proxy of every pod behind its address.
Each result carries the store's own counts before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..kube import Kube, KubeAnswerTooLarge, KubeApiError, KubeConnectionError, size_text, status_message
from .calls import StoreCall
from .config import parse_address
from .records import Endpoint, StoreResult
from .refusal import api_refusal
from .registry import KINDS, Kind, KindId, kind_of

__all__ = ["CLEARERS", "STORE_ERRORS", "Clearer", "KubeReach", "StoreResult", "pod_http", "pod_object", "run_call"]


def _endpoint(call: StoreCall) -> Endpoint | None:
    eps = call.store.resolution.endpoints
    return next((e for e in eps if e.ready), None)


#: ``clearer(kube, call, endpoint, dry_run, timeout_s)`` -> what the call did. May raise the
#: errors :data:`STORE_ERRORS` lists; :func:`run_call` turns them into a ``failed`` result.
Clearer = Callable[[Kube, StoreCall, Endpoint, bool, float], StoreResult]


def pod_http(kube: Kube, ep: Endpoint, port: int, timeout_s: float) -> Callable[..., tuple[int, bytes]]:
    """An ``http(method, path, query, body=None) -> (status, body)`` to ``port`` of the endpoint's
    pod over the API server's pod proxy (``pods/proxy``); a ``body`` goes as ``application/json``.
    An answer the API server itself gave (403, 404 of the pod, 503) raises :class:`KubeApiError`
    with its Status message, so a store's own 404 is never mistaken for a missing pod. An answer
    past :data:`~kubectl_kvreset.kube.POD_ANSWER_MAX_BYTES` raises :class:`~kubectl_kvreset.kube.KubeAnswerTooLarge`
    naming the pod, port, route and cap (a ``failed`` row)."""

    def http(method: str, path: str, query: Sequence[tuple[str, str]] = (),
             body: bytes | None = None) -> tuple[int, bytes]:
        try:
            ans = kube.pod_proxy(ep.namespace, ep.name, port, method, path, list(query), body=body,
                                 content_type="application/json" if body is not None else None, timeout_s=timeout_s)
        except KubeAnswerTooLarge as exc:
            raise KubeAnswerTooLarge(f"{method} {path} on {ep.namespace}/{ep.name}:{port}: the store's answer is "
                                     "larger "
                                     f"than the {size_text(exc.limit)} cap; reading stopped there", exc.limit) from exc
        if ans.from_apiserver:
            reason, message = status_message(ans.body)
            raise KubeApiError(ans.status, reason, message or ans.text()[:300])
        return ans.status, ans.body

    return http


@dataclass
class KubeReach:
    """The :class:`~.kinds.base.Reach` of a real run: the store pods over the API server
    (``pods/proxy`` for HTTP, ``pods/portforward`` for a socket), its refusals as
    :func:`~.refusal.api_refusal` words them."""

    kube: Kube
    timeout_s: float
    api_error: type[Exception] = KubeApiError

    def http(self, ep: Endpoint, port: int) -> Callable[..., tuple[int, bytes]]:
        """:func:`pod_http` to ``port`` of the endpoint's pod."""
        return pod_http(self.kube, ep, port, self.timeout_s)

    def socket(self, ep: Endpoint, port: int) -> Any:
        """A port-forward stream to ``port`` of the endpoint's pod."""
        return self.kube.port_forward_socket(ep.namespace, ep.name, port, timeout_s=self.timeout_s)

    def pod(self, ep: Endpoint) -> Mapping[str, Any] | None:
        """:func:`pod_object`."""
        return pod_object(self.kube, ep)

    def refusal(self, call: StoreCall, exc: Exception) -> str:
        """:func:`~.refusal.api_refusal` of a :class:`~kubectl_kvreset.kube.KubeApiError`."""
        return api_refusal(call, exc) if isinstance(exc, KubeApiError) else str(exc)

    def display(self, url: str) -> str:
        """:func:`~.config.parse_address` then :meth:`~.address.Address.display`."""
        try:
            return parse_address(url).display()
        except ValueError:
            return "an unparsable address"


def _clearer(kind: Kind) -> Clearer:
    """The kind's :meth:`~.kinds.base.Kind.clear` through a :class:`KubeReach`."""
    def clear(kube: Kube, call: StoreCall, ep: Endpoint, dry_run: bool, timeout_s: float) -> StoreResult:
        return kind.clear(KubeReach(kube, timeout_s), call, ep, dry_run)

    return clear


#: The store kinds this version clears, and how (a view of the registry
#: :data:`~.kinds.KINDS`: each kind's :meth:`~.kinds.base.Kind.clear`).
CLEARERS: dict[KindId, Clearer] = {k.name: _clearer(k) for k in KINDS if k.clears}

#: Errors a clearer may raise for a store's answer (every kind's ``errors``); each becomes a
#: ``failed`` result.
STORE_ERRORS: tuple[type[Exception], ...] = tuple(dict.fromkeys(e for k in KINDS for e in k.errors))


def run_call(kube: Kube, call: StoreCall, *, dry_run: bool = False, timeout_s: float = 30.0) -> StoreResult:
    """Make ``call`` (or, with ``dry_run``, only count) with the kind's entry in
    :data:`CLEARERS`. Never raises for the store's answer: the result says it."""
    if call.blocked is not None:
        return StoreResult("left", message=call.blocked)
    ep = _endpoint(call)
    if ep is None:
        return StoreResult("failed", message=f"{call.store.resolution.describe()} has no ready pod")
    clearer = CLEARERS.get(call.store.kind)
    if clearer is None:
        return StoreResult("left", message="not cleared by this version")
    if kind_of(call.store.kind).every_endpoint:
        eps = call.store.resolution.endpoints
        if len(eps) > 1:
            return _every_endpoint(kube, call, clearer, eps, dry_run, timeout_s)
    return _one(kube, call, clearer, ep, dry_run, timeout_s)


def _one(kube: Kube, call: StoreCall, clearer: Clearer, ep: Endpoint, dry_run: bool, timeout_s: float) -> StoreResult:
    try:
        return vouched(clearer(kube, call, ep, dry_run, timeout_s))
    except STORE_ERRORS as exc:
        return StoreResult("failed", message=str(exc))
    except KubeApiError as exc:
        return StoreResult("failed", message=api_refusal(call, exc))
    except KubeConnectionError as exc:
        return StoreResult("failed", message=str(exc))
    except Exception as exc:  # a kind's fault must not lose the rows of the resets already made
        return StoreResult("failed", message=f"{kind_of(call.store.kind).name.value}: clear raised "
                                             f"{type(exc).__name__}: {exc}")


def vouched(result: StoreResult) -> StoreResult:
    """``result`` as a row may show it: ``emptied`` only where the store's own count after the
    clear is 0. A kind that says ``emptied`` with no count after is ``unconfirmed``; with a count
    above 0 it is ``left``. Other results pass unchanged."""
    if result.result != "emptied" or result.after == 0:
        return result
    if result.after is None:
        why = "the store's own count after the clear is missing"
        return replace(result, result="unconfirmed", message="; ".join(m for m in (result.message, why) if m))
    why = f"{result.after} {result.unit} remain after the clear"
    return replace(result, result="left", message="; ".join(m for m in (result.message, why) if m))


def _every_endpoint(kube: Kube, call: StoreCall, clearer: Clearer, eps: Sequence[Endpoint], dry_run: bool,
                    timeout_s: float) -> StoreResult:
    """``clearer`` on each endpoint of the store's Service; ``emptied`` only when every one is
    (a pod not ready is not reached, so the row is ``left`` naming it)."""
    parts: list[tuple[str, StoreResult]] = []
    for e in eps:
        name = f"{e.namespace}/{e.name}"
        if not e.ready:
            parts.append((name, StoreResult("left",
                                            message=f"pod {name} behind the Service is not ready: not cleared")))
            continue
        parts.append((name, _one(kube, call, clearer, e, dry_run, timeout_s)))
    results = [r for _, r in parts]
    counted = [r for r in results if r.before is not None]
    before = sum(r.before or 0 for r in counted) if counted else None
    afters = [r.after for r in results]
    after = sum(a or 0 for a in afters) if all(a is not None for a in afters) else None
    vias = ", ".join(r.via for r in results if r.via) or None
    unit = results[0].unit if results else "keys"
    if dry_run and all(r.result == "planned" for r in results):
        return StoreResult("planned", before, before if after is None else after, unit=unit, via=vias)
    order = ("failed", "left", "unconfirmed", "replaced", "emptied", "planned")
    result = min((r.result for r in results), key=lambda r: order.index(r) if r in order else 0)
    messages = [f"{name}: {r.result}" + (f" ({r.message})" if r.message else "")
                for name, r in parts if r.result != "emptied" or r.message]
    head = f"{len(eps)} pods behind the Service, each cleared"
    return StoreResult(result, before, after, unit=unit, via=vias,
                       message="; ".join([head, *messages]))


def pod_object(kube: Kube, ep: Endpoint) -> dict[str, object] | None:
    """The endpoint's pod object, or None when it cannot be read (its ports then fall back to
    the defaults)."""
    try:
        return kube.get_object("v1", "pods", ep.namespace, ep.name)
    except KubeApiError:
        return None
