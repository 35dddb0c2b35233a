"""A fake InfiniStore server's control plane, as a simulated pod serves it.

What it follows (``bytedance/InfiniStore`` ``infinistore/server.py``):
the server is started as ``infinistore [--service-port N] [--manage-port M] ...`` (the console
script; ``python -m infinistore.server`` too); its FastAPI control plane listens on
``--manage-port`` (default 18080) of every address and answers

* ``POST /purge`` -> 200 ``{"status": "ok", "num": N}``, N the key map's length before it is
  emptied;
* ``GET /kvmap_len`` -> 200 ``{"len": N}``;
* ``GET /health`` -> 200 ``Healthy`` (newer releases);
* anything else -> FastAPI's 404 ``{"detail": "Not Found"}`` (405 ``Method Not Allowed`` for
  a known path with another method).

The data plane (``--service-port``, RDMA/TCP) is not emulated: the map starts with the pod
override ``infinistore_keys`` (default 0) keys, and ``infinistore_no_kvmap_len: true`` makes
``/kvmap_len`` a 404 (a server without that route).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from .fakevllm import Response

__all__ = ["FakeInfiniStore", "infinistore_manage_port"]

DEFAULT_MANAGE_PORT = 18080


def infinistore_manage_port(argv: list[str] | None) -> int | None:
    """The manage port of a container whose argv starts the InfiniStore server (``infinistore``
    or ``python -m infinistore.server``), else None."""
    if not argv:
        return None
    words = [str(a) for a in argv]
    is_server = words[0].rsplit("/", 1)[-1] == "infinistore" or any(
        words[i] == "-m" and i + 1 < len(words) and words[i + 1] == "infinistore.server" for i in range(len(words)))
    if not is_server:
        return None
    port = DEFAULT_MANAGE_PORT
    for i, w in enumerate(words):
        value = None
        if w in ("--manage-port", "--manage_port") and i + 1 < len(words):
            value = words[i + 1]
        elif w.startswith(("--manage-port=", "--manage_port=")):
            value = w.split("=", 1)[1]
        if value is not None and value.isdigit():
            port = int(value)
    return port


def _json(status: int, doc: Any) -> Response:
    return status, [("content-type", "application/json")], json.dumps(doc).encode()


class FakeInfiniStore:
    """The control plane on one port; thread-safe. ``keys``: the map's length at start;
    ``kvmap_len_route``: False emulates a server without ``/kvmap_len``."""

    def __init__(self, port: int, *, keys: int = 0, kvmap_len_route: bool = True) -> None:
        self.port = port
        self._lock = threading.Lock()
        self._keys = int(keys)
        self._kvmap_len_route = kvmap_len_route
        self._purge_calls = 0
        self._len_calls = 0

    def snapshot(self) -> dict[str, Any]:
        """Counters for /sim/v1/state (role ``infinistore``; the vLLM cache fields are 0)."""
        with self._lock:
            return {"role": "infinistore", "keys": self._keys, "purge_calls": self._purge_calls,
                    "kvmap_len_calls": self._len_calls, "reset_calls": 0, "prefix_cache_blocks": 0,
                    "offload_cpu_blocks": 0, "reset_mm_calls": 0, "reset_encoder_calls": 0, "metrics_calls": 0}

    def handle(self, method: str, path: str, query: str, headers: dict[str, str] | None = None, body: bytes = b"",
               *, scheme: str = "http", transport: str = "proxy") -> Response:
        """Answer one request as the FastAPI app does (module docstring). Never raises."""
        method = method.upper()
        routes = {"/purge": "POST", "/health": "GET"}
        if self._kvmap_len_route:
            routes["/kvmap_len"] = "GET"
        want = routes.get(path)
        if want is None:
            return _json(404, {"detail": "Not Found"})
        if method != want:
            return _json(405, {"detail": "Method Not Allowed"})
        with self._lock:
            if path == "/purge":
                self._purge_calls += 1
                num, self._keys = self._keys, 0
                return _json(200, {"status": "ok", "num": num})
            if path == "/kvmap_len":
                self._len_calls += 1
                return _json(200, {"len": self._keys})
        return 200, [("content-type", "text/plain")], b"Healthy"
