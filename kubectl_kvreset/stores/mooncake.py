"""Clearing a Mooncake master (research/lmcache.md §5, research/real-peers.md §4).

``POST /api/v1/remove_all?force=true`` on the master's admin port (``--metrics_port``,
default 9003) answers ``{"success":true,"removed_count":N}`` (Mooncake
``mooncake-store/src/master_admin_service.cpp::HandleRemoveAll``, PR #2676, first released in
v0.3.12.post1; older masters answer 404). Without ``force`` objects inside their lease stay.
It is store-wide: every instance's objects go. The count is ``master_key_count`` on
``GET /metrics`` of the same port, read before and after.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["MooncakeClear", "MooncakeError", "clear_master", "key_count"]

#: ``http(method, path, query)`` -> ``(status, body)``: one HTTP call to the admin port.
Http = Callable[[str, str, Sequence[tuple[str, str]]], tuple[int, bytes]]

REMOVE_ALL = "/api/v1/remove_all"
OLD_MASTER_REMEDY = ("the master predates v0.3.12.post1 (no remove_all on its admin port): upgrade it, run "
                     "MooncakeDistributedStore().remove_all(True) from a client, or restart the master "
                     "without snapshot restore (disruptive)")


class MooncakeError(Exception):
    """The master answered something the clear cannot use (message says what)."""


@dataclass(frozen=True)
class MooncakeClear:
    """``before``/``after``: ``master_key_count``; ``removed``: the master's
    ``removed_count`` (None on a dry run or when it was not called); ``left`` with the reason
    when the call is missing (404)."""

    before: int | None
    after: int | None
    removed: int | None
    left: str | None = None


def key_count(http: Http) -> int | None:
    """``master_key_count`` from ``GET /metrics`` (Prometheus text, read with
    ``prometheus_client``'s parser); None when the master does not export it.

    Raises:
        MooncakeError: ``/metrics`` did not answer 200.
    """
    from prometheus_client.parser import text_string_to_metric_families

    status, body = http("GET", "/metrics", ())
    if status != 200:
        raise MooncakeError(f"GET /metrics answered {status}: {body[:200].decode('utf-8', 'replace')}")
    for family in text_string_to_metric_families(body.decode("utf-8", "replace")):
        for sample in family.samples:
            if sample.name == "master_key_count":
                return int(sample.value)
    return None


def clear_master(http: Http, *, dry_run: bool = False) -> MooncakeClear:
    """Empty the whole Mooncake store (``remove_all?force=true``), counting keys before and after.

    Raises:
        MooncakeError: ``/metrics`` failed, or ``remove_all`` answered neither 200 nor 404,
        or ``success`` was false.
    """
    before = key_count(http)
    if dry_run:
        return MooncakeClear(before, before, None)
    status, body = http("POST", REMOVE_ALL, (("force", "true"),))
    if status == 404:
        return MooncakeClear(before, before, None, left=OLD_MASTER_REMEDY)
    if status != 200:
        raise MooncakeError(f"POST {REMOVE_ALL} answered {status}: {body[:200].decode('utf-8', 'replace')}")
    try:
        answer = json.loads(body or b"{}")
    except ValueError as exc:
        raise MooncakeError(f"POST {REMOVE_ALL}: not JSON ({body[:100]!r})") from exc
    if not answer.get("success", False):
        raise MooncakeError(f"POST {REMOVE_ALL}: {answer}")
    removed = answer.get("removed_count")
    return MooncakeClear(before, key_count(http), int(removed) if isinstance(removed, int) else None)
