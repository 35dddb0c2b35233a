"""Clearing an LMCache MP server's L1 (LMCache ``lmcache/v1/multiprocess/http_apis/cache_api.py``;
the real 0.5.6 server's answers are checked by ``tests/peers/test_stores_mpserver.py``).

The MP server (``lmcache server``: ``lmcache/v1/multiprocess/http_server.py``) keeps one L1
that every vLLM engine connected to it (``LMCacheMPConnector``) shares, so its clear is
store-wide. Its HTTP frontend (``--http-port``, default 8080) has answered the clear at three
paths over time (checked in the PyPI wheels' ``lmcache/v1/multiprocess/http_server.py`` and
``http_apis/*.py``):

=============  ================================================  ===============
lmcache        clear                                             status
=============  ================================================  ===============
0.5.1-0.5.6    ``POST /cache/clear {"tier":"l1","force":B}``     ``GET /status``
0.5.0          ``POST /clear-cache``                             ``GET /status``
0.4.x          ``POST /api/clear-cache`` (body ignored)          ``GET /api/status``
=============  ================================================  ===============

The newest path is tried first and the next one only when the server answers 404 or 405 (the
path or method does not exist there); any other answer is the server's verdict. The body always
names ``tier`` and ``force``: the default of ``force`` changed (true in 0.5.1-0.5.5, false in
0.5.6, ``lmcache/v1/multiprocess/http_apis/schemas.py::ClearRequest``), and ``force: true``
also removes locked objects, which may corrupt in-flight stores and prefetches
(``http_apis/cache_api.py::clear_cache``). It is sent as ``application/json``: FastAPI answers
422 to the same bytes under another content type (checked on 0.5.6).

The count is ``GET /status`` (0.5.6 ``http_apis/info_api.py::status`` ->
``server.py::MPCacheServer.report_status``): ``storage_manager.l1_managers.<tag>`` holds each
L1's ``total_object_count`` and ``memory_used_bytes``
(``lmcache/v1/distributed/storage_manager.py::StorageManager.report_status``,
``l1_manager.py::L1Manager.report_status``), summed over the L1 managers; a single-L1
``storage_manager.l1_manager`` is read when ``l1_managers`` is absent. The shape of the 0.4.x and
0.5.0 status answers was not read from LMCache's sources; where those fields are missing the count
is unknown and the clear is never reported emptied.

The clear empties L1 only: ``StorageManager.clear`` loops over the L1 managers, and the L2
adapters listed in ``storage_manager.l2_adapters`` keep what they hold.

A ZMQ-only server (``python -m lmcache.v1.multiprocess.server``, the operator's and the example
DaemonSet's command) has no HTTP API at all: :func:`zmq_only_remedy` says what would empty it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .kinds.names import StoreKind

__all__ = ["CLEAR_PATHS", "FORCE_FLAG", "L1Count", "MpClear", "MpServerError", "clear_l1", "clear_method",
           "l1_status", "summary", "with_force", "zmq_only_remedy"]

#: ``http(method, path, query, body)`` -> ``(status, body)``: one HTTP call to the MP server's
#: HTTP port; a ``body`` is JSON and sent as ``application/json``.
Http = Callable[[str, str, Sequence[tuple[str, str]], "bytes | None"], tuple[int, bytes]]

#: The clear paths, newest first (lmcache 0.5.1+, 0.5.0, 0.4.x).
CLEAR_PATHS = ("/cache/clear", "/clear-cache", "/api/clear-cache")
#: The status paths, newest first (lmcache 0.5.x, 0.4.x).
STATUS_PATHS = ("/status", "/api/status")
#: The flag that sends ``force: true``.
FORCE_FLAG = "--force-mp-clear"
_MISSING = (404, 405)


class MpServerError(Exception):
    """The MP server answered something the clear cannot use (the message says what)."""


@dataclass(frozen=True)
class L1Count:
    """What ``GET /status`` says the L1 holds: ``objects`` (``total_object_count`` summed over
    the L1 managers) and ``bytes`` (``memory_used_bytes``), each None when absent; ``l2``: one
    description per L2 adapter (its ``type`` and, where reported, ``stored_object_count``);
    ``path``: the status path that answered."""

    objects: int | None
    bytes: int | None
    l2: tuple[str, ...] = ()
    path: str = "/status"


@dataclass(frozen=True)
class MpClear:
    """One MP server's clear.

    Attributes:
        before, after: the L1 counts (``after`` is ``before`` on a dry run or when nothing was
            called).
        path: the clear path that answered 200 (``/cache/clear`` ...), None when none was called.
        left: why nothing was cleared (no clear path exists), else None.
    """

    before: L1Count
    after: L1Count
    path: str | None
    left: str | None = None


def clear_method(force: bool = False) -> str:
    """The call as a row's METHOD shows it: ``POST /cache/clear {"tier":"l1","force":false}``."""
    return f'POST /cache/clear {{"tier":"l1","force":{"true" if force else "false"}}}'


def _text(body: bytes) -> str:
    return body[:200].decode("utf-8", "replace")


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _sum(values: Sequence[int | None]) -> int | None:
    return None if not values or any(v is None for v in values) else sum(v for v in values if v is not None)


def parse_status(answer: Any, path: str = "/status") -> L1Count:
    """The L1 counts and L2 adapters of a ``GET /status`` answer (see the module docstring);
    fields that are absent give None counts. Never raises."""
    sm = answer.get("storage_manager") if isinstance(answer, dict) else None
    if not isinstance(sm, dict):
        return L1Count(None, None, path=path)
    managers = sm.get("l1_managers")
    if not isinstance(managers, dict) or not managers:
        single = sm.get("l1_manager")
        managers = {"_default": single} if isinstance(single, dict) else {}
    l1s = [m for m in managers.values() if isinstance(m, dict)]
    objects = _sum([_int(m.get("total_object_count")) for m in l1s])
    used = _sum([_int(m.get("memory_used_bytes")) for m in l1s])
    l2: list[str] = []
    for i, adapter in enumerate(sm.get("l2_adapters") or []):
        if not isinstance(adapter, dict):
            continue
        text = str(adapter.get("type") or f"adapter {i}")
        stored = _int(adapter.get("stored_object_count"))
        l2.append(text + (f" ({stored} objects)" if stored is not None else ""))
    if not l2 and _int(sm.get("num_l2_adapters")):
        l2 = [f"{sm['num_l2_adapters']} adapter(s)"]
    return L1Count(objects, used, tuple(l2), path)


def l1_status(http: Http) -> L1Count:
    """``GET /status`` (``/api/status`` on 0.4.x, tried when ``/status`` answers 404/405).
    When neither exists (0.3.x has only ``/api/healthcheck``) the counts are None.

    Raises:
        MpServerError: the status answered neither 200 nor 404/405 (503 while the server
            starts) or was not JSON.
    """
    for path in STATUS_PATHS:
        status, body = http("GET", path, (), None)
        if status in _MISSING:
            continue
        if status != 200:
            raise MpServerError(f"GET {path} answered {status}: {_text(body)}")
        try:
            return parse_status(json.loads(body or b"null"), path)
        except ValueError as exc:
            raise MpServerError(f"GET {path}: not JSON ({body[:100]!r})") from exc
    return L1Count(None, None, path=" or ".join(STATUS_PATHS))


def clear_l1(http: Http, *, force: bool = False, dry_run: bool = False) -> MpClear:
    """Empty the MP server's L1 (``force`` as the body's ``force``), reading ``/status`` before
    and after. A dry run only reads the status.

    Returns:
        an :class:`MpClear`; ``left`` set when every clear path answered 404/405.

    Raises:
        MpServerError: a status read failed, or a clear path answered other than
            200/404/405 (400: the tier was refused; 503: the server is starting).
    """
    before = l1_status(http)
    if dry_run:
        return MpClear(before, before, None)
    body = json.dumps({"tier": "l1", "force": bool(force)}).encode()
    for path in CLEAR_PATHS:
        status, answer = http("POST", path, (), body)
        if status in _MISSING:
            continue
        if status != 200:
            raise MpServerError(f"POST {path} answered {status}: {_text(answer)}")
        return MpClear(before, l1_status(http), path)
    return MpClear(before, before, None,
                   left=("this MP server has no HTTP clear (POST " + ", POST ".join(CLEAR_PATHS)
                         + " answered 404/405; lmcache older than 0.4?): restart its pod to empty its L1 "
                           "(disruptive: every vLLM pod connected to it loses its cache and reconnects)"))


def zmq_only_remedy(pod: str) -> str:
    """What would empty the L1 of the ZMQ-only MP server ``pod`` (``ns/name``), which has no HTTP
    API (``python -m lmcache.v1.multiprocess.server``, the command of LMCache's
    ``examples/multi_process/lmcache-daemonset.yaml`` and operator; LMCache 0.5.6's
    ``lmcache_mp_connector.py`` forwards vLLM's ``reset_cache`` to the server's
    L1 clear, unlocked objects only)."""
    return (f"pod {pod} runs the ZMQ-only MP server (python -m lmcache.v1.multiprocess.server): it has no "
            "HTTP clear. To empty its L1: restart that pod (disruptive: every vLLM pod connected to it "
            "loses its cache and reconnects), or run it as `lmcache server ... --http-port 8080` (the HTTP "
            "frontend) so that POST /cache/clear can be called; where the vLLM pods load LMCache's own connector "
            "(vLLM 0.32 does for LMCacheMPConnector unless LMCACHE_USE_UPSTREAM_MP is set; "
            "kv_connector_module_path lmcache.integration.vllm.lmcache_mp_connector on any release; "
            "lmcache >= 0.5.6), their reset_prefix_cache?reset_external=true clears its unlocked L1 objects "
            "(clear sends it when every pod using that server is targeted, or with --shared-stores)")


def _count(c: L1Count | None) -> str:
    if c is None or c.objects is None:
        return "?"
    return f"{c.objects}"


def summary(parts: Sequence[tuple[str, MpClear | str | Exception]], *, force: bool = False,
            dry_run: bool = False) -> tuple[str, int | None, int | None, str | None]:
    """One row's ``(result, before, after, message)`` from the clears of the MP server pods
    behind one address (``parts``: ``(ns/pod, what happened)``: an :class:`MpClear`, the reason
    it was not cleared, or the error its server or the API server gave).

    ``before``/``after`` are L1 objects summed over the pods (None when one is unknown);
    bytes go in the message. ``emptied`` only when every pod was cleared, ``after`` is 0 and no
    L2 sits behind them; ``planned`` on a dry run; ``failed`` when a call failed; ``left`` with
    the reasons when something stays; ``unconfirmed`` when the clear answered ok but the status
    gives no count to confirm it.
    """
    reasons: list[str] = []
    counts: list[str] = []
    befores: list[int | None] = []
    afters: list[int | None] = []
    l2: list[str] = []
    unconfirmed: list[str] = []
    failed = False
    for pod, part in parts:
        if isinstance(part, (str, Exception)):
            failed = failed or isinstance(part, Exception)
            reasons.append(part if isinstance(part, str) else f"{pod}: {part}")
            befores.append(None)
            afters.append(None)
            continue
        befores.append(part.before.objects)
        afters.append(part.after.objects)
        b0, b1 = part.before.bytes, part.after.bytes
        text = f"L1 of {pod}: {_count(part.before)} -> {_count(part.after)} objects"
        if b0 is not None and b1 is not None:
            text += f", {b0} -> {b1} bytes"
        if part.path is not None and part.path != CLEAR_PATHS[0]:
            text += f" (cleared with POST {part.path}, an older lmcache's path)"
        counts.append(text)
        if part.left:
            reasons.append(part.left)
        l2 += [f"{pod}: {a}" for a in part.after.l2]
        if part.after.objects is None and not part.left:
            unconfirmed.append(f"unconfirmed: GET {part.after.path} of {pod} gave no L1 object count")
    before, after = _sum(befores), _sum(afters)
    if dry_run:
        reasons += unconfirmed
        unconfirmed = []
    if dry_run and not reasons:
        notes = counts + ([f"force: true ({FORCE_FLAG})"] if force else [])
        if l2:
            notes.append(f"the L2 behind the MP server would be left (this call empties L1 only): {', '.join(l2)}")
        return "planned", before, after, "; ".join(notes) or None
    if not dry_run and after and not reasons:
        reasons.append(f"{after} object(s) remain in L1: " + (
            "written meanwhile, or held by a lock the forced clear skipped" if force else
            f"locked or in flight (force: false keeps them; {FORCE_FLAG} removes them too, and may corrupt "
            "in-flight stores)"))
    if l2:
        reasons.append("the L2 behind the MP server is not cleared by this call (StorageManager.clear empties "
                       f"L1 only): {', '.join(l2)}; clear that store itself")
    result = "failed" if failed else "left" if reasons else "unconfirmed" if unconfirmed else "emptied"
    return result, before, after, "; ".join(counts + reasons + unconfirmed) or None


def with_force(calls: Sequence[Any], force: bool) -> list[Any]:
    """The planned store calls with the MP server clears made forced (``force: true`` in the
    body and the METHOD) when ``force`` (:data:`FORCE_FLAG`) is given; the others unchanged."""
    if not force:
        return list(calls)
    return [replace(c, force=True, method=clear_method(True)) if c.store.kind is StoreKind.LMCACHE_MP else c
            for c in calls]
