"""Clearing a Mooncake master (``kvcache-ai/Mooncake``; checked by
``tests/peers/test_stores_redis_mooncake.py``).

``POST /api/v1/remove_all?force=true`` on the master's admin port (``--metrics_port``,
default 9003) answers ``{"success":true,"removed_count":N}`` (Mooncake
``mooncake-store/src/master_admin_service.cpp::HandleRemoveAll``, Mooncake PR #2676, first released in
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
    """The master answered something the clear cannot use (message says what).

    ``before``: the ``master_key_count`` read before the failing call (None when the failure
    came first), so the row keeps it.
    """

    def __init__(self, message: str, before: int | None = None) -> None:
        super().__init__(message)
        self.before = before


@dataclass(frozen=True)
class MooncakeClear:
    """``before``/``after``: ``master_key_count``; ``removed``: the master's
    ``removed_count`` (None on a dry run or when it was not called); ``left`` with the reason
    when the call is missing (404); ``unknown`` with the reason when ``remove_all`` was sent and
    no answer came (a hung master, a timeout): ``after`` is then the count read afterwards,
    None when the master did not answer that either."""

    before: int | None
    after: int | None
    removed: int | None
    left: str | None = None
    unknown: str | None = None


def key_count(http: Http) -> int | None:
    """``master_key_count`` from ``GET /metrics`` (Prometheus text, read with
    ``prometheus_client``'s parser); None when the master does not export it.

    Raises:
        MooncakeError: ``/metrics`` did not answer 200.
    """
    from ..lazyimport import prometheus_parser
    text_string_to_metric_families = prometheus_parser().text_string_to_metric_families

    status, body = http("GET", "/metrics", ())
    if status != 200:
        raise MooncakeError(f"GET /metrics answered {status}: {body[:200].decode('utf-8', 'replace')}")
    for family in text_string_to_metric_families(body.decode("utf-8", "replace")):
        for sample in family.samples:
            if sample.name == "master_key_count":
                return int(sample.value)
    return None


def clear_master(http: Http, *, dry_run: bool = False,
                 refused: Callable[[Exception], bool] = lambda exc: False) -> MooncakeClear:
    """Empty the whole Mooncake store (``remove_all?force=true``), counting keys before and after.

    ``refused(exc)`` says whether an exception ``http`` raised for the ``remove_all`` call means
    the call never reached the master (an authorisation refusal): it is then a
    :class:`MooncakeError` with ``before``, caused by ``exc``.
    Any other exception from that call (a timeout, a broken stream, the API server's 503 for
    a master that does not answer) leaves the outcome unknown: the count is read again and the
    result says so in ``unknown``.

    Raises:
        MooncakeError: ``/metrics`` failed, or ``remove_all`` answered neither 200 nor 404,
        or ``success`` was false (``before`` set when it was read).
    """
    before = key_count(http)
    if dry_run:
        return MooncakeClear(before, before, None)
    try:
        status, body = http("POST", REMOVE_ALL, (("force", "true"),))
    except Exception as exc:
        if refused(exc):
            raise MooncakeError(f"POST {REMOVE_ALL} was refused: {exc}", before) from exc
        return MooncakeClear(before, _count_again(http), None, unknown=f"POST {REMOVE_ALL} got no answer ({exc})")
    if status == 404:
        return MooncakeClear(before, before, None, left=OLD_MASTER_REMEDY)
    if status != 200:
        raise MooncakeError(f"POST {REMOVE_ALL} answered {status}: {body[:200].decode('utf-8', 'replace')}", before)
    try:
        answer = json.loads(body or b"{}")
    except ValueError as exc:
        raise MooncakeError(f"POST {REMOVE_ALL}: not JSON ({body[:100]!r})", before) from exc
    if not answer.get("success", False):
        raise MooncakeError(f"POST {REMOVE_ALL}: {answer}", before)
    removed = answer.get("removed_count")
    try:
        after = key_count(http)
    except Exception as exc:  # the clear was answered; only the count after it is missing
        return MooncakeClear(before, None, int(removed) if isinstance(removed, int) else None,
                             unknown=f"remove_all answered, but GET /metrics did not afterwards ({exc})")
    return MooncakeClear(before, after, int(removed) if isinstance(removed, int) else None)


def _count_again(http: Http) -> int | None:
    """``master_key_count`` after a call whose outcome is unknown; None when that fails too."""
    try:
        return key_count(http)
    except Exception:  # the master or the path to it is down: nothing counts what remains
        return None
