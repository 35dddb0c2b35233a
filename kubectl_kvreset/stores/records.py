"""The records the store step passes along, from a pod's configuration to a row: a store use
(:class:`StoreUse`), where its address leads (:class:`Resolution`, :class:`Endpoint`), a store and
its users (:class:`FoundStore`), a planned call (:class:`StoreCall`) and what it did
(:class:`StoreResult`). Data only: the store kinds (:mod:`kubectl_kvreset.stores.kinds`) read
them, so this module imports no kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..pods import VllmPod
from .address import Address
from .kinds.names import KindId

__all__ = ["Endpoint", "FoundStore", "Resolution", "StoreCall", "StoreResult", "StoreUse", "StoreUser"]


@dataclass(frozen=True)
class StoreUse:
    """One store one vLLM pod uses, as its configuration says.

    Attributes:
        kind: the kind's name (:class:`~.kinds.base.StoreKind`; its facts: :func:`~.kinds.kind_of`).
        address: where it listens (None when the configuration names none; see ``notes``).
            For the LMCache controller it is the ZMQ pull address: the HTTP admin port comes
            from the controller's own pod (``--port``, default 9000). For the worker internal
            API it is ``localhost``: the vLLM pod itself.
        scope: what a clear of it removes: ``"model"`` (Redis/Valkey keys of ``model``),
            ``"instance"`` (the LMCache instance ``instance_id`` at the controller),
            ``"worker"`` (the pod's own workers), ``"store"`` (everything in it).
        model: the model name in LMCache's keys (``model_config.model``), None when unknown.
        instance_id: ``lmcache_instance_id`` for the controller.
        ports: the worker internal API ports (``internal_api_server_port_start`` + 1 + rank).
        source: where the setting was read, e.g. ``env LMCACHE_REMOTE_URL``.
        extra: store options (``valkey_username``, ``valkey_password``, ``valkey_mode``...).
        notes: what could not be known.
    """

    kind: KindId
    address: Address | None
    scope: str
    model: str | None = None
    instance_id: str | None = None
    ports: tuple[int, ...] = ()
    source: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Endpoint:
    """A pod behind a store address: ``namespace``/``name``, the ``port`` it serves the
    address's port on, and its ``ready`` condition."""

    namespace: str
    name: str
    port: int | None
    ready: bool = True


@dataclass(frozen=True)
class Resolution:
    """Where an address leads.

    Attributes:
        kind: ``"service"``, ``"pod"`` (a pod IP, ``localhost``, or a node's hostNetwork pod),
            ``"outside"`` (nothing of the cluster has it) or ``"unresolved"`` (a list it
            needed was refused: the message names the permission, never "does not exist").
        namespace, name: the Service or pod (``""`` when outside).
        service_port: the Service port the address names (services only).
        endpoints: the pods that serve it (one for a pod).
        message: for ``outside``: why, for the others what was matched.
    """

    kind: str
    namespace: str = ""
    name: str = ""
    service_port: int | None = None
    endpoints: tuple[Endpoint, ...] = ()
    message: str = ""

    def describe(self) -> str:
        """``service lmc/kv-redis``, ``pod lmc/worker-0`` or ``outside the cluster``."""
        if self.kind == "outside":
            return "outside the cluster"
        if self.kind == "unresolved":
            return "unresolved (forbidden)"
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class StoreUser:
    """One vLLM pod's use of a store: the ``pod``, what its configuration says (``use``), and
    whether the command targets it."""

    pod: VllmPod
    use: StoreUse
    targeted: bool


@dataclass(frozen=True)
class FoundStore:
    """One store and every visible vLLM pod that uses it.

    Attributes:
        kind: the store kind.
        address: the address as the first targeted user's configuration names it.
        resolution: where it leads in the cluster (see :class:`~.resolve.Resolution`).
        users: the pods using it, targeted or not, in discovery order.
        unlisted: namespaces that could not be listed: possible other users.
    """

    kind: KindId
    address: Address | None
    resolution: Resolution
    users: tuple[StoreUser, ...]
    unlisted: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def others(self, model: str | None = None) -> list[VllmPod]:
        """Untargeted users (of ``model`` only, when given; a user whose model is unknown may
        serve ``model`` and counts too)."""
        return [u.pod for u in self.users if not u.targeted
                and (model is None or u.use.model is None or u.use.model == model)]

    def targeted(self) -> list[VllmPod]:
        """Targeted users."""
        return [u.pod for u in self.users if u.targeted]


@dataclass(frozen=True)
class StoreCall:
    """One clear of one store, planned.

    Attributes:
        store: the store and its users.
        scope: ``"model"``, ``"instance"``, ``"worker"``, ``"store"`` (what the call removes).
        model: for ``scope == "model"``: the model whose keys go.
        method: the call, e.g. ``SCAN MATCH 'm@*' + UNLINK`` or
            ``POST /api/v1/remove_all?force=true``.
        blocked: why the call is not made (consent, outside the cluster, not supported), or
            None when it runs.
        others: untargeted pods (``ns/name``) the call would reach.
        instance: for ``scope == "instance"``: the LMCache instance id cleared at the controller.
        force: the store's forced variant (the MP server's ``force: true``,
            ``--force-mp-clear``).
        kept: untargeted pods using the store whose data the call keeps (``ns/name (model M)``:
            they serve another model, or use another instance id).
    """

    store: FoundStore
    scope: str
    model: str | None
    method: str
    blocked: str | None = None
    others: tuple[str, ...] = ()
    instance: str | None = None
    force: bool = False
    kept: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoreResult:
    """What one call did.

    Attributes:
        result: ``emptied`` (after is 0), ``left`` (not made, or something remains),
            ``failed`` (the store or the API refused), ``planned`` (dry run), ``unconfirmed``
            (the call ran but nothing counts what remains).
        unit: what ``before``/``after`` count (``keys``: for LMCache, chunks).
        via: the pod and port the call went to (``ns/pod:port``).
        message: why, and what would clear it.
    """

    result: str
    before: int | None = None
    after: int | None = None
    unit: str = "keys"
    via: str | None = None
    message: str | None = None
