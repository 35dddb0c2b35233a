"""The keep-alive pool of plain requests (kubectl_kvreset/kube/ ``_KeepAlive``) against a local
HTTP/1.1 server on the loopback: connections are reused and bounded, one the server closed while
idle is replaced without an error, the server URL's own path comes first, a bound is kept, and
over TLS a new connection resumes the first one's session."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubectl_kvreset.kube import KubeConnectionError, Transport, _KeepAlive


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, int]] = []  # (method, path, client port)
    resumed: list[bool] = []  # over TLS: per request, whether its connection resumed a session
    lock = threading.Lock()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        with self.lock:
            self.seen.append((self.command, self.path, self.client_address[1]))
            if hasattr(self.connection, "session_reused"):
                self.resumed.append(self.connection.session_reused)
        if self.path.endswith("/slow"):
            time.sleep(1.0)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.path.endswith("/close"):
            self.send_header("Connection", "close")
            self.close_connection = True
        try:
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up on /slow
            self.close_connection = True

    do_GET = do_POST = _answer  # noqa: N815

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    _Handler.seen = []
    _Handler.resumed = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_requests_reuse_connections_within_the_bound(server: http.server.ThreadingHTTPServer) -> None:
    pool = _KeepAlive("127.0.0.1", server.server_address[1], None, size=2)
    results: list[int] = []

    def work() -> None:
        for _ in range(5):
            status, headers, body = pool.request("POST", "/reset", b"", {"Accept": "*/*"}, 10.0)
            assert headers["content-type"] == "application/json" and body == b'{"ok": true}'
            results.append(status)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 20
    ports = {port for _, _, port in _Handler.seen}
    assert 1 <= len(ports) <= 2, ports  # 20 requests over at most the pool's 2 connections
    pool.close()


def test_a_connection_the_server_closed_is_replaced(server: http.server.ThreadingHTTPServer) -> None:
    pool = _KeepAlive("127.0.0.1", server.server_address[1], None, size=1)
    assert pool.request("GET", "/close", None, {}, 10.0)[0] == 200  # the server says close
    assert pool.request("GET", "/next", None, {}, 10.0)[0] == 200
    assert pool.request("GET", "/again", None, {}, 10.0)[0] == 200
    ports = [port for _, _, port in _Handler.seen]
    assert ports[0] != ports[1] and ports[1] == ports[2]


def test_the_server_urls_path_comes_first_and_the_bound_holds(server: http.server.ThreadingHTTPServer) -> None:
    class Conf:
        host = f"http://127.0.0.1:{server.server_address[1]}/k8s/clusters/c-1"
        ssl_ca_cert = cert_file = key_file = None
        verify_ssl = True
        proxy = None

    transport = Transport(Conf(), pool_size=3)
    assert transport.keep_alive is not None and transport.keep_alive.size == 3
    assert transport.keep_alive.request("GET", "/api/v1/pods?limit=1", None, {}, 10.0)[0] == 200
    assert _Handler.seen[-1][1] == "/k8s/clusters/c-1/api/v1/pods?limit=1"
    with pytest.raises(TimeoutError):
        transport.keep_alive.request("GET", "/slow", None, {}, 0.2)


def test_a_refused_connection_is_a_connection_error() -> None:
    import socket

    from kubectl_kvreset.kube import Kube

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    class Conf:
        host = f"http://127.0.0.1:{port}"
        ssl_ca_cert = cert_file = key_file = None
        verify_ssl = True
        proxy = None
        api_key: dict[str, str] = {}

        def get_api_key_with_prefix(self, *args: Any, **kwargs: Any) -> None:
            return None

    kube = Kube(host=Conf.host, namespace="ns", context="c", timeout_s=5.0, _transport=Transport(Conf(), 1))
    with pytest.raises(KubeConnectionError, match="cannot reach the API server .*connection refused"):
        kube.request("POST", "/api/v1/namespaces/ns/pods/p:8000/proxy/reset_prefix_cache")


def test_new_tls_connections_resume_the_first_ones_session() -> None:
    import ssl

    import trustme

    ca = trustme.CA()
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)

    class _TLSServer(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def get_request(self) -> tuple[Any, Any]:
            sock, addr = super().get_request()
            return server_ctx.wrap_socket(sock, server_side=True), addr

    _Handler.seen, _Handler.resumed = [], []
    srv = _TLSServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ca.configure_trust(client_ctx)
        pool = _KeepAlive("127.0.0.1", srv.server_address[1], client_ctx, size=2)
        assert pool.request("GET", "/first", None, {}, 10.0)[0] == 200
        pool.close()  # the next requests need new connections
        assert pool.request("GET", "/second", None, {}, 10.0)[0] == 200
        pool.close()
        assert pool.request("GET", "/third", None, {}, 10.0)[0] == 200
        assert len({port for _, _, port in _Handler.seen}) == 3  # three connections
        assert _Handler.resumed == [False, True, True]
        pool.close()
    finally:
        srv.shutdown()
        srv.server_close()
