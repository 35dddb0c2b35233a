"""Consent for an API reset that is itself store-wide: one rule for every connector whose reset
hook empties a store other pods and models may use (:data:`kubectl_kvreset.plan.STORE_WIDE_HOOKS`,
each row with its source):

- ``MooncakeStoreConnector`` from vLLM 0.23 runs ``remove_all`` on the Mooncake master (vllm PR
  #42694; in the 0.32.0 sources ``vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/
  connector.py::MooncakeStoreConnector.reset_cache`` -> ``scheduler.py::MooncakeStoreScheduler.
  reset_store`` -> ``worker.py::LookupKeyClient.reset``, whose ``RESET_MSG`` makes
  ``worker.py::LookupKeyServer`` call ``store.remove_all(force=True)``);
- ``LMCacheMPConnector``: vLLM 0.32.0 loads LMCache's own class for that name
  (``vllm/distributed/kv_transfer/kv_connector/v1/lmcache_mp_connector.py::
  _resolve_lmcache_mp_connector``, unless ``LMCACHE_USE_UPSTREAM_MP`` is set; a
  ``kv_connector_module_path`` naming LMCache's module loads it on any release), and LMCache
  0.5.6's ``reset_cache`` (``lmcache/integration/vllm/lmcache_mp_connector.py``) sends a clear to
  the MP server, whose L1 every connected pod and model shares (seen on a real vLLM 0.32 CPU build
  against a real ``lmcache server``: L1 524288 bytes -> 0 on one pod's reset).

So ``reset_external=true`` on such a pod empties the whole store, for every instance using it: a
store-wide clear, under the same rule as clear-store's (:func:`kubectl_kvreset.stores.calls.
plan_calls`). Without ``--shared-stores`` it needs every user of that store among the targets;
pods outside the targets, namespaces that cannot be listed, or a store this plugin could not read
from the pod's configuration all count against it. Where it is missing, the pod's reset is sent
with ``reset_external=false`` (:mod:`kubectl_kvreset.job.planning` applies the pod's
:class:`ResetHold` rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..consent import hold
from ..plan import NEWEST_KNOWN, STORE_WIDE_HOOKS, StoreWideHook, store_wide_hook
from ..pods import VllmPod
from ..stores.calls import StoreCall, store_users, user_names
from ..stores.config import MOONCAKE_STORE_CONNECTOR, StoreKind, StoreUse
from ..stores.find import FoundStore
from ..stores.registry import KindId, kind_for_connector

__all__ = ["HOOK_STORES", "ResetHold", "from_hook", "from_mooncake_connector", "reset_holds", "reset_reaches"]

#: Per :data:`~kubectl_kvreset.plan.STORE_WIDE_HOOKS` connector: the kind of store clear-store
#: finds for it (:mod:`kubectl_kvreset.stores.find`; the kind whose ``connectors`` lists it).
HOOK_STORES: Mapping[str, KindId] = {h.connector: k.name for h in STORE_WIDE_HOOKS
                                     if (k := kind_for_connector(h.connector)) is not None}


@dataclass(frozen=True)
class ResetHold:
    """Why one pod's ``reset_external=true`` would empty a store it does not own alone, for one
    connector's hook.

    Attributes:
        store: the store as the row names it (``host:port`` and where it resolved), or None
            when the pod's configuration did not tell which store it is.
        others: untargeted pods (``ns/name``) using that store.
        unlisted: namespaces that could not be listed (possible other users).
        unknown: why the store is not known (ConfigMap not readable, ...), or None.
        hook: the :data:`~kubectl_kvreset.plan.STORE_WIDE_HOOKS` row (Mooncake's by default).
    """

    store: str | None
    others: tuple[str, ...] = ()
    unlisted: tuple[str, ...] = ()
    unknown: str | None = None
    hook: StoreWideHook = STORE_WIDE_HOOKS[0]

    def reason(self) -> str:
        """Why, naming the store and its other users (the rows give ``--shared-stores`` as the remedy)."""
        if self.unknown is not None:
            who = f"the store this pod uses is not known ({self.unknown}), so other pods may use it"
        elif self.others:
            who = (f"{len(self.others)} pod(s) outside the targets ({', '.join(self.others)}) use the store "
                   f"{self.store}")
        else:
            who = (f"namespaces that cannot be listed ({', '.join(self.unlisted)}) may hold other users of "
                   f"the store {self.store}")
        return f"{self.hook.effect}, and {who}"


def from_mooncake_connector(use: StoreUse) -> bool:
    """True when ``use`` is the master of a ``MooncakeStoreConnector`` (its extra config,
    ``MOONCAKE_CONFIG_PATH`` or ``MOONCAKE_MASTER``: :func:`kubectl_kvreset.stores.config.stores_of`),
    not LMCache's ``mooncakestore://`` remote (which vLLM's reset does not reach)."""
    return use.kind is StoreKind.MOONCAKE and (
        use.source in ("kv_connector_extra_config", "env MOONCAKE_MASTER")
        or use.source.startswith("MOONCAKE_CONFIG_PATH"))


def from_hook(use: StoreUse, hook: StoreWideHook) -> bool:
    """True when ``use`` is the store ``hook``'s connector uses: the Mooncake master of a
    ``MooncakeStoreConnector`` (:func:`from_mooncake_connector`), the MP server an
    ``LMCacheMPConnector`` names (``lmcache.mp.host``)."""
    if hook.connector == MOONCAKE_STORE_CONNECTOR:
        return from_mooncake_connector(use)
    return use.kind is HOOK_STORES.get(hook.connector)


def _store_text(store: FoundStore) -> str:
    address = store.address.display() if store.address is not None else "?"
    return f"{address} ({store.resolution.describe()})"


def reset_holds(pods: Sequence[VllmPod], calls: Sequence[StoreCall], unknown: Sequence[str] = (), *,
                shared: bool) -> dict[str, tuple[ResetHold, ...]]:
    """Per targeted pod uid, the :class:`ResetHold` rows (one per hook of
    :data:`~kubectl_kvreset.plan.STORE_WIDE_HOOKS`) that keep its reset from sending
    ``reset_external=true`` (none with ``shared``, ``--shared-stores``).

    Args:
        pods: the targeted pods.
        calls: clear-store's planned calls (:attr:`kubectl_kvreset.job.storeclear.StorePlan.calls`),
            whose stores list every visible user.
        unknown: clear-store's ``"ns/pod: why"`` lines for targeted pods whose store
            configuration could not be read.
        shared: the user gave ``--shared-stores``.

    Every targeted pod without a readable store of its own for a hook gets a hold with
    ``unknown`` set: the planning applies a hold only where the running server's layout has that
    hook's connector and its reset is store-wide (:func:`kubectl_kvreset.plan.store_wide_hook`),
    so a pod whose spec shows no such connector but whose live configuration does is held too.
    Pure; never raises.
    """
    if shared:
        return {}
    why_unknown: Mapping[str, str] = {line.partition(": ")[0]: line.partition(": ")[2] for line in unknown}
    holds: dict[str, tuple[ResetHold, ...]] = {}
    for pod in pods:
        ref = f"{pod.namespace}/{pod.name}"
        held: list[ResetHold] = []
        for hook in STORE_WIDE_HOOKS:
            stores = [c.store for c in calls if c.store.kind is HOOK_STORES[hook.connector]]
            mine = [s for s in stores
                    if any(u.targeted and u.pod.uid == pod.uid and from_hook(u.use, hook) for u in s.users)]
            if not mine:
                if hook.connector in pod.layout.connectors:
                    text = why_unknown.get(ref) or "no store address was found in its configuration"
                else:
                    text = f"its spec names no {hook.connector}, the running server's configuration does"
                held.append(ResetHold(None, unknown=text, hook=hook))
                continue
            for store in mine:
                # store-wide: the one consent rule (kubectl_kvreset.consent.hold, no model)
                verdict = hold(store_users(store), given=False)
                if verdict is not None:
                    others = user_names(store.others(), store)
                    held.append(ResetHold(_store_text(store), others, tuple(store.unlisted), hook=hook))
                    break
        if held:
            holds[pod.uid] = tuple(held)
    return holds


def reset_reaches(calls: Sequence[StoreCall], plans: Sequence[Any]) -> tuple[StoreCall, ...]:
    """The store calls (not blocked) whose store a targeted pod's planned reset reaches: its
    query sends ``reset_external=true`` and its layout has the connector of a
    :data:`~kubectl_kvreset.plan.STORE_WIDE_HOOKS` row that empties that store on its version
    (an unknown one counts as the newest), and the pod uses the store through that connector.
    ``plans``: the clear's :class:`~kubectl_kvreset.job.planning.PodPlan` objects. ``clear``
    counts these stores before the resets (:func:`kubectl_kvreset.job.storeclear.count_first`),
    so the store row shows what the reset emptied and the store step confirms it. Pure."""
    hooked: dict[str, set[KindId]] = {}
    for p in plans:
        if ("reset_external", "true") not in p.query or not p.has("api-reset"):
            continue
        version = p.pod.engine.release(p.version) or NEWEST_KNOWN
        for tier in p.pod.layout.tiers:
            hook = store_wide_hook(tier, version)
            if hook is not None:
                hooked.setdefault(p.pod.uid, set()).add(HOOK_STORES[hook.connector])
    out: list[StoreCall] = []
    for call in calls:
        if call.blocked:
            continue
        users = [u for u in call.store.users if u.targeted and call.store.kind in hooked.get(u.pod.uid, set())
                 and any(from_hook(u.use, h) for h in STORE_WIDE_HOOKS if HOOK_STORES[h.connector] is call.store.kind)]
        if users:
            out.append(call)
    return tuple(out)
