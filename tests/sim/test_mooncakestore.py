"""The fake vLLM's MooncakeStoreConnector reset hook (tests/sim/mooncakestore.py), against a small
loopback HTTP server standing in for the master's admin port (the real master is in
tests/peers/test_stores_mooncake_reset.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.sim.connectorinfo import ConnectorInfo
from tests.sim.fakevllm import FakeVLLM
from tests.sim.mooncakestore import MooncakeStoreHook, hosts_lookup


@pytest.fixture()
def master() -> Iterator[dict[str, Any]]:
    state: dict[str, Any] = {"keys": 5, "paths": []}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            state["paths"].append(self.path)
            removed, state["keys"] = state["keys"], 0
            body = json.dumps({"success": True, "removed_count": removed}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["port"] = server.server_address[1]
    yield state
    server.shutdown()
    server.server_close()


def _hook(tmp_path: Path, address: str, port: int, hosts: str | None) -> MooncakeStoreHook:
    cfg = tmp_path / "mc.json"
    cfg.write_text(json.dumps({"master_server_address": address, "metadata_server": "P2PHANDSHAKE"}))
    hosts_file = None
    if hosts is not None:
        hosts_file = str(tmp_path / "hosts")
        Path(hosts_file).write_text(hosts)
    return MooncakeStoreHook({"MOONCAKE_CONFIG_PATH": "/etc/mc/mc.json"},
                             lambda p: cfg.read_text() if p == "/etc/mc/mc.json" else "", hosts_file, port)


def test_hosts_lookup_reads_every_name_of_a_line(tmp_path: Path) -> None:
    f = tmp_path / "hosts"
    f.write_text("127.0.0.1\tlocalhost\n127.9.128.4\tkv kv.st kv.st.svc kv.st.svc.cluster.local  # svc\n")
    assert hosts_lookup(f, "kv.st.svc.cluster.local") == "127.9.128.4"
    assert hosts_lookup(f, "KV") == "127.9.128.4" and hosts_lookup(f, "other") is None
    assert hosts_lookup(tmp_path / "absent", "kv") is None


def test_the_hook_empties_the_named_master_through_its_admin_port(tmp_path: Path, master: dict[str, Any]) -> None:
    hook = _hook(tmp_path, "kv.st.svc.cluster.local:50051", master["port"], "127.0.0.1\tkv.st.svc.cluster.local\n")
    assert hook.master() == "kv.st.svc.cluster.local:50051" and hook.modelled()
    assert hook.reset() is True
    assert master["paths"] == ["/api/v1/remove_all?force=true"] and master["keys"] == 0
    [call] = hook.snapshot()
    assert call["ok"] is True and call["removed"] == 5 and call["via"] == f"127.0.0.1:{master['port']}"


def test_no_hosts_file_means_no_master_modelled_and_nothing_called(tmp_path: Path, master: dict[str, Any]) -> None:
    hook = _hook(tmp_path, "kv.st.svc.cluster.local:50051", master["port"], None)
    assert not hook.modelled() and hook.reset() is None and master["paths"] == [] and hook.snapshot() == []
    # an address outside the loopback is never called, even when a hosts file names it
    far = _hook(tmp_path, "kv:50051", master["port"], "10.0.0.5\tkv\n")
    assert far.reset() is None


def test_a_master_that_does_not_answer_fails_the_reset(tmp_path: Path, master: dict[str, Any]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    hook = _hook(tmp_path, "127.0.0.1:50051", free, None)
    vllm = FakeVLLM(port=8000, version="0.32.0", dev_mode=True, model="m",
                    connectors=[ConnectorInfo("MooncakeStoreConnector")], store_hook=hook)
    status, _, body = vllm.handle("POST", "/reset_prefix_cache", "reset_external=true")
    assert status == 200 and json.loads(body) == {"success": False}
    assert vllm.snapshot()["mooncake_resets"][0]["ok"] is False
    # reset_external=false never reaches the store; 0.22 has no hook
    status, _, body = vllm.handle("POST", "/reset_prefix_cache", "reset_external=false")
    assert json.loads(body) == {"success": True} and len(hook.snapshot()) == 1
    ok = _hook(tmp_path, "127.0.0.1:50051", master["port"], None)
    old = FakeVLLM(port=8000, version="0.22.0", dev_mode=True, model="m",
                   connectors=[ConnectorInfo("MooncakeStoreConnector")], store_hook=ok)
    assert old.handle("POST", "/reset_prefix_cache", "reset_external=true")[0] == 200 and ok.snapshot() == []
