"""pods/portforward over WebSocket, checked with the official Python client
(``kubernetes.stream.portforward``): HTTP over ``pf.socket(port)`` reaches the pod runtime."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.beside import llm_d_fixture
from tests.sim.__main__ import Simulator
from tests.sim.podhttp import serve_in_thread

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client as k8s_client  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402
from kubernetes.stream import portforward  # noqa: E402


@pytest.fixture(scope="module")
def psim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    f02 = llm_d_fixture("02-")
    # no sandbox needed: a literal `vllm serve` argv is read as written
    s = Simulator([str(f02)], namespace="llm", dev_mode="on", ready_delay=0.05, sandbox=False,
                  state_dir=tmp_path_factory.mktemp("psim") / "state")
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def core(psim: Simulator, tmp_path_factory: pytest.TempPathFactory) -> Any:
    kc = tmp_path_factory.mktemp("kc") / "kc.yaml"
    psim.server.write_kubeconfig(kc)
    return k8s_client.CoreV1Api(k8s_config.new_client_from_config(str(kc)))


class _Conn(http.client.HTTPConnection):
    """An HTTPConnection over an already connected socket (the port-forward socket)."""

    def __init__(self, sock: Any) -> None:
        super().__init__("localhost", timeout=10)
        self.sock = sock

    def connect(self) -> None:  # the socket is already connected
        pass


def _serving_pod(sim: Simulator) -> str:
    for r in sim.cluster.records():
        if not r.deleted and r.runtime is not None and "8200" in r.state()["ports"]:
            return r.name
    pytest.skip("no pod serves 8200 in this fixture without the sandbox")


def _state_port(sim: Simulator, pod: str, port: str) -> dict[str, Any]:
    p = next(p for p in sim.server.state()["pods"] if p["name"] == pod)
    return dict(p["ports"][port])


def test_portforward_http_and_reset(psim: Simulator, core: Any) -> None:
    pod = _serving_pod(psim)
    pf = portforward(core.connect_get_namespaced_pod_portforward, pod, "llm", ports="8200")
    try:
        conn = _Conn(pf.socket(8200))
        conn.request("GET", "/version")
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read()) == {"version": "0.23.0"}
        # keep-alive: a second request on the same forwarded connection
        conn.request("POST", "/reset_prefix_cache?reset_external=true", body=b"")
        r = conn.getresponse()
        assert r.status == 200
        r.read()
    finally:
        pf.close()
    port = _state_port(psim, pod, "8200")
    assert port["reset_calls"] == 1
    assert port["last_transport"] == "portforward"
    assert port["last_reset_query"] == "reset_external=true"
    assert psim.server.api_requests().get("get pods/portforward", 0) >= 1


def test_portforward_unserved_port_error(psim: Simulator, core: Any) -> None:
    pod = _serving_pod(psim)
    pf = portforward(core.connect_get_namespaced_pod_portforward, pod, "llm",
                     ports="8200,9999")
    try:
        deadline = time.monotonic() + 5
        while pf.error(9999) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        err = pf.error(9999)
        assert err is not None and err.startswith("error forwarding port 9999 to pod ")
        assert err.rstrip().endswith("connect: connection refused")
        # the other port still works
        conn = _Conn(pf.socket(8200))
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
    finally:
        pf.close()


def test_portforward_sidecar_path(psim: Simulator, core: Any) -> None:
    pod = _serving_pod(psim)
    if "8000" not in next(p for p in psim.server.state()["pods"] if p["name"] == pod)["ports"]:
        pytest.skip("no sidecar port")
    pf = portforward(core.connect_get_namespaced_pod_portforward, pod, "llm", ports="8000")
    try:
        conn = _Conn(pf.socket(8000))
        conn.request("GET", "/health")
        r = conn.getresponse()
        r.read()
        # the sidecar answers whatever it answers for plain HTTP; the bytes made it there
        assert r.status in (200, 400)
    finally:
        pf.close()


def test_podhttp_chunked_body_and_close() -> None:
    import socket
    seen: list[tuple[Any, ...]] = []

    def request(port: int, method: str, path: str, query: str, headers: dict[str, str],
                body: bytes, *, scheme: str = "http", transport: str = "proxy") -> Any:
        seen.append((port, method, path, query, body, scheme, transport))
        return 201, [("content-type", "text/plain"), ("connection", "close")], b"made"

    a, b = socket.socketpair()
    t = serve_in_thread(b, request, 8200, "portforward")
    a.sendall(b"POST /x?y=1 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    data = b""
    while True:
        chunk = a.recv(4096)
        if not chunk:
            break
        data += chunk
    t.join(5)
    a.close()
    assert data.startswith(b"HTTP/1.1 201 ")
    assert data.endswith(b"\r\n\r\nmade")
    assert seen == [(8200, "POST", "/x", "y=1", b"abcde", "http", "portforward")]
