"""HTTPS API server of the simulated cluster (the Kubernetes REST wire protocol, JSON only).

Serves discovery (``/version``, ``/api``, ``/apis``...), CRUD + PATCH on every stored resource
type, label/field selectors, server-side Table output for ``kubectl get``, ``pods/proxy`` to the
pod runtimes, and ``/sim/v1/state``. Errors are ``Status`` objects as a real API server gives
them (k8s.io/apimachinery ``pkg/api/errors``). Bearer-token authentication; the admin token
bypasses authorisation; other users go through ``SimServer.authorizer`` (the simulator plugs in
tests/sim/rbac.py; None allows everything).

``pods/exec`` and ``pods/portforward`` are served over channel WebSockets (tests/sim/wsstream.py):
exec runs the argv in the pod's sandbox (tests/sim/execsandbox.py), port-forward carries HTTP to
the pod runtime (tests/sim/podhttp.py). A request without a WebSocket upgrade (plain, or SPDY,
kubectl's fallback) gets 400 "Upgrade request required" once the request is otherwise valid.

Watch (``?watch=true``) streams JSON-lines events from the moment it starts. Not served:
server-side apply, SPDY.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import os
import queue
import secrets
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import trustme
import yaml

from .controllers import Cluster, PodRecord, human_age
from .execsandbox import ExecProcess, ExecSpec, exec_failure_message
from .fakevllm import StreamBody
from .faults import Faults, hangs
from .network import pump_sockets
from .podhttp import serve_in_thread
from .store import (
    ApiError,
    Event,
    Obj,
    ResourceType,
    bad_request,
    fields_match,
    forbidden,
    invalid,
    json_patch,
    labels_match,
    merge_patch,
    method_not_allowed,
    parse_field_selector,
    parse_label_selector,
    strategic_merge_patch,
)
from .wsstream import CLOSE_CHANNEL, V4, V5, ChannelWebSocket, is_upgrade

VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4",
    "gitCommit": "59526cd4867447956156ae3a602fcbac10a2c335",
    "gitTreeState": "clean",
    "buildDate": "2025-04-22T16:02:27Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}

# Subresource discovery entries: name -> (kind, group, version, verbs)
_SUBRESOURCES: dict[str, tuple[str, list[str]]] = {
    "proxy": ("PodProxyOptions", ["create", "delete", "get", "patch", "update"]),
    "exec": ("PodExecOptions", ["create", "get"]),
    "portforward": ("PodPortForwardOptions", ["create", "get"]),
    "log": ("Pod", ["get"]),
    "status": ("", ["get", "patch", "update"]),
    "scale": ("Scale", ["get", "patch", "update"]),
}

_METHOD_VERB = {"GET": "get", "HEAD": "get", "OPTIONS": "get", "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete"}
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
               "trailers", "transfer-encoding", "upgrade", "content-length", "date", "server"}

Authorizer = Callable[[str, str, str, str, "str | None", str], bool]


def _truthy(v: str | None) -> bool:
    return (v or "").lower() in ("1", "true", "yes")


def _parse_time(ts: str | None) -> float:
    if not ts:
        return time.time()
    try:
        return _dt.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=_dt.timezone.utc).timestamp()
    except ValueError:
        return time.time()


# --------------------------------------------------------------------------------------------
# Tables (server-side printing, as `kubectl get` asks with Accept: ...;as=Table;g=meta.k8s.io)
# --------------------------------------------------------------------------------------------


def _col(name: str, ctype: str = "string", desc: str = "", priority: int = 0,
         fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": ctype, "format": fmt, "description": desc, "priority": priority}


def _pod_cells(p: Obj) -> list[Any]:
    spec = p.get("spec") or {}
    st = p.get("status") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    total = len(spec.get("containers") or []) + len(sidecars)
    statuses = list(st.get("containerStatuses") or [])
    side_names = {c.get("name") for c in sidecars}
    statuses += [s for s in st.get("initContainerStatuses") or [] if s.get("name") in side_names]
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    reason = st.get("phase", "Pending")
    for s in statuses:
        w = (s.get("state") or {}).get("waiting")
        if w and w.get("reason"):
            reason = w["reason"]
    if p["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    age = human_age(time.time() - _parse_time(p["metadata"].get("creationTimestamp")))
    return [p["metadata"]["name"], f"{ready}/{total}", reason, restarts, age,
            st.get("podIP", "<none>"), spec.get("nodeName", "<none>")]


def _deploy_cells(d: Obj) -> list[Any]:
    st = d.get("status") or {}
    want = (d.get("spec") or {}).get("replicas", 1)
    age = human_age(time.time() - _parse_time(d["metadata"].get("creationTimestamp")))
    return [d["metadata"]["name"], f"{st.get('readyReplicas', 0)}/{want}",
            st.get("updatedReplicas", 0), st.get("availableReplicas", 0), age]


def _service_cells(o: Obj) -> list[Any]:
    spec = o.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [])
    age = human_age(time.time() - _parse_time(o["metadata"].get("creationTimestamp")))
    sel = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [o["metadata"]["name"], spec.get("type", "ClusterIP"), spec.get("clusterIP", "<none>"),
            "<none>", ports or "<none>", age, sel or "<none>"]


def _slice_cells(o: Obj) -> list[Any]:
    ports = ",".join(str(p.get("port")) for p in o.get("ports") or [] if p.get("port") is not None)
    addrs = [a for e in o.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addrs[:3]) + (f" + {len(addrs) - 3} more..." if len(addrs) > 3 else "")
    age = human_age(time.time() - _parse_time(o["metadata"].get("creationTimestamp")))
    return [o["metadata"]["name"], o.get("addressType", "IPv4"), ports or "<unset>",
            shown or "<unset>", age]


def _daemonset_cells(o: Obj) -> list[Any]:
    st = o.get("status") or {}
    age = human_age(time.time() - _parse_time(o["metadata"].get("creationTimestamp")))
    return [o["metadata"]["name"], st.get("desiredNumberScheduled", 0),
            st.get("currentNumberScheduled", 0), st.get("numberReady", 0),
            st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0), "<none>", age]


def _default_cells(o: Obj) -> list[Any]:
    age = human_age(time.time() - _parse_time(o["metadata"].get("creationTimestamp")))
    return [o["metadata"]["name"], age]


def table_for(rtype: ResourceType, items: list[Obj], rv: str, include: str) -> Obj:
    """A ``meta.k8s.io/v1`` Table: pods (NAME READY STATUS RESTARTS AGE, wide: IP NODE),
    deployments (NAME READY UP-TO-DATE AVAILABLE AGE), others (NAME AGE). ``include`` is the
    ``includeObject`` policy: ``Metadata`` (default), ``Object`` or ``None``."""
    cells: Callable[[Obj], list[Any]]
    if rtype.kind == "Pod":
        cols = [_col("Name", desc="Name"), _col("Ready"), _col("Status"),
                _col("Restarts", "string"), _col("Age"), _col("IP", priority=1),
                _col("Node", priority=1)]
        cells = _pod_cells
    elif rtype.kind == "Deployment":
        cols = [_col("Name", desc="Name"), _col("Ready"), _col("Up-to-date", "integer"),
                _col("Available", "integer"), _col("Age")]
        cells = _deploy_cells
    elif rtype.kind == "Service":
        cols = [_col("Name", desc="Name"), _col("Type"), _col("Cluster-IP"),
                _col("External-IP"), _col("Port(s)"), _col("Age"), _col("Selector", priority=1)]
        cells = _service_cells
    elif rtype.kind == "EndpointSlice":
        cols = [_col("Name", desc="Name"), _col("AddressType"), _col("Ports"),
                _col("Endpoints"), _col("Age")]
        cells = _slice_cells
    elif rtype.kind == "DaemonSet":
        cols = [_col("Name", desc="Name"), _col("Desired", "integer"), _col("Current", "integer"),
                _col("Ready", "integer"), _col("Up-to-date", "integer"),
                _col("Available", "integer"), _col("Node Selector"), _col("Age")]
        cells = _daemonset_cells
    else:
        cols = [_col("Name", desc="Name"), _col("Age")]
        cells = _default_cells
    cols[0]["format"] = "name"
    rows = []
    for o in items:
        row: dict[str, Any] = {"cells": cells(o)}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": o["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": rv}, "columnDefinitions": cols, "rows": rows}


# --------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------


class _Reply(Exception):
    """Internal: a finished response (status, headers, body)."""

    def __init__(self, code: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        super().__init__(code)
        self.code = code
        self.body = body
        self.headers = headers


class _Stream(Exception):
    """Internal: a streamed (chunked) response, e.g. a watch."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        super().__init__("stream")
        self.chunks = chunks


def _send_status(ws: ChannelWebSocket, status: Obj) -> None:
    """Write an exec ``Status`` on the error channel (3), compact JSON as Go encodes it."""
    ws.send(3, json.dumps(status, separators=(",", ":")).encode())


class _Hijacked(Exception):
    """Internal: the connection was taken over (a WebSocket upgrade) and is finished."""


class _Dropped(Exception):
    """Internal: a fault closes the connection without an answer."""


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 ctx: ssl.SSLContext, sim: SimServer) -> None:
        self.ssl_ctx = ctx
        self.sim = sim
        super().__init__(addr, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        # a header and a body written in two sends must not wait for the peer's delayed ACK
        # (Nagle's algorithm: about 40 ms per keep-alive answer); real API servers (Go's
        # net/http) set TCP_NODELAY on every accepted connection
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # the TLS handshake happens on the handler thread, not in the accept loop
        return self.ssl_ctx.wrap_socket(sock, server_side=True,
                                        do_handshake_on_connect=False), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # client disconnects and failed handshakes are routine


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kvreset-sim"
    timeout = 300
    server: _TLSServer
    #: ``"<verb> <resource>"`` of the resource request being served (for ``api_errors``)
    sim_call: str | None = None

    def setup(self) -> None:
        self.request.settimeout(30)
        self.request.do_handshake()
        self.server.sim.count_handshake()
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _handle(self) -> None:
        self.server.sim.handle(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle


class SimServer:
    """The API server. ``start()`` binds 127.0.0.1 on a free port with a fresh CA;
    ``kubeconfig()`` / ``write_kubeconfig(path)`` describe how to reach it; ``stop()`` shuts
    it down. ``users`` are extra (scenario) user names, each given its own token.
    ``authorizer(user, verb, resource, group, namespace, name) -> bool`` decides for non-admin
    users (default: allow). ``unreachable_delay`` is how long a pod with the ``unreachable``
    network fault makes a proxy call wait before its 503. ``exec_timeout`` (s, default 300)
    bounds one exec (then it is killed and its error channel says so);
    ``portforward_timeout`` (s, default 3600) bounds one port-forward session.
    ``drop_fields`` (resource plural -> field paths as key tuples; the scenario's
    ``drop_fields``) is a fault: every object of that resource the server returns (get, list,
    watch, Table rows, write answers) lacks those fields; what is stored is unchanged.

    Faults (tests/sim/faults.py): ``faults`` (the scenario's ``fault_state``) answers, delays
    or drops API requests and fails proxied vLLM calls; per-pod faults come from the
    scenario's ``pods:`` rules (``Scenario.pod_faults``). ``token_uses`` maps a token to the
    requests it still serves (absent: unlimited); a token at 0 answers 401. ``token_ttl``
    (user -> N) gives every token issued to that user at start N uses. ``hang_limit`` (s,
    default 600) is how long a ``hang`` fault holds a request before giving up.
    """

    def __init__(self, cluster: Cluster, users: list[str] | None = None,
                 namespace: str = "default", unreachable_delay: float = 0.5,
                 faults: Faults | None = None, token_ttl: dict[str, int] | None = None) -> None:
        self.cluster = cluster
        cluster.api_server = self
        self.store = cluster.store
        self.namespace = namespace
        self.admin_token = secrets.token_urlsafe(32)
        self.tokens: dict[str, str] = {self.admin_token: "admin"}
        self.user_tokens: dict[str, str] = {"admin": self.admin_token}
        for u in users or []:
            tok = secrets.token_urlsafe(32)
            self.tokens[tok] = u
            self.user_tokens[u] = tok
        self.authorizer: Authorizer | None = None
        self.unreachable_delay = unreachable_delay
        self.exec_timeout = 300.0
        self.portforward_timeout = 3600.0
        self.drop_fields: dict[str, list[tuple[str, ...]]] = {}
        self.faults = faults or Faults()
        self.token_uses: dict[str, int] = {}
        for u, ttl in (token_ttl or {}).items():
            if u in self.user_tokens:
                self.token_uses[self.user_tokens[u]] = ttl
        self.hang_limit = 600.0
        self.tokens_expired = 0
        self._stop_event = threading.Event()
        self._fault_lock = threading.Lock()
        self._pod_fault_state: dict[str, dict[str, Any]] = {}
        self._counts: Counter[str] = Counter()
        #: ``"<verb> <resource> <code> <reason>"`` -> how many resource requests got that Status
        self._errors: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self.tls_handshakes = 0
        self._httpd: _TLSServer | None = None
        self._thread: threading.Thread | None = None
        self.ca = trustme.CA()
        self.port = 0
        self._stopping = False

    # ---------------- lifecycle ----------------
    def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Bind and serve in a daemon thread."""
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(ctx)
        ctx.set_alpn_protocols(["http/1.1"])
        self._httpd = _TLSServer((host, port), _Handler, ctx, self)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.2}, name="sim-api",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting and close the listening socket."""
        self._stopping = True
        self._stop_event.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def url(self) -> str:
        """``https://127.0.0.1:PORT``."""
        return f"https://127.0.0.1:{self.port}"

    def ca_pem(self) -> bytes:
        """The CA certificate (PEM) clients must trust."""
        return self.ca.cert_pem.bytes()

    def kubeconfig(self) -> dict[str, Any]:
        """Kubeconfig: cluster ``sim``, user ``admin`` + one user per scenario user, context
        ``sim`` (admin, default namespace) and ``sim-<user>`` per extra user."""
        users = [{"name": u, "user": {"token": t}} for u, t in self.user_tokens.items()]
        contexts = [{"name": "sim" if u == "admin" else f"sim-{u}",
                     "context": {"cluster": "sim", "user": u, "namespace": self.namespace}}
                    for u in self.user_tokens]
        return {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "sim", "cluster": {
                "server": self.url,
                "certificate-authority-data": base64.b64encode(self.ca_pem()).decode()}}],
            "users": users, "contexts": contexts, "current-context": "sim",
        }

    def write_kubeconfig(self, path: str | Path) -> None:
        """Write ``kubeconfig()`` as YAML (mode 0600)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump(self.kubeconfig(), f, sort_keys=False)

    def api_requests(self) -> dict[str, int]:
        """Counts of API requests as ``"<verb> <resource>"`` (``list pods``,
        ``create pods/proxy``...)."""
        with self._count_lock:
            return dict(sorted(self._counts.items()))

    def api_errors(self) -> dict[str, int]:
        """Counts of resource requests answered with an error ``Status``, as
        ``"<verb> <resource> <code> <reason>"`` (``patch deployments 409 Conflict``)."""
        with self._count_lock:
            return dict(sorted(self._errors.items()))

    def count_handshake(self) -> None:
        """Count one completed TLS handshake (one accepted client connection)."""
        with self._count_lock:
            self.tls_handshakes += 1

    def _count(self, verb: str, resource: str) -> None:
        with self._count_lock:
            self._counts[f"{verb} {resource}"] += 1

    # ---------------- request entry ----------------
    def handle(self, h: _Handler) -> None:
        """Serve one request on handler ``h`` (any method)."""
        h.sim_call = None
        try:
            body = self._read_body(h)
            code, headers, payload = self._route(h, body)
        except _Reply as r:
            code, headers, payload = r.code, r.headers, r.body
        except _Stream as st:
            self._send_stream(h, st.chunks)
            return
        except (_Hijacked, _Dropped):
            h.close_connection = True
            return
        except ApiError as e:
            code, headers, payload = e.code, [("Content-Type", "application/json")], \
                json.dumps(e.status()).encode()
            call = getattr(h, "sim_call", None)
            if call is not None:
                with self._count_lock:
                    self._errors[f"{call} {e.code} {e.reason}"] += 1
        except Exception as e:  # pragma: no cover - a bug must still answer
            err = ApiError(500, "InternalError", f"Internal error occurred: {e!r}")
            code, headers, payload = 500, [("Content-Type", "application/json")], \
                json.dumps(err.status()).encode()
        try:
            h.send_response(code)
            for k, v in headers:
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(payload)))
            h.send_header("Cache-Control", "no-cache, private")
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            h.close_connection = True

    @staticmethod
    def _send_stream(h: _Handler, chunks: Iterator[bytes]) -> None:
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Transfer-Encoding", "chunked")
            h.send_header("Cache-Control", "no-cache, private")
            h.end_headers()
            h.wfile.flush()
            for c in chunks:
                h.wfile.write(f"{len(c):x}\r\n".encode() + c + b"\r\n")
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            h.close_connection = True
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def _watch(self, rtype: ResourceType, ns: str | None, query: dict[str, str],
               as_table: bool = False) -> Iterator[bytes]:
        """Watch events as JSON lines: ADDED for every current match unless a non-zero
        ``resourceVersion`` is given, then every later change that matches, until
        ``timeoutSeconds`` (default 1800) or the server stops; with ``as_table`` each object is
        a one-row Table (what ``kubectl get -w`` asks for). A change before the watch began
        but after the given resourceVersion is not replayed (no event history is kept)."""
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        q: queue.Queue[Event] = queue.Queue()

        def listener(ev: Event) -> None:
            if ev.rtype is rtype:
                q.put(ev)

        self.store.subscribe(listener)
        try:
            if query.get("resourceVersion", "0") in ("", "0"):
                for o in self.store.list(rtype, ns, labels, fields):
                    yield self._watch_line("ADDED", rtype, o, as_table, query)
            end = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
            while not self._stopping and time.monotonic() < end:
                try:
                    ev = q.get(timeout=min(0.5, max(end - time.monotonic(), 0.01)))
                except queue.Empty:
                    continue
                md = ev.obj.get("metadata", {})
                if ns is not None and rtype.namespaced and md.get("namespace") != ns:
                    continue
                if not labels_match(labels, md.get("labels")) or \
                        not fields_match(fields, ev.obj):
                    continue
                yield self._watch_line(ev.type, rtype, ev.obj, as_table, query)
        finally:
            self.store.unsubscribe(listener)

    def _served(self, rtype: ResourceType, obj: Obj) -> Obj:
        """``obj`` as the server returns it: a copy without the ``drop_fields`` of its
        resource (the fault), else ``obj`` itself."""
        paths = self.drop_fields.get(rtype.plural)
        if not paths or not isinstance(obj, dict):
            return obj
        out: Obj = json.loads(json.dumps(obj))
        for path in paths:
            node: Any = out
            for key in path[:-1]:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(path[-1], None)
        return out

    def _watch_line(self, etype: str, rtype: ResourceType, obj: Obj, as_table: bool,
                    query: dict[str, str]) -> bytes:
        obj = self._served(rtype, obj)
        out = table_for(rtype, [obj], obj["metadata"].get("resourceVersion", ""),
                        query.get("includeObject", "Metadata")) if as_table else obj
        return json.dumps({"type": etype, "object": out}, separators=(",", ":")).encode() + b"\n"

    @staticmethod
    def _read_body(h: _Handler) -> bytes:
        if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                line = h.rfile.readline()
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(h.rfile.read(size))
                h.rfile.readline()
            return b"".join(chunks)
        n = int(h.headers.get("Content-Length") or 0)
        return h.rfile.read(n) if n else b""

    def _json(self, code: int, obj: Any) -> tuple[int, list[tuple[str, str]], bytes]:
        return code, [("Content-Type", "application/json")], \
            json.dumps(obj, separators=(",", ":")).encode()

    def _authenticate(self, h: _Handler) -> str:
        auth = h.headers.get("Authorization") or ""
        if auth.lower().startswith("bearer "):
            token = auth[7:].strip()
            user = self.tokens.get(token)
            if user is not None:
                with self._fault_lock:
                    left = self.token_uses.get(token)
                    if left is None:
                        return user
                    if left > 0:
                        self.token_uses[token] = left - 1
                        return user
                    self.tokens_expired += 1
        raise ApiError(401, "Unauthorized", "Unauthorized")

    def mint_token(self, user: str, ttl: int | None = None) -> str:
        """A new bearer token for ``user`` (any name; ``admin`` bypasses RBAC), serving
        ``ttl`` requests (None: unlimited) before it answers 401."""
        tok = secrets.token_urlsafe(32)
        with self._fault_lock:
            self.tokens[tok] = user
            if ttl is not None:
                self.token_uses[tok] = ttl
        return tok

    def _authorize(self, user: str, verb: str, resource: str, group: str, ns: str | None,
                   name: str) -> None:
        if user == "admin" or self.authorizer is None:
            return
        if not self.authorizer(user, verb, resource, group, ns, name):
            raise forbidden(user, verb, resource, group, ns, name)

    # ---------------- routing ----------------
    def _route(self, h: _Handler, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        url = urlsplit(h.path)
        raw_segs = [s for s in url.path.split("/") if s != ""]
        segs = [unquote(s) for s in raw_segs]
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        user = self._authenticate(h)
        method = h.command
        if not segs:
            return self._json(200, {"paths": ["/api", "/api/v1", "/apis", "/version"]})
        if segs == ["version"]:
            return self._json(200, VERSION_INFO)
        if segs[0] in ("healthz", "livez", "readyz"):
            return 200, [("Content-Type", "text/plain")], b"ok"
        if segs[0] == "openapi":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if segs[:2] == ["sim", "v1"]:
            return self._sim(user, method, segs[2:], body)
        if segs[0] == "api":
            if len(segs) == 1:
                return self._json(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": [{
                                            "clientCIDR": "0.0.0.0/0",
                                            "serverAddress": f"127.0.0.1:{self.port}"}]})
            if segs[1] != "v1":
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            group, version, rest = "", "v1", segs[2:]
            raw_rest = raw_segs[2:]
        elif segs[0] == "apis":
            if len(segs) == 1:
                return self._json(200, self._group_list())
            groups = self.store.types.groups()
            if segs[1] not in groups:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if len(segs) == 2:
                return self._json(200, self._group(segs[1], groups[segs[1]]))
            if segs[2] not in groups[segs[1]]:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            group, version, rest = segs[1], segs[2], segs[3:]
            raw_rest = raw_segs[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return self._json(200, self._resource_list(group, version))
        return self._resource(h, user, method, group, version, rest, raw_rest, query, body,
                              url.query)

    def _group_list(self) -> Obj:
        groups = []
        for g, versions in self.store.types.groups().items():
            if g:
                groups.append(self._group(g, versions))
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    @staticmethod
    def _group(g: str, versions: list[str]) -> Obj:
        vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": vs,
                "preferredVersion": vs[0]}

    def _resource_list(self, group: str, version: str) -> Obj:
        resources: list[dict[str, Any]] = []
        for t in self.store.types.all():
            if t.group != group or t.version != version:
                continue
            r: dict[str, Any] = {"name": t.plural, "singularName": t.singular,
                                 "namespaced": t.namespaced, "kind": t.kind,
                                 "verbs": list(t.verbs)}
            if t.short_names:
                r["shortNames"] = list(t.short_names)
            if t.categories:
                r["categories"] = list(t.categories)
            resources.append(r)
            for sub in t.subresources:
                kind, verbs = _SUBRESOURCES[sub]
                e: dict[str, Any] = {"name": f"{t.plural}/{sub}", "singularName": "",
                                     "namespaced": t.namespaced, "kind": kind or t.kind,
                                     "verbs": verbs}
                if sub == "scale":
                    e["group"], e["version"] = "autoscaling", "v1"
                resources.append(e)
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": version if not group else f"{group}/{version}",
                "resources": resources}

    def _sim(self, user: str, method: str, segs: list[str],
             body: bytes = b"") -> tuple[int, list[tuple[str, str]], bytes]:
        if user != "admin":
            raise ApiError(403, "Forbidden", f'User "{user}" cannot access the simulator state')
        if segs == ["state"] and method == "GET":
            return self._json(200, self.state())
        if segs == ["tokens"] and method == "POST":
            req = self._decode(body) if body.strip() else {}
            name = req.get("user", "admin")
            ttl = req.get("ttl")
            if not isinstance(name, str) or not name or (
                    ttl is not None and (not isinstance(ttl, int) or ttl < 0)):
                raise bad_request("body must be {\"user\": NAME, \"ttl\": N or null}")
            return self._json(201, {"user": name, "ttl": ttl,
                                     "token": self.mint_token(name, ttl)})
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def state(self) -> Obj:
        """``/sim/v1/state``: every pod record (deleted ones too), the request counts,
        ``api_errors`` (error answers per verb, resource, code and reason), ``tls_handshakes`` (client connections whose TLS handshake completed, WebSockets
        included), and
        ``faults``: ``api`` (per ``faults.api`` rule: matched, fired), ``vllm_failed``,
        ``tokens_expired`` (401s of used-up tokens) and ``pods`` (pod uid -> what its faults
        did: ``deleted_on_reset``, ``refused_calls``, ``hung_calls``, ``cut_execs``...)."""
        cache: dict[str, list[str]] = {}
        faults = self.faults.state()
        faults["tokens_expired"] = self.tokens_expired
        with self._fault_lock:
            faults["pods"] = {uid: dict(st) for uid, st in self._pod_fault_state.items()}
        return {"pods": [r.state(cache) for r in self.cluster.records()],
                "api_requests": self.api_requests(), "api_errors": self.api_errors(),
                "tls_handshakes": self.tls_handshakes, "faults": faults}

    # ---------------- resources ----------------
    def _resource(self, h: _Handler, user: str, method: str, group: str, version: str,
                  rest: list[str], raw_rest: list[str], query: dict[str, str], body: bytes,
                  raw_query: str) -> tuple[int, list[tuple[str, str]], bytes]:
        ns: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and \
                self.store.types.lookup(group, version, rest[2]) is not None:
            ns, plural, tail, raw_tail = rest[1], rest[2], rest[3:], raw_rest[3:]
        else:
            plural, tail, raw_tail = rest[0], rest[1:], raw_rest[1:]
        rtype = self.store.types.lookup(group, version, plural)
        if rtype is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if ns is not None and not rtype.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = tail[0] if tail else ""
        sub = tail[1] if len(tail) > 1 else ""
        if rtype.namespaced and name and ns is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub and sub not in rtype.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not name and method not in ("GET", "POST", "DELETE"):
            raise method_not_allowed("the server does not allow this method on the requested "
                                     "resource")
        resource = f"{plural}/{sub}" if sub else plural
        if sub == "proxy":
            verb = _METHOD_VERB.get(method, "get")
        elif method == "GET" and not name:
            verb = "watch" if _truthy(query.get("watch")) else "list"
        elif method == "DELETE" and not name:
            verb = "deletecollection"
        else:
            verb = _METHOD_VERB.get(method, method.lower())
        self._count(verb, resource)
        h.sim_call = f"{verb} {resource}"
        self._authorize(user, verb, resource, group, ns, name)
        self._api_fault(verb, resource, ns, name, user)
        dry = query.get("dryRun") == "All"
        accept = h.headers.get("Accept") or ""

        if sub == "proxy":
            rest_path = "/" + "/".join(unquote(s) for s in raw_tail[2:]) if len(raw_tail) > 2 \
                else "/"
            if raw_tail[-1:] and h.path.split("?")[0].endswith("/") and rest_path != "/":
                rest_path += "/"
            if plural == "services":
                return self._service_proxy(h, ns or "", name, rest_path, raw_query, body)
            return self._proxy(h, ns or "", name, rest_path, raw_query, body)
        if sub in ("exec", "portforward"):
            pod = self.store.get(self.cluster.t_pod, ns, name)
            params = parse_qs(raw_query, keep_blank_values=True)
            if sub == "exec":
                self._exec(h, pod, params)
            else:
                self._portforward(h, pod, params)
            raise _Hijacked()
        if sub == "log":
            return self._log(self.store.get(rtype, ns, name), query)

        if verb == "watch":
            raise _Stream(self._watch(rtype, ns, query, "as=Table" in accept))
        if verb == "list":
            items = self.store.list(rtype, ns, parse_label_selector(query.get("labelSelector")),
                                    parse_field_selector(query.get("fieldSelector")))
            items = [self._served(rtype, o) for o in items]
            rv = self.store.resource_version
            if "as=Table" in accept:
                return self._json(200, table_for(rtype, items, rv,
                                                 query.get("includeObject", "Metadata")))
            return self._json(200, {"kind": f"{rtype.kind}List", "apiVersion": rtype.api_version,
                                    "metadata": {"resourceVersion": rv}, "items": items})
        if verb == "get":
            obj = self.store.get(rtype, ns, name)
            if sub == "scale":
                return self._json(200, self._scale(rtype, obj))
            obj = self._served(rtype, obj)
            if "as=Table" in accept:
                return self._json(200, table_for(rtype, [obj], self.store.resource_version,
                                                 query.get("includeObject", "Metadata")))
            return self._json(200, obj)
        if verb == "create":
            if name:
                raise method_not_allowed(
                    "the server does not allow this method on the requested resource")
            obj = self._decode(body)
            self._check_kind(rtype, obj)
            created = self.cluster.create_object(rtype, obj, ns, dry_run=dry)
            return self._json(201, self._served(rtype, created))
        if verb == "update":
            obj = self._decode(body)
            if sub == "scale":
                return self._json(200, self._set_scale(rtype, ns, name,
                                                       (obj.get("spec") or {}).get("replicas"),
                                                       dry))
            self._check_kind(rtype, obj)
            return self._json(200, self._served(rtype, self.store.replace(
                rtype, ns, name, obj, dry_run=dry, status_only=sub == "status")))
        if verb == "patch":
            try:
                patch = json.loads(body or b"null")
            except ValueError as e:
                raise bad_request(f"error decoding patch: {e}") from e
            ctype = h.headers.get("Content-Type") or ""
            if sub == "scale":
                cur = self._scale(rtype, self.store.get(rtype, ns, name))
                ct = ctype.split(";")[0].strip()
                new = (json_patch(cur, patch) if ct == "application/json-patch+json"
                       else merge_patch(cur, patch) if ct == "application/merge-patch+json"
                       else strategic_merge_patch(cur, patch))
                return self._json(200, self._set_scale(rtype, ns, name,
                                                       (new.get("spec") or {}).get("replicas"),
                                                       dry))
            return self._json(200, self._served(rtype, self.store.patch(rtype, ns, name, ctype,
                                                                        patch, dry_run=dry)))
        if verb == "delete":
            obj = self.store.delete(rtype, ns, name, dry_run=dry)
            if rtype.kind == "Pod":
                out = json.loads(json.dumps(obj))
                out["metadata"]["deletionTimestamp"] = out["metadata"].get(
                    "deletionTimestamp") or _dt.datetime.now(_dt.timezone.utc).strftime(
                    "%Y-%m-%dT%H:%M:%SZ")
                out["metadata"]["deletionGracePeriodSeconds"] = 30
                return self._json(200, out)
            details: dict[str, Any] = {"name": name, "kind": plural,
                                       "uid": obj["metadata"].get("uid")}
            if group:
                details["group"] = group
            return self._json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                    "status": "Success", "details": details})
        if verb == "deletecollection":
            items = self.store.list(rtype, ns, parse_label_selector(query.get("labelSelector")),
                                    parse_field_selector(query.get("fieldSelector")))
            for o in items:
                if not dry:
                    try:
                        self.store.delete(rtype, ns or o["metadata"].get("namespace"),
                                          o["metadata"]["name"])
                    except ApiError:
                        pass
            return self._json(200, {"kind": f"{rtype.kind}List",
                                    "apiVersion": rtype.api_version,
                                    "metadata": {"resourceVersion": self.store.resource_version},
                                    "items": items})
        raise method_not_allowed("the server does not allow this method on the requested "
                                 "resource")

    def _log(self, pod: Obj, query: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        """``pods/log``: a batch pod's container log (tests/sim/batchpods.py), empty for other
        pods. ``container`` may be left out when the pod has one container (else 400 as the
        API server words it); ``tailLines`` is honoured."""
        spec = pod.get("spec") or {}
        names = [str(c.get("name")) for c in spec.get("containers") or []]
        inits = [str(c.get("name")) for c in spec.get("initContainers") or []]
        pname = pod["metadata"]["name"]
        container = query.get("container") or ""
        if not container:
            if len(names) != 1:
                raise bad_request(f"a container name must be specified for pod {pname}, choose one "
                                  f"of: [{' '.join(names)}] or one of the init containers: "
                                  f"[{' '.join(inits)}]")
            container = names[0]
        elif container not in names + inits:
            raise bad_request(f"container {container} is not valid for pod {pname}")
        rec = self.cluster.record_for(pod["metadata"]["namespace"], pname)
        data = rec.batch.log(container) if rec is not None and rec.batch is not None else b""
        tail = query.get("tailLines")
        if tail and tail.isdigit():
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(tail):]) if int(tail) else b""
        return 200, [("Content-Type", "text/plain")], data

    @staticmethod
    def _decode(body: bytes) -> Obj:
        try:
            obj = json.loads(body) if body.strip()[:1] in (b"{", b"[") else yaml.safe_load(body)
        except (ValueError, yaml.YAMLError) as e:
            raise bad_request(f"error decoding body: {e}") from e
        if not isinstance(obj, dict):
            raise bad_request("the body of the request must be an object")
        return obj

    @staticmethod
    def _check_kind(rtype: ResourceType, obj: Obj) -> None:
        kind = obj.get("kind")
        if kind and kind != rtype.kind:
            raise bad_request(f"the kind of the object ({kind}) does not match the resource "
                              f"({rtype.plural})")

    def _scale(self, rtype: ResourceType, obj: Obj) -> Obj:
        st = obj.get("status") or {}
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: obj["metadata"][k] for k in
                             ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in obj["metadata"]},
                "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
                "status": {"replicas": st.get("replicas", 0)}}

    def _set_scale(self, rtype: ResourceType, ns: str | None, name: str, replicas: Any,
                   dry: bool) -> Obj:
        if not isinstance(replicas, int) or replicas < 0:
            raise invalid(rtype, name, [("spec.replicas", "FieldValueInvalid",
                                         f"Invalid value: {replicas!r}: must be greater than "
                                         "or equal to 0")])
        obj = self.store.patch(rtype, ns, name, "application/merge-patch+json",
                               {"spec": {"replicas": replicas}}, dry_run=dry)
        return self._scale(rtype, obj)

    # ---------------- exec and port-forward (WebSocket) ----------------
    def _pod_runtime_for_stream(self, pod: Obj) -> PodRecord | None:
        md = pod["metadata"]
        status = pod.get("status") or {}
        rec = self.cluster.record_for(md.get("namespace", ""), md["name"])
        if status.get("phase") != "Running":
            return None
        return rec

    @staticmethod
    def _exec_status(code: int, failure: str | None, argv: list[str]) -> Obj:
        """The error-channel ``Status`` the kubelet writes (kubelet
        ``pkg/kubelet/cri/streaming/remotecommand/exec.go`` ``ServeExec``; the exit error text
        is containerd's ``error executing command %v, exit code %d``)."""
        if failure is not None:
            err = f"error executing command in container: {failure}"
            return {"metadata": {}, "status": "Failure",
                    "message": f"Internal error occurred: {err}", "reason": "InternalError",
                    "details": {"causes": [{"message": err}]}, "code": 500}
        if code == 0:
            return {"metadata": {}, "status": "Success"}
        argv_text = "[" + " ".join(argv) + "]"
        return {"metadata": {}, "status": "Failure",
                "message": "command terminated with non-zero exit code: error executing "
                           f"command {argv_text}, exit code {code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}

    def _exec(self, h: _Handler, pod: Obj, params: dict[str, list[str]]) -> None:
        """``pods/exec`` over a channel WebSocket (``v5``/``v4.channel.k8s.io``): validate as the
        API server does (``pkg/registry/core/pod/strategy.go`` ``ExecLocation``), upgrade, run
        the argv in the pod's sandbox (tests/sim/execsandbox.py), stream stdout/stderr, feed
        stdin, then write the exit ``Status`` on channel 3 and close."""
        name = pod["metadata"]["name"]
        spec = pod.get("spec") or {}
        argv = params.get("command") or []
        if not argv:
            raise bad_request("you must specify at least 1 command")
        names = [str(c.get("name")) for c in spec.get("containers") or []]
        inits = [str(c.get("name")) for c in spec.get("initContainers") or []]
        container = (params.get("container") or [""])[-1]
        if not container:
            if len(names) == 1:
                container = names[0]
            else:
                msg = (f"a container name must be specified for pod {name}, choose one of: "
                       f"[{' '.join(names)}]")
                if inits:
                    msg += f" or one of the init containers: [{' '.join(inits)}]"
                raise bad_request(msg)
        if container not in names and container not in inits:
            raise bad_request(f"container {container} is not valid for pod {name}")
        rec = self._pod_runtime_for_stream(pod)
        if rec is None:
            raise bad_request(f'unable to upgrade connection: container not found ("{container}")')
        if not is_upgrade(h.headers):
            # a plain request, or SPDY (kubectl's fallback), which is not served
            raise bad_request("Upgrade request required")
        want_stdin = _truthy((params.get("stdin") or [""])[-1])
        want_stdout = (params.get("stdout") or ["true"])[-1].lower() not in ("0", "false")
        want_stderr = (params.get("stderr") or ["true"])[-1].lower() not in ("0", "false")
        tty = _truthy((params.get("tty") or [""])[-1])
        ws = ChannelWebSocket(h.connection)
        if ws.handshake(h.command, h.path, list(h.headers.items()), [V5, V4]) is None:
            return
        cut = self._pod_faults(rec).get("exec_cut")
        if cut:
            with self._fault_lock:
                st = self._pod_fault_state.setdefault(rec.uid, {"pod": name})
                st["cut_execs"] = st.get("cut_execs", 0) + 1
        if cut == "before":
            ws.close()  # fault: the stream ends before anything ran, without a Status
            return
        view = None
        runtime = rec.runtime if rec is not None else None
        if runtime is not None and self.cluster.config.sandbox:
            getter = getattr(runtime, "exec_view", None)
            view = getter(container) if getter is not None else None
        if view is None:
            why = ("the simulator runs no commands (bubblewrap unavailable)"
                   if not self.cluster.config.sandbox else "the pod has no runtime")
            _send_status(ws, self._exec_status(0, why, argv))
            ws.close()
            return
        proc = ExecProcess(ExecSpec(argv=list(argv), env=view.env, binds=view.binds,
                                    shm_dir=view.shm_dir, hostname=name, ports=view.ports,
                                    request=runtime.request if runtime is not None else None,
                                    workdir=view.workdir,
                                    connect=getattr(runtime, "connect", None)), stdin=want_stdin)
        try:
            try:
                proc.start()
            except OSError as e:
                _send_status(ws, self._exec_status(0, f"cannot run bubblewrap: {e}", argv))
                ws.close()
                return
            assert proc.proc is not None and proc.proc.stdout is not None
            assert proc.proc.stderr is not None
            popen = proc.proc
            out_fd, err_fd = popen.stdout.fileno(), popen.stderr.fileno()  # type: ignore[union-attr]
            open_fds = {out_fd, err_fd}

            def reader(fd: int, channel: int, keep: bool) -> Callable[[], bool]:
                def cb() -> bool:
                    try:
                        data = os.read(fd, 65536)
                    except OSError:
                        data = b""
                    if not data:
                        open_fds.discard(fd)
                        return False
                    if keep:
                        ws.send(channel, data)
                    return True
                return cb

            def on_message(channel: int, data: bytes) -> None:
                stdin = popen.stdin
                if channel == 0 and stdin is not None and data:
                    try:
                        stdin.write(data)
                        stdin.flush()
                    except OSError:
                        pass
                elif channel == CLOSE_CHANNEL and data[:1] == b"\x00" and stdin is not None:
                    try:
                        stdin.close()
                    except OSError:
                        pass

            fds = {out_fd: reader(out_fd, 1, want_stdout),
                   err_fd: reader(err_fd, 1 if tty else 2, want_stderr)}
            outcome = ws.run(fds, on_message, lambda: not open_fds and popen.poll() is not None,
                             time.monotonic() + self.exec_timeout)
            if outcome != "done":
                proc.kill()
                if outcome == "timeout":
                    _send_status(ws, self._exec_status(
                        0, f"command timed out after {self.exec_timeout:g}s", argv))
                ws.close()
                return
            code, failure = proc.finish()
            if cut == "after":
                ws.close()  # fault: the command ran, its output was sent, the Status never is
                return
            exec_id = rec.uid.replace("-", "") * 2
            _send_status(ws, self._exec_status(
                code, exec_failure_message(failure, exec_id) if failure else None, argv))
            ws.close()
        finally:
            proc.kill()
            if proc.proc is not None:
                for f in (proc.proc.stdin, proc.proc.stdout, proc.proc.stderr):
                    try:
                        if f is not None:
                            f.close()
                    except OSError:
                        pass
                try:
                    proc.proc.wait(timeout=5)
                except Exception:  # noqa: BLE001
                    pass
            proc.cleanup()

    def _portforward(self, h: _Handler, pod: Obj, params: dict[str, list[str]]) -> None:
        """``pods/portforward`` over a channel WebSocket (``v4.channel.k8s.io``, kubelet
        ``cri/streaming/portforward/websocket.go``): for the i-th port of ``ports`` channel 2i
        carries the connection's bytes and 2i+1 errors; each channel's first message is the port
        as 2 bytes little-endian. The data channel is one HTTP connection to the pod's port
        (tests/sim/podhttp.py, transport ``portforward``); a port nothing listens on gets the
        runtime's connection-refused message on its error channel."""
        name = pod["metadata"]["name"]
        ports: list[int] = []
        for value in params.get("ports") or []:
            for part in value.split(","):
                part = part.strip()
                if not part:
                    continue
                if not part.isdigit() or not 0 < int(part) < 65536:
                    raise bad_request(f"invalid port: {part!r}")
                ports.append(int(part))
        if not ports:
            raise bad_request("query parameter \"port\" is required")
        rec = self._pod_runtime_for_stream(pod)
        if rec is None:
            raise bad_request(f'unable to upgrade connection: pod {name} is not running')
        if not is_upgrade(h.headers):
            raise bad_request("Upgrade request required")
        ws = ChannelWebSocket(h.connection)
        if ws.handshake(h.command, h.path, list(h.headers.items()),
                        [V4, "portforward.k8s.io"]) is None:
            return
        runtime = rec.runtime
        served: list[int] | None = None
        getter = getattr(runtime, "served_ports", None)
        if getter is not None:
            served = list(getter())
        locals_: dict[int, socket.socket] = {}
        fds: dict[int, Callable[[], bool]] = {}
        sandbox_id = rec.uid.replace("-", "") * 2
        # fault: after this many bytes from the pod the connection drops, without a close frame
        cut = self._pod_faults(rec).get("portforward_cut")
        relayed = [0]

        for i, port in enumerate(ports):
            le = port.to_bytes(2, "little")
            ws.send(2 * i, le)
            ws.send(2 * i + 1, le)
            listening = runtime is not None and (served is None or port in served)
            upstream = None
            connect = getattr(runtime, "connect", None)
            if listening and connect is not None:
                # a real server: the data channel is its TCP connection, byte for byte
                upstream = connect(port)
                listening = upstream is not None
            if not listening:
                ws.send(2 * i + 1, (
                    f"error forwarding port {port} to pod {sandbox_id}, uid : failed to execute "
                    f'portforward in network namespace "/var/run/netns/cni-{rec.uid}": failed '
                    f'to connect to localhost:{port} inside namespace "{sandbox_id}", IPv4: dial '
                    f"tcp4 127.0.0.1:{port}: connect: connection refused IPv6 dial tcp6 "
                    f"[::1]:{port}: connect: connection refused ").encode())
                continue
            assert runtime is not None
            mine, theirs = socket.socketpair()
            if upstream is not None:
                threading.Thread(target=pump_sockets, args=(theirs, upstream), daemon=True,
                                 name=f"sim-pf-{port}").start()
            else:
                serve_in_thread(theirs, runtime.request, port, "portforward")
            locals_[i] = mine

            def pump(idx: int = i, s: socket.socket = mine) -> bool:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    return False
                ws.send(2 * idx, data)
                relayed[0] += len(data)
                if cut and relayed[0] >= cut:
                    with self._fault_lock:
                        st = self._pod_fault_state.setdefault(rec.uid, {"pod": name})
                        st["cut_forwards"] = st.get("cut_forwards", 0) + 1
                    ws.closed = True
                    try:
                        h.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return False
                return True
            fds[mine.fileno()] = pump

        def on_message(channel: int, data: bytes) -> None:
            s = locals_.get(channel // 2)
            if channel % 2 == 0 and s is not None and data:
                try:
                    s.sendall(data)
                except OSError:
                    pass

        try:
            ws.run(fds, on_message, lambda: False, time.monotonic() + self.portforward_timeout)
            ws.close()
        finally:
            for s in locals_.values():
                try:
                    s.close()
                except OSError:
                    pass

    # ---------------- faults ----------------
    def _api_fault(self, verb: str, resource: str, ns: str | None, name: str, user: str) -> None:
        """Apply the first ``faults.api`` rule that fires: sleep, then drop the connection
        (:class:`_Dropped`) or answer its ``Status`` (:class:`_Reply`); else return."""
        action = self.faults.api_action(verb, resource, ns, name, user)
        if action is None:
            return
        if action.delay_s > 0:
            self._stop_event.wait(action.delay_s)
        if action.drop:
            raise _Dropped()
        if action.status is not None:
            raise _Reply(action.status, json.dumps(action.body).encode(),
                         [("Content-Type", "application/json"), *action.headers])

    def _pod_faults(self, rec: PodRecord) -> dict[str, Any]:
        """The per-pod fault keys of the scenario rules matching this pod (owner, ordinal,
        namespace, name, as the controllers match overrides)."""
        owner = (rec.owner[0].lower(), rec.owner[1]) if rec.owner else ("pod", rec.name)
        return self.cluster.scenario.pod_faults(owner, rec.ordinal, rec.namespace, rec.name)

    def _pod_fault_gate(self, ns: str, pname: str, path: str) -> None:
        """Per-pod faults on a proxied call, before the pod is looked up: ``hang`` holds the
        request (up to ``hang_limit``, then 503 ``i/o timeout``); ``delete_on_first_reset``
        deletes the pod on its first ``/reset_*`` call (its controller makes a successor; the
        call then goes on by name: 404 for a new name); ``down_for`` makes the pod refuse
        connections (503 ``connection refused``) and be not Ready for that many seconds from
        its first call (``down_at: first_reset``: its first reset call), then Ready again."""
        rec = self.cluster.record_for(ns, pname)
        if rec is None:
            return
        pf = self._pod_faults(rec)
        if not pf:
            return
        is_reset = path.rstrip("/").startswith("/reset_")
        with self._fault_lock:
            st = self._pod_fault_state.setdefault(rec.uid, {"pod": pname})
        if hangs(pf.get("hang"), path):
            with self._fault_lock:
                st["hung_calls"] = st.get("hung_calls", 0) + 1
            self._stop_event.wait(self.hang_limit)
            raise ApiError(503, "ServiceUnavailable",
                           f"error trying to reach service: dial tcp {rec.pod_ip}: i/o timeout")
        if pf.get("delete_on_first_reset") and is_reset:
            with self._fault_lock:
                first = not st.get("deleted_on_reset")
                st["deleted_on_reset"] = True
            if first:
                try:
                    self.store.delete(self.cluster.t_pod, ns, pname)
                except ApiError:
                    pass
            return
        down = pf.get("down_for")
        if down:
            now = time.monotonic()
            start = False
            with self._fault_lock:
                if "down_until" not in st and (is_reset or pf.get("down_at", "first_call") == "first_call"):
                    st["down_until"] = now + float(down)
                    st["down_since"] = now
                    start = True
                until = st.get("down_until")
            if start:
                self.cluster.set_pod_ready(rec, False, "Error")
                self.cluster.call_at(now + float(down), lambda: self.cluster.set_pod_ready(rec, True))
            if until is not None and now < until:
                with self._fault_lock:
                    st["refused_calls"] = st.get("refused_calls", 0) + 1
                raise ApiError(503, "ServiceUnavailable",
                               f"error trying to reach service: dial tcp {rec.pod_ip}: connect: "
                               "connection refused")

    # ---------------- service proxy ----------------
    def _service_proxy(self, h: _Handler, ns: str, name_part: str, path: str, query: str,
                       body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """``/api/v1/namespaces/NS/services/[scheme:]NAME[:PORT]/proxy/PATH``: one ready
        endpoint of the Service (round robin over its EndpointSlice's ready pods), then as the
        pod proxy to that pod's target port. No ready endpoint: 503 ``no endpoints available
        for service "NAME"`` (k8s.io/kubernetes ``pkg/registry/core/service/storage``
        ``ResourceLocation``)."""
        parts = name_part.split(":")
        scheme, port_s = "http", ""
        if len(parts) == 3:
            scheme, sname, port_s = parts
        elif len(parts) == 2:
            sname, port_s = parts
        else:
            sname = name_part
        targets, _svc = self.cluster.network.ready_targets(ns, sname, port_s)
        with self._fault_lock:
            self._svc_rr = getattr(self, "_svc_rr", 0) + 1
            pick = targets[self._svc_rr % len(targets)]
        return self._proxy(h, ns, f"{scheme}:{pick[0]}:{pick[1]}", path, query, body)

    # ---------------- pod proxy ----------------
    def _proxy(self, h: _Handler, ns: str, name_part: str, path: str, query: str,
               body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        parts = name_part.split(":")
        scheme, port_s = "http", ""
        if len(parts) == 3:
            scheme, pname, port_s = parts
        elif len(parts) == 2:
            pname, port_s = parts
        else:
            pname = name_part
        if scheme not in ("http", "https"):
            raise bad_request(f"unsupported scheme {scheme!r}")
        t_pod = self.cluster.t_pod
        self._pod_fault_gate(ns, pname, path)
        pod = self.store.get(t_pod, ns, pname)
        spec = pod.get("spec") or {}
        port = self._resolve_port(spec, port_s)
        status = pod.get("status") or {}
        ip = status.get("podIP") or ""
        rec: PodRecord | None = self.cluster.record_for(ns, pname)
        if port is None:
            raise ApiError(503, "ServiceUnavailable",
                           f'error trying to reach service: pod "{pname}" has no port '
                           f'"{port_s}"')
        if status.get("phase") != "Running" or not ip:
            raise ApiError(503, "ServiceUnavailable",
                           f'error trying to reach service: pod "{pname}" is not running '
                           f'(phase {status.get("phase", "Pending")}, no pod IP to dial)')
        if rec is not None and rec.network == "unreachable":
            time.sleep(self.unreachable_delay)
            raise ApiError(503, "ServiceUnavailable",
                           f"error trying to reach service: dial tcp {ip}:{port}: i/o timeout")
        headers = {k: v for k, v in h.headers.items()
                   if k.lower() not in ("authorization", "host", "connection", "keep-alive",
                                        "transfer-encoding", "content-length")}
        result = None
        vfault = self.faults.vllm_action(ns, pname, port, path) \
            if rec is not None and rec.runtime is not None and port in self._served_ports(rec) else None
        if vfault == "drop":
            # vLLM closed the connection without answering; the API server's reverse proxy
            # reports the transport error (EOF) as it reports a refused dial
            raise ApiError(503, "ServiceUnavailable", "error trying to reach service: EOF")
        if vfault == "error":
            return 500, [("content-type", "application/json")], json.dumps(
                {"error": {"message": "simulated engine failure", "type": "InternalServerError",
                           "param": None, "code": 500}}).encode()
        if rec is not None and rec.runtime is not None:
            result = rec.runtime.request(port, h.command, path, query, headers, body,
                                         scheme=scheme, transport="proxy")
        if result is None:
            raise ApiError(503, "ServiceUnavailable",
                           f"error trying to reach service: dial tcp {ip}:{port}: connect: "
                           "connection refused")
        code, rheaders, rbody = result
        if isinstance(rbody, StreamBody) and h.command != "HEAD":
            # a streamed completion goes through the proxy chunk by chunk, as the API server's
            # reverse proxy flushes it: the request runs in the fake vLLM while it is read
            raise _Stream(rbody.chunks())
        out = [(k, v) for k, v in rheaders if k.lower() not in _HOP_BY_HOP]
        return code, out, rbody

    @staticmethod
    def _served_ports(rec: PodRecord) -> list[int]:
        getter = getattr(rec.runtime, "served_ports", None)
        if getter is None:
            return []
        try:
            return list(getter())
        except Exception:  # noqa: BLE001 - a fault check must not break the proxy
            return []

    @staticmethod
    def _resolve_port(spec: dict[str, Any], port_s: str) -> int | None:
        """Numeric port, a container port name, or (empty) the first port of the first container
        that declares one, as the API server's pod ``ResourceLocation`` does (80 when none)."""
        if port_s.isdigit():
            return int(port_s)
        containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
        if not port_s:
            for c in spec.get("containers") or []:
                for p in c.get("ports") or []:
                    return int(p.get("containerPort"))
            return 80
        for c in containers:
            for p in c.get("ports") or []:
                if p.get("name") == port_s:
                    return int(p.get("containerPort"))
        return None

