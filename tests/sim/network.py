"""Loopback addressing, Services, EndpointSlices, cluster DNS names and ClusterIP relays.

**Addresses.** Every address of a simulated cluster lies in 127.0.0.0/8, which Linux routes to
the loopback device without configuration, so nothing a pod or Service does ever leaves the
machine. Each simulator claims its own block ``127.B.0.0/16`` (``B`` in 1..254): it holds the
abstract Unix socket ``@kvreset-sim-net-B`` for its lifetime (the kernel frees it when the
process dies, so a crashed simulator leaks nothing), trying ``B = 1 + pid % 254`` first and then
the next ones, so simulators of parallel test workers never share an address. Within a block:

- nodes ``127.B.0.(10+i)`` (``status.hostIP``; a ``hostNetwork`` pod's ``status.podIP``),
- pods ``127.B.1.1`` .. ``127.B.127.254`` (``status.podIP``),
- Services ``127.B.128.1`` .. ``127.B.254.254`` (``spec.clusterIP``).

**Services** (``v1``): a ClusterIP is assigned at creation (``clusterIP: None`` stays headless),
``type`` defaults to ``ClusterIP``, every port gets ``protocol: TCP`` and ``targetPort`` = port.
**EndpointSlices** (``discovery.k8s.io/v1``, one per Service with a selector, named
``<service>-<5 chars>``, label ``kubernetes.io/service-name``, ``endpointslice.kubernetes.io/
managed-by: endpointslice-controller.k8s.io``) list the Running pods matching the selector, with
``conditions.ready`` = the pod's Ready condition; only ready ones carry traffic (kube-proxy and
the API server's service proxy skip the others). A named ``targetPort`` resolves per pod through
its container ports, as the endpointslice controller does
(kubernetes ``pkg/controller/endpointslice``).

**Relays.** For every port of a non-headless Service a listener on ``clusterIP:port`` carries
each connection to one ready endpoint (round robin), as kube-proxy does: to the real server at
``podIP:targetPort`` when the pod runs one (``runtime.connect(port)``), else served as HTTP/1.1
to the simulated pod (tests/sim/podhttp.py, transport ``service``). No endpoint: the connection
is closed at once (a real ClusterIP with no endpoints rejects it).

**Cluster DNS.** Real servers cannot use a DNS server here, so each pod that runs one gets a
hosts file (bound at ``/etc/hosts`` in its sandbox) naming, for every Service of the cluster,
``name.ns``, ``name.ns.svc`` and ``name.ns.svc.cluster.local`` (plus the short ``name`` for the
pod's own namespace, as the search path ``ns.svc.cluster.local`` would give) at its ClusterIP
(headless: at each ready endpoint), and the pod's own hostname at its pod IP as the kubelet's
hosts file does. Files are rewritten in place (a bind mount keeps the inode) whenever Services or
endpoints change.
"""

from __future__ import annotations

import copy
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .apierrors import ApiError
from .resourcetypes import Obj
from .store import Event, Store

__all__ = ["AddressBlock", "HostsFiles", "Network", "pump_sockets"]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"
CLUSTER_DOMAIN = "cluster.local"


class AddressBlock:
    """The ``127.B.0.0/16`` block of one simulator (module docstring). Thread-safe.

    ``claim=False`` (tests of addressing alone) skips the machine-wide claim. Raises
    ``RuntimeError`` when all 254 blocks are held by other simulators."""

    def __init__(self, claim: bool = True) -> None:
        self._lock = threading.Lock()
        self._holder: socket.socket | None = None
        start = os.getpid() % 254
        self.block = 1 + start
        if claim:
            for i in range(254):
                b = 1 + (start + i) % 254
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.bind(f"\0kvreset-sim-net-{b}")
                except OSError:
                    s.close()
                    continue
                self._holder, self.block = s, b
                break
            else:
                raise RuntimeError("every 127.B.0.0/16 block is held by another simulator")
        self._pods = itertools.count(0)
        self._services = itertools.count(0)

    @staticmethod
    def _at(block: int, first: int, span: int, n: int) -> str:
        third, fourth = first + n // 254, 1 + n % 254
        if third >= first + span:
            raise RuntimeError("address block exhausted")
        return f"127.{block}.{third}.{fourth}"

    def node_ip(self, index: int) -> str:
        """Address of simulated node ``index`` (0-based, < 240)."""
        return f"127.{self.block}.0.{10 + index}"

    def pod_ip(self) -> str:
        """A fresh pod address (127.B.1.1 onwards; 32k of them)."""
        with self._lock:
            return self._at(self.block, 1, 127, next(self._pods))

    def service_ip(self) -> str:
        """A fresh ClusterIP (127.B.128.1 onwards)."""
        with self._lock:
            return self._at(self.block, 128, 127, next(self._services))

    def release(self) -> None:
        """Give the block back (closing the claim socket)."""
        if self._holder is not None:
            self._holder.close()
            self._holder = None


def pump_sockets(a: socket.socket, b: socket.socket, idle: float = 3600.0) -> None:
    """Copy bytes both ways between connected sockets until both directions end (half-close
    passed on with ``shutdown``) or ``idle`` seconds pass without data; closes both."""
    def one(src: socket.socket, dst: socket.socket) -> None:
        try:
            src.settimeout(idle)
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    t = threading.Thread(target=one, args=(b, a), daemon=True, name="sim-pump")
    t.start()
    one(a, b)
    t.join()
    for s in (a, b):
        try:
            s.close()
        except OSError:
            pass


@dataclass
class _HostsFile:
    path: Path
    namespace: str
    own: list[tuple[str, str]] = field(default_factory=list)   # (ip, names)


class HostsFiles:
    """The per-pod hosts files (module docstring, "Cluster DNS"). Thread-safe."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._lock = threading.Lock()
        self._files: dict[str, _HostsFile] = {}
        self._services: list[tuple[str, str, list[str]]] = []   # (ns, name, ips)

    def add(self, key: str, namespace: str, own: list[tuple[str, str]]) -> Path:
        """Create the hosts file of pod ``key`` (its uid) in ``namespace`` with its ``own``
        lines (``(ip, "name1 name2")``); returns its path."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            f = _HostsFile(self.dir / f"hosts-{key}", namespace, own)
            self._files[key] = f
            self._write(f)
            return f.path

    def remove(self, key: str) -> None:
        """Forget pod ``key``'s file (the file itself stays with the pod's directory)."""
        with self._lock:
            self._files.pop(key, None)

    def set_services(self, services: list[tuple[str, str, list[str]]]) -> None:
        """Replace the Service entries: ``(namespace, name, addresses)``; rewrite every file
        whose content changes."""
        with self._lock:
            if services == self._services:
                return
            self._services = list(services)
            for f in self._files.values():
                self._write(f)

    def render(self, namespace: str, own: list[tuple[str, str]]) -> str:
        """The text of a hosts file for a pod in ``namespace`` (caller holds no lock)."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{ip}\t{names}" for ip, names in own]
        for ns, name, ips in self._services:
            fq = f"{name}.{ns}.svc.{CLUSTER_DOMAIN}"
            names = ([name] if ns == namespace else []) + [f"{name}.{ns}", f"{name}.{ns}.svc", fq]
            lines += [f"{ip}\t{' '.join(names)}" for ip in ips]
        return "\n".join(lines) + "\n"

    def _write(self, f: _HostsFile) -> None:
        text = self.render(f.namespace, f.own).encode()
        # in place: a bind mount of the file keeps pointing at this inode
        fd = os.open(f.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, text, 0)
        finally:
            os.close(fd)


class _Relay:
    """One listener ``ip:port`` of a Service port (module docstring, "Relays")."""

    def __init__(self, ip: str, port: int, pick: Callable[[], tuple[Any, int] | None]) -> None:
        self.ip, self.port = ip, port
        self._pick = pick
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((ip, port))
        self._sock.listen(128)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=f"sim-svc-{ip}:{port}").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        target = self._pick()
        if target is None:
            conn.close()
            return
        runtime, port = target
        connect = getattr(runtime, "connect", None)
        upstream = connect(port) if connect is not None else None
        if upstream is not None:
            pump_sockets(conn, upstream)
            return
        from .podhttp import serve_pod_connection
        serve_pod_connection(conn, runtime.request, port, "service")

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass


def _pod_ready(pod: Obj) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def _labels_match(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def resolve_target_port(pod: Obj, target: Any) -> int | None:
    """A Service port's ``targetPort`` for one pod: a number as is, a name through the pod's
    container ports (None when the pod declares no such name)."""
    if isinstance(target, int):
        return target
    text = str(target)
    if text.isdigit():
        return int(text)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == text and p.get("containerPort"):
                return int(p["containerPort"])
    return None


class Network:
    """Services, EndpointSlices, relays and hosts files of one cluster.

    ``store``: the cluster's store; ``block``: its :class:`AddressBlock`; ``records``: a
    callable ``(namespace, pod name) -> PodRecord | None`` (the runtime of a pod); ``net_dir``:
    where hosts files go. Call :meth:`start` once the store exists; :meth:`stop` closes every
    relay. Store events mark namespaces dirty; a worker thread recomputes their slices and
    relays (within ~20 ms), so no store write happens inside another's event callback."""

    def __init__(self, store: Store, block: AddressBlock, records: Callable[[str, str], Any],
                 net_dir: Path) -> None:
        self.store = store
        self.block = block
        self.records = records
        self.hosts = HostsFiles(net_dir)
        t = store.types
        self.t_pod = t.lookup("", "v1", "pods")
        self.t_svc = t.lookup("", "v1", "services")
        self.t_eps = t.lookup("discovery.k8s.io", "v1", "endpointslices")
        self._relays: dict[tuple[str, int], _Relay] = {}
        self._relay_owner: dict[tuple[str, int], str] = {}     # (ip, port) -> "ns/name"
        self._targets: dict[tuple[str, int], list[tuple[str, str, int]]] = {}
        self._rr = itertools.count()
        self._dirty: set[str] = set()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="sim-network")
        self.notes: list[str] = []

    # ---------------- object defaults ----------------
    def default_service(self, obj: Obj) -> None:
        """Fill a new Service as the API server does: ``clusterIP``/``clusterIPs`` (a fresh
        loopback address unless ``None``), ``type: ClusterIP``, ``sessionAffinity: None``,
        ``ipFamilies``, per port ``protocol: TCP`` and ``targetPort`` = ``port``. A given
        clusterIP outside 127.0.0.0/8 is replaced (nothing may listen elsewhere)."""
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        ip = spec.get("clusterIP")
        if ip != "None" and not (isinstance(ip, str) and ip.startswith("127.")):
            ip = self.block.service_ip()
        spec["clusterIP"] = ip
        spec["clusterIPs"] = [ip]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                if "port" in p:
                    p.setdefault("targetPort", p["port"])
        obj.setdefault("status", {"loadBalancer": {}})

    # ---------------- events ----------------
    def start(self) -> None:
        """Subscribe to store events and start the worker thread."""
        self.store.subscribe(self._on_event)
        self._thread.start()

    def _on_event(self, ev: Event) -> None:
        if ev.rtype is self.t_pod or ev.rtype is self.t_svc:
            ns = (ev.obj.get("metadata") or {}).get("namespace", "")
            with self._cond:
                self._dirty.add(ns)
                self._cond.notify()

    def mark_dirty(self, namespace: str) -> None:
        """Recompute ``namespace``'s slices soon (a pod's runtime changed, e.g. it started)."""
        with self._cond:
            self._dirty.add(namespace)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
            time.sleep(0.02)   # gather a burst of events
            with self._cond:
                dirty, self._dirty = self._dirty, set()
            for ns in sorted(dirty):
                try:
                    self.sync_namespace(ns)
                except Exception as e:  # noqa: BLE001 - keep serving
                    self.notes.append(f"sync of namespace {ns} failed: {e!r}")
            self._sync_hosts()

    # ---------------- slices ----------------
    def _slice_for(self, svc: Obj, pods: list[Obj]) -> Obj:
        md = svc["metadata"]
        name = md["name"]
        spec = svc.get("spec") or {}
        endpoints = []
        port_of: dict[str, int | None] = {}
        for pod in pods:
            st = pod.get("status") or {}
            if st.get("phase") != "Running" or not st.get("podIP") or \
                    (pod["metadata"].get("deletionTimestamp")):
                continue
            ready = _pod_ready(pod)
            endpoints.append({
                "addresses": [st["podIP"]],
                "conditions": {"ready": ready, "serving": ready, "terminating": False},
                "nodeName": (pod.get("spec") or {}).get("nodeName"),
                "targetRef": {"kind": "Pod", "namespace": md["namespace"],
                              "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]},
            })
            for p in spec.get("ports") or []:
                key = str(p.get("name") or "")
                if port_of.get(key) is None:
                    port_of[key] = resolve_target_port(pod, p.get("targetPort", p.get("port")))
        ports = []
        for p in spec.get("ports") or []:
            key = str(p.get("name") or "")
            entry: dict[str, Any] = {"name": key, "protocol": p.get("protocol", "TCP")}
            if port_of.get(key) is not None:
                entry["port"] = port_of[key]
            ports.append(entry)
        suffix = md.get("uid", "00000")[:5].replace("-", "x")
        return {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": f"{name}-{suffix}", "namespace": md["namespace"],
                "labels": {SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name,
                                     "uid": md.get("uid"), "controller": True,
                                     "blockOwnerDeletion": True}],
            },
            "addressType": "IPv4", "endpoints": endpoints, "ports": ports,
        }

    def sync_namespace(self, ns: str) -> None:
        """Recompute the EndpointSlices and relays of every Service in ``ns``; delete slices
        whose Service is gone."""
        assert self.t_svc is not None and self.t_pod is not None and self.t_eps is not None
        services = self.store.list(self.t_svc, ns)
        pods = self.store.list(self.t_pod, ns)
        wanted: dict[str, Obj] = {}
        for svc in services:
            sel = (svc.get("spec") or {}).get("selector")
            if not isinstance(sel, dict) or not sel:
                continue
            matching = [p for p in pods if _labels_match(sel, p["metadata"].get("labels") or {})]
            sl = self._slice_for(svc, matching)
            wanted[sl["metadata"]["name"]] = sl
            self._sync_relays(svc, sl)
        for old in self.store.list(self.t_eps, ns):
            oname = old["metadata"]["name"]
            if (old["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
                continue
            new = wanted.pop(oname, None)
            try:
                if new is None:
                    self.store.delete(self.t_eps, ns, oname)
                elif (new["endpoints"], new["ports"]) != (old.get("endpoints"), old.get("ports")):
                    upd = copy.deepcopy(old)
                    upd["endpoints"], upd["ports"] = new["endpoints"], new["ports"]
                    upd["metadata"].pop("resourceVersion", None)
                    self.store.replace(self.t_eps, ns, oname, upd)
            except ApiError:
                pass
        for sl in wanted.values():
            try:
                self.store.create(self.t_eps, sl, ns)
            except ApiError:
                pass
        live = {(s["metadata"]["name"]) for s in services}
        for key in [k for k in self._targets if k[0].startswith(f"{ns}/")]:
            if key[0].split("/", 1)[1] not in live:
                self._drop_relays(key[0])

    def _sync_relays(self, svc: Obj, sl: Obj) -> None:
        md, spec = svc["metadata"], svc.get("spec") or {}
        ip = spec.get("clusterIP")
        key_base = f"{md['namespace']}/{md['name']}"
        if not isinstance(ip, str) or not ip.startswith("127."):
            return
        pods = {e["targetRef"]["name"]: e for e in sl["endpoints"] if e["conditions"]["ready"]}
        all_pods = {p["metadata"]["name"]: p for p in self.store.list(self.t_pod, md["namespace"])}  # type: ignore[arg-type]
        for p in spec.get("ports") or []:
            try:
                port = int(p.get("port"))
            except (TypeError, ValueError):
                continue
            targets = []
            for pname in sorted(pods):
                pod = all_pods.get(pname)
                tp = resolve_target_port(pod, p.get("targetPort", port)) if pod else None
                if tp is not None:
                    targets.append((md["namespace"], pname, tp))
            self._targets[(key_base, port)] = targets
            rkey = (ip, port)
            if rkey not in self._relays:
                try:
                    self._relays[rkey] = _Relay(ip, port, self._picker(key_base, port))
                    self._relay_owner[rkey] = key_base
                except OSError as e:
                    self.notes.append(f"service {key_base} port {port}: cannot listen on "
                                      f"{ip}:{port}: {e}")

    def _picker(self, key_base: str, port: int) -> Callable[[], tuple[Any, int] | None]:
        def pick() -> tuple[Any, int] | None:
            targets = list(self._targets.get((key_base, port)) or [])
            for _ in range(len(targets)):
                ns, pname, tp = targets[next(self._rr) % len(targets)]
                rec = self.records(ns, pname)
                if rec is not None and rec.runtime is not None and not rec.deleted:
                    return rec.runtime, tp
            return None
        return pick

    def _drop_relays(self, key_base: str) -> None:
        for key in [k for k in self._targets if k[0] == key_base]:
            del self._targets[key]
        for rkey, owner in list(self._relay_owner.items()):
            if owner == key_base:
                self._relays.pop(rkey).close()
                del self._relay_owner[rkey]

    def ready_targets(self, ns: str, name: str, port_spec: str) -> tuple[list[tuple[str, int]], Obj]:
        """For the service proxy: the ready endpoints ``(pod name, target port)`` of Service
        ``ns/name`` for the port given as a number or a port name (empty: the first port), and
        the Service object. Raises ``ApiError`` 404 for an unknown Service, 503 (the API
        server's ``no endpoints available for service "NAME"``) when there is none, or when the
        Service has no such port."""
        assert self.t_svc is not None and self.t_pod is not None
        svc = self.store.get(self.t_svc, ns, name)
        spec = svc.get("spec") or {}
        chosen = None
        for p in spec.get("ports") or []:
            if not port_spec or str(p.get("port")) == port_spec or p.get("name") == port_spec:
                chosen = p
                break
        if chosen is None:
            raise ApiError(503, "ServiceUnavailable",
                           f'no endpoints available for service "{name}"')
        sel = spec.get("selector") or {}
        out = []
        for pod in self.store.list(self.t_pod, ns):
            if not sel or not _labels_match(sel, pod["metadata"].get("labels") or {}):
                continue
            if (pod.get("status") or {}).get("phase") != "Running" or not _pod_ready(pod):
                continue
            tp = resolve_target_port(pod, chosen.get("targetPort", chosen.get("port")))
            if tp is not None:
                out.append((pod["metadata"]["name"], tp))
        if not out:
            raise ApiError(503, "ServiceUnavailable",
                           f'no endpoints available for service "{name}"')
        return out, svc

    # ---------------- hosts ----------------
    def _sync_hosts(self) -> None:
        assert self.t_svc is not None and self.t_eps is not None
        entries: list[tuple[str, str, list[str]]] = []
        for svc in self.store.list(self.t_svc, None):
            md, spec = svc["metadata"], svc.get("spec") or {}
            ip = spec.get("clusterIP")
            if ip and ip != "None":
                entries.append((md["namespace"], md["name"], [ip]))
            elif ip == "None":
                ips = []
                for sl in self.store.list(self.t_eps, md["namespace"]):
                    if (sl["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) == md["name"]:
                        ips += [e["addresses"][0] for e in sl.get("endpoints") or []
                                if e["conditions"]["ready"]]
                if ips:
                    entries.append((md["namespace"], md["name"], sorted(ips)))
        entries.sort()
        self.hosts.set_services(entries)

    def stop(self) -> None:
        """Stop the worker and close every relay."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        for relay in list(self._relays.values()):
            relay.close()
        self._relays.clear()
