"""The fake vLLM's LMCacheMPConnector reset hook (tests/sim/mpstore.py), against the simulator's fake
MP server served on a loopback port (the real pair is in tests/peers/test_real_mp_reset.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.sim.connectorinfo import ConnectorInfo
from tests.sim.fakemp import FakeMpServer
from tests.sim.fakevllm import FakeVLLM
from tests.sim.mpstore import LMCacheMPHook, mp_extra

CONNECTOR = {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
             "kv_connector_extra_config": {"lmcache.mp.host": "tcp://lmcache-server", "lmcache.mp.port": 5555}}


@pytest.fixture()
def mp() -> Iterator[tuple[FakeMpServer, int]]:
    fake = FakeMpServer(0, objects=6)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, headers, answer = fake.handle("POST", self.path, "", dict(self.headers), body)
            self.send_response(status)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield fake, server.server_address[1]
    server.shutdown()
    server.server_close()


def _hosts(tmp_path: Path) -> str:
    f = tmp_path / "hosts"
    f.write_text("127.0.0.1\tlmcache-server lmcache-server.mpc lmcache-server.mpc.svc\n")
    return str(f)


def test_mp_extra_finds_the_connector_under_a_multiconnector() -> None:
    multi = {"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "OffloadingConnector"}, CONNECTOR]}}
    assert mp_extra(multi) == CONNECTOR and mp_extra(CONNECTOR) == CONNECTOR
    assert mp_extra({"kv_connector": "LMCacheConnectorV1"}) is None and mp_extra(None) is None


def test_reset_external_clears_the_servers_l1_through_its_http_clear(tmp_path: Path,
                                                                     mp: tuple[FakeMpServer, int]) -> None:
    fake, port = mp
    hook = LMCacheMPHook(CONNECTOR, {}, _hosts(tmp_path), port)
    vllm = FakeVLLM(port=8000, version="0.32.0", dev_mode=True, model="m",
                    connectors=[ConnectorInfo("LMCacheMPConnector")], mp_hook=hook)
    status, _, body = vllm.handle("POST", "/reset_prefix_cache", "reset_external=false")
    assert status == 200 and fake.objects == 6 and hook.snapshot() == []
    status, _, body = vllm.handle("POST", "/reset_prefix_cache", "reset_external=true")
    assert status == 200 and json.loads(body) == {"success": True}
    assert fake.objects == 0 and fake.clear_calls == [("/cache/clear", {"tier": "l1", "force": False})]
    [call] = vllm.snapshot()["mp_resets"]
    assert call == {"server": "tcp://lmcache-server", "via": f"127.0.0.1:{port}", "ok": True, "detail": None}


def test_upstream_mp_has_no_hook_but_lmcaches_module_path_does(tmp_path: Path, mp: tuple[FakeMpServer, int]) -> None:
    fake, port = mp
    upstream = LMCacheMPHook(CONNECTOR, {"LMCACHE_USE_UPSTREAM_MP": "1"}, _hosts(tmp_path), port)
    assert upstream.reset() is None and fake.objects == 6
    module = {**CONNECTOR, "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector"}
    forced = LMCacheMPHook(module, {"LMCACHE_USE_UPSTREAM_MP": "1"}, _hosts(tmp_path), port)
    assert forced.reset() is True and fake.objects == 0


def test_no_hosts_file_models_no_server_and_a_dead_one_fails(tmp_path: Path) -> None:
    assert LMCacheMPHook(CONNECTOR, {}, None).reset() is None
    dead = LMCacheMPHook({**CONNECTOR, "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1"}},
                         {}, None, 1)
    vllm = FakeVLLM(port=8000, version="0.32.0", dev_mode=True, model="m",
                    connectors=[ConnectorInfo("LMCacheMPConnector")], mp_hook=dead)
    _, _, body = vllm.handle("POST", "/reset_prefix_cache", "reset_external=true")
    assert json.loads(body) == {"success": False} and vllm.snapshot()["mp_resets"][0]["ok"] is False
