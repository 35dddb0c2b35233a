"""Pieces the API server's handlers share: the internal exceptions that end a request (a finished
reply, a stream, a hijacked or dropped connection), the verb of each HTTP method and the
hop-by-hop headers a proxy drops, the query-flag parser."""

from __future__ import annotations

import datetime as _dt
import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from .resourcetypes import Obj
from .wsstream import ChannelWebSocket

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


class _Sim(Protocol):
    """What the HTTP server asks of :class:`tests.sim.server.SimServer`."""

    def handle(self, h: _Handler) -> None: ...

    def count_handshake(self) -> None: ...


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 ctx: ssl.SSLContext, sim: _Sim) -> None:
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
