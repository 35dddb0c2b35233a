"""Emulation of the llm-d routing sidecar (P/D proxy in front of vLLM in the same pod).

Behaviour (llm-d-inference-scheduler ``pkg/sidecar/proxy/proxy.go``
``createRoutes``, legacy llm-d-routing-sidecar ``internal/proxy/proxy.go``):

- ``GET /health`` is answered by the sidecar itself (200, empty body), so it says nothing about
  vLLM;
- ``POST /v1/completions``, ``/v1/chat/completions`` (and ``/v1/responses``) go through the P/D
  handler; without a prefiller header that ends at the local decoder, so here they are forwarded
  like everything else;
- every other path is reverse-proxied to the vLLM port of the same pod, keeping vLLM's status,
  headers and body. When nothing listens there Go's ``httputil.ReverseProxy`` answers 502 with an
  empty body.
- ``--secure-proxy`` (default true) serves TLS: a plain-HTTP request gets Go's 400
  ``Client sent an HTTP request to an HTTPS server.``
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .fakevllm import Response

__all__ = ["RoutingSidecar", "Upstream"]

Upstream = Callable[[int, str, str, str, dict[str, str], bytes, str, str], "Response | None"]
"""In-process call to the pod's port: (port, method, path, query, headers, body, scheme,
transport) -> response, or None when nothing listens on that port."""

_COMPLETION_PATHS = {"/v1/completions", "/v1/chat/completions", "/v1/responses"}


class RoutingSidecar:
    """One sidecar listening port forwarding to one vLLM port of the same pod.

    Args:
        port: the sidecar port (``--port`` + DP index).
        vllm_port: where it forwards (``--vllm-port`` + DP index).
        secure: TLS on the sidecar port (``--secure-proxy``).
        upstream: the pod's in-process request function (see :data:`Upstream`).

    Counts reset calls that pass through it (``/reset_prefix_cache``), thread-safe.
    """

    def __init__(self, *, port: int, vllm_port: int, secure: bool, upstream: Upstream) -> None:
        self.port = port
        self.vllm_port = vllm_port
        self.secure = secure
        self._upstream = upstream
        self._lock = threading.Lock()
        self._reset_calls = 0
        self._last_query: str | None = None
        self._last_transport: str | None = None

    def snapshot(self) -> dict[str, Any]:
        """Counters for /sim/v1/state: role ``sidecar``; only the reset fields count, the cache
        fields are 0 (the vLLM port behind holds the cache state); ``forwards_to`` names it."""
        with self._lock:
            return {
                "role": "sidecar",
                "reset_calls": self._reset_calls,
                "last_reset_query": self._last_query,
                "last_transport": self._last_transport,
                "prefix_cache_blocks": 0,
                "offload_cpu_blocks": 0,
                "reset_mm_calls": 0,
                "reset_encoder_calls": 0,
                "metrics_calls": 0,
                "forwards_to": self.vllm_port,
            }

    def handle(
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        scheme: str = "http",
        transport: str = "proxy",
    ) -> Response:
        """Answer one request as the sidecar does (see module docstring). Never raises."""
        if self.secure and scheme != "https":
            return 400, [("content-type", "text/plain; charset=utf-8"), ("connection", "close")], (
                b"Client sent an HTTP request to an HTTPS server.\n"
            )
        if not self.secure and scheme == "https":
            return (502, [("content-type", "text/plain; charset=utf-8")],
                    b"tls: first record does not look like a TLS handshake")
        if path == "/health" and method.upper() == "GET":
            return 200, [], b""
        if path.rstrip("/") == "/reset_prefix_cache":
            with self._lock:
                self._reset_calls += 1
                self._last_query = query
                self._last_transport = transport
        # The sidecar talks plain HTTP to vLLM on localhost (it does not re-encrypt).
        result = self._upstream(self.vllm_port, method, path, query, dict(headers or {}), body, "http", transport)
        if result is None:
            return 502, [], b""
        return result

    @staticmethod
    def is_completion_path(path: str) -> bool:
        """True for the routes the sidecar's P/D handler owns."""
        return path in _COMPLETION_PATHS
