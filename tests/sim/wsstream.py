"""Kubernetes channel WebSockets (exec, port-forward) over the API server's TLS socket.

The opening handshake and the framing are the ``websockets`` library's sans-I/O
``ServerProtocol``; this module only moves bytes between it and the socket the threaded HTTP
server already parsed the upgrade request from. Channel protocol (k8s.io/apimachinery
``pkg/util/httpstream/wsstream/conn.go``, kubelet ``cri/streaming/remotecommand/websocket.go``):
every binary message starts with one byte naming the channel; ``v5.channel.k8s.io`` adds the
close signal, a message ``[255, channel]``. For exec the channels are 0 stdin, 1 stdout, 2
stderr, 3 error (a JSON ``Status``), 4 resize; for port-forward 2i data and 2i+1 error of the
i-th requested port.

Everything runs on the handler's thread: :meth:`ChannelWebSocket.run` multiplexes the socket with
other file descriptors (pipes of an exec, socketpairs of a port-forward) through ``select``, so
the TLS socket is never read and written by two threads at once.
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

from websockets.datastructures import Headers
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

__all__ = ["ChannelWebSocket", "CLOSE_CHANNEL", "V4", "V5", "is_upgrade"]

V4 = "v4.channel.k8s.io"
V5 = "v5.channel.k8s.io"
CLOSE_CHANNEL = 255


def is_upgrade(headers: Any) -> bool:
    """True when the request headers ask for a WebSocket upgrade (``Connection: Upgrade`` and
    ``Upgrade: websocket``, case-insensitive)."""
    conn = [t.strip().lower() for t in str(headers.get("Connection") or "").split(",")]
    return "upgrade" in conn and str(headers.get("Upgrade") or "").strip().lower() == "websocket"


class ChannelWebSocket:
    """The server side of one channel WebSocket on ``sock`` (the handler's connection, TLS).

    ``handshake(method, path, headers, offered)`` answers the upgrade: 101 with the first
    subprotocol the client offered that is in ``offered`` (kubelet order: client's preference),
    or the library's rejection (400 for no common subprotocol, 405 for a non-GET); returns the
    chosen subprotocol, or None when rejected (the response is then already sent).
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.protocol = ServerProtocol(max_size=16 * 2**20)
        self.subprotocol: str | None = None
        self.closed = False
        self.buffered = False  # messages read in by _flush, not dispatched yet

    # ------------------------------------------------------------------ handshake
    def handshake(self, method: str, path: str, headers: Sequence[tuple[str, str]],
                  offered: Sequence[str]) -> str | None:
        """Do the opening handshake (see class docstring)."""
        def pick(_p: ServerProtocol, client: Sequence[Subprotocol]) -> Subprotocol | None:
            for sp in client:
                if sp in offered:
                    return sp
            from websockets.exceptions import NegotiationError
            raise NegotiationError("invalid subprotocol; expected one of " + ", ".join(offered))

        self.protocol = ServerProtocol(max_size=16 * 2**20, select_subprotocol=pick)
        hdrs = Headers([(k, v) for k, v in headers
                        if k.lower() not in ("content-length", "transfer-encoding")])
        req = Request(path, hdrs, method)
        self.protocol.receive_data(req.serialize())
        events = self.protocol.events_received()
        request = events[0] if events else req
        assert isinstance(request, Request)
        response = self.protocol.accept(request)
        self.protocol.send_response(response)
        self._flush()
        if response.status_code != 101:
            self.closed = True
            return None
        self.subprotocol = self.protocol.subprotocol
        return self.subprotocol

    # ------------------------------------------------------------------ I/O
    def _flush(self) -> None:
        """Write what the protocol has to send (up to 30 s). While the client cannot take more,
        what it sends meanwhile is read into the protocol (dispatched by the next read), so a
        client that writes before it reads never deadlocks with this one thread."""
        data = b"".join(self.protocol.data_to_send())
        if not data:
            return
        view = memoryview(data)
        size = 0  # a TLS write that could not be done is retried with the same length
        end = time.monotonic() + 30
        try:
            self.sock.setblocking(False)
            while view:
                size = size or min(len(view), 256 * 1024)
                try:
                    sent = self.sock.send(view[:size])
                    view, size = view[sent:], 0
                    continue
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                    pass
                left = end - time.monotonic()
                if left <= 0:
                    self.closed = True
                    return
                r, _, _ = select.select([self.sock], [self.sock], [], left)
                if r and not self._take_in():
                    self.closed = True
                    return
        except (OSError, ssl.SSLError):
            self.closed = True
        finally:
            try:
                self.sock.settimeout(30)
            except OSError:
                pass

    def _take_in(self) -> bool:
        """Read what the (non-blocking) socket holds into the protocol without dispatching it;
        False at end of file."""
        while True:
            try:
                b = self.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return True
            if not b:
                return False
            self.protocol.receive_data(b)
            self.buffered = True
            if not (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
                return True

    def send(self, channel: int, data: bytes = b"") -> None:
        """Send one binary message ``[channel] + data``."""
        if self.closed or self.protocol.state is not State.OPEN:
            return
        self.protocol.send_binary(bytes([channel]) + data)
        self._flush()

    def close(self, code: int = 1000) -> None:
        """Start the closing handshake, wait briefly for the client's close, then shut down."""
        if not self.closed and self.protocol.state is State.OPEN:
            self.protocol.send_close(code)
            self._flush()
            end = time.monotonic() + 1.0
            while self._state() is not State.CLOSED and time.monotonic() < end:
                if not self._read(timeout=end - time.monotonic(), on_message=None):
                    break
        self.closed = True

    def _state(self) -> State:
        return self.protocol.state

    def _read(self, timeout: float,
              on_message: Callable[[int, bytes], None] | None) -> bool:
        """Read what is available (waiting up to ``timeout``) and dispatch messages; False when
        the connection ended."""
        pending = self.buffered or (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0)
        if not pending:
            r, _, _ = select.select([self.sock], [], [], max(timeout, 0))
            if not r:
                return True
        try:
            self.sock.setblocking(False)
            chunks = []
            while True:
                try:
                    b = self.sock.recv(65536)
                except (ssl.SSLWantReadError, BlockingIOError):
                    break
                if not b:
                    self.protocol.receive_eof()
                    break
                chunks.append(b)
                if not (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
                    break
        except (OSError, ssl.SSLError):
            self.closed = True
            return False
        finally:
            try:
                self.sock.settimeout(30)
            except OSError:
                pass
        if chunks:
            self.protocol.receive_data(b"".join(chunks))
        self.buffered = False
        for ev in self.protocol.events_received():
            if isinstance(ev, Frame) and ev.opcode is Opcode.BINARY and on_message:
                if ev.data:
                    on_message(ev.data[0], bytes(ev.data[1:]))
            elif isinstance(ev, Frame) and ev.opcode is Opcode.TEXT and on_message:
                if ev.data:
                    on_message(ev.data[0], bytes(ev.data[1:]))
        self._flush()  # pongs, close replies
        if self.protocol.state is State.CLOSED or self.protocol.close_expected():
            self.closed = True
            return False
        return True

    def run(self, fds: dict[int, Callable[[], bool]], on_message: Callable[[int, bytes], None],
            done: Callable[[], bool], deadline: float) -> str:
        """Pump until ``done()`` is true (``"done"``), the client goes away (``"closed"``) or the
        monotonic ``deadline`` passes (``"timeout"``). ``fds`` maps a readable file descriptor to
        a callback that consumes it and returns False once the descriptor reached EOF (it is
        then dropped); ``on_message(channel, payload)`` gets each client message."""
        live = dict(fds)
        while True:
            if done():
                return "done"
            if self.closed:
                return "closed"
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            pending = self.buffered or (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0)
            wait = 0.0 if pending else min(0.2, deadline - now)
            try:
                sock_fd = self.sock.fileno()
                r, _, _ = select.select([sock_fd, *live], [], [], wait)
            except (OSError, ValueError):
                return "closed"
            if pending or sock_fd in r:
                if not self._read(0, on_message):
                    return "closed"
            for fd in r:
                if fd == sock_fd:
                    continue
                cb = live.get(fd)
                if cb is not None and not cb():
                    live.pop(fd, None)
