"""The Mooncake master (``MooncakeStoreConnector``, LMCache ``remote_url`` ``mooncakestore://``):
emptied store-wide by ``POST /api/v1/remove_all?force=true`` on its HTTP port (``--metrics_port``,
default 9003), counted by ``master_key_count`` (:mod:`kubectl_kvreset.stores.mooncake`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..mooncake import MooncakeError
from ..podenv import Unread
from ..records import StoreResult, StoreUse
from .base import AddressReader, Kind, Reach, StoreKind

if TYPE_CHECKING:
    from ..address import Address
    from ..records import Endpoint, FoundStore, StoreCall

__all__ = ["Mooncake", "mooncake_master_address"]


def mooncake_master_address(cfg: Mapping[str, Any]) -> str | None:
    """The master address of a Mooncake config (``MOONCAKE_CONFIG_PATH`` JSON or a connector's
    extra config): ``master_server_address`` or ``mooncake_master_server_addr`` (both spellings
    are in use: llm-d's ConfigMap uses the first, Mooncake's own setup reads the second)."""
    for key in ("master_server_address", "mooncake_master_server_addr"):
        if isinstance(cfg.get(key), str) and cfg[key]:
            return str(cfg[key])
    return None


class Mooncake(Kind):
    """The Mooncake master: its RPC port 50051, its admin port ``--metrics_port`` 9003."""

    name = StoreKind.MOONCAKE
    connectors = ("MooncakeStoreConnector",)
    schemes: Mapping[str, int | None] = {"mooncakestore": 50051}
    admin_flags = ("--metrics_port", "--metrics-port")
    admin_default: int = 9003
    clears = True
    errors = (MooncakeError,)

    def address_text(self, url: str, options: Mapping[str, Any]) -> str:
        """``extra_config``'s ``mooncake_master_server_addr`` (Mooncake 0.3.13 ignores
        ``master_server_address`` there), else the URL's host and port."""
        return str(options.get("mooncake_master_server_addr") or url.split("://", 1)[1])

    def connector_use(self, extra: Mapping[str, Any], env: Mapping[str, str], files: Mapping[str, Any],
                      read: AddressReader) -> StoreUse:
        """``MooncakeStoreConnector``: the master its extra config names, else the JSON file
        ``MOONCAKE_CONFIG_PATH`` names, else ``MOONCAKE_MASTER`` (port 50051 by default)."""
        notes: list[str] = []
        text = mooncake_master_address(extra)
        source = "kv_connector_extra_config"
        path = env.get("MOONCAKE_CONFIG_PATH")
        if text is None and path:
            content = files.get(path)
            if isinstance(content, str):
                try:
                    cfg = json.loads(content)
                except ValueError as exc:
                    notes.append(f"MOONCAKE_CONFIG_PATH {path}: not JSON ({exc})")
                    cfg = {}
                text = mooncake_master_address(cfg) if isinstance(cfg, Mapping) else None
                source = f"MOONCAKE_CONFIG_PATH {path}"
                if text is None and not notes:
                    notes.append(f"MOONCAKE_CONFIG_PATH {path}: no master_server_address in it")
            else:
                why = content.reason if isinstance(content, Unread) else "not read"
                notes.append(f"MOONCAKE_CONFIG_PATH {path}: {why}")
        if text is None and env.get("MOONCAKE_MASTER"):
            text, source = env["MOONCAKE_MASTER"], "env MOONCAKE_MASTER"
        if text is None and not path:
            notes.append("no Mooncake master address in the configuration")
        addr = read(text, source, notes, default_port=self.schemes["mooncakestore"]) if text else None
        return StoreUse(self.name, addr, "store", source=source, notes=tuple(notes))

    def method(self, store: FoundStore, model: str | None) -> str:
        """``POST /api/v1/remove_all?force=true``."""
        return "POST /api/v1/remove_all?force=true"

    def clear(self, reach: Reach, call: StoreCall, ep: Endpoint, dry_run: bool) -> StoreResult:
        """``remove_all`` on the master's admin port, ``master_key_count`` before and after."""
        from ..mooncake import clear_master

        port = self.admin_port(reach.pod(ep)) or self.admin_default
        via = f"{ep.namespace}/{ep.name}:{port}"
        api_error = reach.api_error

        def refused(exc: Exception) -> bool:
            # an API server answer below 500 (403, 404, 429) means the call did not reach the master
            return isinstance(exc, api_error) and int(getattr(exc, "status", 500)) < 500

        try:
            mc = clear_master(reach.http(ep, port), dry_run=dry_run, refused=refused)
        except MooncakeError as exc:
            if exc.before is None:
                raise
            cause = exc.__cause__
            return StoreResult("failed", exc.before, None, via=via,
                               message=reach.refusal(call, cause) if isinstance(cause, api_error) else str(exc))
        if dry_run:
            return StoreResult("planned", mc.before, mc.after, via=via)
        if mc.left:
            return StoreResult("left", mc.before, mc.after, via=via, message=mc.left)
        if mc.unknown:
            if mc.after == 0:
                return StoreResult("emptied", mc.before, 0, via=via,
                                   message=f"{mc.unknown}; master_key_count is 0 afterwards")
            counted = ("nothing counted what remains" if mc.after is None
                       else f"master_key_count is {mc.after} afterwards: the clear may still be running, "
                       "or did not happen")
            return StoreResult("unconfirmed", mc.before, mc.after, via=via, message=f"{mc.unknown}; {counted}")
        result = "emptied" if mc.after == 0 else "left"
        msg = None if result == "emptied" else (
            f"{mc.after} key(s) remain (objects with pending replication, or written meanwhile)")
        return StoreResult(result, mc.before, mc.after, via=via, message=msg)

    def remedy(self, address: Address | None, model: str | None = None) -> str:
        """``remove_all`` on the master's admin port."""
        return (f"POST http://{self.host(address)}:{self.admin_default}/api/v1/remove_all?force=true on the "
                "Mooncake master (its metrics_port)")
