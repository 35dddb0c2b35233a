"""Which pods of a namespace (or of all) are vLLM servers: one pod list, and the ReplicaSets
that name their Deployments, through :class:`~kubectl_kvreset.kube.Kube`. What a pod object
says is read by the pure :mod:`kubectl_kvreset.pods` (re-exported here for callers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .kube import Kube, KubeApiError
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

__all__ = [
    "DEV_MODE_ENV", "ROLE_LABELS", "SERVING_LABELS", "ApiPort", "DevMode", "Owner", "TargetError", "Targets",
    "VllmPod", "deployment_from_replicaset_name", "describe_pod", "describe_pod_containers", "discover", "expand_k8s_refs", "matched_label",
    "missing_pair_roles", "parse_owner_ref", "pod_env", "pod_owner", "pod_role", "read_dev_mode",
    "replicaset_owners", "select",
]


def discover(kube: Kube, namespace: str | None, *, selector: str | None = None) -> list[VllmPod]:
    """List pods (one namespace, or all when ``namespace`` is None) and describe the vLLM ones:
    one :class:`VllmPod` per vLLM server container (a pod with two gives two, same name).

    API requests: one pod list, plus one ReplicaSet list per namespace holding ReplicaSet-owned
    vLLM pods (to name their Deployments). Pods that are being deleted are left out.

    Raises:
        kubectl_kvreset.kube.KubeApiError: the list was refused (403) or failed.
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer.
    """
    pods = kube.list_items("v1", "pods", namespace, label_selector=selector)
    found: list[tuple[Mapping[str, Any], VllmPod]] = []
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for described in describe_pod_containers(pod):  # one per vLLM container
            found.append((pod, described))
    rs_namespaces = sorted({d.namespace for _, d in found if d.owner.kind == "ReplicaSet"})
    rs_owners_by_ns: dict[str, dict[str, Owner]] = {}
    inferred: set[str] = set()
    for ns in rs_namespaces:
        try:
            rs_owners_by_ns[ns] = replicaset_owners(kube.list_items("apps/v1", "replicasets", ns))
        except KubeApiError as exc:
            if exc.status != 403:
                raise
            inferred.add(ns)  # no right to list ReplicaSets: read the Deployment from the names
    result: list[VllmPod] = []
    for obj, described in found:
        if described.owner.kind == "ReplicaSet":
            if described.namespace in inferred:
                owner = deployment_from_replicaset_name(described.owner.name, described.labels)
                if owner is not None:
                    described = replace(described, owner=owner, notes=described.notes + (
                        "owner read from the ReplicaSet's name (no permission to list replicasets)",))
            else:
                described = replace(described, owner=pod_owner(obj, rs_owners_by_ns.get(described.namespace)))
        result.append(described)
    result.sort(key=lambda p: (p.namespace, p.owner.kind, p.owner.name, p.name))  # stable: containers in spec order
    return result
