"""The emulated LMCache MP server HTTP frontend (tests/sim/fakemp.py)."""

from __future__ import annotations

import json

from tests.sim.fakemp import FakeMpServer, mp_http_port

JSON = {"Content-Type": "application/json"}


def test_which_commands_serve_http() -> None:
    assert mp_http_port(["lmcache", "server", "--http-port", "8181"]) == 8181
    assert mp_http_port(["/opt/venv/bin/lmcache", "server"]) == 8080
    assert mp_http_port(["python3", "-m", "lmcache.v1.multiprocess.http_server", "--http-port=9"]) == 9
    assert mp_http_port(["python3", "-m", "lmcache.v1.multiprocess.server", "--port", "5555"]) is None
    assert mp_http_port(["vllm", "serve", "m"]) is None


def test_056_answers_as_the_real_server_did() -> None:
    mp = FakeMpServer(8080, "0.5.6", objects=6, locked=1)
    assert mp.handle("POST", "/clear-cache", "")[0] == 404 and mp.handle("GET", "/cache/clear", "")[0] == 405
    assert mp.handle("POST", "/cache/clear", "", {}, b'{"tier":"l1"}')[0] == 422  # no JSON content type
    assert mp.handle("POST", "/cache/clear", "", JSON, b'{"tier":"l2"}')[0] == 400
    status, _, body = mp.handle("POST", "/cache/clear", "", JSON, b'{"tier":"l1","force":false}')
    assert status == 200 and json.loads(body) == {"status": "ok", "cleared": {"tier": "l1"}} and mp.objects == 1
    l1 = json.loads(mp.handle("GET", "/status", "")[2])["storage_manager"]["l1_managers"]["_default"]
    assert (l1["total_object_count"], l1["memory_used_bytes"]) == (1, 65536)
    mp.handle("POST", "/cache/clear", "", JSON, b"")  # no body: the release's default force (false)
    assert mp.objects == 1


def test_older_releases() -> None:
    assert FakeMpServer.for_pod(1, "lmcache/vllm-openai:v0.4.3", {}).version == "0.4.3"
    assert FakeMpServer.for_pod(1, "lmcache/vllm-openai:latest", {"lmcache_version": "0.5.0"}).version == "0.5.0"
    old = FakeMpServer(1, "0.4.3")
    assert old.handle("GET", "/status", "")[0] == 404 and old.handle("GET", "/api/status", "")[0] == 200
    assert old.handle("POST", "/api/clear-cache", "", {}, b"ignored")[0] == 200 and old.objects == 0
    forced = FakeMpServer(1, "0.5.3", locked=2)
    forced.handle("POST", "/cache/clear", "", {}, b"")
    assert forced.objects == 0  # 0.5.1-0.5.5 default to force: true
    assert FakeMpServer(1, "0.3.15").handle("POST", "/api/clear-cache", "")[0] == 404
