"""Finding the shared stores of the vLLM pods through the API (README "clear-store").

Reads the ConfigMaps and Secrets the vLLM containers' env and configuration files name
(``get`` on configmaps/secrets), lists Services, EndpointSlices and pods across namespaces
(falling back to the vLLM pods' namespaces, which are then noted as a limit), and groups every
vLLM pod the plugin can see by the store it uses, so the consent rule can tell the targeted
users of a store from the others.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from ..engines.vllm.configfile import ConfigFileError, ConfigSource, decode_key
from ..engines.vllm.servecmd import model_unknown_reason, unevaluated_in
from ..kube import Kube, KubeApiError
from ..pods import VllmPod
from .config import (
    LMCACHE_CONNECTORS,
    FileSource,
    StoreUse,
    Unread,
    file_source,
    resolve_env,
    stores_of,
    wanted_files,
)
from .records import FoundStore, StoreUser
from .registry import CONNECTORS, kind_of
from .resolve import ClusterIndex, Resolution

__all__ = ["FoundStore", "StoreUser", "cluster_index", "find_stores", "may_use_stores", "pod_config", "pod_stores"]

#: Connectors whose configuration can name a store outside the pod.
STORE_CONNECTORS = frozenset({*LMCACHE_CONNECTORS, *CONNECTORS})


def may_use_stores(pod: VllmPod) -> bool:
    """Whether the pod runs a connector that can use a shared store (LMCache in-process or MP,
    MooncakeStoreConnector); only those pods' ConfigMaps and Secrets are read."""
    return bool(STORE_CONNECTORS & set(pod.layout.connectors))


def _get_for(kube: Kube, namespace: str, cache: dict[tuple[str, str, str], Any]) -> Any:
    """``get(kind, name)``: the ConfigMap or Secret object of ``namespace`` as the API returns
    it (read once per run through ``cache``); raises ``PermissionError`` (403) or ``KeyError``."""
    def get(kind: str, name: str) -> Mapping[str, Any]:
        key = (namespace, kind, name)
        if key not in cache:
            plural = "configmaps" if kind == "ConfigMap" else "secrets"
            try:
                cache[key] = kube.get_object("v1", plural, namespace, name)
            except KubeApiError as exc:
                cache[key] = PermissionError(str(exc)) if exc.status == 403 else KeyError(name)
        value = cache[key]
        if isinstance(value, Exception):
            raise value
        return value  # type: ignore[no-any-return]

    return get


def _lookup_for(kube: Kube, namespace: str, cache: dict[tuple[str, str, str], Any]) -> Any:
    """A :data:`~.config.SourceLookup` for environment variables: ConfigMap ``data`` and Secret
    ``data`` base64-decoded. ConfigMap ``binaryData`` is left out, as the kubelet leaves it out
    of ``envFrom`` and ``configMapKeyRef`` (``pkg/kubelet/kubelet_pods.go``
    ``makeEnvironmentVariables`` reads ``configMap.Data`` only)."""
    get = _get_for(kube, namespace, cache)

    def lookup(kind: str, name: str) -> Mapping[str, str]:
        obj = get(kind, name)
        data = dict(obj.get("data") or {})
        if kind == "Secret":
            data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}
        return data

    return lookup


def pod_stores(kube: Kube, pod: VllmPod, cache: dict[tuple[str, str, str], Any]) -> tuple[list[StoreUse], list[str]]:
    """The stores one vLLM pod's configuration names, with the notes of what could not be read
    (a ConfigMap/Secret not permitted or absent, a file on a volume the API cannot read)."""
    env, files, notes = pod_config(kube, pod, cache)
    # the model name in LMCache's keys is model_config.model: unknown when the spec's name holds
    # a construct not evaluated, is redirected (here also by an envFrom source) or is a URI
    why = None if pod.serve.model_live else (
        pod.serve.model_unknown or model_unknown_reason(pod.serve.model, pod.serve.unevaluated, env))
    uses = stores_of(pod.serve.kv_transfer_config, env, files, model=None if why else pod.serve.model,
                     argv=pod.serve.argv)
    if why:
        notes.append(why)
    return uses, notes


def pod_config(kube: Kube, pod: VllmPod,
               cache: dict[tuple[str, str, str], Any]) -> tuple[dict[str, str], dict[str, Any], list[str]]:
    """What the store settings of one vLLM pod are read from: its container environment
    (``envFrom``/``valueFrom`` resolved, ``serve``'s own env on top), the configuration files
    :func:`~.config.wanted_files` names (path -> text, or :class:`~.config.Unread`), and the
    notes of what could not be read. ``cache`` holds the ConfigMaps/Secrets read so far."""
    raw = pod.raw
    container: Mapping[str, Any] = next((c for c in (raw.get("spec") or {}).get("containers") or []
                                         if c.get("name") == pod.container), {})
    lookup = _lookup_for(kube, pod.namespace, cache)
    get = _get_for(kube, pod.namespace, cache)
    env, notes = resolve_env(raw, container, lookup)
    env.update(pod.serve.env)
    files: dict[str, Any] = {}
    for _var, path in wanted_files(env):
        unknown = unevaluated_in(path, pod.serve.unevaluated)
        if unknown:
            files[path] = Unread(f"{path}: cannot be evaluated from the pod spec: {'; '.join(unknown)} (to let the "
                                 "plugin read it, name the file by a literal path)")
            continue
        src = file_source(raw, container, path)
        if isinstance(src, FileSource):
            try:
                obj = get(src.kind, src.name)
            except PermissionError as exc:
                files[path] = Unread(f"not permitted to read {src.kind}/{src.name} ({exc}); needs get on "
                                     f"{src.kind.lower()}s in namespace {pod.namespace}")
                continue
            except KeyError:
                files[path] = Unread(f"{src.kind}/{src.name} does not exist")
                continue
            try:
                # the file as the kubelet mounts it: ConfigMap data or base64 binaryData, Secret data
                files[path] = decode_key(obj, ConfigSource(src.kind, src.name, src.key, ""))
            except ConfigFileError:
                files[path] = Unread(f"key {src.key!r} absent from {src.kind}/{src.name}"
                                     if src.key not in (obj.get("data") or {}) and src.key not in
                                     (obj.get("binaryData") or {}) else
                                     f"key {src.key!r} of {src.kind}/{src.name} is not UTF-8 text")
        else:
            files[path] = Unread(src)
    return env, files, notes


def cluster_index(kube: Kube, namespaces: Sequence[str]) -> ClusterIndex:
    """Services, EndpointSlices and pods of every namespace, else of ``namespaces``, each
    resource on its own: a refusal (403) is recorded in ``forbidden`` per resource and
    namespace (``""``: the cluster scope), never read as "none there", and a namespace where
    one of them is refused is in ``unlisted`` (so is "other namespaces" when a cluster-wide
    list is refused)."""
    lists: dict[str, list[dict[str, Any]]] = {}
    listed: dict[str, frozenset[str] | None] = {}
    forbidden: dict[tuple[str, str], str] = {}
    unlisted: list[str] = []
    for api, resource in (("v1", "services"), ("discovery.k8s.io/v1", "endpointslices"), ("v1", "pods")):
        try:
            lists[resource], listed[resource] = kube.list_items(api, resource, None), None
            continue
        except KubeApiError as exc:
            if exc.status != 403:
                raise
            forbidden[(resource, "")] = exc.message or str(exc)
        items: list[dict[str, Any]] = []
        done: set[str] = set()
        for ns in dict.fromkeys(namespaces):
            try:
                items += kube.list_items(api, resource, ns)
                done.add(ns)
            except KubeApiError as exc:
                if exc.status != 403:
                    raise
                forbidden[(resource, ns)] = exc.message or str(exc)
                unlisted.append(ns)
        lists[resource], listed[resource] = items, frozenset(done)
    if any(ns == "" for _res, ns in forbidden):
        unlisted.insert(0, "other namespaces")
    return ClusterIndex(lists["services"], lists["endpointslices"], lists["pods"], list(dict.fromkeys(unlisted)),
                        list(dict.fromkeys(forbidden.values())), forbidden=forbidden, listed=listed)


def _identity(use: StoreUse, res: Resolution) -> tuple[Any, ...]:
    """What makes two uses the same store: the kind and the Service/pod reached (an outside
    address by its text; a Redis database number too; the worker API is per pod)."""
    db = use.address.db if use.address else None
    if kind_of(use.kind).per_pod:
        return (use.kind, "pod", res.namespace, res.name)
    if res.kind in ("outside", "unresolved"):
        return (use.kind, res.kind, use.address.display() if use.address else "", db)
    port = res.service_port if res.kind == "service" else (use.address.port if use.address else None)
    return (use.kind, res.kind, res.namespace, res.name, port, db)


def find_stores(kube: Kube, universe: Sequence[VllmPod], targeted_uids: set[str],
                index: ClusterIndex | None = None,
                containers: set[tuple[str, str]] | None = None) -> tuple[list[FoundStore], list[str]]:
    """Every store the visible vLLM pods use, with its users; only stores at least one
    targeted pod uses are returned.

    Args:
        universe: every vLLM pod the plugin can see (targeted or not).
        targeted_uids: uids of the targeted pods.
        index: the cluster's Services/pods (read when None).
        containers: ``(uid, container)`` of the targeted vLLM containers (``--container``), or
            None when every vLLM container of a targeted pod is targeted; a container left out
            is a user outside the targets.

    Returns:
        ``(stores, notes)``; notes say what configuration could not be read, per pod.
    """
    universe = [p for p in universe if may_use_stores(p)]

    def is_target(pod: VllmPod) -> bool:
        return pod.uid in targeted_uids and (containers is None or (pod.uid, pod.container) in containers)

    if not any(is_target(p) for p in universe):
        return [], []
    if index is None:
        index = cluster_index(kube, [p.namespace for p in universe])
    cache: dict[tuple[str, str, str], Any] = {}
    groups: dict[tuple[Any, ...], tuple[StoreUse, Resolution, list[StoreUser]]] = {}
    notes: list[str] = []
    for pod in universe:
        uses, pod_notes = pod_stores(kube, pod, cache)
        notes.extend(f"{pod.namespace}/{pod.name}: {n}" for n in pod_notes)
        for use in uses:
            if use.address is None:
                if is_target(pod):
                    notes.extend(f"{pod.namespace}/{pod.name}: {n}" for n in use.notes)
                continue
            res = index.resolve(use.address, pod.raw)
            key = _identity(use, res)
            entry = groups.setdefault(key, (use, res, []))
            entry[2].append(StoreUser(pod, use, is_target(pod)))
    stores = [FoundStore(use.kind, next(u.use.address for u in users if u.targeted), res, tuple(users),
                         tuple(index.unlisted),
                         tuple(dict.fromkeys(n for u in users if u.targeted for n in u.use.notes)))
              for use, res, users in groups.values() if any(u.targeted for u in users)]
    return stores, notes
