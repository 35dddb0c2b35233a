"""The port-forward stream of ``Kube.port_forward_socket`` (kubectl_kvreset/kube/streams.py
``ForwardLoop``) against a local TLS WebSocket server on the loopback that echoes channel 0
(the simulator's channel WebSocket, tests/sim/wsstream.py): many streams at once, each sending
megabytes while the echo comes back, or request and answer as a RESP client does (the pattern
that broke a stream read and written from two threads: the stream ended after about a
thousand rounds); every byte must come back in order. Also the frame reader on its own."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubectl_kvreset.kube import Kube, KubeFlags, WsFrames
from tests.sim.wsstream import V4, ChannelWebSocket


def _serve(conn: ssl.SSLSocket, seen: list[str]) -> None:
    head = b""
    while b"\r\n\r\n" not in head:
        b = conn.recv(1)
        if not b:
            return
        head += b
    lines = head.decode().split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:] if ":" in line]
    seen.append(path)
    ws = ChannelWebSocket(conn)  # type: ignore[arg-type]
    if ws.handshake(method, path, headers, [V4]) is None:  # type: ignore[arg-type]
        return
    port = (6379).to_bytes(2, "little")
    ws.send(0, port)
    ws.send(1, port)
    ws.run({}, lambda channel, data: ws.send(0, data) if channel == 0 else None, lambda: False,
           time.monotonic() + 300)
    ws.close()


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    import trustme

    ca = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[str] = []

    def accept() -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def one(raw: socket.socket = raw) -> None:
                try:
                    with ctx.wrap_socket(raw, server_side=True) as conn:
                        _serve(conn, seen)
                except (OSError, ssl.SSLError):
                    pass
            threading.Thread(target=one, daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "k", "cluster": {
               "server": f"https://127.0.0.1:{listener.getsockname()[1]}",
               "certificate-authority-data": base64.b64encode(ca.cert_pem.bytes()).decode()}}],
           "users": [{"name": "u", "user": {"token": "t0k"}}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    path = tmp_path_factory.mktemp("pf") / "config"
    path.write_text(yaml.safe_dump(cfg))
    yield path, seen
    listener.close()


def _round_trip(sock: socket.socket, size: int, errors: list[str]) -> None:
    """Send ``size`` random bytes from one thread while another reads the echo; compare."""
    data = os.urandom(size)
    got = hashlib.sha256()
    count = 0

    def send() -> None:
        try:
            sock.sendall(data)
        except OSError as exc:
            errors.append(f"send: {exc}")

    t = threading.Thread(target=send)
    t.start()
    sock.settimeout(120)
    try:
        while count < size:
            chunk = sock.recv(1 << 20)
            if not chunk:
                errors.append(f"the stream ended after {count} of {size} bytes")
                break
            got.update(chunk)
            count += len(chunk)
    except OSError as exc:
        errors.append(f"recv after {count} bytes: {exc}")
    t.join()
    sock.close()
    if count == size and got.digest() != hashlib.sha256(data).digest():
        errors.append("the echo differs from what was sent")


def test_many_streams_both_ways_at_once_keep_every_byte(echo: tuple[Path, list[str]]) -> None:
    path, seen = echo
    kube = Kube.connect(KubeFlags(kubeconfig=str(path)))
    socks = [kube.port_forward_socket("st", f"kv-{i}", 6379) for i in range(6)]
    errors: list[str] = []
    threads = [threading.Thread(target=_round_trip, args=(s, 4 << 20, errors)) for s in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(seen)[:1] == ["/api/v1/namespaces/st/pods/kv-0/portforward?ports=6379"]


def _ping_pong(sock: socket.socket, rounds: int, errors: list[str]) -> None:
    """Request and answer, as a RESP client does: a message of a random size, then wait for
    its echo before the next (the reader waits while the writer sends, on one TLS connection)."""
    import random

    rng = random.Random(rounds)
    sock.settimeout(60)
    try:
        for i in range(rounds):
            msg = os.urandom(rng.choice((20, 60, 1500, 40_000, 70_000)))
            sock.sendall(msg)
            got = b""
            while len(got) < len(msg):
                chunk = sock.recv(len(msg) - len(got))
                if not chunk:
                    errors.append(f"the stream ended at round {i}")
                    return
                got += chunk
            if got != msg:
                errors.append(f"round {i}: the echo differs")
                return
    except OSError as exc:
        errors.append(f"round {i}: {exc}")
    finally:
        sock.close()


def test_request_and_answer_streams_keep_every_byte(echo: tuple[Path, list[str]]) -> None:
    path, _ = echo
    kube = Kube.connect(KubeFlags(kubeconfig=str(path)))
    socks = [kube.port_forward_socket("st", f"rr-{i}", 6379) for i in range(4)]
    errors: list[str] = []
    threads = [threading.Thread(target=_ping_pong, args=(s, 2500, errors)) for s in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_closing_the_socket_ends_the_stream(echo: tuple[Path, list[str]]) -> None:
    path, _ = echo
    kube = Kube.connect(KubeFlags(kubeconfig=str(path)))
    before = {t.name for t in threading.enumerate()}
    sock = kube.port_forward_socket("st", "kv-z", 6379)
    sock.sendall(b"ping")
    sock.settimeout(30)
    assert sock.recv(4) == b"ping"
    loops = [t for t in threading.enumerate() if t.name == "pf-kv-z:6379" and t.name not in before]
    assert len(loops) == 1
    sock.close()
    loops[0].join(30)
    assert not loops[0].is_alive()


def _frame(opcode: int, payload: bytes, fin: bool = True, mask: bytes = b"") -> bytes:
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([m | 127]) + n.to_bytes(8, "big")
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + payload


def test_frames_are_read_whatever_the_chunks() -> None:
    big = os.urandom(70_000)
    raw = (_frame(2, b"\x00ab") + _frame(2, b"\x00" + big[:300], fin=False) + _frame(9, b"hi")
           + _frame(0, big[300:], fin=True) + _frame(2, b"\x01" * 200, mask=b"\x01\x02\x03\x04") + _frame(8, b""))
    want = [(2, b"\x00ab"), (9, b"hi"), (2, b"\x00" + big), (2, b"\x01" * 200), (8, b"")]
    for step in (1, 7, 125, 4096, len(raw)):
        reader = WsFrames()
        out: list[tuple[int, bytes]] = []
        for i in range(0, len(raw), step):
            out += reader.feed(raw[i:i + step])
        assert out == want, step
    with pytest.raises(ValueError, match="limit"):
        WsFrames(max_size=10).feed(_frame(2, b"x" * 11))




def test_the_simulator_side_reads_while_its_client_cannot_take_more(echo: tuple[Path, list[str]]) -> None:
    """A client that sends 32 messages of 512 KiB with blocking writes before it reads
    anything: the simulator's one thread must keep reading while its echo of the first ones
    cannot be written yet, or both sides wait on each other."""
    import websocket

    path, _ = echo
    cfg = yaml.safe_load(path.read_text())
    server = cfg["clusters"][0]["cluster"]["server"].replace("https", "wss")
    ca = path.parent / "ca.pem"
    ca.write_bytes(base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"]))
    ws = websocket.WebSocket(sslopt={"ca_certs": str(ca)})
    ws.settimeout(60)
    ws.connect(server + "/api/v1/namespaces/st/pods/big/portforward?ports=6379", subprotocols=[V4])
    data = os.urandom(16 << 20)
    for i in range(0, len(data), 512 << 10):
        ws.send_binary(b"\x00" + data[i:i + (512 << 10)])
    got = bytearray()
    while len(got) < len(data):
        opcode, frame = ws.recv_data()
        if frame[:1] == b"\x00" and len(frame) > 3:
            got += frame[1:]
    ws.close()
    assert bytes(got) == data
