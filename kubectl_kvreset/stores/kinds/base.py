"""The store-kind seam: one :class:`Kind` subclass per kind of shared store (one base class per
extension point), one line per kind in :mod:`kubectl_kvreset.stores.kinds`.

A kind says how a vLLM pod's configuration names it (``remote_url`` schemes and their default
ports), where its HTTP admin port is, which consent scope its clear has (per model or the
whole store), which call the row's METHOD shows, how one endpoint pod of it is cleared and
confirmed (through a :class:`Reach`, so the kind itself does no I/O of its own), what a user
runs where the plugin cannot reach it, and which errors its calls raise. Pure: no I/O; the
kinds' protocol modules (``redisclear``, ``mooncake``...) are imported where used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .names import KindId, KindName, StoreKind

if TYPE_CHECKING:
    from ..address import Address
    from ..records import Endpoint, FoundStore, StoreCall, StoreResult, StoreUse

__all__ = ["AddressReader", "Http", "Kind", "KindId", "KindName", "Other", "Reach", "StoreKind", "flag_value"]


#: ``http(method, path, query=(), body=None) -> (status, body bytes)`` to one port of one pod.
Http = Callable[..., tuple[int, bytes]]


#: ``read(text, source, notes, default_port=None)`` -> the parsed address, or None after
#: appending to ``notes`` why ``text`` (read from ``source``) is no address; the port defaults
#: to ``default_port``, else to the scheme's kind's (:func:`kubectl_kvreset.stores.config.parse_address`).
AddressReader = Callable[..., "Address | None"]


class Reach(Protocol):
    """How a kind's :meth:`Kind.clear` reaches a store pod: over the API server
    (:class:`kubectl_kvreset.stores.clear.KubeReach`), or a test's fake.

    Attributes:
        api_error: the exception type of an answer the API server itself gave (403, 404 of
            the pod, 503), as opposed to the store's own answer; it has ``status`` (int).
        timeout_s: seconds each call may take.
    """

    api_error: type[Exception]
    timeout_s: float

    def http(self, ep: Endpoint, port: int) -> Http:
        """An :data:`Http` to ``port`` of the endpoint's pod (``pods/proxy``)."""

    def socket(self, ep: Endpoint, port: int) -> Any:
        """A connected socket to ``port`` of the endpoint's pod (``pods/portforward``)."""

    def pod(self, ep: Endpoint) -> Mapping[str, Any] | None:
        """The endpoint's pod object, None when it cannot be read (ports fall back to defaults)."""

    def refusal(self, call: StoreCall, exc: Exception) -> str:
        """The row message for the API server's refusal ``exc`` (an :attr:`api_error`)."""

    def display(self, url: str) -> str:
        """A store URL as a message shows it: without credentials, its port defaulted by its
        scheme's kind (``"an unparsable address"`` when it does not parse)."""


def flag_value(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the last ``--flag VALUE`` or ``--flag=VALUE`` of ``names`` in ``argv``."""
    value = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value


class Kind:
    """One kind of shared store. Subclasses set the class attributes and override what their
    store does differently; the defaults describe a store the plugin knows by name only
    (listed as a row, never cleared, with a generic remedy).

    Attributes:
        name: the kind's name in rows and JSON (a :class:`StoreKind` member or a
            :class:`KindName`).
        connectors: vLLM ``kv_connector`` names whose ``kv_connector_extra_config`` names this
            store (:meth:`connector_use` reads it).
        schemes: LMCache ``remote_url`` scheme -> the port the address defaults to (None: no
            default) for the schemes that name this kind
            (``lmcache/v1/storage_backend/connector/__init__.py``).
        admin_flags: the store pod's flags naming its HTTP admin port (first found wins).
        admin_default: that port when no flag names it; None for kinds without one (Redis).
        scope: what a clear removes, hence its consent rule (:mod:`kubectl_kvreset.stores.calls`):
            ``"model"`` (the model's keys), ``"store"`` (everything), ``"instance"`` (one
            LMCache instance id at a controller), ``"worker"`` (the vLLM pod's own workers).
        clears: whether this version clears the kind (it then overrides :meth:`method` and
            :meth:`clear`).
        every_endpoint: each pod behind a Service holds keys of its own, so the clear goes to
            every endpoint and the row sums them.
        per_pod: two pods' uses are one store only when they reach the same pod (the worker
            API inside each vLLM pod).
        unit: what ``before``/``after`` count when no call counted (``keys``; ``objects``).
        errors: the exceptions :meth:`clear` raises for the store's answer (a ``failed`` row).
    """

    name: KindId = StoreKind.OTHER
    connectors: tuple[str, ...] = ()
    schemes: Mapping[str, int | None] = {}
    admin_flags: tuple[str, ...] = ()
    admin_default: int | None = None
    scope: str = "store"
    clears: bool = False
    every_endpoint: bool = False
    per_pod: bool = False
    unit: str = "keys"
    errors: tuple[type[Exception], ...] = ()

    def address_text(self, url: str, options: Mapping[str, Any]) -> str:
        """The address to parse for a ``remote_url`` of this kind (``options``: LMCache's
        ``extra_config``); the URL itself unless the kind reads it elsewhere."""
        return url

    def connector_use(self, extra: Mapping[str, Any], env: Mapping[str, str], files: Mapping[str, Any],
                      read: AddressReader) -> StoreUse:
        """The use of this store a server configured with one of :attr:`connectors` makes.

        Args:
            extra: the connector's ``kv_connector_extra_config``.
            env: the container environment (:func:`~kubectl_kvreset.stores.podenv.resolve_env`).
            files: path -> file text, or :class:`~kubectl_kvreset.stores.podenv.Unread`.
            read: parses an address (:data:`AddressReader`).

        Never raises on odd configurations: what cannot be known is in the use's ``notes``.
        """
        raise NotImplementedError(f"{self.name.value} is named by no connector")

    def settings_use(self, settings: Mapping[str, Any], sources: Mapping[str, str], *, model: str | None,
                     world: int, read: AddressReader) -> StoreUse | None:
        """The use an in-process LMCache (``LMCacheConnectorV1``) makes of this store, None when
        its settings do not switch it on (a store named by ``remote_url`` is chosen by scheme
        instead: :attr:`schemes`).

        Args:
            settings: LMCache's settings, key -> value
                (:func:`~kubectl_kvreset.stores.config.lmcache_settings`).
            sources: key -> where it was read (``env LMCACHE_X``...).
            model: the model name in LMCache's keys, None when unknown.
            world: the server's tensor-parallel x pipeline-parallel size (one LMCache worker each).
            read: parses an address (:data:`AddressReader`).
        """
        return None

    def admin_port(self, pod: Mapping[str, Any] | None) -> int | None:
        """The HTTP admin port of a store pod: an :attr:`admin_flags` flag in its containers'
        ``command`` + ``args``, else :attr:`admin_default`."""
        if self.admin_default is None:
            return None
        for c in ((pod or {}).get("spec") or {}).get("containers") or []:
            argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
            value = flag_value(argv, self.admin_flags)
            if value is not None and value.isdigit():
                return int(value)
        return self.admin_default

    def method(self, store: FoundStore, model: str | None) -> str:
        """The call a clear of ``store`` (of ``model``'s keys for a per-model kind) makes, as the
        row's METHOD shows it; ``"-"`` for a kind this version does not clear."""
        return "-"

    def clear(self, reach: Reach, call: StoreCall, ep: Endpoint, dry_run: bool) -> StoreResult:
        """Make ``call`` on the endpoint pod ``ep`` (with ``dry_run``: only count), count before
        and after, and say what the counts confirm.

        Raises:
            one of :attr:`errors` for the store's answer; :attr:`Reach.api_error` for the API
            server's (both become a ``failed`` row).
        """
        raise NotImplementedError(f"{self.name.value} is not cleared by this version")

    def no_clear(self) -> str:
        """Why a kind this version does not clear gets no call."""
        return f"no clear call is known for a {self.name.value} store"

    def remedy(self, address: Address | None, model: str | None = None) -> str:
        """What clears the store where the plugin cannot reach it, as a command a user can run
        where it is reachable (the recipes of README "clear-store")."""
        where = address.display() if address else "the store"
        return f"clear {where} with its own tools"

    @staticmethod
    def host(address: Address | None) -> str:
        """The address's host for a remedy, ``HOST`` when unknown."""
        return address.host if address else "HOST"


class Other(Kind):
    """A store no kind names (an unknown ``remote_url`` scheme, an unread configuration file):
    listed with the generic remedy, never cleared."""
