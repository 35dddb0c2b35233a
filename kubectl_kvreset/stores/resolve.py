"""From a store address to a Service or pod of the cluster. Pure: no I/O.

Names follow cluster DNS (Kubernetes "DNS for Services and Pods"): ``name`` in the client
pod's namespace, ``name.ns``, ``name.ns.svc``, ``name.ns.svc.cluster.local``; an IP is a
Service's ``spec.clusterIP`` or a pod's ``status.podIP``. A ``hostNetwork`` pod has its node's
IP, so ``status.hostIP`` of the client reaches a ``hostNetwork`` DaemonSet pod on the same
node (LMCache's MP DaemonSet, ``examples/multi_process/lmcache-daemonset.yaml``). ``localhost``
is the client pod itself.

The admin (HTTP) port of a store is read from its container's args with the defaults research
gives: LMCache controller ``--port`` 9000, MP server ``--http-port`` 8080, Mooncake master
``--metrics_port`` 9003, InfiniStore ``--manage-port`` 18080.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..permissions import Permission, from_forbidden
from .config import Address, StoreKind, glob_escape

__all__ = ["ClusterIndex", "Endpoint", "Resolution", "admin_port", "remedy"]

CLUSTER_DOMAIN = "cluster.local"

#: kind -> (flag names of the admin port, default).
_ADMIN_FLAGS: dict[StoreKind, tuple[tuple[str, ...], int]] = {
    StoreKind.LMCACHE_CONTROLLER: (("--port",), 9000),
    StoreKind.LMCACHE_MP: (("--http-port",), 8080),
    StoreKind.MOONCAKE: (("--metrics_port", "--metrics-port"), 9003),
    StoreKind.INFINISTORE: (("--manage-port", "--manage_port"), 18080),
}


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


def _pod_ports(pod: Mapping[str, Any]) -> set[int]:
    ports: set[int] = set()
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if isinstance(p.get("containerPort"), int):
                ports.add(p["containerPort"])
    return ports


def _flag(args: Sequence[str], names: Sequence[str]) -> str | None:
    value = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value


def admin_port(kind: StoreKind, pod: Mapping[str, Any] | None) -> int | None:
    """The HTTP admin port of a store's pod: the flag in its containers' ``command``+``args``,
    else the kind's default. None for kinds without an HTTP admin port (Redis)."""
    if kind not in _ADMIN_FLAGS:
        return None
    names, default = _ADMIN_FLAGS[kind]
    for c in ((pod or {}).get("spec") or {}).get("containers") or []:
        argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        value = _flag(argv, names)
        if value is not None and value.isdigit():
            return int(value)
    return default


def mp_has_http(pod: Mapping[str, Any] | None) -> bool:
    """Whether an LMCache MP server pod serves HTTP: ``lmcache server`` and
    ``lmcache.v1.multiprocess.http_server`` do, ``python -m lmcache.v1.multiprocess.server``
    (the operator's and the DaemonSet example's command) is ZMQ only (its argparse text:
    "LMCache Cache Server (without HTTP)")."""
    for c in ((pod or {}).get("spec") or {}).get("containers") or []:
        argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        if "lmcache.v1.multiprocess.server" in argv:
            return False
    return True


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
        blocked = self._unresolved(address, "endpointslices", key[0], f"to find the pods behind service {key[0]}/{key[1]}")
        if blocked is not None:
            return blocked
        return self._service(found, port, host)

    def _outside(self, why: str, namespace: str | None = None) -> Resolution:
        if self.unlisted and (namespace is None or namespace in self.unlisted):
            why += f" (namespaces not listable: {', '.join(sorted(self.unlisted))}; it may be there"
            why += f": {self.denied[0]})" if self.denied else ")"
        return Resolution("outside", message=why)


def redis_cli_remedy(address: Address | None, model: str | None) -> str:
    """The ``redis-cli`` pipeline that removes ``model``'s LMCache keys: the same connection
    options on both sides (``-s`` for a Unix socket, ``-h``/``-p``, ``-n`` for a database in the
    URL, ``--tls`` for ``rediss``; credentials are left to ``REDISCLI_AUTH``, never printed), and
    the glob-escaped ``<model>@*`` pattern the plugin's own ``SCAN`` uses, then a ``grep -E`` for
    LMCache's key layout (``<model>@<world size>@<worker>@<hash>@``, as
    :func:`kubectl_kvreset.stores.redisclear.is_model_key`) so that the keys of a model whose
    name starts with ``<model>@`` (``org/m@v2`` for ``org/m``) are kept."""
    if address is not None and address.path:
        conn = f"-s {shlex.quote(address.path)}"
    else:
        conn = f"-h {address.host if address else 'HOST'} -p {(address.port if address else None) or 6379}"
    if address is not None and address.db:
        conn += f" -n {address.db}"
    if address is not None and address.tls:
        conn += " --tls"
    pattern = shlex.quote(f"{glob_escape(model)}@*") if model else "'<model>@*'"
    ere = re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", model) if model else "<model>"
    layout = shlex.quote(f"^{ere}@-?[0-9]+@-?[0-9]+@-?[0-9a-f]+@[a-z0-9_]+(@|kv_bytes$|metadata$|:|$)")
    return (f"redis-cli {conn} --scan --pattern {pattern} | grep -E {layout} | "
            f"xargs -r redis-cli {conn} UNLINK")


def remedy(kind: StoreKind, address: Address | None, *, model: str | None = None) -> str:
    """What would clear a store the plugin cannot reach, as a command a user can run where the
    store is reachable (the recipes of README "clear-store")."""
    where = address.display() if address else "the store"
    host = f"{address.host}" if address else "HOST"
    if kind in (StoreKind.REDIS, StoreKind.VALKEY):
        return f"from where {where} is reachable: {redis_cli_remedy(address, model)}"
    if kind is StoreKind.MOONCAKE:
        return f"POST http://{host}:9003/api/v1/remove_all?force=true on the Mooncake master (its metrics_port)"
    if kind is StoreKind.LMCACHE_CONTROLLER:
        return f"POST http://{host}:9000/clear with the instance id and location on the LMCache controller"
    if kind is StoreKind.LMCACHE_MP:
        return f"POST http://{host}:8080/cache/clear {{\"tier\":\"l1\",\"force\":false}} on the LMCache MP server"
    if kind is StoreKind.LMCACHE_SERVER:
        return (f"restart the LMCache server at {where} (its protocol has no delete: PUT, GET, EXIST, LIST, HEALTH, "
                "lmcache/v1/protocol.py); it holds its cache in memory, so a restart of its pod empties it, "
                "for every user")
    if kind is StoreKind.INFINISTORE:
        return f"POST http://{host}:18080/purge on the InfiniStore server"
    return f"clear {where} with its own tools"
