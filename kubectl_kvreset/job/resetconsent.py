"""Consent for an API reset that is itself store-wide (DESIGN §6 "Consent", issue 13).

On vLLM 0.23 and later ``MooncakeStoreConnector.reset_cache`` runs ``remove_all`` on the
Mooncake master (vllm PR #42694; in the 0.32.0 sources
``vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/connector.py::
MooncakeStoreConnector.reset_cache`` -> ``scheduler.py::MooncakeStoreScheduler.reset_store`` ->
``worker.py::LookupKeyClient.reset``, whose ``RESET_MSG`` makes ``worker.py::LookupKeyServer``
call ``store.remove_all(force=True)``). So ``reset_external=true`` on such a pod empties the
whole store, for every instance using it: a store-wide clear, under the same rule as
clear-store's ``remove_all`` (:func:`kubectl_kvreset.stores.calls.plan_calls`). Without
``--shared-stores`` it needs every user of that master among the targets; pods outside the
targets, namespaces that cannot be listed, or a master this plugin could not read from the
pod's configuration all count against it. Where it is missing, the pod's reset is sent with
``reset_external=false`` (:mod:`kubectl_kvreset.job.planning` applies a :class:`ResetHold`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..pods import VllmPod
from ..stores.calls import StoreCall
from ..stores.config import MOONCAKE_STORE_CONNECTOR, StoreKind, StoreUse
from ..stores.find import FoundStore

__all__ = ["ResetHold", "from_mooncake_connector", "reset_holds"]


@dataclass(frozen=True)
class ResetHold:
    """Why one pod's ``reset_external=true`` would empty a Mooncake store it does not own alone.

    Attributes:
        store: the master as the row names it (``host:port`` and where it resolved), or None
            when the pod's configuration did not tell which master it is.
        others: untargeted pods (``ns/name``) using that master.
        unlisted: namespaces that could not be listed (possible other users).
        unknown: why the master is not known (ConfigMap not readable, ...), or None.
    """

    store: str | None
    others: tuple[str, ...] = ()
    unlisted: tuple[str, ...] = ()
    unknown: str | None = None

    def reason(self) -> str:
        """Why, naming the other users (the rows give ``--shared-stores`` as the remedy)."""
        hook = ("vLLM's MooncakeStoreConnector empties the whole Mooncake store on reset_external=true "
                "(remove_all, vLLM >= 0.23)")
        if self.unknown is not None:
            who = f"the master this pod uses is not known ({self.unknown}), so other pods may use it"
        elif self.others:
            who = (f"{len(self.others)} pod(s) outside the targets ({', '.join(self.others)}) use the master "
                   f"{self.store}")
        else:
            who = (f"namespaces that cannot be listed ({', '.join(self.unlisted)}) may hold other users of "
                   f"the master {self.store}")
        return f"{hook}, and {who}"


def from_mooncake_connector(use: StoreUse) -> bool:
    """True when ``use`` is the master of a ``MooncakeStoreConnector`` (its extra config,
    ``MOONCAKE_CONFIG_PATH`` or ``MOONCAKE_MASTER``: :func:`kubectl_kvreset.stores.config.stores_of`),
    not LMCache's ``mooncakestore://`` remote (which vLLM's reset does not reach)."""
    return use.kind is StoreKind.MOONCAKE and (
        use.source in ("kv_connector_extra_config", "env MOONCAKE_MASTER")
        or use.source.startswith("MOONCAKE_CONFIG_PATH"))


def _store_text(store: FoundStore) -> str:
    address = store.address.display() if store.address is not None else "?"
    return f"{address} ({store.resolution.describe()})"


def reset_holds(pods: Sequence[VllmPod], calls: Sequence[StoreCall], unknown: Sequence[str] = (), *,
                shared: bool) -> dict[str, ResetHold]:
    """Per targeted pod uid, the :class:`ResetHold` that keeps its reset from sending
    ``reset_external=true`` (none with ``shared``, ``--shared-stores``).

    Args:
        pods: the targeted pods.
        calls: clear-store's planned calls (:attr:`kubectl_kvreset.job.storeclear.StorePlan.calls`),
            whose stores list every visible user.
        unknown: clear-store's ``"ns/pod: why"`` lines for targeted pods whose store
            configuration could not be read.
        shared: the user gave ``--shared-stores``.

    Every targeted pod without a readable master of its own gets a hold with ``unknown`` set:
    the planning applies a hold only where the running server's layout has a
    ``MooncakeStoreConnector`` whose reset is store-wide, so a pod whose spec shows no such
    connector but whose live configuration does is held too. Pure; never raises.
    """
    if shared:
        return {}
    why_unknown: Mapping[str, str] = {line.partition(": ")[0]: line.partition(": ")[2] for line in unknown}
    stores = [c.store for c in calls if c.store.kind is StoreKind.MOONCAKE]
    holds: dict[str, ResetHold] = {}
    for pod in pods:
        mine = [s for s in stores
                if any(u.targeted and u.pod.uid == pod.uid and from_mooncake_connector(u.use) for u in s.users)]
        if not mine:
            ref = f"{pod.namespace}/{pod.name}"
            if MOONCAKE_STORE_CONNECTOR in pod.layout.connectors:
                text = why_unknown.get(ref) or "no master address was found in its configuration"
            else:
                text = "its spec names no MooncakeStoreConnector, the running server's configuration does"
            holds[pod.uid] = ResetHold(None, unknown=text)
            continue
        for store in mine:
            others = tuple(f"{p.namespace}/{p.name}" for p in store.others())
            if others or store.unlisted:
                holds[pod.uid] = ResetHold(_store_text(store), others, tuple(store.unlisted))
                break
    return holds
