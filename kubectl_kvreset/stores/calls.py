"""Which store calls a clear makes, and the consent rule (README "clear-store", "Consent").

A clear runs without a flag when everything it removes belongs to the targets:

* per model (Redis/Valkey ``<model>@*`` keys in LMCache's key layout,
  :func:`kubectl_kvreset.stores.redisclear.is_model_key`): no untargeted pod serves that model,
  by its exact name, against that store (``org/m@v2`` is another model: its keys are kept);
* per instance (the LMCache controller's ``/clear`` of one ``lmcache_instance_id``): no
  untargeted pod uses that instance id at that controller;
* per worker (LMCache's internal API in the vLLM pod itself): always, it is the pod's own;
* store-wide (Mooncake ``remove_all``, an MP server's L1, InfiniStore's purge): no untargeted
  pod uses the store at all.

Namespaces the plugin cannot list count as possible other users. Otherwise the call needs
``--shared-stores`` (:data:`SHARED_FLAG`) and, without it, the store is reported ``left`` naming
the flag and the other users.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..consent import SHARED_FLAG, User, hold, kept, unlisted_user
from ..pods import VllmPod
from .records import FoundStore, StoreCall
from .registry import KINDS, KindId, kind_of
from .resolve import remedy

__all__ = ["METHODS", "PER_MODEL_KINDS", "SHARED_FLAG", "StoreCall", "plan_calls", "store_users", "user_names"]

#: The consent flag (:data:`kubectl_kvreset.consent.SHARED_FLAG`), here for the stores' callers.
SHARED_FLAG = SHARED_FLAG

def user_names(pods: Sequence[VllmPod], store: FoundStore) -> tuple[str, ...]:
    """``ns/pod`` of each; ``ns/pod (container c)`` for another vLLM container of a targeted pod
    (``--container`` left it out)."""
    targets = {(u.pod.namespace, u.pod.name) for u in store.users if u.targeted}
    return tuple(f"{p.namespace}/{p.name}" + (f" (container {p.container})" if (p.namespace, p.name) in targets else "")
                 for p in pods)


def store_users(store: FoundStore, *, instance: bool = False, which: str | None = None) -> list[User]:
    """The store's users outside the targets as :class:`~kubectl_kvreset.consent.User` rows
    (one per pod; the namespaces that could not be listed last), for the consent rule. With
    ``instance`` the ``model`` of each is its LMCache instance id, ``which`` the targets'."""
    users: list[User] = []
    targets = {(u.pod.namespace, u.pod.name) for u in store.users if u.targeted}
    for u in store.users:
        if u.targeted:
            continue
        name = f"{u.pod.namespace}/{u.pod.name}"
        if (u.pod.namespace, u.pod.name) in targets:
            # another vLLM container of a targeted pod (--container left it out)
            name += f" (container {u.pod.container})"
        if instance:
            users.append(User(name, u.use.instance_id if u.use.instance_id is not None else None, serves=True))
        elif all(x.name != name or x.model != u.use.model for x in users):
            users.append(User(name, u.use.model))
    return users + [unlisted_user(ns) for ns in store.unlisted]


#: The call each cleared kind makes, as the row's METHOD shows it: ``method(store, model)``
#: (:meth:`~.kinds.base.Kind.method`, a view of the registry :data:`~.kinds.KINDS`).
METHODS: dict[KindId, Callable[[FoundStore, str | None], str]] = {k.name: k.method for k in KINDS if k.clears}

#: Kinds cleared per model (``<model>@*`` keys; ``scope == "model"``); the others store-wide.
PER_MODEL_KINDS = frozenset(k.name for k in KINDS if k.scope == "model")


def _method(store: FoundStore, model: str | None) -> str:
    kind = kind_of(store.kind)
    return kind.method(store, model) if kind.clears else "-"


def plan_calls(stores: list[FoundStore], *, shared: bool) -> list[StoreCall]:
    """The calls for ``stores`` (one per model for Redis/Valkey, one per store otherwise),
    each with its consent decision; ``shared`` is :data:`SHARED_FLAG`.

    Never raises: what cannot be done is a call with ``blocked`` set.
    """
    calls: list[StoreCall] = []
    for store in stores:
        res = store.resolution
        outside = None
        if res.kind in ("outside", "unresolved"):  # unresolved: a list of the API server was refused
            outside = f"{res.message}; {remedy(store.kind, store.address)}"
        scope = store.users[0].use.scope if store.users else "store"
        if scope == "worker":
            # the pod's own LMCache workers: what it removes belongs to the targeted pod alone
            calls.append(StoreCall(store, "worker", None, _method(store, None), outside))
            continue
        if scope == "instance":
            calls.extend(_instance_calls(store, outside, shared=shared))
            continue
        if kind_of(store.kind).scope == "model":
            models = list(dict.fromkeys(u.use.model for u in store.users if u.targeted))
            for model in models:
                others = user_names(store.others(model), store)
                blocked = outside
                if blocked is None and store.address is not None and store.address.scheme == "redis-sentinel":
                    blocked = ("a redis-sentinel URL names the Sentinels, which hold no keys: the keys are on the "
                               "master they elect (redis-cli -h SENTINEL -p 26379 SENTINEL get-master-addr-by-name "
                               f"NAME); there, {remedy(store.kind, None, model=model)}")
                elif blocked is None and model is None:
                    why = [u.pod.serve.model_unknown for u in store.users
                           if u.targeted and u.use.model is None and u.pod.serve.model_unknown]
                    blocked = "the model name is unknown: a per-model clear is impossible" + (
                        f" ({'; '.join(dict.fromkeys(why))})" if why else "")
                elif outside is not None:
                    blocked = f"{res.message}; {remedy(store.kind, store.address, model=model)}"
                users = store_users(store)
                held = hold(users, model=model, given=shared) if blocked is None and model is not None else None
                if held is not None and held.why == "same":
                    blocked = (f"{len(others)} pod(s) outside the targets serve {model} against this store "
                               f"({', '.join(others)}): give {SHARED_FLAG} to remove its keys anyway")
                elif held is not None:
                    blocked = (f"namespaces that cannot be listed ({', '.join(held.names)}) may hold pods "
                               f"serving {model} against this store: give {SHARED_FLAG} to remove its keys anyway")
                calls.append(StoreCall(store, "model", model, _method(store, model), blocked, others,
                                       kept=tuple(u.shown() for u in kept(users, model))))
            continue
        others = user_names(store.others(), store)
        blocked = outside
        if not kind_of(store.kind).clears:
            blocked = blocked or f"{kind_of(store.kind).no_clear()}; {remedy(store.kind, store.address)}"
        elif blocked is None:
            held = hold(store_users(store), given=shared)
            if held is not None and held.why == "others":
                blocked = (f"store-wide clear, and {len(others)} pod(s) outside the targets use this store "
                           f"({', '.join(others)}): give {SHARED_FLAG} to empty it anyway")
            elif held is not None:
                blocked = (f"store-wide clear, and namespaces that cannot be listed ({', '.join(held.names)}) "
                           f"may hold other users: give {SHARED_FLAG} to empty it anyway")
        calls.append(StoreCall(store, "store", None, _method(store, None), blocked, others))
    return _without_covered_workers(calls)


def _without_covered_workers(calls: list[StoreCall]) -> list[StoreCall]:
    """Drop the worker-API call of a pod whose LMCache instance a controller call (not blocked)
    clears: both empty the same CPU tier, and the controller's is the one the configuration
    routes through. Where the controller call is blocked or absent, the worker API (the pod's
    own) is used, and a controller call blocked for consent alone is dropped where the worker
    API covers every targeted pod of its instance."""
    covered = {(u.pod.namespace, u.pod.name) for c in calls if c.scope == "instance" and c.blocked is None
               for u in c.store.users if u.targeted and u.use.instance_id == c.instance}
    calls = [c for c in calls if not (c.scope == "worker" and c.blocked is None and c.store.users
                                      and all((u.pod.namespace, u.pod.name) in covered
                                              for u in c.store.users if u.targeted))]
    # an instance clear held back only for consent (its message names the flag), whose targeted
    # pods all clear their own workers: what belongs to the targets is emptied that way, and the
    # other pods' part of the instance stays, as consent asks
    own = {(u.pod.namespace, u.pod.name) for c in calls if c.scope == "worker" and c.blocked is None
           for u in c.store.users if u.targeted}
    return [c for c in calls if not (c.scope == "instance" and c.blocked is not None and SHARED_FLAG in c.blocked
                                     and all((u.pod.namespace, u.pod.name) in own for u in c.store.users
                                             if u.targeted and u.use.instance_id == c.instance))]


def _instance_calls(store: FoundStore, outside: str | None, *, shared: bool) -> list[StoreCall]:
    """One call per LMCache instance id the targets use at a controller. It empties that
    instance only, so it belongs to the targets when no untargeted pod the plugin can see uses the
    same instance id at this controller and no namespace that cannot be listed might (those
    count as possible other users)."""
    calls: list[StoreCall] = []
    for instance in dict.fromkeys(u.use.instance_id for u in store.users if u.targeted):
        # an instance id is what a per-model clear's model is: a pod of another id keeps its part
        users = [u for u in store_users(store, instance=True) if not u.listed or u.model is not None]
        others = user_names([u.pod for u in store.users if not u.targeted and u.use.instance_id == instance], store)
        blocked = outside
        if blocked is None and not kind_of(store.kind).clears:
            blocked = f"not cleared by this version; {remedy(store.kind, store.address)}"
        elif blocked is None and instance is None:
            blocked = ("lmcache_instance_id is not set: the controller clears by instance id, so nothing can be "
                       "cleared through it")
        elif blocked is None:
            held = hold(users, model=instance, given=shared)
            if held is not None and held.why == "same":
                blocked = (f"{len(others)} pod(s) outside the targets use LMCache instance {instance} at this "
                           f"controller ({', '.join(others)}): give {SHARED_FLAG} to clear it anyway")
            elif held is not None:
                blocked = (f"namespaces that cannot be listed ({', '.join(held.names)}) may hold pods of LMCache "
                           f"instance {instance}: give {SHARED_FLAG} to clear it anyway")
        calls.append(StoreCall(store, "instance", None, _method(store, None), blocked, others, instance=instance,
                               kept=tuple(f"{u.name} (instance {u.model})" for u in users
                                          if u.listed and u.model != instance)))
    return calls
