"""Exec and port-forward over the API server's WebSocket upgrades (``v4.channel.k8s.io``): the
channel framing, the exit status of a command, one I/O loop per port-forward stream
(:class:`ForwardLoop`), and HTTP answers read from a forwarded port.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from .errors import (
    _HEAD_ALLOWANCE,
    MAX_RETRIES,
    HttpAnswer,
    KubeApiError,
    KubeConnectionError,
    _http_reason,
    _too_large,
    retry_after_seconds,
    status_message,
)


class StreamOwner(Protocol):
    """What the streams need of :class:`kubectl_kvreset.kube.api.Kube` (a structural type, so this
    module does not import the one that calls it)."""

    host: str
    _transport: Any
    _headers: dict[str, str]
    _impersonate_groups: tuple[str, ...]
    _reload: Any

    def _auth_headers(self) -> dict[str, str]: ...

    def _count_retry(self) -> None: ...

_LOG = logging.getLogger("kubectl_kvreset")

@dataclass(frozen=True)
class ExecResult:
    """The end of a command run with ``pods/exec``.

    ``exit_code`` is the command's exit status (None when there is none: the stream was cut or
    the bound was hit, or the runtime could not start the command); ``stdout``/``stderr`` are
    the bytes received; ``message`` is the error channel's text when it is not an exit code
    (e.g. ``executable file not found``); ``timed_out`` is True when the bound ended the wait,
    which is reported, never read as success.
    """

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    message: str | None = None
    timed_out: bool = False


def read_exec_status(raw: bytes) -> tuple[int | None, str | None]:
    """Read the error channel (3) of an exec stream: a ``Status`` object.

    ``Success`` -> ``(0, None)``; a cause with reason ``ExitCode`` -> ``(code, message)``; any
    other failure -> ``(None, message)``; empty -> ``(None, "no exit status")``. This replaces
    the Python client's ``returncode``, which raises on several of these shapes
    (kubernetes-client/python #1840, #2156).
    """
    if not raw.strip():
        return None, "no exit status (the stream ended early)"
    try:
        doc = json.loads(raw)
    except ValueError:
        return None, raw.decode("utf-8", "replace")[:300]
    if not isinstance(doc, dict):
        return None, str(doc)[:300]
    if doc.get("status") == "Success":
        return 0, None
    for cause in (doc.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message")), str(doc.get("message") or "")
            except (TypeError, ValueError):
                break
    return None, str(doc.get("message") or "command failed")


class _Channels:
    """A WebSocket carrying Kubernetes channel frames (``v4``/``v5.channel.k8s.io``): the first
    byte of each binary frame names the channel (k8s.io/apimachinery ``wsstream``)."""

    def __init__(self, kube: StreamOwner, path: str, query: Sequence[tuple[str, str]], timeout_s: float | None,
                 protocols: Sequence[str]) -> None:
        """Open the stream. The upgrade follows :meth:`Kube.request`'s rules for what was not
        processed: a 429 is retried after ``Retry-After`` (up to :data:`MAX_RETRIES` times), a
        401 rebuilds the credentials once.

        Raises:
            KubeApiError: the upgrade was refused (403, 404, 400, or 429/401 after the retries).
            KubeConnectionError: the API server could not be reached.
        """

        import websocket

        url = "wss" + kube.host[len("https"):] if kube.host.startswith("https") else "ws" + kube.host[len("http"):]
        url += path + ("?" + urlencode(list(query)) if query else "")
        attempt = 0
        refreshed = False
        while True:
            header = [f"{k}: {v}" for k, v in kube._auth_headers().items()]
            header += [f"{k}: {v}" for k, v in kube._headers.items() if k.startswith("Impersonate")]
            if kube._impersonate_groups:
                header += [f"Impersonate-Group: {g}" for g in kube._impersonate_groups]
            self.ws = websocket.WebSocket(sslopt=kube._transport.ws_sslopt(), skip_utf8_validation=True)
            self.ws.settimeout(timeout_s)
            try:
                self.ws.connect(url, header=header, subprotocols=list(protocols))  # type: ignore[no-untyped-call]
            except websocket.WebSocketBadStatusException as exc:
                body = exc.resp_body or b""
                if exc.status_code == 429 and attempt < MAX_RETRIES:
                    attempt += 1
                    kube._count_retry()
                    headers_in = {k.lower(): v for k, v in (exc.resp_headers or {}).items()}
                    time.sleep(retry_after_seconds(headers_in.get("retry-after"), attempt))
                    continue
                if exc.status_code == 401 and not refreshed and kube._reload is not None:
                    refreshed = True
                    kube._transport = kube._reload()
                    kube._count_retry()
                    continue
                reason, message = status_message(body)
                raise KubeApiError(exc.status_code, reason or _http_reason(exc.status_code), message or str(exc),
                                   body) from exc
            except (websocket.WebSocketException, OSError) as exc:
                raise KubeConnectionError(f"cannot open a stream to {path}: {exc}") from exc
            break
        self.protocol = getattr(self.ws, "subprotocol", None) or ""

    def frames(self, deadline: float | None) -> Any:
        """Yield ``(channel, payload)`` until the server closes. Raises TimeoutError at ``deadline``."""

        import websocket

        while True:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.ws.settimeout(left)
            try:
                opcode, data = self.ws.recv_data(control_frame=False)
            except websocket.WebSocketTimeoutException as exc:
                raise TimeoutError from exc
            except (websocket.WebSocketConnectionClosedException, OSError):
                return
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                return
            if not data:
                continue
            if isinstance(data, str):
                data = data.encode()
            yield data[0], data[1:]

    def send(self, channel: int, payload: bytes) -> None:
        """Send ``payload`` on ``channel``."""
        self.ws.send_binary(bytes([channel]) + payload)

    def close(self) -> None:
        """Close the stream (never raises)."""
        try:
            self.ws.close(timeout=1)
        except Exception:  # closing a broken socket: nothing left to do
            pass


def _exec(kube: StreamOwner, namespace: str, pod: str, container: str, argv: Sequence[str], timeout_s: float,
          max_output: int = 0) -> ExecResult:

    query = [("command", a) for a in argv] + [("container", container), ("stdout", "true"), ("stderr", "true")]
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"
    chans = _Channels(kube, path, query, timeout_s, ["v5.channel.k8s.io", "v4.channel.k8s.io"])
    out, err, status = bytearray(), bytearray(), bytearray()
    deadline = time.monotonic() + timeout_s
    timed_out = False
    try:
        for channel, payload in chans.frames(deadline):
            if channel == 1:
                out += payload
            elif channel == 2:
                err += payload
            elif channel == 3:
                status += payload
            if max_output and len(out) + len(err) + len(status) > max_output:
                raise _too_large(f"exec in {namespace}/{pod} container {container}", max_output)
    except TimeoutError:
        timed_out = True
    finally:
        chans.close()
    if timed_out:
        return ExecResult(None, bytes(out), bytes(err), f"no exit status within {timeout_s:g} s", True)
    code, message = read_exec_status(bytes(status))
    return ExecResult(code, bytes(out), bytes(err), message)


def _port_forward_http(kube: StreamOwner, namespace: str, pod: str, port: int, request: bytes, timeout_s: float,
                       limit: int = 0) -> bytes:

    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/portforward"
    chans = _Channels(kube, path, [("ports", str(port))], timeout_s, ["v4.channel.k8s.io"])
    data, error = bytearray(), bytearray()
    seen_header = {0: False, 1: False}
    deadline = time.monotonic() + timeout_s
    try:
        chans.send(0, request)
        for channel, payload in chans.frames(deadline):
            if channel in seen_header and not seen_header[channel]:
                # the first frame on each channel carries the port number (2 bytes, little endian)
                seen_header[channel] = True
                payload = payload[2:]
            if channel == 0:
                data += payload
                if limit and len(data) > limit:
                    raise _too_large(f"port-forward to {namespace}/{pod}:{port}", limit - _HEAD_ALLOWANCE)
                if _http_complete(bytes(data)):
                    break
            elif channel == 1:
                error += payload
                if limit and len(error) > limit:
                    raise _too_large(f"port-forward to {namespace}/{pod}:{port} (error channel)", limit)
    except TimeoutError as exc:
        raise KubeConnectionError(f"port-forward to {pod}:{port}: no answer within {timeout_s:g} s") from exc
    finally:
        chans.close()
    if error and not data:
        raise KubeConnectionError(f"port-forward to {pod}:{port}: {error.decode('utf-8', 'replace').strip()}")
    return bytes(data)


def _port_forward_socket(kube: StreamOwner, namespace: str, pod: str, port: int, timeout_s: float) -> socket.socket:
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/portforward"
    chans = _Channels(kube, path, [("ports", str(port))], timeout_s, ["v4.channel.k8s.io"])
    wire = chans.ws.sock
    if wire is None:
        raise KubeConnectionError(f"cannot open a stream to {path}: the connection closed after the upgrade")
    ours, theirs = socket.socketpair()
    loop = ForwardLoop(wire, theirs)
    threading.Thread(target=loop.run, name=f"pf-{pod}:{port}", daemon=True).start()
    return ours


class WsFrames:
    """Incremental reader of the frames a WebSocket server sends (RFC 6455 section 5.2: FIN and
    opcode byte, 7/16/64-bit length, optional mask key, payload; fragments joined until FIN).

    :meth:`feed` takes raw bytes and returns the complete messages as ``(opcode, payload)``;
    control frames (close 8, ping 9, pong 10) come out as they arrive, between fragments.

    Raises (from :meth:`feed`):
        ValueError: a frame longer than ``max_size`` bytes.
    """

    def __init__(self, max_size: int = 64 * 2**20) -> None:
        self._buf = bytearray()
        self._parts: list[bytes] = []
        self._opcode = 0
        self.max_size = max_size

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Append ``data``; the messages it completes (see the class docstring)."""
        self._buf += data
        out: list[tuple[int, bytes]] = []
        while True:
            buf = self._buf
            if len(buf) < 2:
                return out
            fin, opcode, masked, n = buf[0] & 0x80, buf[0] & 0x0F, buf[1] & 0x80, buf[1] & 0x7F
            at = 2
            if n == 126:
                if len(buf) < 4:
                    return out
                n, at = int.from_bytes(buf[2:4], "big"), 4
            elif n == 127:
                if len(buf) < 10:
                    return out
                n, at = int.from_bytes(buf[2:10], "big"), 10
            if n > self.max_size:
                raise ValueError(f"WebSocket frame of {n} bytes (limit {self.max_size})")
            key = b""
            if masked:
                key, at = bytes(buf[at:at + 4]), at + 4
            if len(buf) < at + n:
                return out
            payload = bytes(buf[at:at + n])
            del buf[:at + n]
            if key:
                payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
            if opcode >= 8:
                out.append((opcode, payload))
                continue
            if opcode != 0:
                self._opcode, self._parts = opcode, []
            self._parts.append(payload)
            if fin:
                out.append((self._opcode, b"".join(self._parts)))
                self._parts = []


class ForwardLoop:
    """One port-forward stream driven by one thread: bytes between ``local`` (one end of a
    socketpair, the caller's side) and the WebSocket on ``wire`` (the API server's TLS socket,
    after the ``v4.channel.k8s.io`` upgrade), with data channel 0 and error channel 1 (each
    opening with the port as two little-endian bytes, kubelet
    ``cri/streaming/portforward/websocket.go``).

    Both sockets are non-blocking and served by one ``selectors`` loop, so the TLS connection is
    never read and written by two threads at once (an ``ssl.SSLSocket`` is not safe for that)
    and neither direction waits on the other: bytes that cannot be written yet are kept
    (at most :attr:`HIGH` per direction; above it the loop stops reading the side that feeds
    them). Decrypted bytes the TLS layer already holds (``SSLSocket.pending()``) are read
    before waiting. Frames out are masked client frames (websocket-client's ``ABNF``). A
    ping is answered with a pong; a close, the end of either socket or an error ends the
    loop, closing both (the caller then reads end of file).
    """

    #: Bytes kept unwritten in one direction before the loop stops reading its source.
    HIGH = 4 * 2**20
    #: Largest payload of one data frame sent.
    CHUNK = 64 * 1024

    def __init__(self, wire: socket.socket, local: socket.socket) -> None:
        self.wire, self.local = wire, local
        self.frames = WsFrames()
        self.to_wire = bytearray()
        self.to_local = bytearray()
        self.retry_len = 0   # length of a TLS write to retry with the same bytes (OpenSSL's rule)
        self.seen_header = {0: False, 1: False}
        self.error = bytearray()
        self.local_eof = False
        self.wire_closed = False

    def _frame(self, opcode: int, payload: bytes) -> bytes:
        import websocket

        return bytes(websocket.ABNF.create_frame(payload, opcode).format())

    def _on_message(self, opcode: int, data: bytes) -> None:
        if opcode == 8:
            self.wire_closed = True
            return
        if opcode == 9:
            self.to_wire += self._frame(10, data)
            return
        if opcode not in (1, 2) or not data:
            return
        channel, payload = data[0], data[1:]
        if channel in self.seen_header and not self.seen_header[channel]:
            self.seen_header[channel] = True
            payload = payload[2:]
        if channel == 0:
            self.to_local += payload
        elif channel == 1 and payload:
            # the pod refused the port or the connection to it broke (kubectl port-forward
            # ends the stream on this too): the caller reads end of file
            self.error += payload
            self.wire_closed = True

    def _read_wire(self) -> None:
        while True:
            try:
                data = self.wire.recv(256 * 1024)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                import ssl

                if isinstance(exc, (ssl.SSLWantReadError, ssl.SSLWantWriteError)):
                    return
                raise
            if not data:
                self.wire_closed = True
                return
            for opcode, payload in self.frames.feed(data):
                self._on_message(opcode, payload)
            if len(self.to_local) >= self.HIGH or not self._wire_pending():
                return

    def _wire_pending(self) -> bool:
        pending = getattr(self.wire, "pending", None)
        return bool(pending()) if pending is not None else False

    def _write_wire(self) -> None:
        import ssl

        while self.to_wire:
            size = self.retry_len or min(len(self.to_wire), 256 * 1024)
            try:
                sent = self.wire.send(self.to_wire[:size])
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                self.retry_len = size
                return
            self.retry_len = 0
            del self.to_wire[:sent]

    def _read_local(self) -> None:
        try:
            data = self.local.recv(self.CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        if not data:
            self.local_eof = True
            self.to_wire += self._frame(8, (1000).to_bytes(2, "big"))
            return
        self.to_wire += self._frame(2, b"\x00" + data)

    def _write_local(self) -> None:
        while self.to_local:
            try:
                sent = self.local.send(self.to_local[:self.CHUNK * 4])
            except (BlockingIOError, InterruptedError):
                return
            del self.to_local[:sent]

    def step(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` s for either socket and move what can be moved; False once
        the stream is over (both sockets are then to be closed).

        Raises:
            OSError: either socket failed. ValueError: the server sent a frame too large.
        """
        import selectors

        if self.wire_closed and not self.to_local:
            return False
        if self.local_eof and not self.to_wire:
            return False
        if self._wire_pending() and len(self.to_local) < self.HIGH:
            timeout = 0
        with selectors.DefaultSelector() as sel:
            wire_events = 0
            if not self.wire_closed and len(self.to_local) < self.HIGH:
                wire_events |= selectors.EVENT_READ
            if self.to_wire:
                wire_events |= selectors.EVENT_WRITE
            if wire_events:
                sel.register(self.wire, wire_events)
            local_events = 0
            if not self.local_eof and len(self.to_wire) < self.HIGH:
                local_events |= selectors.EVENT_READ
            if self.to_local:
                local_events |= selectors.EVENT_WRITE
            if local_events:
                sel.register(self.local, local_events)
            ready = sel.select(timeout) if (wire_events or local_events) else []
        events = {key.fileobj: mask for key, mask in ready}
        if events.get(self.wire, 0) & selectors.EVENT_READ or (
                self._wire_pending() and not self.wire_closed and len(self.to_local) < self.HIGH):
            self._read_wire()
        if events.get(self.local, 0) & selectors.EVENT_READ:
            self._read_local()
        if self.to_wire:
            self._write_wire()
        if self.to_local:
            self._write_local()
        return True

    def run(self) -> None:
        """Drive the stream until it ends (see the class docstring); closes both sockets.
        Never raises: a failure ends the stream, and the caller reads end of file."""
        try:
            self.wire.setblocking(False)
            self.local.setblocking(False)
            while self.step(None):
                pass
        except (OSError, ValueError):  # the stream broke: the caller sees end of file
            pass
        finally:
            for s in (self.local, self.wire):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


def _http_complete(raw: bytes) -> bool:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return len(body) >= int(value.strip())
            except ValueError:
                return False
    return False


def parse_http_response(raw: bytes) -> HttpAnswer:
    """Parse a raw HTTP/1.1 response (status line, headers, body; ``Content-Length`` or
    close-delimited) with the standard library's ``http.client`` parser.

    Raises:
        KubeConnectionError: the bytes are not an HTTP response.
    """
    import http.client
    import io

    class _Sock:
        def __init__(self, data: bytes) -> None:
            self._f = io.BytesIO(data)

        def makefile(self, *args: Any, **kwargs: Any) -> io.BytesIO:
            return self._f

    resp = http.client.HTTPResponse(_Sock(raw))  # type: ignore[arg-type]
    try:
        resp.begin()
        body = resp.read()
    except (http.client.HTTPException, ValueError) as exc:
        raise KubeConnectionError(f"the pod answered something that is not HTTP: {raw[:80]!r}") from exc
    headers = {k.lower(): v for k, v in resp.getheaders()}
    return HttpAnswer(resp.status, headers, body)
