"""A toy inference server and a toy KV store, chosen by the container's command, for tests that
add an engine or a store kind to the plugin and run it against the simulator (the seam tests).
Neither models a real product: they are the least a reset route and a store count need.

* ``toy-serve [--port N] ...`` (default 8000): ``GET /toy/version`` -> 200 ``1.0.0`` (text),
  ``GET /health`` -> 200, ``POST /toy/reset`` -> 200 ``{"emptied": true}`` and its prefix cache
  goes cold; while the pod override ``busy`` (int) lasts, each reset answers 200
  ``{"emptied": false, "busy": true}`` and empties nothing. Warm with ``warm_blocks`` (default
  512) blocks unless ``cold``.
* ``toy-kv [--port N]`` (default 7777): ``GET /toy/count`` -> 200 ``{"count": N}``,
  ``POST /toy/clear`` -> 200 ``{"removed": N}`` and the store is empty; it starts with the pod
  override ``toy_keys`` (default 5) keys.

Anything else on either: 404 ``{"detail": "Not Found"}``.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from .fakevllm import Response

__all__ = ["FakeToyServer", "FakeToyStore", "toy_fake"]


def _json(status: int, doc: Any) -> Response:
    return status, [("content-type", "application/json")], json.dumps(doc).encode()


def _port(words: list[str], default: int) -> int:
    """The last ``--port N`` / ``--port=N`` of ``words``, else ``default``."""
    port = default
    for i, w in enumerate(words):
        value = w.split("=", 1)[1] if w.startswith("--port=") else None
        if w == "--port" and i + 1 < len(words):
            value = words[i + 1]
        if value is not None and value.isdigit():
            port = int(value)
    return port


class _ToyBase:
    """The lock, the counters every port snapshot carries, the 404."""

    role = ""

    def __init__(self, port: int) -> None:
        self.port = port
        self._lock = threading.Lock()
        self.calls: list[str] = []
        self.last_transport = ""

    def _counters(self) -> dict[str, Any]:
        return {"role": self.role, "calls": list(self.calls), "reset_calls": 0, "prefix_cache_blocks": 0,
                "offload_cpu_blocks": 0, "reset_mm_calls": 0, "reset_encoder_calls": 0, "metrics_calls": 0}

    def route(self, method: str, path: str) -> Response | None:
        """The answer of one route; None for a route it does not serve."""
        raise NotImplementedError

    def handle(self, method: str, path: str, query: str, headers: dict[str, str] | None = None, body: bytes = b"",
               *, scheme: str = "http", transport: str = "proxy") -> Response:
        """Answer one request (module docstring). Never raises."""
        with self._lock:
            self.calls.append(f"{method.upper()} {path}" + (f"?{query}" if query else ""))
            self.last_transport = transport
            got = self.route(method.upper(), path)
        return got if got is not None else _json(404, {"detail": "Not Found"})


class FakeToyServer(_ToyBase):
    """The toy inference server on one port; thread-safe."""

    role = "toy"

    def __init__(self, port: int, *, warm_blocks: int = 512, busy: int = 0) -> None:
        super().__init__(port)
        self.blocks = warm_blocks
        self.busy_left = busy
        self.resets = 0
        self.busy_answers = 0

    def route(self, method: str, path: str) -> Response | None:
        if (method, path) == ("GET", "/toy/version"):
            return 200, [("content-type", "text/plain")], b"1.0.0"
        if (method, path) == ("GET", "/health"):
            return 200, [], b""
        if (method, path) != ("POST", "/toy/reset"):
            return None
        self.resets += 1
        if self.busy_left > 0:
            self.busy_left -= 1
            self.busy_answers += 1
            return _json(200, {"emptied": False, "busy": True})
        self.blocks = 0
        return _json(200, {"emptied": True})

    def snapshot(self) -> dict[str, Any]:
        """Counters for /sim/v1/state: role ``toy``, its resets and prefix-cache blocks."""
        with self._lock:
            return {**self._counters(), "reset_calls": self.resets, "prefix_cache_blocks": self.blocks,
                    "busy_answers": self.busy_answers, "last_transport": self.last_transport}


class FakeToyStore(_ToyBase):
    """The toy KV store on one port; thread-safe."""

    role = "toy-kv"

    def __init__(self, port: int, *, keys: int = 5) -> None:
        super().__init__(port)
        self.keys = keys

    def route(self, method: str, path: str) -> Response | None:
        if (method, path) == ("GET", "/toy/count"):
            return _json(200, {"count": self.keys})
        if (method, path) == ("POST", "/toy/clear"):
            removed, self.keys = self.keys, 0
            return _json(200, {"removed": removed})
        return None

    def snapshot(self) -> dict[str, Any]:
        """Counters for /sim/v1/state: role ``toy-kv``, its key count."""
        with self._lock:
            return {**self._counters(), "keys": self.keys}


def toy_fake(argv: list[str] | None, overrides: dict[str, Any]) -> FakeToyServer | FakeToyStore | None:
    """The toy server or store a container whose ``argv`` starts ``toy-serve`` / ``toy-kv`` runs
    (``overrides``: the pod's, module docstring), else None."""
    words = [str(a) for a in argv or []]
    first = words[0].rsplit("/", 1)[-1] if words else ""
    if first == "toy-serve":
        warm = 0 if overrides.get("cold") else int(overrides.get("warm_blocks", 512))
        return FakeToyServer(_port(words, 8000), warm_blocks=warm, busy=int(overrides.get("busy") or 0))
    if first == "toy-kv":
        return FakeToyStore(_port(words, 7777), keys=int(overrides.get("toy_keys", 5)))
    return None
