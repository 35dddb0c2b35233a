"""Running one planned store call through the API server (README "clear-store").

Redis/Valkey over ``pods/portforward`` to a ready endpoint pod of the Service (as
``kubectl port-forward svc/...`` picks one), the Mooncake master's admin port, the LMCache
controller's HTTP port (``--port``) and LMCache's worker API in the vLLM pod itself over the pod
proxy, the LMCache MP server's HTTP port over the pod proxy of every pod behind its address.
Each result carries the store's own counts before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..kube import Kube, KubeAnswerTooLarge, KubeApiError, KubeConnectionError, size_text, status_message
from .calls import StoreCall
from .config import StoreKind
from .infinistore import InfiniStoreError, clear_infinistore
from .lmcache_controller import ControllerError
from .lmcache_worker import WorkerError
from .mooncake import MooncakeError, clear_master
from .mpserver import MpClear, MpServerError, clear_l1, summary, zmq_only_remedy
from .redisclear import RedisStoreError, clear_model_keys
from .refusal import api_refusal
from .resolve import Endpoint, admin_port, mp_has_http

__all__ = ["CLEARERS", "STORE_ERRORS", "Clearer", "StoreResult", "pod_http", "pod_object", "run_call"]


@dataclass(frozen=True)
class StoreResult:
    """What one call did.

    Attributes:
        result: ``emptied`` (after is 0), ``left`` (not made, or something remains),
            ``failed`` (the store or the API refused), ``planned`` (dry run), ``unconfirmed``
            (the call ran but nothing counts what remains).
        unit: what ``before``/``after`` count (``keys``: for LMCache, chunks).
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

    def http(method: str, path: str, query: Sequence[tuple[str, str]] = (), body: bytes | None = None) -> tuple[int, bytes]:
        try:
            ans = kube.pod_proxy(ep.namespace, ep.name, port, method, path, list(query), body=body,
                                 content_type="application/json" if body is not None else None, timeout_s=timeout_s)
        except KubeAnswerTooLarge as exc:
            raise KubeAnswerTooLarge(f"{method} {path} on {ep.namespace}/{ep.name}:{port}: the store's answer is larger "
                                     f"than the {size_text(exc.limit)} cap; reading stopped there", exc.limit) from exc
        if ans.from_apiserver:
            reason, message = status_message(ans.body)
            raise KubeApiError(ans.status, reason, message or ans.text()[:300])
        return ans.status, ans.body

    return http


def _clear_redis(kube: Kube, call: StoreCall, ep: Endpoint, dry_run: bool, timeout_s: float) -> StoreResult:
    store = call.store
    port = ep.port or (store.address.port if store.address else None) or 6379
    via = f"{ep.namespace}/{ep.name}:{port}"
    extra = store.users[0].use.extra or {}
    valkey = store.kind is StoreKind.VALKEY
    try:
        done = clear_model_keys(lambda: kube.port_forward_socket(ep.namespace, ep.name, port, timeout_s=timeout_s),
                                store.address, call.model or "",  # type: ignore[arg-type]
                                password=extra.get("valkey_password") if valkey else None,
                                username=extra.get("valkey_username") if valkey else None,
                                cluster=str(extra.get("valkey_mode", "")).lower() == "cluster",
                                dry_run=dry_run, timeout_s=timeout_s)
    except RedisStoreError as exc:
        if exc.partial is None:
            raise
        # the clear stopped part-way: the row keeps what it counted (the message says what was deleted)
        return StoreResult("failed", exc.partial.before, None, via=via, message=str(exc))
    kept = (f"{done.kept} key(s) matching {done.pattern!r} are not in the layout of {call.model}'s keys "
            "(another model's name starts with it): kept") if done.kept else None
    unsure = (f"{done.unsure_owner} key(s) in the layout of {call.model}'s keys also read as keys of a model "
              f"whose name starts with or extends {call.model!r} (their tags look like a key's numbers): LMCache "
              "writes the same string for both, so they were kept") if done.unsure_owner else None
    if dry_run:
        return StoreResult("planned", done.before, done.after, via=via,
                           message="; ".join(m for m in (unsure, kept) if m) or None)
    notes = []
    if unsure:
        notes.append(unsure)
    if done.after:
        notes.append(f"{done.after} key(s) of {call.model} remain (written meanwhile?)")
    if done.reconnects:
        notes.append(f"the port-forward stream was lost {done.reconnects} time(s) and the clear went on over a "
                     f"new one; {done.removed} key(s) deleted")
    if kept:
        notes.append(kept)
    result = "emptied" if done.after == 0 and not done.unsure_owner else "left"
    return StoreResult(result, done.before, done.after, via=via, message="; ".join(notes) or None)


def _clear_mooncake(kube: Kube, call: StoreCall, ep: Endpoint, dry_run: bool, timeout_s: float) -> StoreResult:
    port = admin_port(StoreKind.MOONCAKE, pod_object(kube, ep)) or 9003
    via = f"{ep.namespace}/{ep.name}:{port}"
    try:
        # an API server answer below 500 (403, 404, 429) means the call did not reach the master
        mc = clear_master(pod_http(kube, ep, port, timeout_s), dry_run=dry_run,
                          refused=lambda exc: isinstance(exc, KubeApiError) and exc.status < 500)
    except MooncakeError as exc:
        if exc.before is None:
            raise
        cause = exc.__cause__
        return StoreResult("failed", exc.before, None, via=via,
                           message=api_refusal(call, cause) if isinstance(cause, KubeApiError) else str(exc))
    if dry_run:
        return StoreResult("planned", mc.before, mc.after, via=via)
    if mc.left:
        return StoreResult("left", mc.before, mc.after, via=via, message=mc.left)
    if mc.unknown:
        if mc.after == 0:
            return StoreResult("emptied", mc.before, 0, via=via,
                               message=f"{mc.unknown}; master_key_count is 0 afterwards")
        counted = ("nothing counted what remains" if mc.after is None
                   else f"master_key_count is {mc.after} afterwards: the clear may still be running, or did not happen")
        return StoreResult("unconfirmed", mc.before, mc.after, via=via, message=f"{mc.unknown}; {counted}")
    result = "emptied" if mc.after == 0 else "left"
    msg = None if result == "emptied" else (
        f"{mc.after} key(s) remain (objects with pending replication, or written meanwhile)")
    return StoreResult(result, mc.before, mc.after, via=via, message=msg)


def _clear_lmcache_controller(kube: Kube, call: StoreCall, ep: Endpoint, dry_run: bool,
                              timeout_s: float) -> StoreResult:
    from .lmcache_controller import NO_CLEAR, clear_instance, locations_for

    port = admin_port(StoreKind.LMCACHE_CONTROLLER, pod_object(kube, ep)) or 9000
    via = f"{ep.namespace}/{ep.name}:{port}"
    users = [u for u in call.store.users if u.targeted and u.use.instance_id == call.instance]
    disk = any((u.use.extra or {}).get("local_disk") for u in users)
    remote = next((str(u.use.extra["remote_url"]) for u in users if (u.use.extra or {}).get("remote_url")), None)
    done = clear_instance(pod_http(kube, ep, port, timeout_s), call.instance or "", locations=locations_for(disk),
                          dry_run=dry_run)
    if done.left:
        return StoreResult("left", via=via, message=done.left)
    if dry_run:
        return StoreResult("planned", done.before, done.after, via=via)
    notes = [f"{done.tokens} tokens removed (POST /clear {', '.join(done.locations)}"
             + (f", {done.workers} worker(s))" if done.workers is not None else ")")]
    if remote is not None:
        notes.append(f"RemoteBackend ({_display(remote)}) left here: {NO_CLEAR['RemoteBackend']}")
    if done.after is None:
        notes.append("the controller has no /controller/workers (older than LMCache's internal API routes): "
                     "nothing counts what remains")
        return StoreResult("unconfirmed", done.before, None, via=via, message="; ".join(notes))
    if done.after == 0:
        return StoreResult("emptied", done.before, 0, via=via, message="; ".join(notes))
    why = (NO_CLEAR["LocalDiskBackend"] if disk
           else "objects pinned or in use are skipped by LocalCPUBackend.clear, or keys were written meanwhile")
    notes.insert(0, f"{done.after} key(s) remain at the controller: {why}")
    return StoreResult("left", done.before, done.after, via=via, message="; ".join(notes))


def _clear_lmcache_worker(kube: Kube, call: StoreCall, ep: Endpoint, dry_run: bool, timeout_s: float) -> StoreResult:
    from .lmcache_controller import NO_CLEAR
    from .lmcache_worker import HOT_CACHE_COUNT, clear_workers

    users = [u for u in call.store.users if u.targeted]
    ports = list(dict.fromkeys(p for u in users for p in u.use.ports))
    via = f"{ep.namespace}/{ep.name}:{','.join(str(p) for p in ports)}"
    done = clear_workers(lambda port: pod_http(kube, ep, port, timeout_s), ports, dry_run=dry_run)
    if dry_run:
        return StoreResult("planned", done.before, done.after, via=via)
    notes = [f"{done.removed} tokens removed (num_removed of {len(ports)} worker port(s))"]
    for key, name in (("local_disk", "LocalDiskBackend"), ("remote_url", "RemoteBackend")):
        value = next((str(u.use.extra[key]) for u in users if (u.use.extra or {}).get(key)), None)
        if value is not None:
            notes.append(f"{name} ({_display(value)}) left here: {NO_CLEAR[name]}")
    if done.after is None:
        notes.append(f"the worker API exports no {HOT_CACHE_COUNT} on /metrics: nothing counts what remains, "
                     "so only the removal is known")
        return StoreResult("unconfirmed", done.before, None, via=via, message="; ".join(notes))
    if done.after == 0:
        return StoreResult("emptied", done.before, 0, via=via, message="; ".join(notes))
    notes.insert(0, f"{done.after} chunk(s) remain in LocalCPUBackend: objects pinned or in use are skipped by its "
                    "clear, or chunks were stored meanwhile")
    return StoreResult("left", done.before, done.after, via=via, message="; ".join(notes))


def _display(url: str) -> str:
    """A store URL without credentials."""
    from .config import parse_address

    try:
        return parse_address(url).display()
    except ValueError:
        return "an unparsable address"


def _clear_mp(kube: Kube, call: StoreCall, ep: Endpoint, dry_run: bool, timeout_s: float) -> StoreResult:
    """Every ready MP server pod behind the address (one L1 each), over its HTTP port."""
    parts: list[tuple[str, MpClear | str | Exception]] = []
    vias: list[str] = []
    for e in call.store.resolution.endpoints:
        name = f"{e.namespace}/{e.name}"
        if not e.ready:
            parts.append((name, f"pod {name} is not ready: its L1 was not cleared"))
            continue
        pod = pod_object(kube, e)
        if not mp_has_http(pod):
            parts.append((name, zmq_only_remedy(name)))
            continue
        port = admin_port(StoreKind.LMCACHE_MP, pod) or 8080
        vias.append(f"{name}:{port}")
        try:
            parts.append((name, clear_l1(pod_http(kube, e, port, timeout_s), force=call.force, dry_run=dry_run)))
        except MpServerError as exc:
            parts.append((name, exc))
        except KubeApiError as exc:
            parts.append((name, MpServerError(api_refusal(call, exc))))
    result, before, after, message = summary(parts, force=call.force, dry_run=dry_run)
    return StoreResult(result, before, after, unit="objects", via=", ".join(vias) or None, message=message)


def _clear_infinistore(kube: Kube, call: StoreCall, ep: Endpoint, dry_run: bool, timeout_s: float) -> StoreResult:
    port = admin_port(StoreKind.INFINISTORE, pod_object(kube, ep)) or 18080
    via = f"{ep.namespace}/{ep.name}:{port}"
    done = clear_infinistore(pod_http(kube, ep, port, timeout_s), dry_run=dry_run)
    if dry_run:
        return StoreResult("planned", done.before, done.after, via=via)
    if not done.confirmed:
        return StoreResult("unconfirmed", done.before, None, via=via, message=(
            f"POST /purge answered ok (num {done.purged}), but the server does not answer GET /kvmap_len: "
            "nothing confirms the map is empty"))
    result = "emptied" if done.after == 0 else "left"
    msg = None if result == "emptied" else f"{done.after} key(s) remain (written meanwhile?)"
    return StoreResult(result, done.before, done.after, via=via, message=msg)


#: The store kinds this version clears, and how (one entry per kind; ``calls.METHODS`` names
#: the call each makes).
CLEARERS: dict[StoreKind, Clearer] = {
    StoreKind.REDIS: _clear_redis,
    StoreKind.VALKEY: _clear_redis,
    StoreKind.MOONCAKE: _clear_mooncake,
    StoreKind.LMCACHE_CONTROLLER: _clear_lmcache_controller,
    StoreKind.LMCACHE_WORKER: _clear_lmcache_worker,
    StoreKind.LMCACHE_MP: _clear_mp,
    StoreKind.INFINISTORE: _clear_infinistore,
}

#: Errors a clearer may raise for a store's answer; each becomes a ``failed`` result.
STORE_ERRORS: tuple[type[Exception], ...] = (RedisStoreError, MooncakeError, ControllerError, WorkerError,
                                             MpServerError, InfiniStoreError)


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
    if call.store.kind in EVERY_ENDPOINT:
        eps = call.store.resolution.endpoints
        if len(eps) > 1:
            return _every_endpoint(kube, call, clearer, eps, dry_run, timeout_s)
    return _one(kube, call, clearer, ep, dry_run, timeout_s)


def _one(kube: Kube, call: StoreCall, clearer: Clearer, ep: Endpoint, dry_run: bool, timeout_s: float) -> StoreResult:
    try:
        return clearer(kube, call, ep, dry_run, timeout_s)
    except STORE_ERRORS as exc:
        return StoreResult("failed", message=str(exc))
    except KubeApiError as exc:
        return StoreResult("failed", message=api_refusal(call, exc))
    except KubeConnectionError as exc:
        return StoreResult("failed", message=str(exc))


#: Kinds whose every pod behind a Service holds keys of its own (independent Redis/Valkey
#: pods, a Valkey cluster's nodes: ``SCAN`` covers only the node it is sent to; InfiniStore
#: replicas): the clear goes to each endpoint and the row sums them. The MP server clearer
#: walks its endpoints itself.
EVERY_ENDPOINT = frozenset({StoreKind.REDIS, StoreKind.VALKEY, StoreKind.INFINISTORE})


def _every_endpoint(kube: Kube, call: StoreCall, clearer: Clearer, eps: Sequence[Endpoint], dry_run: bool,
                    timeout_s: float) -> StoreResult:
    """``clearer`` on each endpoint of the store's Service; ``emptied`` only when every one is
    (a pod not ready is not reached, so the row is ``left`` naming it)."""
    parts: list[tuple[str, StoreResult]] = []
    for e in eps:
        name = f"{e.namespace}/{e.name}"
        if not e.ready:
            parts.append((name, StoreResult("left", message=f"pod {name} behind the Service is not ready: not cleared")))
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
