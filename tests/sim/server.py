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

This module routes (discovery, authentication, authorisation); the handlers are mixins of
:class:`SimServer`, each in its own module: tests/sim/apiresources.py (CRUD, PATCH,
subresources), tests/sim/apiwatch.py, tests/sim/apiexec.py, tests/sim/apiportforward.py,
tests/sim/apiproxy.py (proxies, faults); tests/sim/apitables.py prints Tables.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import ssl
import threading
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import trustme
import yaml

from .apibase import (
    Authorizer,
    _Dropped,
    _Handler,
    _Hijacked,
    _Reply,
    _Stream,
    _TLSServer,
)
from .apierrors import ApiError, bad_request, forbidden
from .apiexec import ExecHandler
from .apiportforward import PortForwardHandler
from .apiproxy import ProxyHandlers
from .apiresources import ResourceHandlers
from .apiwatch import WatchHandlers
from .controllers import Cluster
from .faults import Faults
from .resourcetypes import Obj

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


# --------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------


class SimServer(ProxyHandlers, PortForwardHandler, ExecHandler, WatchHandlers, ResourceHandlers):
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
        ``api_errors`` (error answers per verb, resource, code and reason), ``tls_handshakes``
        (client connections whose TLS handshake completed, WebSockets included), and
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


