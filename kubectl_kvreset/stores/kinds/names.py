"""The names of the store kinds, as rows and JSON output show them. A leaf: the records and
the kinds' protocol modules import it, the kinds' classes (:mod:`.base`) carry the facts."""

from __future__ import annotations

from enum import Enum

__all__ = ["KindId", "KindName", "StoreKind"]


class StoreKind(str, Enum):
    """The names of the kinds this version knows (the table of README "clear-store"); the
    value is what rows and JSON output show. A kind added later may name itself with a
    :class:`KindName` instead."""

    LMCACHE_CONTROLLER = "lmcache-controller"
    LMCACHE_WORKER = "lmcache-worker"
    LMCACHE_MP = "lmcache-mp"
    REDIS = "redis"
    VALKEY = "valkey"
    MOONCAKE = "mooncake-master"
    LMCACHE_SERVER = "lmcache-server"
    INFINISTORE = "infinistore"
    OTHER = "other"


class KindName(str):
    """A kind's name outside :class:`StoreKind`: a string whose ``value`` is itself, as a
    :class:`StoreKind` member's is (the output reads ``kind.value``)."""

    __slots__ = ()

    @property
    def value(self) -> str:
        """The name as output shows it."""
        return str(self)


#: A kind's name as :class:`~kubectl_kvreset.stores.config.StoreUse` and rows carry it.
KindId = StoreKind | KindName
