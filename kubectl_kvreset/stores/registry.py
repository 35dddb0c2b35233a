"""The registry of store kinds: one line per kind in :data:`KINDS` (its class lives in its own
module of :mod:`kubectl_kvreset.stores.kinds`, :class:`~.kinds.base.Kind` says what a kind
provides). Everything that differs by kind
(``remote_url`` schemes, default and admin ports, consent scope, the call, the clear, the
remedy, the errors) is looked up here. Pure: no I/O."""

from __future__ import annotations

from .kinds.base import Kind, Other
from .kinds.infinistore import InfiniStore
from .kinds.lmcache import LMCacheController, LMCacheMP, LMCacheServer, LMCacheWorker
from .kinds.mooncake import Mooncake
from .kinds.names import KindId, StoreKind
from .kinds.redis import Redis, Valkey

__all__ = ["CONNECTORS", "KINDS", "Kind", "KindId", "StoreKind", "kind_for_connector", "kind_for_scheme", "kind_of",
           "scheme_port"]

#: Every store kind, one per line. ``Other`` (no clear, the generic remedy) is the fallback.
KINDS: tuple[Kind, ...] = (
    Redis(),
    Valkey(),
    Mooncake(),
    LMCacheController(),
    LMCacheWorker(),
    LMCacheMP(),
    LMCacheServer(),
    InfiniStore(),
    Other(),
)



def _unique(what: str, pairs: list[tuple[str, Kind]]) -> dict[str, Kind]:
    """``pairs`` as a mapping; raises ``ValueError`` naming both kinds when two kinds give the same
    ``what`` (a name, a scheme or a connector): a later kind never takes another's stores over."""
    found: dict[str, Kind] = {}
    for key, kind in pairs:
        if key in found:
            raise ValueError(f"store kinds {type(found[key]).__name__} and {type(kind).__name__} both claim "
                             f"the {what} {key!r}: give each kind its own")
        found[key] = kind
    return found


_BY_NAME: dict[str, Kind] = _unique("name", [(k.name.value, k) for k in KINDS])
_BY_SCHEME: dict[str, Kind] = _unique("remote_url scheme", [(s, k) for k in KINDS for s in k.schemes])
_BY_CONNECTOR: dict[str, Kind] = _unique("connector", [(c, k) for k in KINDS for c in k.connectors])
_OTHER: Kind = _BY_NAME[StoreKind.OTHER.value]


def kind_of(name: KindId | str) -> Kind:
    """The kind named ``name`` (a :class:`StoreKind` member, a :class:`~.kinds.base.KindName` or its
    string); :class:`~.kinds.base.Other` for a name no kind has."""
    return _BY_NAME.get(getattr(name, "value", name), _OTHER)


def kind_for_scheme(scheme: str) -> Kind:
    """The kind an LMCache ``remote_url`` scheme names (lower case); :class:`~.kinds.base.Other` when
    none does (LMCache ``lmcache/v1/storage_backend/connector/__init__.py``)."""
    return _BY_SCHEME.get(scheme, _OTHER)


def kind_for_connector(name: str) -> Kind | None:
    """The kind a vLLM ``kv_connector`` of that name uses as its store
    (:meth:`~.kinds.base.Kind.connector_use` reads where), None for other connectors."""
    return _BY_CONNECTOR.get(name)


#: Every ``kv_connector`` name some kind is reached through.
CONNECTORS: frozenset[str] = frozenset(_BY_CONNECTOR)


def scheme_port(scheme: str) -> int | None:
    """The port an address of ``scheme`` defaults to (Redis 6379, Sentinel 26379, Mooncake
    50051), None when the scheme gives none."""
    kind = _BY_SCHEME.get(scheme)
    return kind.schemes.get(scheme) if kind is not None else None
