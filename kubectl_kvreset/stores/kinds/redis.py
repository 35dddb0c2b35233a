"""Redis and Valkey (LMCache ``remote_url`` ``redis://``, ``rediss://``, ``unix://``,
``redis-sentinel://``, ``redis-cluster://``, ``resp://``, ``valkey://``): cleared per model, the
``<model>@*`` keys of LMCache's layout (:mod:`kubectl_kvreset.stores.redisclear`), over
``pods/portforward`` to each pod behind the Service (independent pods, a Valkey cluster's nodes:
``SCAN`` covers only the node it is sent to)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..records import StoreResult
from ..redisclear import RedisStoreError
from .base import Kind, Reach, StoreKind

if TYPE_CHECKING:
    from ..address import Address
    from ..records import Endpoint, FoundStore, StoreCall

__all__ = ["Redis", "Valkey", "redis_cli_remedy"]


def redis_cli_remedy(address: Address | None, model: str | None) -> str:
    """The ``redis-cli`` pipeline that removes ``model``'s LMCache keys: the same connection
    options on both sides (``-s`` for a Unix socket, ``-h``/``-p``, ``-n`` for a database in the
    URL, ``--tls`` for ``rediss``; credentials are left to ``REDISCLI_AUTH``, never printed), and
    the glob-escaped ``<model>@*`` pattern the plugin's own ``SCAN`` uses, then a ``grep -E`` for
    LMCache's key layout (``<model>@<world size>@<worker>@<hash>@``, as
    :func:`kubectl_kvreset.stores.redisclear.is_model_key`) so that the keys of a model whose
    name starts with ``<model>@`` (``org/m@v2`` for ``org/m``) are kept."""
    from ..address import glob_escape

    if address is not None and address.path:
        conn = f"-s {shlex.quote(address.path)}"
    else:
        conn = f"-h {address.host if address else 'HOST'} -p {(address.port if address else None) or 6379}"
    if address is not None and address.db:
        conn += f" -n {address.db}"
    if address is not None and address.tls:
        conn += " --tls"
    pattern = shlex.quote(f"{glob_escape(model)}@*") if model else "'<model>@*'"
    ere = re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", model) if model else "<model>"
    layout = shlex.quote(f"^{ere}@-?[0-9]+@-?[0-9]+@-?[0-9a-f]+@[a-z0-9_]+(@|kv_bytes$|metadata$|:|$)")
    return (f"redis-cli {conn} --scan --pattern {pattern} | grep -E {layout} | "
            f"xargs -r redis-cli {conn} UNLINK")


class Redis(Kind):
    """Redis: the model's keys go with ``SCAN MATCH`` + ``UNLINK`` (port 6379, Sentinel 26379)."""

    name = StoreKind.REDIS
    schemes: Mapping[str, int | None] = {"redis": 6379, "rediss": 6379, "unix": None, "redis-sentinel": 26379,
                                         "redis-cluster": 6379, "resp": 6379}
    scope = "model"
    clears = True
    every_endpoint = True
    errors = (RedisStoreError,)
    #: ``valkey_username``/``valkey_password`` of LMCache's ``extra_config`` are sent (Valkey only).
    credentials = False

    def address_text(self, url: str, options: Mapping[str, Any]) -> str:
        """LMCache's multi-sentinel form ``redis-sentinel://h1:p1,h2:p2``: the first sentinel."""
        scheme, _, rest = url.partition("://")
        if scheme.lower() == "redis-sentinel" and "," in rest.split("/", 1)[0]:
            return f"{scheme.lower()}://{rest.split(',', 1)[0]}"
        return url

    def method(self, store: FoundStore, model: str | None) -> str:
        """``SCAN MATCH '<model>@*' + UNLINK`` (a cluster's pattern hash-tagged)."""
        from ..redisclear import model_pattern

        cluster = str((store.users[0].use.extra or {}).get("valkey_mode", "")).lower() == "cluster"
        return f"SCAN MATCH '{model_pattern(model or '', cluster=cluster)}' + UNLINK"

    def clear(self, reach: Reach, call: StoreCall, ep: Endpoint, dry_run: bool) -> StoreResult:
        """The model's keys on this one pod; ``left`` when some remain or are unsure."""
        from ..redisclear import clear_model_keys

        store = call.store
        port = ep.port or (store.address.port if store.address else None) or 6379
        via = f"{ep.namespace}/{ep.name}:{port}"
        extra = store.users[0].use.extra or {}
        try:
            done = clear_model_keys(lambda: reach.socket(ep, port),
                                    store.address, call.model or "",  # type: ignore[arg-type]
                                    password=extra.get("valkey_password") if self.credentials else None,
                                    username=extra.get("valkey_username") if self.credentials else None,
                                    cluster=str(extra.get("valkey_mode", "")).lower() == "cluster",
                                    dry_run=dry_run, timeout_s=reach.timeout_s)
        except RedisStoreError as exc:
            if exc.partial is None:
                raise
            # the clear stopped part-way: the row keeps what it counted (the message says what was deleted)
            return StoreResult("failed", exc.partial.before, None, via=via, message=str(exc))
        kept = (f"{done.kept} key(s) matching {done.pattern!r} are not in the layout of {call.model}'s keys "
                "(another model's name starts with it): kept") if done.kept else None
        unsure = (f"{done.unsure_owner} key(s) in the layout of {call.model}'s keys also read as keys of a model "
                  f"whose name starts with or extends {call.model!r} (their tags look like a key's numbers): "
                  "LMCache writes the same string for both, so they were kept") if done.unsure_owner else None
        if dry_run:
            return StoreResult("planned", done.before, done.after, via=via,
                               message="; ".join(m for m in (unsure, kept) if m) or None)
        notes = []
        if unsure:
            notes.append(unsure)
        if done.after:
            notes.append(f"{done.after} key(s) of {call.model} remain (written meanwhile?)")
        if done.reconnects:
            notes.append(f"the port-forward stream was lost {done.reconnects} time(s) and the clear went on over "
                         f"a new one; {done.removed} key(s) deleted")
        if kept:
            notes.append(kept)
        result = "emptied" if done.after == 0 and not done.unsure_owner else "left"
        return StoreResult(result, done.before, done.after, via=via, message="; ".join(notes) or None)

    def remedy(self, address: Address | None, model: str | None = None) -> str:
        """The ``redis-cli`` pipeline (:func:`redis_cli_remedy`)."""
        where = address.display() if address else "the store"
        return f"from where {where} is reachable: {redis_cli_remedy(address, model)}"


class Valkey(Redis):
    """Valkey: as Redis, with LMCache's ``valkey_username``/``valkey_password``/``valkey_mode``."""

    name = StoreKind.VALKEY
    schemes: Mapping[str, int | None] = {"valkey": 6379}
    credentials = True
