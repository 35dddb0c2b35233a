"""Purging an InfiniStore server (``bytedance/InfiniStore`` ``infinistore/server.py``).

LMCache's ``infinistore://HOST:PORT`` names the server's data plane (``--service-port``,
default 22345; ``lmcache/v1/storage_backend/connector/infinistore_adapter.py`` passes the URL's
port as ``service_port``). The clear is on its control plane, a FastAPI app on
``--manage-port`` (default 18080) of the same pod (``bytedance/InfiniStore``
``infinistore/server.py``):

* ``POST /purge`` empties the whole key map and answers ``{"status": "ok", "num": N}``, N being
  the map's length read just before the purge;
* ``GET /kvmap_len`` answers ``{"len": N}``, the number of keys in the map.

The purge is store-wide (every instance's keys go). The count is ``/kvmap_len`` before and
after; where a server does not answer it (404), the purge's own ``num`` gives ``before`` and
nothing proves the map empty afterwards, so the result is ``unconfirmed``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["InfiniStoreClear", "InfiniStoreError", "PURGE", "clear_infinistore", "kvmap_len"]

#: ``http(method, path, query)`` -> ``(status, body)``: one HTTP call to the manage port.
Http = Callable[[str, str, Sequence[tuple[str, str]]], tuple[int, bytes]]

PURGE = "/purge"
KVMAP_LEN = "/kvmap_len"


class InfiniStoreError(Exception):
    """The server answered something the purge cannot use (the message says what)."""


@dataclass(frozen=True)
class InfiniStoreClear:
    """What a purge did.

    Attributes:
        before, after: keys in the map (``/kvmap_len``), None when it cannot be read.
        purged: the purge's ``num`` (keys in the map when it ran), None on a dry run.
        confirmed: ``after`` was read from the server after the purge.
    """

    before: int | None
    after: int | None
    purged: int | None
    confirmed: bool


def _json(status: int, body: bytes, what: str) -> dict[str, Any]:
    text = body[:200].decode("utf-8", "replace")
    if status != 200:
        raise InfiniStoreError(f"{what} answered {status}: {text}")
    try:
        doc = json.loads(body or b"{}")
    except ValueError as exc:
        raise InfiniStoreError(f"{what}: not JSON ({text!r})") from exc
    if not isinstance(doc, dict):
        raise InfiniStoreError(f"{what}: not a JSON object ({text!r})")
    return doc


def kvmap_len(http: Http) -> int | None:
    """Keys in the map: ``len`` of ``GET /kvmap_len``; None when the server has no such route
    (404).

    Raises:
        InfiniStoreError: another status, or an answer without an integer ``len``.
    """
    status, body = http("GET", KVMAP_LEN, ())
    if status == 404:
        return None
    doc = _json(status, body, f"GET {KVMAP_LEN}")
    value = doc.get("len")
    if not isinstance(value, int) or isinstance(value, bool):
        raise InfiniStoreError(f"GET {KVMAP_LEN}: no integer 'len' in {doc}")
    return value


def clear_infinistore(http: Http, *, dry_run: bool = False) -> InfiniStoreClear:
    """Purge the whole map (``POST /purge``), counting keys before and after.

    With ``dry_run`` only ``/kvmap_len`` is read.

    Raises:
        InfiniStoreError: ``/kvmap_len`` or ``/purge`` answered an error, or the purge's
        ``status`` was not ``ok``.
    """
    before = kvmap_len(http)
    if dry_run:
        return InfiniStoreClear(before, before, None, before is not None)
    status, body = http("POST", PURGE, ())
    doc = _json(status, body, f"POST {PURGE}")
    if doc.get("status") != "ok":
        raise InfiniStoreError(f"POST {PURGE}: {doc}")
    num = doc.get("num")
    purged = num if isinstance(num, int) and not isinstance(num, bool) else None
    after = kvmap_len(http)
    if before is None:
        before = purged
    return InfiniStoreClear(before, after, purged, after is not None)
