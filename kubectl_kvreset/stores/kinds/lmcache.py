"""LMCache's own stores: the controller (``enable_controller``: ``POST /clear`` per instance id,
:mod:`kubectl_kvreset.stores.lmcache_controller`), the worker internal API inside the vLLM pod
(``internal_api_server_enabled``: ``DELETE /cache/clear``, :mod:`~kubectl_kvreset.stores.lmcache_worker`),
the MP server (``LMCacheMPConnector``: ``POST /cache/clear`` of its L1 on every pod behind the address,
:mod:`~kubectl_kvreset.stores.mpserver`) and the LMCache server (``remote_url`` ``lm://``), which has
no clear."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..address import Address
from ..lmcache_controller import ControllerError
from ..lmcache_worker import WorkerError
from ..mpserver import MpClear, MpServerError
from ..records import StoreResult, StoreUse
from .base import AddressReader, Kind, Reach, StoreKind

if TYPE_CHECKING:
    from ..records import Endpoint, FoundStore, StoreCall

__all__ = ["NONE_VALUES", "LMCacheController", "LMCacheMP", "LMCacheServer", "LMCacheWorker", "backends",
           "mp_has_http", "truthy"]

#: Values an LMCache setting holds when it is not set.
NONE_VALUES = (None, "", "None", "none", "null")


def truthy(value: Any) -> bool:
    """An LMCache boolean setting (``true``/``1``/``yes``/``on``, or a bool)."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def backends(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The in-process LMCache backends besides the CPU one (``local_disk``, ``remote_url``), for
    the controller and worker clears to say what they cannot reach."""
    return {key: settings[key] for key in ("local_disk", "remote_url") if settings.get(key) not in NONE_VALUES}


class LMCacheController(Kind):
    """The LMCache controller: one call per instance id, on its HTTP port ``--port`` 9000."""

    name = StoreKind.LMCACHE_CONTROLLER
    admin_flags = ("--port",)
    admin_default: int = 9000
    scope = "instance"
    clears = True
    errors = (ControllerError,)

    def settings_use(self, settings: Mapping[str, Any], sources: Mapping[str, str], *, model: str | None,
                     world: int, read: AddressReader) -> StoreUse | None:
        """``enable_controller``: the controller at ``controller_pull_url`` (ZMQ; its HTTP port is
        the controller pod's ``--port``), cleared per ``lmcache_instance_id``."""
        if not truthy(settings.get("enable_controller", False)):
            return None
        notes: list[str] = []
        pull = settings.get("controller_pull_url")
        addr = None
        if pull in NONE_VALUES:
            notes.append("enable_controller is set but controller_pull_url is not")
        else:
            addr = read(pull, sources["controller_pull_url"], notes)
        instance = settings.get("lmcache_instance_id")
        if instance in NONE_VALUES:
            instance = None
            notes.append("lmcache_instance_id is not set (required by LMCache 0.5.6)")
        return StoreUse(self.name, addr, "instance", model=model, instance_id=str(instance) if instance else None,
                        source=sources.get("enable_controller", ""), extra=backends(settings), notes=tuple(notes))

    def method(self, store: FoundStore, model: str | None) -> str:
        """``GET /controller/workers``, then ``POST /clear`` per location."""
        from ..lmcache_controller import locations_for

        disk = any((u.use.extra or {}).get("local_disk") for u in store.users if u.targeted)
        return ("GET /controller/workers?instance_id=, then POST /clear per location ("
                + ", ".join(locations_for(disk)) + ")")

    def clear(self, reach: Reach, call: StoreCall, ep: Endpoint, dry_run: bool) -> StoreResult:
        """The instance's locations; what remains counted from ``/controller/workers``."""
        from ..lmcache_controller import NO_CLEAR, clear_instance, locations_for

        port = self.admin_port(reach.pod(ep)) or self.admin_default
        via = f"{ep.namespace}/{ep.name}:{port}"
        users = [u for u in call.store.users if u.targeted and u.use.instance_id == call.instance]
        disk = any((u.use.extra or {}).get("local_disk") for u in users)
        remote = next((str(u.use.extra["remote_url"]) for u in users if (u.use.extra or {}).get("remote_url")),
                      None)
        done = clear_instance(reach.http(ep, port), call.instance or "", locations=locations_for(disk),
                              dry_run=dry_run)
        if done.left:
            return StoreResult("left", via=via, message=done.left)
        if dry_run:
            return StoreResult("planned", done.before, done.after, via=via)
        notes = [f"{done.tokens} tokens removed (POST /clear {', '.join(done.locations)}"
                 + (f", {done.workers} worker(s))" if done.workers is not None else ")")]
        if remote is not None:
            notes.append(f"RemoteBackend ({reach.display(remote)}) left here: {NO_CLEAR['RemoteBackend']}")
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

    def remedy(self, address: Address | None, model: str | None = None) -> str:
        """``POST /clear`` on the controller's HTTP port."""
        return (f"POST http://{self.host(address)}:{self.admin_default}/clear with the instance id and location "
                "on the LMCache controller")


class LMCacheWorker(Kind):
    """LMCache's worker internal API in the vLLM pod itself (``localhost``, one port per rank)."""

    name = StoreKind.LMCACHE_WORKER
    scope = "worker"
    clears = True
    per_pod = True
    errors = (WorkerError,)

    def settings_use(self, settings: Mapping[str, Any], sources: Mapping[str, str], *, model: str | None,
                     world: int, read: AddressReader) -> StoreUse | None:
        """``internal_api_server_enabled``: one port per worker, ``internal_api_server_port_start``
        (default 6999) + 1 + rank, the ranks ``internal_api_server_include_index_list`` keeps."""
        if not truthy(settings.get("internal_api_server_enabled", False)):
            return None
        start = settings.get("internal_api_server_port_start", 6999)
        try:
            start = int(start)
        except (TypeError, ValueError):
            start = 6999
        include = settings.get("internal_api_server_include_index_list")
        offsets = [1 + rank for rank in range(world) if not isinstance(include, list) or 1 + rank in include]
        return StoreUse(self.name, Address("localhost", None), "worker", model=model,
                        ports=tuple(start + o for o in offsets),
                        source=sources.get("internal_api_server_enabled", ""), extra=backends(settings))

    def method(self, store: FoundStore, model: str | None) -> str:
        """``DELETE /cache/clear`` on each worker port of the targeted users."""
        ports = [p for u in store.users if u.targeted for p in u.use.ports]
        return "DELETE /cache/clear on port " + ",".join(str(p) for p in dict.fromkeys(ports))

    def clear(self, reach: Reach, call: StoreCall, ep: Endpoint, dry_run: bool) -> StoreResult:
        """Every worker port; the hot cache count of ``/metrics`` before and after."""
        from ..lmcache_controller import NO_CLEAR
        from ..lmcache_worker import HOT_CACHE_COUNT, clear_workers

        users = [u for u in call.store.users if u.targeted]
        ports = list(dict.fromkeys(p for u in users for p in u.use.ports))
        via = f"{ep.namespace}/{ep.name}:{','.join(str(p) for p in ports)}"
        done = clear_workers(lambda port: reach.http(ep, port), ports, dry_run=dry_run)
        if dry_run:
            return StoreResult("planned", done.before, done.after, via=via)
        notes = [f"{done.removed} tokens removed (num_removed of {len(ports)} worker port(s))"]
        for key, name in (("local_disk", "LocalDiskBackend"), ("remote_url", "RemoteBackend")):
            value = next((str(u.use.extra[key]) for u in users if (u.use.extra or {}).get(key)), None)
            if value is not None:
                notes.append(f"{name} ({reach.display(value)}) left here: {NO_CLEAR[name]}")
        if done.after is None:
            notes.append(f"the worker API exports no {HOT_CACHE_COUNT} on /metrics: nothing counts what remains, "
                         "so only the removal is known")
            return StoreResult("unconfirmed", done.before, None, via=via, message="; ".join(notes))
        if done.after == 0:
            return StoreResult("emptied", done.before, 0, via=via, message="; ".join(notes))
        notes.insert(0, f"{done.after} chunk(s) remain in LocalCPUBackend: objects pinned or in use are skipped by "
                        "its clear, or chunks were stored meanwhile")
        return StoreResult("left", done.before, done.after, via=via, message="; ".join(notes))


def mp_has_http(pod: Mapping[str, object] | None) -> bool:
    """Whether an LMCache MP server pod serves HTTP: ``lmcache server`` and
    ``lmcache.v1.multiprocess.http_server`` do, ``python -m lmcache.v1.multiprocess.server``
    (the operator's and the DaemonSet example's command) is ZMQ only (its argparse text:
    "LMCache Cache Server (without HTTP)")."""
    for c in ((pod or {}).get("spec") or {}).get("containers") or []:  # type: ignore[attr-defined]
        argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        if "lmcache.v1.multiprocess.server" in argv:
            return False
    return True


class LMCacheMP(Kind):
    """The LMCache MP server: its L1 on each pod behind the address, over ``--http-port`` 8080."""

    name = StoreKind.LMCACHE_MP
    connectors = ("LMCacheMPConnector",)
    admin_flags = ("--http-port",)
    admin_default: int = 8080
    clears = True
    unit = "objects"
    errors = (MpServerError,)

    def connector_use(self, extra: Mapping[str, Any], env: Mapping[str, str], files: Mapping[str, Any],
                      read: AddressReader) -> StoreUse:
        """``LMCacheMPConnector``: the MP server at ``lmcache.mp.host`` (``tcp://HOST``) and
        ``lmcache.mp.port`` (ZMQ, default 5555)."""
        notes: list[str] = []
        host = str(extra.get("lmcache.mp.host") or "localhost")
        if "lmcache.mp.host" not in extra:
            notes.append("lmcache.mp.host not set: the connector's default (localhost) is assumed")
        port = extra.get("lmcache.mp.port", 5555)
        try:
            port = int(port)
        except (TypeError, ValueError):
            notes.append(f"lmcache.mp.port {port!r} is not a number")
            port = None
        addr = read(host, "lmcache.mp.host", notes, default_port=port)
        return StoreUse(self.name, addr, "store", source="kv_connector_extra_config lmcache.mp.host",
                        notes=tuple(notes))

    def method(self, store: FoundStore, model: str | None) -> str:
        """``POST /cache/clear`` of the L1, unforced (``--force-mp-clear`` forces it later)."""
        from ..mpserver import clear_method

        return clear_method(force=False)

    def clear(self, reach: Reach, call: StoreCall, ep: Endpoint, dry_run: bool) -> StoreResult:
        """Every ready MP server pod behind the address (one L1 each), over its HTTP port."""
        from ..mpserver import clear_l1, summary, zmq_only_remedy

        parts: list[tuple[str, MpClear | str | Exception]] = []
        vias: list[str] = []
        for e in call.store.resolution.endpoints:
            name = f"{e.namespace}/{e.name}"
            if not e.ready:
                parts.append((name, f"pod {name} is not ready: its L1 was not cleared"))
                continue
            pod = reach.pod(e)
            if not mp_has_http(pod):
                parts.append((name, zmq_only_remedy(name)))
                continue
            port = self.admin_port(pod) or self.admin_default
            vias.append(f"{name}:{port}")
            try:
                parts.append((name, clear_l1(reach.http(e, port), force=call.force, dry_run=dry_run)))
            except MpServerError as exc:
                parts.append((name, exc))
            except reach.api_error as exc:
                parts.append((name, MpServerError(reach.refusal(call, exc))))
        result, before, after, message = summary(parts, force=call.force, dry_run=dry_run)
        return StoreResult(result, before, after, unit="objects", via=", ".join(vias) or None, message=message)

    def remedy(self, address: Address | None, model: str | None = None) -> str:
        """``POST /cache/clear`` of the L1 on the MP server's HTTP port."""
        return (f"POST http://{self.host(address)}:{self.admin_default}/cache/clear "
                "{\"tier\":\"l1\",\"force\":false} on the LMCache MP server")


class LMCacheServer(Kind):
    """The LMCache server (``lm://``): its protocol has no delete, so it is listed, not cleared."""

    name = StoreKind.LMCACHE_SERVER
    schemes: Mapping[str, int | None] = {"lm": None}

    def no_clear(self) -> str:
        """Its protocol (``lmcache/v1/protocol.py``) has PUT, GET, EXIST, LIST, HEALTH only."""
        return "an LMCache server (lm://) offers no clear or delete call"

    def remedy(self, address: Address | None, model: str | None = None) -> str:
        """A restart of its pod (it holds its cache in memory)."""
        where = address.display() if address else "the store"
        return (f"restart the LMCache server at {where} (its protocol has no delete: PUT, GET, EXIST, LIST, "
                "HEALTH, lmcache/v1/protocol.py); it holds its cache in memory, so a restart of its pod empties "
                "it, for every user")

