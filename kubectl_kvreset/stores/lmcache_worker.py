"""Clearing LMCache's in-process workers through their internal API server (LMCache
``lmcache/v1/internal_api_server/api_server.py``, checked by ``tests/peers/test_stores_lmcache.py``).
Pure: every call goes through an
``http`` callable per port.

What LMCache 0.5.6 serves on each worker port (``internal_api_server_port_start`` + 1 + rank;
``lmcache/v1/internal_api_server/api_server.py``):

* ``DELETE /cache/clear`` (``lmcache/v1/internal_api_server/vllm/cache_api.py::clear``) runs
  ``LMCacheEngine.clear(locations=None)``: ``StorageManager.clear`` over every backend that has a
  ``clear()`` (0.5.6: ``LocalCPUBackend`` only, evictable objects only), and answers
  ``{"status": "success", "num_removed": N}``, N in tokens; 503 ``LMCache API is unavailable``
  where no engine exists (the scheduler's port), 500 ``Failed to clear cache`` on an error.
* ``GET /metrics`` (``.../common/metrics_api.py``) is the process's Prometheus registry, in which
  ``lmcache:local_cpu_hot_cache_count`` is a gauge read at scrape time as
  ``len(LocalCPUBackend.hot_cache)`` (``lmcache/v1/storage_backend/local_cpu_backend.py::
  _setup_metrics``): the chunks the CPU tier holds. It is the only count the worker API gives;
  where it is missing (a registry in Prometheus multiprocess mode may not carry it), nothing counts
  what remains and the clear is ``unconfirmed``. ``num_removed`` proves only what the call removed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["HOT_CACHE_COUNT", "PortHttp", "WorkerClear", "WorkerError", "clear_workers", "hot_cache_count"]

#: ``http(method, path, query, body)`` -> ``(status, body)``: one call to one worker port.
Http = Callable[[str, str, Sequence[tuple[str, str]], "bytes | None"], tuple[int, bytes]]
#: ``port -> Http``: the worker ports of one pod.
PortHttp = Callable[[int], Http]

HOT_CACHE_COUNT = "lmcache:local_cpu_hot_cache_count"
CLEAR = "/cache/clear"


class WorkerError(Exception):
    """A worker port answered something the clear cannot use (the message names the port)."""


@dataclass(frozen=True)
class WorkerClear:
    """What the clear of one pod's worker ports did.

    Attributes:
        before, after: ``lmcache:local_cpu_hot_cache_count`` summed over the ports (chunks in the
            CPU tier); None when a port does not export it.
        removed: ``num_removed`` summed over the ports (tokens; None on a dry run).
        ports: the ports called.
    """

    before: int | None
    after: int | None
    removed: int | None
    ports: tuple[int, ...]


def _text(body: bytes) -> str:
    return body[:300].decode("utf-8", "replace")


def hot_cache_count(http: Http, port: int) -> int | None:
    """``lmcache:local_cpu_hot_cache_count`` from ``GET /metrics`` of one worker port (summed over
    its label sets, read with ``prometheus_client``'s parser), or None when absent or when
    ``/metrics`` does not answer 200."""
    from ..lazyimport import prometheus_parser
    text_string_to_metric_families = prometheus_parser().text_string_to_metric_families

    status, body = http("GET", "/metrics", (), None)
    if status != 200:
        return None
    found: float | None = None
    try:
        for family in text_string_to_metric_families(body.decode("utf-8", "replace")):
            for sample in family.samples:
                if sample.name == HOT_CACHE_COUNT:
                    found = (found or 0.0) + sample.value
    except ValueError:
        return None
    return int(found) if found is not None else None


def _clear_port(http: Http, port: int) -> int:
    status, body = http("DELETE", CLEAR, (), None)
    if status == 503:
        raise WorkerError(f"port {port}: no LMCache engine answers there ({_text(body)}); it is not a worker port "
                          "(the scheduler's is internal_api_server_port_start + 0)")
    if status == 404:
        raise WorkerError(f"port {port}: DELETE {CLEAR} answered 404 ({_text(body)}): not LMCache's internal API")
    if status != 200:
        raise WorkerError(f"port {port}: DELETE {CLEAR} answered {status}: {_text(body)}")
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise WorkerError(f"port {port}: DELETE {CLEAR}: not JSON ({body[:100]!r})") from exc
    removed = answer.get("num_removed") if isinstance(answer, dict) else None
    if not isinstance(removed, int) or answer.get("status") != "success":
        raise WorkerError(f"port {port}: DELETE {CLEAR}: {_text(body)}")
    return removed


def _sum(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def clear_workers(http_for: PortHttp, ports: Sequence[int], *, dry_run: bool = False) -> WorkerClear:
    """``DELETE /cache/clear`` on every worker port of one pod, counting the CPU tier's chunks
    before and after on each.

    Raises:
        WorkerError: a port refused the clear (the message names it). Ports before it were
        cleared.
    """
    before: list[int | None] = []
    after: list[int | None] = []
    removed = 0
    for port in ports:
        http = http_for(port)
        before.append(hot_cache_count(http, port))
        if dry_run:
            continue
        removed += _clear_port(http, port)
        after.append(hot_cache_count(http, port))
    if dry_run:
        return WorkerClear(_sum(before), _sum(before), None, tuple(ports))
    return WorkerClear(_sum(before), _sum(after), removed, tuple(ports))
