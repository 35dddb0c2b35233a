"""A fake vLLM OpenAI-compatible server for one API port, behaving like the release it claims.

Every behaviour here comes from research/vllm.md (read from vLLM release wheels):

- §1.1 ``POST /reset_prefix_cache``: dev-mode only; query parameters per release (0.8.x-0.11.0
  ``device``; 0.12 ``reset_running_requests``; >= 0.13 also ``reset_external``; unknown
  parameters ignored; a bad boolean -> 400 with vLLM's error body); body per release (empty 200
  before 0.26, ``{"success":bool}`` from 0.26); ``success:false`` while blocks are held unless
  ``reset_running_requests`` preempts; a forced reset that still fails -> 500 (JSON body from
  0.18, Starlette's plain text before). The connector is reset even when the local reset fails.
- §1.2 ``VLLM_SERVER_DEV_MODE`` parsed as ``bool(int(value))``; a bad value crashes startup.
- §1.3 ``/reset_mm_cache`` (>= 0.11.1), ``/reset_encoder_cache`` (>= 0.16.0): dev-only, empty 200.
- §1.4 ``/health`` (empty 200), ``/version`` (``{"version": ...}``), ``/load``.
- §2 ``/metrics`` families per release, labels ``model_name`` and ``engine``; the usage gauge does
  not move on reset.
- §3.2 what ``reset_external=true`` clears per connector/spec/release.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .serveargs import ConnectorInfo

__all__ = [
    "FakeVLLM",
    "Response",
    "dev_mode_state",
    "parse_version",
    "reset_clears_cpu_tier",
]

Response = tuple[int, list[tuple[str, str]], bytes]
"""(HTTP status, headers as (name, value) pairs, body)."""

_JSON = [("content-type", "application/json")]
_TRUE = {"true", "1", "yes", "on", "t", "y"}
_FALSE = {"false", "0", "no", "off", "f", "n"}


def parse_version(text: str | None) -> Version:
    """``packaging`` Version of a vLLM version string; an unparseable one (``dev``, a fork name)
    counts as the oldest behaviour, 0.0.0 (DESIGN.md §1)."""
    try:
        return Version(text or "0")
    except InvalidVersion:
        return Version("0")


def dev_mode_state(value: str | None) -> str:
    """``"on"``, ``"off"`` or ``"invalid"`` for a ``VLLM_SERVER_DEV_MODE`` value (None = unset).

    vLLM: ``bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0")))`` in ``vllm/envs.py`` (0.7.3 ->
    0.33.0): ``"1"``, ``"2"``, ``" 1"`` on; ``"0"``/unset off; ``"true"``, ``""`` raise
    ValueError at startup (research/vllm.md §1.2), reported here as ``"invalid"``.
    """
    if value is None:
        return "off"
    try:
        return "on" if int(value) else "off"
    except ValueError:
        return "invalid"


def reset_clears_cpu_tier(connector: ConnectorInfo, version: Version) -> bool:
    """Whether ``reset_external=true`` empties this connector's CPU tier on ``version``.

    research/vllm.md §3.2: OffloadingConnector + CPUOffloadingSpec from 0.22.0 (no-op 0.14-0.21);
    TieringOffloadingSpec from 0.24.0 (CPU tier only, never the FS tier);
    SimpleCPUOffloadConnector from 0.20.0; LMCache, Nixl, Mooncake P2P never. The hook itself
    exists from 0.13.0 (PR #27170).
    """
    if version < Version("0.13.0") or not connector.cpu_tier:
        return False
    if connector.name == "OffloadingConnector":
        if connector.spec_name == "TieringOffloadingSpec":
            return version >= Version("0.24.0")
        return version >= Version("0.22.0")
    if connector.name == "SimpleCPUOffloadConnector":
        return version >= Version("0.20.0")
    return False


def _json(status: int, obj: Any, extra: list[tuple[str, str]] | None = None) -> Response:
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    return status, list(_JSON) + (extra or []), body


def _not_found() -> Response:
    return _json(404, {"detail": "Not Found"})


def _validation_error(param: str, value: str) -> Response:
    detail = (
        f"1 validation error:\n  {{'type': 'bool_parsing', 'loc': ('query', '{param}'), "
        f"'msg': 'Input should be a valid boolean, unable to interpret input', 'input': '{value}'}}"
    )
    return _json(400, {"error": {"message": detail, "type": "Bad Request", "param": f"query.{param}", "code": 400}})


@dataclass
class _Counters:
    reset_calls: int = 0
    last_reset_query: str | None = None
    last_transport: str | None = None
    prefix_cache_blocks: int = 0
    offload_cpu_blocks: int = 0
    reset_mm_calls: int = 0
    reset_encoder_calls: int = 0
    metrics_calls: int = 0
    completion_calls: int = 0
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    external_queries: float = 0.0
    external_hits: float = 0.0
    busy_left: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class FakeVLLM:
    """One vLLM API server (one engine) listening on one port.

    Args:
        port: the API port (informational; routing is the caller's job).
        version: the vLLM release it claims, e.g. ``"0.26.0"``.
        dev_mode: VLLM_SERVER_DEV_MODE is on (a crashing value never reaches here: the pod
            runtime serves nothing then).
        model / served_model_name: ``--model`` and the metrics ``model_name`` label.
        connectors: the KV connectors (MultiConnector children flattened).
        overrides: scenario overrides: ``busy`` (int, first N reset calls find blocks held),
            ``busy_forced`` (bool: a forced reset while busy still fails -> 500),
            ``reset_delay_ms`` (int), ``metrics_status`` (int), ``warm_blocks`` (int, default
            512), ``warm_cpu_blocks`` (int, default 4 x warm_blocks).
        tls: the server speaks HTTPS (``--ssl-certfile``).

    :meth:`handle` is thread-safe; counters are behind one lock and the reset delay sleeps
    outside it.
    """

    def __init__(
        self,
        *,
        port: int,
        version: str,
        dev_mode: bool,
        model: str,
        served_model_name: str | None = None,
        connectors: Iterable[ConnectorInfo] = (),
        overrides: dict[str, Any] | None = None,
        tls: bool = False,
    ) -> None:
        self.port = port
        self.version = version
        self.v = parse_version(version)
        self.dev_mode = dev_mode
        self.model = model
        self.served_model_name = served_model_name or model
        self.connectors = list(connectors)
        self.overrides = dict(overrides or {})
        self.tls = tls
        self.cpu_tier = any(c.cpu_tier for c in self.connectors)
        self.offload_metric = self.v >= Version("0.24.0") and any(
            c.name == "OffloadingConnector" and c.spec_name in ("CPUOffloadingSpec", "TieringOffloadingSpec")
            for c in self.connectors
        )
        self._lock = threading.Lock()
        warm = int(self.overrides.get("warm_blocks", 512))
        self._c = _Counters(
            prefix_cache_blocks=warm,
            offload_cpu_blocks=int(self.overrides.get("warm_cpu_blocks", warm * 4)) if self.cpu_tier else 0,
            busy_left=int(self.overrides.get("busy", 0) or 0),
        )
        # Token counters only ever grow (they are Prometheus counters): the warm-up traffic.
        self._c.prefix_queries = float(warm * 16 * 2)
        self._c.prefix_hits = float(warm * 16)
        self._c.external_queries = float(self._c.offload_cpu_blocks * 16 * 2)
        self._c.external_hits = float(self._c.offload_cpu_blocks * 16)
        self._total_blocks = max(4096, warm * 8)
        self._warm_usage_blocks = warm // 4
        self._created = time.time()

    # ------------------------------------------------------------------ state
    def snapshot(self) -> dict[str, Any]:
        """Counters for /sim/v1/state: role ``vllm``, reset_calls, last_reset_query,
        last_transport, prefix_cache_blocks, offload_cpu_blocks, reset_mm_calls,
        reset_encoder_calls, metrics_calls, plus version and dev_mode of this server."""
        with self._lock:
            c = self._c
            return {
                "role": "vllm",
                "reset_calls": c.reset_calls,
                "last_reset_query": c.last_reset_query,
                "last_transport": c.last_transport,
                "prefix_cache_blocks": c.prefix_cache_blocks,
                "offload_cpu_blocks": c.offload_cpu_blocks,
                "reset_mm_calls": c.reset_mm_calls,
                "reset_encoder_calls": c.reset_encoder_calls,
                "metrics_calls": c.metrics_calls,
            }

    # ------------------------------------------------------------------ HTTP
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
        """Answer one HTTP request as this vLLM would. Never raises for client input.

        ``path`` excludes the query string, ``query`` excludes ``?``. Unknown paths -> 404
        ``{"detail":"Not Found"}``; a known path with another method -> 405
        ``{"detail":"Method Not Allowed"}`` with an ``allow`` header (Starlette routing).
        """
        method = method.upper()
        if scheme == "https" and not self.tls:
            return 502, [("content-type", "text/plain; charset=utf-8")], b"tls: first record does not look like a TLS handshake"
        if scheme == "http" and self.tls:
            return 400, [("content-type", "text/plain; charset=utf-8")], b"Invalid HTTP request received."
        route = self._routes().get(path.rstrip("/") or "/")
        if route is None:
            return _not_found()
        allowed, handler = route
        if method not in allowed:
            return _json(405, {"detail": "Method Not Allowed"}, [("allow", ", ".join(sorted(allowed)))])
        result: Response = handler(query, body, transport)
        return result

    def _routes(self) -> dict[str, tuple[set[str], Any]]:
        v = self.v
        routes: dict[str, tuple[set[str], Any]] = {
            "/health": ({"GET"}, lambda q, b, t: (200, [], b"")),
            "/version": ({"GET"}, lambda q, b, t: _json(200, {"version": self.version})),
            "/load": ({"GET"}, lambda q, b, t: _json(200, {"server_load": 0})),
            "/metrics": ({"GET", "HEAD", "POST"}, lambda q, b, t: self._metrics()),
            "/v1/models": ({"GET"}, lambda q, b, t: self._models()),
            "/v1/completions": ({"POST"}, lambda q, b, t: self._completion(b, chat=False)),
            "/v1/chat/completions": ({"POST"}, lambda q, b, t: self._completion(b, chat=True)),
        }
        if self.dev_mode:
            routes["/reset_prefix_cache"] = ({"POST"}, self._reset_prefix_cache)
            if v >= Version("0.11.1"):
                routes["/reset_mm_cache"] = ({"POST"}, lambda q, b, t: self._count_reset("reset_mm_calls"))
            if v >= Version("0.16.0"):
                routes["/reset_encoder_cache"] = ({"POST"}, lambda q, b, t: self._count_reset("reset_encoder_calls"))
            if v >= Version("0.8.0"):
                routes["/is_sleeping"] = ({"GET"}, lambda q, b, t: _json(200, {"is_sleeping": False}))
        return routes

    def _count_reset(self, name: str) -> Response:
        with self._lock:
            setattr(self._c, name, getattr(self._c, name) + 1)
        return 200, [], b""

    def _reset_prefix_cache(self, query: str, body: bytes, transport: str) -> Response:
        v = self.v
        params: dict[str, str] = {}
        for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
            params[key] = value  # the last occurrence wins, as in Starlette's QueryParams
        if v >= Version("0.13.0"):
            bool_params = ["reset_running_requests", "reset_external"]
        elif v >= Version("0.12.0"):
            bool_params = ["reset_running_requests"]
        else:
            bool_params = []
        flags: dict[str, bool] = {}
        for name in bool_params:
            if name not in params:
                flags[name] = False
                continue
            low = params[name].strip().lower()
            if low in _TRUE:
                flags[name] = True
            elif low in _FALSE:
                flags[name] = False
            else:
                return _validation_error(name, params[name])
        device_error = False
        if Version("0.8.0") <= v < Version("0.11.1") and "device" in params:
            # Device[device_str.upper()]: unknown -> KeyError, CPU -> "Not supported on CPU." (V1)
            device_error = params["device"].upper() != "GPU"

        delay = int(self.overrides.get("reset_delay_ms", 0) or 0)
        if delay > 0:
            time.sleep(delay / 1000.0)

        forced = flags.get("reset_running_requests", False)
        external = flags.get("reset_external", False)
        with self._lock:
            c = self._c
            c.reset_calls += 1
            c.last_reset_query = query
            c.last_transport = transport
            if device_error:
                return self._internal_error("Not supported on CPU.")
            busy = c.busy_left > 0
            if busy:
                c.busy_left -= 1
            if busy and forced and self.overrides.get("busy_forced"):
                return self._internal_error(
                    "Call to reset_prefix_cache method failed: Failed to reset KV cache even when all the "
                    "running requests are preempted and moved to the waiting queue. This is likely due to "
                    "the presence of running requests that are not preempted."
                )
            local_ok = (not busy) or forced
            if local_ok:
                c.prefix_cache_blocks = 0
            if external:
                for conn in self.connectors:
                    if reset_clears_cpu_tier(conn, v):
                        c.offload_cpu_blocks = 0
            success = local_ok
        if v >= Version("0.26.0"):
            return _json(200, {"success": success})
        return 200, [], b""

    def _internal_error(self, message: str) -> Response:
        if self.v >= Version("0.18.0"):
            return _json(500, {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}})
        return 500, [("content-type", "text/plain; charset=utf-8")], b"Internal Server Error"

    def _models(self) -> Response:
        return _json(200, {
            "object": "list",
            "data": [{
                "id": self.served_model_name,
                "object": "model",
                "created": int(self._created),
                "owned_by": "vllm",
                "root": self.model,
                "parent": None,
                "max_model_len": 32768,
            }],
        })

    def _completion(self, body: bytes, *, chat: bool) -> Response:
        """A canned completion; it warms the caches (16 GPU blocks, 16 CPU blocks with a tier)."""
        with self._lock:
            c = self._c
            c.completion_calls += 1
            c.prefix_queries += 8
            c.prefix_hits += min(8, c.prefix_cache_blocks * 16)
            c.prefix_cache_blocks += 16
            if self.cpu_tier:
                c.external_queries += 8
                c.external_hits += min(8, c.offload_cpu_blocks * 16)
                c.offload_cpu_blocks += 16
            n = c.completion_calls
        created = int(time.time())
        if chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": "ok", "finish_reason": "stop"}
            obj = "text_completion"
        return _json(200, {
            "id": f"cmpl-sim-{self.port}-{n}", "object": obj, "created": created, "model": self.served_model_name,
            "choices": [choice], "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
        })

    # ------------------------------------------------------------------ metrics
    def _metrics(self) -> Response:
        with self._lock:
            self._c.metrics_calls += 1
            tokens = (self._c.prefix_queries, self._c.prefix_hits, self._c.external_queries, self._c.external_hits)
        status = self.overrides.get("metrics_status")
        if status is not None and int(status) != 200:
            return int(status), [("content-type", "text/plain; charset=utf-8")], b"Internal Server Error"
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_MetricsCollector(self, tokens))
        return 200, [("content-type", CONTENT_TYPE_LATEST)], generate_latest(registry)


class _MetricsCollector:
    """Builds the vLLM metric families of one release (research/vllm.md §2 table)."""

    def __init__(self, server: FakeVLLM, tokens: tuple[float, float, float, float]) -> None:
        self.s = server
        self.tokens = tokens

    def collect(self) -> Iterable[Metric]:
        s, v = self.s, self.s.v
        if v >= Version("0.8.0"):
            names, values = ["model_name", "engine"], [s.served_model_name, "0"]
        else:
            names, values = ["model_name"], [s.served_model_name]
        created = s._created
        # usage = 1 - free/total; cached blocks nobody references are free, so it stays where the
        # warm-up left it and does not drop on reset (research/vllm.md §1.1 step 6).
        usage = round(min(1.0, s._warm_usage_blocks / s._total_blocks), 6)
        queries, hits, ext_queries, ext_hits = self.tokens

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=names)
            g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=names)
            c.add_metric(values, value, created=created)
            return c

        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.", 0.0)
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 0.0)
        if v >= Version("0.9.0"):
            yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
        if v < Version("0.11.0"):
            doc = "GPU KV-cache usage. 1 means 100 percent usage."
            if v >= Version("0.9.2"):
                doc += " DEPRECATED: Use vllm:kv_cache_usage_perc instead."
            yield gauge("vllm:gpu_cache_usage_perc", doc, usage)
            yield counter("vllm:gpu_prefix_cache_queries", "GPU prefix cache queries, in terms of number of queried tokens.", queries)
            yield counter("vllm:gpu_prefix_cache_hits", "GPU prefix cache hits, in terms of number of cached tokens.", hits)
        if v >= Version("0.9.0"):
            yield counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", queries)
            yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", hits)
        if v >= Version("0.11.1"):
            yield counter(
                "vllm:external_prefix_cache_queries",
                "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
                ext_queries,
            )
            yield counter(
                "vllm:external_prefix_cache_hits",
                "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
                ext_hits,
            )
        if v >= Version("0.16.0"):
            yield counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", hits)
        if s.offload_metric:
            yield gauge(
                "vllm:kv_offload_cpu_cache_usage_perc",
                "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = saturated).",
                0.0,
            )
