"""The resource types the simulated API server serves: group, version, plural, kind, scope, short
names, verbs and subresources of each built-in type; and ``Obj``, the shape of every stored object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


VERBS_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: ``group`` ("" for core), ``version``, ``plural`` (URL segment), ``kind``,
    ``namespaced``, ``short_names`` (kubectl aliases), ``verbs``, ``subresources`` (names like
    ``proxy``, ``status``), ``strategic`` (False for custom resources: a strategic-merge patch is
    refused with 415, as for a CRD in k8s.io/apiextensions-apiserver).
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = tuple(VERBS_ALL)
    subresources: tuple[str, ...] = ()
    strategic: bool = True
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """``v1`` or ``group/version``."""
        return self.version if not self.group else f"{self.group}/{self.version}"

    @property
    def singular(self) -> str:
        """Lower-case kind, as the discovery document gives ``singularName``."""
        return self.kind.lower()

    @property
    def key(self) -> tuple[str, str]:
        """``(group, plural)``: how the store indexes this type."""
        return (self.group, self.plural)


BUILTIN_TYPES: list[ResourceType] = [
    ResourceType("", "v1", "pods", "Pod", True, ("po",),
                 subresources=("proxy", "exec", "portforward", "log", "status"),
                 categories=("all",)),
    ResourceType("", "v1", "namespaces", "Namespace", False, ("ns",),
                 verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
                 subresources=("status",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    ResourceType("", "v1", "secrets", "Secret", True),
    ResourceType("", "v1", "services", "Service", True, ("svc",), subresources=("proxy", "status"),
                 categories=("all",)),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",)),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",),
                 subresources=("status",)),
    ResourceType("", "v1", "persistentvolumes", "PersistentVolume", False, ("pv",),
                 subresources=("status",)),
    ResourceType("", "v1", "events", "Event", True, ("ev",)),
    ResourceType("apps", "v1", "deployments", "Deployment", True, ("deploy",),
                 subresources=("status", "scale"), categories=("all",)),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",),
                 subresources=("status", "scale"), categories=("all",)),
    ResourceType("apps", "v1", "statefulsets", "StatefulSet", True, ("sts",),
                 subresources=("status", "scale"), categories=("all",)),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",),
                 subresources=("status",), categories=("all",)),
    ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    ResourceType("batch", "v1", "jobs", "Job", True, (), subresources=("status",),
                 categories=("all",)),
    ResourceType("", "v1", "nodes", "Node", False, ("no",), subresources=("status",)),
    ResourceType("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", True,
                 ("lws",), subresources=("status", "scale"), strategic=False),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                 False),
]


CLUSTER_SCOPED_KINDS = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "Node", "PersistentVolume",
    "CustomResourceDefinition", "StorageClass", "PriorityClass", "GatewayClass",
    "IngressClass", "APIService", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}


def plural_of(kind: str) -> str:
    """Lower-case plural of a kind as CRDs conventionally name it (``Gateway`` -> ``gateways``,
    ``Policy`` -> ``policies``, ``Ingress`` -> ``ingresses``)."""
    k = kind.lower()
    if k.endswith("y") and len(k) > 1 and k[-2] not in "aeiou":
        return k[:-1] + "ies"
    if k.endswith(("s", "x", "z", "ch", "sh")):
        return k + "es"
    return k + "s"
