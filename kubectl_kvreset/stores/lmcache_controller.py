"""Clearing one LMCache instance through its cache controller (in-process mode;
LMCache 0.5.6 ``lmcache/v1/api_server/__main__.py``, checked by ``tests/peers/test_stores_lmcache.py``).
Pure: every call goes through an ``http`` callable.

What LMCache 0.5.6 does, from its sources:

* ``GET /controller/workers?instance_id=ID`` (``lmcache/v1/internal_api_server/controller/
  worker_info_api.py::get_workers``) answers ``{"workers": [{..., "key_count": N}],
  "total_count": N}`` from the live registry, or 404 ``No workers found for instance ID``. Without
  ``instance_id`` it answers from a 30 s cache (``registry.get_all_worker_infos_cached``), so it is
  never used. ``key_count`` is ``WorkerNode.get_kv_count`` (``lmcache/v1/cache_controller/
  utils.py``): the chunks the worker reported for every location that sends key events, which in
  0.5.6 are ``LocalCPUBackend`` and ``LocalDiskBackend`` (their ``BatchedMessageSender``); a
  ``RemoteBackend``'s keys are not counted.
* ``POST /clear {"instance_id", "location"}`` (``lmcache/v1/api_server/__main__.py::clear``) sends
  ``ClearWorkerMsg(location)`` to every registered worker of the instance
  (``lmcache/v1/cache_controller/executor.py::LMCacheClusterExecutor.clear``) and answers
  ``{"event_id", "num_tokens"}``; every failure is a 500 ``{"detail": ...}``, an unknown instance
  too (its text, "The number of tokens cleared should be the same across all workers.", is the
  executor's assertion over an empty list). Each worker runs ``StorageManager.clear([location])``
  (``lmcache/v1/storage_backend/storage_manager.py``), which calls ``clear()`` only where the
  backend has one: in 0.5.6 only ``LocalCPUBackend`` (``local_cpu_backend.py::clear``, evictable
  objects only: pinned or in-use ones stay). ``LocalDiskBackend`` has none (LMCache PRs
  #1564 and #2341 closed) and neither has ``RemoteBackend``.
* The workers report removed keys to the controller asynchronously (batches every
  ``kv_msg_batch_timeout``, 10 ms), so ``key_count`` is read again until it settles.

Versions: the controller API is the same from 0.3.15 to 0.5.6 except that ``/controller/workers``
arrived with the internal API routes; where it is missing (FastAPI's 404 ``Not Found``) the clear
still runs but nothing can count what remains (``unconfirmed``). Before LMCache PR #1766
(2025-10-10) ``LocalCPUBackend.clear`` was a no-op; the key count after catches that.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CLEARABLE", "ControllerClear", "ControllerError", "Http", "NO_CLEAR", "clear_instance",
           "instance_workers", "locations_for"]

#: ``http(method, path, query, body)`` -> ``(status, body)``: one call to the controller's HTTP port.
Http = Callable[[str, str, Sequence[tuple[str, str]], "bytes | None"], tuple[int, bytes]]

#: Locations ``POST /clear`` empties in LMCache 0.5.6 (the backends that define ``clear()``).
CLEARABLE = ("LocalCPUBackend",)
#: Locations without a clear in 0.5.6 and what empties them instead.
NO_CLEAR = {
    "LocalDiskBackend": ("LMCache 0.5.6's LocalDiskBackend has no clear(): its *.pt files under local_disk "
                         "are deleted by the lmcache-disk row"),
    "RemoteBackend": ("LMCache 0.5.6's RemoteBackend has no clear(): the remote_url store is cleared by its "
                      "own row"),
}
WORKERS = "/controller/workers"
CLEAR = "/clear"
_NO_WORKERS = "No workers found"
_EXECUTOR_ASSERT = "should be the same across all workers"


class ControllerError(Exception):
    """The controller answered something the clear cannot use (the message says what)."""


@dataclass(frozen=True)
class ControllerClear:
    """What a clear of one instance did.

    Attributes:
        before, after: the instance's ``key_count`` summed over its workers (chunks), None when
            the controller has no ``/controller/workers``.
        tokens: ``num_tokens`` summed over the locations cleared (None on a dry run).
        workers: how many workers the controller lists for the instance (None when unknown).
        locations: the locations ``POST /clear`` was sent for.
        left: why nothing was cleared (an unknown instance), else None.
    """

    before: int | None
    after: int | None
    tokens: int | None
    workers: int | None
    locations: tuple[str, ...] = ()
    left: str | None = None


def _text(body: bytes) -> str:
    return body[:300].decode("utf-8", "replace")


def _detail(body: bytes) -> str:
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        return _text(body)
    if isinstance(answer, dict) and isinstance(answer.get("detail"), str):
        return str(answer["detail"])
    return _text(body)


def unknown_instance(instance_id: str) -> str:
    """The plain message for an instance the controller has no worker of."""
    return (f"the controller knows no worker of instance {instance_id}: no LMCache worker registered under that "
            "lmcache_instance_id (check the pods' lmcache_instance_id, controller_pull_url and "
            "controller_reply_url, and that they are serving), so its cache cannot be cleared through the controller")


def instance_workers(http: Http, instance_id: str) -> list[dict[str, Any]] | None:
    """The workers the controller lists for ``instance_id`` (``GET /controller/workers?instance_id=``).

    Returns:
        the worker records (each with ``worker_id``, ``ip``, ``port``, ``key_count``), or None
        when the controller has no such route (an older controller).

    Raises:
        ControllerError: an unknown instance (the message is :func:`unknown_instance`'s), or any
        other answer than 200.
    """
    status, body = http("GET", WORKERS, (("instance_id", instance_id),), None)
    if status == 404:
        detail = _detail(body)
        if detail.startswith(_NO_WORKERS):
            raise ControllerError(unknown_instance(instance_id))
        if detail == "Not Found":
            return None
    if status != 200:
        raise ControllerError(f"GET {WORKERS}?instance_id={instance_id} answered {status}: {_detail(body)}")
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise ControllerError(f"GET {WORKERS}: not JSON ({body[:100]!r})") from exc
    workers = answer.get("workers") if isinstance(answer, dict) else None
    if not isinstance(workers, list):
        raise ControllerError(f"GET {WORKERS}: no workers list in {_text(body)}")
    return [w for w in workers if isinstance(w, dict)]


def _keys(workers: list[dict[str, Any]] | None) -> int | None:
    if workers is None:
        return None
    counts = [w.get("key_count") for w in workers]
    if not all(isinstance(c, int) for c in counts):
        return None
    return sum(counts)  # type: ignore[arg-type]


def locations_for(local_disk: bool) -> tuple[str, ...]:
    """The locations to send ``POST /clear`` for: ``LocalCPUBackend``, and ``LocalDiskBackend``
    when the instance has a local disk (0.5.6 skips it, but a version with a disk clear empties
    it; the key count after says which)."""
    return CLEARABLE + (("LocalDiskBackend",) if local_disk else ())


def clear_instance(http: Http, instance_id: str, *, locations: Sequence[str] = CLEARABLE, dry_run: bool = False,
                   settle: Sequence[float] = (0.1, 0.2, 0.3, 0.5, 0.5, 1.0, 1.0, 1.0),
                   sleep: Callable[[float], None] = time.sleep) -> ControllerClear:
    """Empty ``locations`` of instance ``instance_id``: check its workers first, then
    ``POST /clear`` per location, then read ``key_count`` again (after each pause in ``settle``,
    seconds, until it is 0: the workers report removals asynchronously).

    Returns:
        a :class:`ControllerClear`; ``left`` is set (nothing sent) for an unknown instance.

    Raises:
        ControllerError: the controller refused a call (its ``detail`` is in the message).
    """
    try:
        workers = instance_workers(http, instance_id)
    except ControllerError as exc:
        if str(exc) == unknown_instance(instance_id):
            return ControllerClear(None, None, None, 0, left=str(exc))
        raise
    before = _keys(workers)
    count = len(workers) if workers is not None else None
    if dry_run:
        return ControllerClear(before, before, None, count)
    tokens = 0
    for location in locations:
        body = json.dumps({"instance_id": instance_id, "location": location}).encode()
        status, answer = http("POST", CLEAR, (), body)
        if status != 200:
            detail = _detail(answer)
            if _EXECUTOR_ASSERT in detail:
                if workers is None:
                    return ControllerClear(None, None, None, None, left=unknown_instance(instance_id))
                detail = (f"the {count} worker(s) of instance {instance_id} cleared different token counts, or one "
                          f"did not answer (controller: {detail})")
            raise ControllerError(f"POST {CLEAR} {location}: {status}: {detail}")
        try:
            num = json.loads(answer).get("num_tokens")
        except (ValueError, AttributeError) as exc:
            raise ControllerError(f"POST {CLEAR}: not the expected JSON ({answer[:100]!r})") from exc
        if not isinstance(num, int):
            raise ControllerError(f"POST {CLEAR}: no num_tokens in {_text(answer)}")
        tokens += num
    after = before
    if workers is not None:
        after = _keys(instance_workers(http, instance_id))
        for pause in settle:
            if after is None or after == 0:
                break
            sleep(pause)
            after = _keys(instance_workers(http, instance_id))
    return ControllerClear(before, after, tokens, count, tuple(locations))
