"""Size caps on answers (kube/transport.py ``_KeepAlive.request``, ``_exec``; podapi.py): reading stops
at the cap, whether the answer says its length or is chunked; the connection is dropped, never
reused; a too-large answer is a final ``too-large`` failure naming pod, port, route and cap,
never retried and never tried over another transport; the exec program reads at most the cap."""

from __future__ import annotations

import base64
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kubectl_kvreset.kube import ExecResult, HttpAnswer, KubeAnswerTooLarge, _KeepAlive, size_text
from kubectl_kvreset.podapi import (
    EXEC_HTTP_SCRIPT,
    METRICS_MAX_BYTES,
    PodCaller,
    PodRef,
    Transports,
    fetch_metrics,
    probe_version,
)

BIG = 3 << 20
CAP = 1 << 20


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    sent: list[int] = []

    def do_GET(self) -> None:  # noqa: N802
        chunked = self.path.startswith("/chunked")
        size = BIG if "big" in self.path else 100
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(size))
        self.end_headers()
        written = 0
        try:
            while written < size:
                part = b"x" * min(64 << 10, size - written)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                written += len(part)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        self.sent.append(written)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def url() -> Iterator[tuple[str, int]]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield "127.0.0.1", srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("path", ["/big", "/chunked-big"])
def test_keep_alive_stops_at_the_cap_and_drops_the_connection(url: tuple[str, int], path: str) -> None:
    pool = _KeepAlive(url[0], url[1], None, 2)
    with pytest.raises(KubeAnswerTooLarge) as info:
        pool.request("GET", path, None, {}, 10.0, CAP)
    assert info.value.limit == CAP and f"GET {path}" in str(info.value) and "1 MiB cap" in str(info.value)
    assert pool._open == 0 and pool._idle == []  # closed, not kept for reuse
    status, _, body = pool.request("GET", path.replace("big", "small"), None, {}, 10.0, CAP)
    assert status == 200 and len(body) == 100
    status, _, body = pool.request("GET", path, None, {}, 10.0, None)  # no cap: read whole
    assert len(body) == BIG
    pool.close()


def test_exec_program_reads_at_most_the_cap(url: tuple[str, int]) -> None:
    base = f"http://{url[0]}:{url[1]}"
    for path, cap, want in (("/big", CAP, {"too_large": CAP}), ("/chunked-big", CAP, {"too_large": CAP}),
                            ("/small", CAP, None)):
        out = subprocess.run([sys.executable, "-c", EXEC_HTTP_SCRIPT, "GET", base + path, "10", str(cap)],
                             capture_output=True, text=True, timeout=60).stdout
        doc = json.loads(out)
        if want is not None:
            assert doc == want, (path, doc)
        else:
            assert doc["status"] == 200 and len(base64.b64decode(doc["body"])) == 100


class _Kube:
    """A pod proxy whose answer is too large; exec and port-forward would answer."""

    timeout_s = 30.0

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pod_proxy(self, *args: Any, max_bytes: int, **kwargs: Any) -> HttpAnswer:
        self.calls.append(f"proxy {args[4]} cap {max_bytes}")
        raise KubeAnswerTooLarge(f"GET {args[4]}: too large", max_bytes)

    def exec_command(self, *args: Any, **kwargs: Any) -> ExecResult:
        self.calls.append("exec")
        return ExecResult(0, b'{"too_large": 5}\n', b"")

    def port_forward_http(self, *args: Any, **kwargs: Any) -> HttpAnswer:
        self.calls.append("pf")
        return HttpAnswer(200, {}, b"")


def test_too_large_is_final_and_names_pod_port_route_and_cap() -> None:
    kube = _Kube()
    caller = PodCaller(kube, Transports("auto"), sleep=lambda s: None)  # type: ignore[arg-type]
    got = fetch_metrics(caller, PodRef("ns", "p-1", "vllm"), 8000, attempts=3)
    assert got.text is None and got.error is not None
    assert got.error.startswith("GET /metrics on ns/p-1:8000: the answer is larger than the 8 MiB cap")
    assert kube.calls == [f"proxy /metrics cap {METRICS_MAX_BYTES}"]  # one call: not retried, no other transport
    version = probe_version(caller, PodRef("ns", "p-1", "vllm"), 8000)
    assert not isinstance(version, str) and version.kind == "too-large" and "64 KiB cap" in version.message


def test_exec_transport_too_large_answer() -> None:
    kube = _Kube()
    caller = PodCaller(kube, Transports("exec"), sleep=lambda s: None)  # type: ignore[arg-type]
    got = fetch_metrics(caller, PodRef("ns", "p-1", "vllm"), 8000)
    assert got.error is not None and "(over exec)" in got.error and "8 MiB cap" in got.error
    assert kube.calls == ["exec"]


def test_size_text() -> None:
    assert [size_text(n) for n in (8 << 20, 64 << 10, 900, 1500)] == ["8 MiB", "64 KiB", "900 bytes", "1500 bytes"]
