"""InfiniStore (LMCache ``remote_url`` ``infinistore://``): purged store-wide by ``POST /purge`` on
its manage port (``--manage-port``, default 18080), counted by ``GET /kvmap_len``
(:mod:`kubectl_kvreset.stores.infinistore`); each replica behind a Service holds its own map."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..infinistore import InfiniStoreError
from ..records import StoreResult
from .base import Kind, Reach, StoreKind

if TYPE_CHECKING:
    from ..address import Address
    from ..records import Endpoint, FoundStore, StoreCall

__all__ = ["InfiniStore"]


class InfiniStore(Kind):
    """An InfiniStore server; its manage port ``--manage-port`` 18080."""

    name = StoreKind.INFINISTORE
    schemes: Mapping[str, int | None] = {"infinistore": None}
    admin_flags = ("--manage-port", "--manage_port")
    admin_default: int = 18080
    clears = True
    every_endpoint = True
    errors = (InfiniStoreError,)

    def method(self, store: FoundStore, model: str | None) -> str:
        """``POST /purge``."""
        return "POST /purge"

    def clear(self, reach: Reach, call: StoreCall, ep: Endpoint, dry_run: bool) -> StoreResult:
        """``/purge`` on the manage port, ``/kvmap_len`` before and after."""
        from ..infinistore import clear_infinistore

        port = self.admin_port(reach.pod(ep)) or self.admin_default
        via = f"{ep.namespace}/{ep.name}:{port}"
        done = clear_infinistore(reach.http(ep, port), dry_run=dry_run)
        if dry_run:
            return StoreResult("planned", done.before, done.after, via=via)
        if not done.confirmed:
            return StoreResult("unconfirmed", done.before, None, via=via, message=(
                f"POST /purge answered ok (num {done.purged}), but the server does not answer GET /kvmap_len: "
                "nothing confirms the map is empty"))
        result = "emptied" if done.after == 0 else "left"
        msg = None if result == "emptied" else f"{done.after} key(s) remain (written meanwhile?)"
        return StoreResult(result, done.before, done.after, via=via, message=msg)

    def remedy(self, address: Address | None, model: str | None = None) -> str:
        """``/purge`` on the manage port."""
        return f"POST http://{self.host(address)}:{self.admin_default}/purge on the InfiniStore server"
