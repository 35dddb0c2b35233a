"""Which pods of a namespace (or of all) are vLLM servers: one pod list, and the ReplicaSets
that name their Deployments, through :class:`~kubectl_kvreset.kube.Kube`. What a pod object
says is read by the pure :mod:`kubectl_kvreset.pods` (re-exported here for callers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from .engines.vllm.configfile import ConfigFileError, decode_key, locate
from .kube import Kube, KubeApiError, KubeConnectionError
from .otherpods import OtherPod, describe_other_containers
from .pods import (
    DEV_MODE_ENV,
    ROLE_LABELS,
    SERVING_LABELS,
    ApiPort,
    DevMode,
    Owner,
    TargetError,
    Targets,
    VllmPod,
    deployment_from_replicaset_name,
    describe_pod,
    describe_pod_containers,
    expand_k8s_refs,
    matched_label,
    missing_pair_roles,
    parse_owner_ref,
    pod_env,
    pod_owner,
    pod_role,
    read_dev_mode,
    replicaset_owners,
    select,
)
from .routers import RouterPod, describe_routers

__all__ = [
    "ConfigFiles", "OtherPod", "discover_all", "DEV_MODE_ENV", "ROLE_LABELS", "SERVING_LABELS", "ApiPort", "DevMode",
    "Owner", "TargetError", "Targets",
    "VllmPod", "deployment_from_replicaset_name", "describe_pod", "describe_pod_containers", "discover",
    "expand_k8s_refs", "find_routers", "matched_label",
    "missing_pair_roles", "parse_owner_ref", "pod_env", "pod_owner", "pod_role", "read_dev_mode",
    "replicaset_owners", "select",
]


#: A described container (:class:`VllmPod` or :class:`OtherPod`): both carry an owner.
_D = TypeVar("_D", VllmPod, OtherPod)


class ConfigFiles:
    """Reads pods' ``--config`` files through the API: the ConfigMap or Secret key mounted at the
    path (:func:`kubectl_kvreset.engines.vllm.configfile.locate`), each object fetched once per run.

    RBAC: ``get`` on ``configmaps`` / ``secrets`` in the pod's namespace. Use an instance as the
    ``config_reader`` of :func:`~kubectl_kvreset.pods.describe_pod`.
    """

    def __init__(self, kube: Kube) -> None:
        """``kube``: the API client the objects are read with."""
        self._kube = kube
        self._objects: dict[tuple[str, str, str], dict[str, Any] | ConfigFileError] = {}

    def _get(self, namespace: str, kind: str, name: str) -> dict[str, Any]:
        key = (namespace, kind, name)
        if key not in self._objects:
            plural = "configmaps" if kind == "ConfigMap" else "secrets"
            try:
                self._objects[key] = self._kube.get_object("v1", plural, namespace, name)
            except KubeApiError as exc:
                if exc.status == 403:
                    why = (f"no permission to get {plural} in namespace {namespace} (the Role in "
                           f"rbac/ grants get on {plural})")
                elif exc.status == 404:
                    why = f"{kind} {namespace}/{name} not found"
                else:
                    why = f"reading {kind} {namespace}/{name} failed: {exc}"
                self._objects[key] = ConfigFileError(why)
            except KubeConnectionError as exc:
                self._objects[key] = ConfigFileError(f"reading {kind} {namespace}/{name} failed: {exc}")
        got = self._objects[key]
        if isinstance(got, ConfigFileError):
            raise got
        return got

    def __call__(self, pod: Mapping[str, Any], container: Mapping[str, Any], path: str) -> tuple[str, str]:
        """``(yaml_text, where)`` of ``path`` in ``container``.

        Raises:
            ConfigFileError: the file is not on a ConfigMap/Secret volume, the object or key is
                missing, or reading it was refused (the message names the permission).
        """
        source = locate(pod, container, path)
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        text = decode_key(self._get(namespace, source.kind, source.name), source)
        return text, source.describe()


def discover(kube: Kube, namespace: str | None, *, selector: str | None = None) -> list[VllmPod]:
    """List pods (one namespace, or all when ``namespace`` is None) and describe the vLLM ones:
    one :class:`VllmPod` per vLLM server container (a pod with two gives two, same name).
    :func:`discover_all` also gives the inference pods this version cannot empty.

    API requests: one pod list, plus one ReplicaSet list per namespace holding a ReplicaSet-owned
    vLLM pod whose labels do not name its Deployment (a ``pod-template-hash`` label that ends
    the ReplicaSet's name gives the Deployment, as the Deployment controller names them:
    :func:`~kubectl_kvreset.pods.deployment_from_replicaset_name`), plus one GET per ConfigMap or
    Secret holding a ``--config`` file (:class:`ConfigFiles`). Pods that are being deleted are
    left out.

    Raises:
        kubectl_kvreset.kube.KubeApiError: the list was refused (403) or failed.
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer.
    """
    return discover_all(kube, namespace, selector=selector)[0]


def discover_all(kube: Kube, namespace: str | None, *,
                 selector: str | None = None) -> tuple[list[VllmPod], list[OtherPod]]:
    """:func:`discover`, and from the same pod list the containers that run an inference engine
    this version cannot empty (:func:`kubectl_kvreset.otherpods.describe_other_containers`:
    SGLang, Dynamo workers, ``trtllm-serve``, the LMCache server), their owners found the same way.

    Raises:
        kubectl_kvreset.kube.KubeApiError: the list was refused (403) or failed.
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer.
    """
    pods = kube.list_items("v1", "pods", namespace, label_selector=selector)
    found: list[tuple[Mapping[str, Any], VllmPod]] = []
    others: list[tuple[Mapping[str, Any], OtherPod]] = []
    config_files = ConfigFiles(kube)
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        mine = describe_pod_containers(pod, config_reader=config_files)  # one per vLLM container
        for described in mine:
            found.append((pod, described))
        for other in describe_other_containers(pod, vllm_containers=[d.container for d in mine]):
            others.append((pod, other))
    every: list[tuple[Mapping[str, Any], Any]] = [*found, *others]
    named: dict[str, Owner] = {}
    for _, d in every:
        if d.owner.kind == "ReplicaSet":
            by_name = deployment_from_replicaset_name(d.owner.name, d.labels)
            if by_name is not None:
                named[d.uid or d.name] = by_name
    rs_namespaces = sorted({d.namespace for _, d in every
                            if d.owner.kind == "ReplicaSet" and (d.uid or d.name) not in named})
    rs_owners_by_ns: dict[str, dict[str, Owner]] = {}
    inferred: set[str] = set()
    for ns in rs_namespaces:
        try:
            rs_owners_by_ns[ns] = replicaset_owners(kube.list_items("apps/v1", "replicasets", ns))
        except KubeApiError as exc:
            if exc.status != 403:
                raise
            inferred.add(ns)  # no right to list ReplicaSets: read the Deployment from the names

    def owned(obj: Mapping[str, Any], described: _D) -> _D:
        if described.owner.kind == "ReplicaSet":
            if (described.uid or described.name) in named:
                return replace(described, owner=named[described.uid or described.name])
            if described.namespace in inferred:
                owner = deployment_from_replicaset_name(described.owner.name, described.labels)
                if owner is not None:
                    return replace(described, owner=owner, notes=described.notes + (
                        "owner read from the ReplicaSet's name (no permission to list replicasets)",))
                return described
            return replace(described, owner=pod_owner(obj, rs_owners_by_ns.get(described.namespace)))
        return described

    result = [owned(obj, d) for obj, d in found]
    result.sort(key=lambda p: (p.namespace, p.owner.kind, p.owner.name, p.name))  # stable: containers in spec order
    rest = [owned(obj, d) for obj, d in others]
    rest.sort(key=lambda p: (p.namespace, p.owner.kind, p.owner.name, p.name))
    return result, rest


def find_routers(kube: Kube, namespaces: Sequence[str | None]) -> list[RouterPod]:
    """The sglang-router containers (:func:`kubectl_kvreset.routers.describe_routers`) of the pods
    of ``namespaces`` (None: every namespace), one pod list each. A list that is refused or fails
    gives none for that namespace (the note they feed is advice, never a row)."""
    found: list[RouterPod] = []
    for namespace in dict.fromkeys(namespaces):
        try:
            pods = kube.list_items("v1", "pods", namespace)
        except (KubeApiError, KubeConnectionError):
            continue
        for pod in pods:
            found += describe_routers(pod)
    return found
