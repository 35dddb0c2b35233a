"""What the store step did to each store, typed: the pods' rows take their shared and
LMCache-disk tiers' final state from these (:func:`kubectl_kvreset.job.outcome.with_store_results`,
:func:`kubectl_kvreset.job.storeclear.lmcache_cpu_cleared`), never from the printed
``StoreClear`` rows."""

from __future__ import annotations

from dataclasses import dataclass

from ..stores.calls import StoreCall
from .storedisk import DiskCall

__all__ = ["PodKey", "StoreDone", "scope_text"]

#: ``(namespace, pod name)``.
PodKey = tuple[str, str]


def scope_text(target: StoreCall | DiskCall) -> str:
    """The ``SCOPE`` cell of a store call or disk deletion: ``model M``, ``instance ID``,
    ``worker`` or ``store``."""
    if target.scope == "model":
        return f"model {target.model or '(unknown)'}"
    if isinstance(target, StoreCall) and target.scope == "instance":
        return f"instance {target.instance}"
    return target.scope


@dataclass(frozen=True)
class StoreDone:
    """One store call or LMCache local-disk deletion of a run, and what it did.

    Attributes:
        target: the :class:`~kubectl_kvreset.stores.calls.StoreCall` or
            :class:`~kubectl_kvreset.job.storedisk.DiskCall`.
        result: ``emptied``, ``unconfirmed``, ``left``, ``failed``, ``replaced`` (its pods were
            replaced by the restart), ``planned`` (dry run) or ``interrupted`` (not run).
        before: what the store held first (the count read before the targets' resets where a
            reset empties the store itself), None when not counted.
        after: what it held after the call, None when not counted.
        unit: what the counts count (``keys``, ``objects``, ``files``).
    """

    target: StoreCall | DiskCall
    result: str
    before: int | None = None
    after: int | None = None
    unit: str = "keys"

    @property
    def store(self) -> str:
        """The ``STORE`` cell: the store kind (``redis``, ``mooncake-master``...) or
        the file kind of a deletion (``lmcache-disk``, ``hicache-file``)."""
        return self.target.store if isinstance(self.target, DiskCall) else self.target.store.kind.value

    @property
    def address(self) -> str | None:
        """The ``ADDRESS`` cell (no credentials)."""
        if isinstance(self.target, DiskCall):
            return self.target.setting
        address = self.target.store.address
        return address.display() if address else None

    @property
    def scope(self) -> str:
        """The ``SCOPE`` cell (:func:`scope_text`)."""
        return scope_text(self.target)

    def targeted_pods(self) -> tuple[PodKey, ...]:
        """The targeted pods the call was made for (the ``TARGETED PODS`` cell): for an
        LMCache controller instance, those that use that instance id."""
        t = self.target
        if isinstance(t, DiskCall):
            return tuple(_key(ref) for ref in t.targeted)
        return tuple((u.pod.namespace, u.pod.name) for u in t.store.users if u.targeted
                     and (t.scope != "instance" or u.use.instance_id == t.instance))

    def tier_pods(self) -> tuple[PodKey, ...]:
        """The targeted pods whose tier this call empties: for a per-model call, only the users
        of that model; a disk deletion, every pod whose disk it is (a per-model one, the pods of
        its model)."""
        t = self.target
        if isinstance(t, DiskCall):
            if t.scope == "model" and t.model_pods:
                return tuple(_key(ref) for ref in t.model_pods)
            return self.targeted_pods()
        return tuple((u.pod.namespace, u.pod.name) for u in t.store.users
                     if u.targeted and (t.model is None or u.use.model == t.model))

    def counted(self) -> str:
        """``: B -> A unit`` where counted, else ``: result``, for a pod row's message."""
        if self.before is None:
            return f": {self.result}"
        return f": {self.before} -> {self.after} {self.unit or ''}".rstrip()


def _key(ref: str) -> PodKey:
    namespace, _, name = ref.partition("/")
    return namespace, name
