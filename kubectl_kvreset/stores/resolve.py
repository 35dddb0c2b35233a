"""From a store address to a Service or pod of the cluster. Pure: no I/O.

Names follow cluster DNS (Kubernetes "DNS for Services and Pods"): ``name`` in the client
pod's namespace, ``name.ns``, ``name.ns.svc``, ``name.ns.svc.cluster.local``; an IP is a
Service's ``spec.clusterIP`` or a pod's ``status.podIP``. A ``hostNetwork`` pod has its node's
IP, so ``status.hostIP`` of the client reaches a ``hostNetwork`` DaemonSet pod on the same
node (LMCache's MP DaemonSet, ``examples/multi_process/lmcache-daemonset.yaml``). ``localhost``
is the client pod itself.

The admin (HTTP) port of a store, and what clears it from elsewhere, are its kind's
(:mod:`kubectl_kvreset.stores.kinds`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..permissions import Permission, from_forbidden
from .address import Address
from .kinds.lmcache import mp_has_http
from .kinds.redis import redis_cli_remedy
from .records import Endpoint, Resolution
from .registry import KindId, kind_of

__all__ = ["ClusterIndex", "Endpoint", "Resolution", "admin_port", "mp_has_http", "redis_cli_remedy", "remedy"]

CLUSTER_DOMAIN = "cluster.local"

def _pod_ports(pod: Mapping[str, Any]) -> set[int]:
    ports: set[int] = set()
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if isinstance(p.get("containerPort"), int):
                ports.add(p["containerPort"])
    return ports


def admin_port(kind: KindId, pod: Mapping[str, Any] | None) -> int | None:
    """The HTTP admin port of a store's pod (:meth:`~.kinds.base.Kind.admin_port`): the flag in
    its containers' ``command``+``args``, else the kind's default. None for kinds without an HTTP
    admin port (Redis)."""
    return kind_of(kind).admin_port(pod)


@dataclass
class ClusterIndex:
    """The Services, EndpointSlices and pods the plugin could list, for :meth:`resolve`.

    Attributes:
        services, endpointslices, pods: the objects as the API returned them.
        unlisted: namespaces that could not be listed (Forbidden): an address there may be
            a Service the plugin cannot see.
        denied: the API server's refusals (they name the missing permission).
        forbidden: ``(resource, namespace)`` -> the API server's refusal of that list
            (namespace ``""``: the cluster scope).
        listed: resource -> the namespaces it was listed in (None: every namespace).
    """

    services: Sequence[Mapping[str, Any]]
    endpointslices: Sequence[Mapping[str, Any]]
    pods: Sequence[Mapping[str, Any]]
    unlisted: Sequence[str] = ()
    denied: Sequence[str] = ()
    forbidden: Mapping[tuple[str, str], str] = field(default_factory=dict)
    listed: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    _by_name: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for svc in self.services:
            meta = svc.get("metadata") or {}
            self._by_name[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = svc

    def pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The pod object, or None."""
        for p in self.pods:
            meta = p.get("metadata") or {}
            if meta.get("namespace") == namespace and meta.get("name") == name:
                return p
        return None

    def _service_endpoints(self, svc: Mapping[str, Any], port: int | None) -> tuple[int | None, tuple[Endpoint, ...]]:
        meta = svc.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        ports = (svc.get("spec") or {}).get("ports") or []
        chosen = next((p for p in ports if port is None or p.get("port") == port), None)
        if chosen is None:
            return None, ()
        port_name = chosen.get("name")
        eps: list[Endpoint] = []
        for sl in self.endpointslices:
            smeta = sl.get("metadata") or {}
            if smeta.get("namespace") != ns or (smeta.get("labels") or {}).get("kubernetes.io/service-name") != name:
                continue
            target = next((p.get("port") for p in sl.get("ports") or []
                           if (p.get("name") or None) == (port_name or None)), None)
            for ep in sl.get("endpoints") or []:
                ref = ep.get("targetRef") or {}
                if ref.get("kind") == "Pod":
                    eps.append(Endpoint(str(ref.get("namespace") or ns), str(ref.get("name", "")), target,
                                        bool((ep.get("conditions") or {}).get("ready", True))))
        return chosen.get("port"), tuple(eps)

    def refusal(self, resource: str, namespace: str | None) -> Permission | None:
        """The refused permission that kept ``resource`` of ``namespace`` (None: any
        namespace) from being listed, or None when it was listed."""
        listed = self.listed.get(resource)
        if listed is None or (namespace is not None and namespace in listed):
            return None
        keys = [(resource, namespace)] if namespace is not None else []
        keys += [(resource, ns) for (res, ns) in self.forbidden if res == resource and (resource, ns) not in keys]
        for key in [*keys, (resource, "")]:
            if key in self.forbidden:
                group = "discovery.k8s.io" if resource == "endpointslices" else ""
                return from_forbidden(self.forbidden[key]) or Permission("list", resource, group, key[1] or None)
        return None

    def _unresolved(self, address: Address, resource: str, namespace: str | None, what: str) -> Resolution | None:
        perm = self.refusal(resource, namespace)
        if perm is None:
            return None
        return Resolution("unresolved", namespace or "", "",
                          message=f"{address.display()} could not be resolved: {perm.refused(what)}")

    def _service(self, svc: Mapping[str, Any], port: int | None, how: str) -> Resolution:
        meta = svc.get("metadata") or {}
        sport, eps = self._service_endpoints(svc, port)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        if sport is None:
            return Resolution("outside", message=f"service {ns}/{name} ({how}) has no port {port}")
        return Resolution("service", ns, name, sport, eps, f"{how} is service {ns}/{name}")

    def _pod_at(self, pod: Mapping[str, Any], port: int | None, how: str) -> Resolution:
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (pod.get("status") or {}).get("conditions") or [])
        return Resolution("pod", ns, name, None, (Endpoint(ns, name, port, ready),), f"{how} is pod {ns}/{name}")

    def resolve(self, address: Address, client: Mapping[str, Any]) -> Resolution:
        """Where ``address``, as the vLLM pod ``client`` sees it, leads.

        Returns:
            a :class:`Resolution`; ``outside`` says why (and, when namespaces could not be
            listed, that the address may be there).
        """
        cmeta = client.get("metadata") or {}
        cns = str(cmeta.get("namespace", ""))
        cstatus = client.get("status") or {}
        host = address.host.lower().rstrip(".")
        port = address.port
        if address.path is not None:
            return Resolution("outside", message=f"a Unix socket ({address.path}) inside the pod's own file system")
        if host in ("localhost", "127.0.0.1", "::1"):
            return self._pod_at(client, port, host)
        try:
            ip = str(ipaddress.ip_address(host))
        except ValueError:
            ip = None
        if ip is not None:
            blocked = (self._unresolved(address, "services", None, f"to tell whether {ip} is a Service's ClusterIP")
                       or self._unresolved(address, "pods", None, f"to tell whether {ip} is a pod's IP"))
            for svc in self.services:
                if (svc.get("spec") or {}).get("clusterIP") == ip:
                    return self._service(svc, port, f"ClusterIP {ip}")
            node_ip = cstatus.get("hostIP")
            candidates: list[Mapping[str, Any]] = []
            for p in self.pods:
                st, sp = p.get("status") or {}, p.get("spec") or {}
                if st.get("podIP") != ip:
                    continue
                if sp.get("hostNetwork"):
                    # a node's address: the hostNetwork pod on that node with the port
                    if port is None or port in _pod_ports(p):
                        candidates.append(p)
                else:
                    return self._pod_at(p, port, f"pod IP {ip}")
            if candidates:
                how = "the node's address (status.hostIP)" if ip == node_ip else f"node IP {ip}"
                return self._pod_at(candidates[0], port, f"{how}, hostNetwork")
            if blocked is not None:  # a refused list is no proof that nothing has the IP
                return blocked
            return self._outside(f"{ip} is no Service ClusterIP or pod IP of the cluster")
        parts = host.split(".")
        suffix = ["svc", *CLUSTER_DOMAIN.split(".")]
        if len(parts) == 1:
            key = (cns, parts[0])
        elif len(parts) == 2 or parts[2:] == suffix[:len(parts) - 2]:
            key = (parts[1], parts[0])
        else:
            return self._outside(f"{host} is not a cluster Service name")
        found = self._by_name.get(key)
        if found is None:
            blocked = self._unresolved(address, "services", key[0], f"to find service {key[0]}/{key[1]}")
            if blocked is not None:  # a 403 is never "does not exist"
                return blocked
            return self._outside(f"service {key[0]}/{key[1]} does not exist", key[0])
        blocked = self._unresolved(address, "endpointslices", key[0],
                                   f"to find the pods behind service {key[0]}/{key[1]}")
        if blocked is not None:
            return blocked
        return self._service(found, port, host)

    def _outside(self, why: str, namespace: str | None = None) -> Resolution:
        if self.unlisted and (namespace is None or namespace in self.unlisted):
            why += f" (namespaces not listable: {', '.join(sorted(self.unlisted))}; it may be there"
            why += f": {self.denied[0]})" if self.denied else ")"
        return Resolution("outside", message=why)


def remedy(kind: KindId, address: Address | None, *, model: str | None = None) -> str:
    """What would clear a store the plugin cannot reach, as a command a user can run where the
    store is reachable (the kind's :meth:`~.kinds.base.Kind.remedy`: the recipes of README
    "clear-store")."""
    return kind_of(kind).remedy(address, model)
