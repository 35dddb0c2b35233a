"""HTTP/1.1 connections to a simulated pod's port, carried over any stream socket.

Exec (a relay inside the sandbox, tests/sim/execsandbox.py) and port-forward (a WebSocket data
channel, tests/sim/server.py) both deliver the raw bytes of a TCP connection to a pod's port.
:func:`serve_pod_connection` parses them as HTTP/1.1 with the standard library
(``http.server.BaseHTTPRequestHandler``: request line, headers, ``Content-Length`` or chunked
body, ``Expect: 100-continue``, keep-alive), hands every request to the pod runtime's
``request(port, method, path, query, headers, body, scheme=..., transport=...)`` and writes the
answer back (a :class:`tests.sim.fakevllm.StreamBody` chunk by chunk, chunked transfer encoding).
A connection whose first byte is a TLS handshake record (0x16) is terminated with a
server certificate for ``localhost``/``127.0.0.1``/``::1`` and served as ``https`` (what the pod's
TLS servers, vLLM with ``--ssl-certfile`` or the routing sidecar with ``--secure-proxy``, would
see); anything else is ``http``.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from functools import lru_cache
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

import trustme

from .fakevllm import StreamBody

__all__ = ["PodRequest", "serve_pod_connection", "serve_in_thread"]

PodRequest = Callable[..., "tuple[int, list[tuple[str, str]], bytes] | None"]
"""``runtime.request`` (tests/sim/pods.py ``PodRuntime.request``)."""

_SKIP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "date",
                 "server", "proxy-connection", "upgrade"}


@lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1", "::1")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    return ctx


class _Server:
    """What BaseHTTPRequestHandler needs of a server object."""

    def __init__(self, request: PodRequest, port: int, scheme: str, transport: str) -> None:
        self.request = request
        self.port = port
        self.scheme = scheme
        self.transport = transport


class _PodHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    timeout = 120
    server: _Server  # type: ignore[assignment]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(parts)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _serve(self) -> None:
        body = self._body()
        url = urlsplit(self.path)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("connection", "keep-alive", "transfer-encoding",
                                        "content-length")}
        srv = self.server
        result = srv.request(srv.port, self.command, url.path or "/", url.query, headers, body,
                             scheme=srv.scheme, transport=srv.transport)
        if result is None:
            # the server behind went away: a reset connection, as a dead process gives
            self.close_connection = True
            return
        code, rheaders, rbody = result
        self.send_response_only(code)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        close = False
        for k, v in rheaders:
            if k.lower() == "connection" and v.lower() == "close":
                close = True
            if k.lower() not in _SKIP_HEADERS:
                self.send_header(k, v)
        streamed = isinstance(rbody, StreamBody) and self.command != "HEAD"
        if streamed:
            self.send_header("transfer-encoding", "chunked")
        else:
            self.send_header("content-length", str(len(rbody)))
        if close:
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()
        if streamed:
            # chunk by chunk as the server produces them (uvicorn's chunked transfer encoding)
            assert isinstance(rbody, StreamBody)
            chunks = rbody.chunks()
            try:
                for part in chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
            finally:
                chunks.close()
            self.wfile.write(b"0\r\n\r\n")
        elif self.command != "HEAD":
            self.wfile.write(rbody)
        self.wfile.flush()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve


def serve_pod_connection(sock: socket.socket, request: PodRequest, port: int,
                         transport: str) -> None:
    """Serve HTTP/1.1 on the connected stream ``sock`` (blocking, until the peer closes, asks
    ``Connection: close`` or idles 120 s) for the pod's ``port``; ``request`` is the runtime's
    ``request``; ``transport`` (``exec`` / ``portforward``) is recorded on reset calls. Closes
    ``sock``. Never raises for network errors."""
    try:
        scheme = "http"
        try:
            sock.settimeout(120)
            first = sock.recv(1, socket.MSG_PEEK)
        except OSError:
            first = b""
        if not first:
            return
        conn: socket.socket = sock
        if first == b"\x16":
            conn = _tls_context().wrap_socket(sock, server_side=True)
            scheme = "https"
        _PodHandler(conn, ("127.0.0.1", 0), _Server(request, port, scheme, transport))  # type: ignore[arg-type]
    except (OSError, ssl.SSLError, ValueError):
        pass
    finally:
        try:
            sock.close()
        except OSError:
            pass


def serve_in_thread(sock: socket.socket, request: PodRequest, port: int,
                    transport: str) -> threading.Thread:
    """:func:`serve_pod_connection` on a daemon thread (started; returned)."""
    t = threading.Thread(target=serve_pod_connection, args=(sock, request, port, transport),
                         name=f"sim-podhttp-{port}", daemon=True)
    t.start()
    return t
