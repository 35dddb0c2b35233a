"""Emulation of an LMCache MP server's HTTP frontend (``lmcache server``,
``python -m lmcache.v1.multiprocess.http_server``) in a pod the simulator does not run for real.

It answers as each release does (checked in the wheels' ``lmcache/v1/multiprocess/http_server.py``
and ``http_apis/*.py``):

=============  ==========================================  ====================  ===================
lmcache        clear                                       health                status
=============  ==========================================  ====================  ===================
0.3.x          none                                        ``/api/healthcheck``  none
0.4.x          ``POST /api/clear-cache`` (body ignored)    ``/api/healthcheck``  ``GET /api/status``
0.5.0          ``POST /clear-cache``                       ``/healthcheck``      ``GET /status``
0.5.1-0.5.5    ``POST /cache/clear`` (``force`` true)      ``/healthcheck``      ``GET /status``
0.5.6+         ``POST /cache/clear`` (``force`` false)     ``/healthcheck``      ``GET /status``
=============  ==========================================  ====================  ===================

``/cache/clear`` takes ``{"tier","force"}``: another tier is 400; the body is read only under
``application/json`` (FastAPI answers 422 otherwise, as the real 0.5.6 server did); ``force:
false`` keeps locked objects. A path that exists answers 405 to another method; an unknown path
404 ``{"detail":"Not Found"}`` (FastAPI). The status has LMCache 0.5.6's shape
(``storage_manager.l1_managers._default.total_object_count``/``memory_used_bytes``, and
``l2_adapters``) for every release: the older shapes were not read from LMCache's sources. L1 objects are
64 KiB each (the real server held 6 objects in 393216 bytes after ``lmcache bench server``,
tests/peers/test_stores_mpserver.py).

The release is the pod override ``lmcache_version``, else the image tag (``...:v0.4.3``), else
0.5.6. ``mp_objects`` (default 6) objects are in L1 at start, ``mp_locked`` (default 0) of them
locked, ``mp_l2_objects`` (default: no L2 adapter) in one mock L2 adapter.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from .fakevllm import Response

__all__ = ["FakeMpServer", "mp_http_port"]

OBJECT_BYTES = 65536
DEFAULT_VERSION = "0.5.6"
_NOT_FOUND: Response = (404, [("content-type", "application/json")], b'{"detail":"Not Found"}')
_NOT_ALLOWED: Response = (405, [("content-type", "application/json")], b'{"detail":"Method Not Allowed"}')


def _flag(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def mp_http_port(argv: list[str]) -> int | None:
    """The HTTP port of an MP server command (``--http-port``, default 8080), or None when the
    argv is no MP server with an HTTP frontend (the ZMQ-only ``lmcache.v1.multiprocess.server``
    included)."""
    words = [a.rsplit("/", 1)[-1] for a in argv]
    http = ("lmcache" in words and words[words.index("lmcache") + 1:][:1] == ["server"]) or \
        "lmcache.v1.multiprocess.http_server" in argv
    if not http:
        return None
    value = _flag(argv, "--http-port")
    return int(value) if value and value.isdigit() else 8080


def _version(text: str) -> tuple[int, int, int]:
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (0, 5, 6)


class FakeMpServer:
    """One MP server HTTP port (see the module docstring). Thread-safe."""

    def __init__(self, port: int, version: str = DEFAULT_VERSION, *, objects: int = 6, locked: int = 0,
                 l2_objects: int | None = None) -> None:
        self.port = port
        self.version = version
        self._v = _version(version)
        self._lock = threading.Lock()
        self.objects, self.locked, self.l2_objects = objects, locked, l2_objects
        self.clear_calls: list[tuple[str, Any]] = []

    @classmethod
    def for_pod(cls, port: int, image: str, overrides: dict[str, Any]) -> FakeMpServer:
        """The server of a pod: release from ``lmcache_version`` or the image tag, contents from
        the ``mp_*`` overrides."""
        tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
        version = str(overrides.get("lmcache_version") or (tag.lstrip("v") if re.match(r"v?\d+\.\d+\.\d+", tag)
                                                            else DEFAULT_VERSION))
        l2 = overrides.get("mp_l2_objects")
        return cls(port, version, objects=int(overrides.get("mp_objects", 6)),
                   locked=int(overrides.get("mp_locked", 0)),
                   l2_objects=int(l2) if l2 is not None else None)

    def _status(self) -> dict[str, Any]:
        l1 = {"is_healthy": True, "total_object_count": self.objects, "memory_used_bytes": self.objects * OBJECT_BYTES,
              "memory_total_bytes": 268435456}
        adapters = [] if self.l2_objects is None else [
            {"is_healthy": True, "type": "MockL2Adapter", "stored_object_count": self.l2_objects}]
        return {"is_healthy": True, "engine_type": "MPCacheServer", "chunk_size": 256,
                "storage_manager": {"is_healthy": True, "l1_managers": {"_default": l1}, "l1_manager": l1,
                                    "l2_adapters": adapters, "num_l2_adapters": len(adapters)}}

    def _routes(self) -> dict[str, str]:
        """path -> the method it answers, for this release."""
        v = self._v
        if v < (0, 4, 0):
            return {"/api/healthcheck": "GET"}
        if v < (0, 5, 0):
            return {"/api/healthcheck": "GET", "/api/status": "GET", "/api/clear-cache": "POST"}
        if v == (0, 5, 0):
            return {"/healthcheck": "GET", "/status": "GET", "/clear-cache": "POST"}
        return {"/healthcheck": "GET", "/status": "GET", "/cache/clear": "POST"}

    def handle(self, method: str, path: str, query: str, headers: dict[str, str] | None = None, body: bytes = b"",
               *, scheme: str = "http", transport: str = "proxy") -> Response:
        """Answer one HTTP request as the release does."""
        routes = self._routes()
        if path not in routes:
            return _NOT_FOUND
        if method != routes[path]:
            return _NOT_ALLOWED
        if path.endswith("healthcheck"):
            return _json(200, {"status": "healthy"})
        with self._lock:
            if path.endswith("status"):
                return _json(200, self._status())
            ctype = {k.lower(): v for k, v in (headers or {}).items()}.get("content-type", "")
            request: Any = None
            if body:
                if path == "/cache/clear" and ctype.split(";")[0].strip() != "application/json":
                    wrong = "Input should be a dictionary or an instance of ClearRequest"
                    return _json(422, {"detail": [{"type": "dataclass_type", "loc": ["body"], "msg": wrong}]})
                try:
                    request = json.loads(body)
                except ValueError:
                    if path == "/cache/clear":
                        return _json(422, {"detail": "invalid JSON"})
                    request = body.decode("utf-8", "replace")  # the older clears ignore their body
            self.clear_calls.append((path, request))
            if path == "/cache/clear":
                req = request if isinstance(request, dict) else {}
                if req.get("tier", "l1") != "l1":
                    return _json(400, {"detail": f"tier {req.get('tier')!r} not supported; only 'l1'"})
                self._clear(bool(req.get("force", self._v < (0, 5, 6))))
                return _json(200, {"status": "ok", "cleared": {"tier": "l1"}})
            # 0.5.0 and 0.4.x: the clear has no options; locked objects stay
            self._clear(False)
            return _json(200, {"status": "ok"})

    def _clear(self, force: bool) -> None:
        self.objects = 0 if force else min(self.objects, self.locked)
        self.locked = 0 if force else self.locked

    def snapshot(self) -> dict[str, Any]:
        """Counters for /sim/v1/state: role ``lmcache-mp``, the release, L1 objects, the clear
        calls made (path and body); the vLLM cache fields are 0."""
        with self._lock:
            return {"role": "lmcache-mp", "lmcache_version": self.version, "l1_objects": self.objects,
                    "l2_objects": self.l2_objects, "clear_calls": [list(c) for c in self.clear_calls],
                    "reset_calls": 0, "prefix_cache_blocks": 0, "offload_cpu_blocks": 0, "reset_mm_calls": 0,
                    "reset_encoder_calls": 0, "metrics_calls": 0}


def _json(status: int, obj: Any) -> Response:
    return status, [("content-type", "application/json")], json.dumps(obj).encode()
