"""A fake SGLang HTTP server (``python3 -m sglang.launch_server``, ``sglang serve``), as a simulated
pod serves it on its ``--port`` (default 30000).

What it follows (sgl-project/sglang 0.5.23, ``python/sglang/srt/``; the bodies as a real server
answered them):

* ``POST``/``GET /flush_cache[?timeout=S]`` (``entrypoints/http_server.py``): idle -> 200, no
  content type, body :data:`FLUSHED`; requests running and no timeout -> 400 ``Flush cache
  failed.\\n``; with a timeout the server waits for idle up to S seconds, then 400 ``Timed out
  waiting for idle state.``; a second flush while one waits -> 400 ``Another flush_cache is already
  in progress.`` (``managers/scheduler_components/flush_wrapper.py``); a timeout that is not a
  number >= 0 -> 400 JSON. The flush empties the radix cache and the HiCache host tier, never the
  storage tier.
* Data parallel (``--dp-size N``): every rank flushes unless busy, but only rank 0's reply is
  returned (``managers/tokenizer_control_mixin.py``; sglang issue #39562): rank 1 busy keeps its
  cache behind a 200.
* Auth (``utils/auth.py``): ``/flush_cache`` wants the ``--admin-api-key`` when set, else the
  ``--api-key`` when set; ``/generate`` wants the ``--api-key``; a missing or wrong key -> 401
  ``{"error":"Unauthorized"}``. ``/health``, ``/metrics``, ``/server_info`` stay open.
* ``GET /server_info`` (and ``/get_server_info``): ``version``, ``dp_size`` and the server args.
* ``POST /generate`` ``{"text": T | "input_ids": [...], "routed_dp_rank": R}``:
  ``meta_info.cached_tokens`` (with ``--enable-cache-report``): 0 the first time a prompt is seen on
  a rank, its tokens minus one after (a token is a word or an id here); ``cached_tokens_details``
  ``{"device", "host"}``, null when nothing was cached.
* ``POST /hicache/storage-backend/clear`` without a storage backend: 400, body :data:`CLEARED`;
  with the file backend (admin key when set) every ``*.bin`` of its directory is deleted, every
  model's (``mem_cache/hicache_storage.py`` ``HiCacheFile.clear``), 200 :data:`CLEARED`.
* The file backend (``--hicache-storage-backend file``): the pod gives the host directory of
  ``SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR`` (default ``/tmp/hicache``); the fake writes
  ``warm_storage_files`` page files there at start, named as 0.5.23 names them
  (``<sha256 hex>_<served model, / as ->_<tp rank>_<tp size>.bin``), and its storage tier holds 8
  tokens per such file present, so a deletion from outside empties it.
* ``GET /metrics`` (with ``--enable-metrics``): ``sglang:cached_tokens_total{cache_source=...}``
  (counters), ``sglang:num_running_reqs``, ``sglang:num_queue_reqs`` (gauges, per ``dp_rank``).

Scenario overrides (a pod's ``overrides``): ``warm_tokens`` (radix tokens per rank at start,
default 64; ``cold`` 0), ``warm_host_tokens`` / ``warm_storage_tokens`` (HiCache tiers, default
32 when enabled), ``busy_seconds`` (rank 0 runs requests for that long from the first flush or metrics read),
``busy_ranks`` (``{rank: seconds}``, the same per rank), ``prompt_seen`` (the first ``/generate`` on
rank 0 is a repeat: it reports its tokens minus one cached).

:func:`answer` answers one ``(method, path, query, auth)`` of a server built from an argv with
``(status, content_type, body)``: the referee replays recorded real answers against it.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from .fakevllm import Response

__all__ = ["FLUSHED", "FakeSGLang", "SglangArgs", "answer", "sglang_args"]

FLUSHED = (b"Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
           b"requests, the operation will not be performed.)\n")
FAILED = b"Flush cache failed.\n"
TIMED_OUT = b"Timed out waiting for idle state."
IN_PROGRESS = b"Another flush_cache is already in progress."
CLEARED = b"Hierarchical cache storage backend cleared.\n"
UNAUTHORIZED = b'{"error":"Unauthorized"}'
VERSION = "0.5.23"

_BOOLEAN = {"enable-hierarchical-cache", "enable-cache-report", "enable-metrics", "trust-remote-code",
            "disable-radix-cache", "disable-cuda-graph", "enable-dp-attention", "skip-server-warmup"}


@dataclass(frozen=True)
class SglangArgs:
    """The flags of one SGLang server the fake needs (``--port`` ... ``--enable-metrics``)."""

    port: int = 30000
    host: str = "127.0.0.1"
    model: str | None = None
    served_model_name: str | None = None
    dp_size: int = 1
    api_key: str | None = None
    admin_key: str | None = None
    hicache: bool = False
    storage_backend: str | None = None
    cache_report: bool = False
    metrics: bool = False
    tls: bool = False
    tp_size: int = 1
    extra_config: str | None = None
    argv: tuple[str, ...] = field(default=(), repr=False)


def _entry(words: Sequence[str]) -> int | None:
    """Index of the first flag when ``words`` start SGLang's server, else None."""
    for i, w in enumerate(words):
        base = w.rsplit("/", 1)[-1]
        if base == "sglang" and i + 1 < len(words) and words[i + 1] == "serve":
            return i + 2
        if w == "-m" and i + 1 < len(words) and words[i + 1] == "sglang.launch_server":
            return i + 2
    return None


def sglang_args(argv: Sequence[str] | None) -> SglangArgs | None:
    """The :class:`SglangArgs` of an argv that starts SGLang's server (directly, or as the one
    command of a ``bash -c`` script, split the shell's way), else None."""
    if not argv:
        return None
    words = [str(a) for a in argv]
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in ("sh", "bash") and "-c" in words:
        import shlex
        try:
            words = shlex.split(words[words.index("-c") + 1].replace("\\\n", " "), comments=True)
        except (ValueError, IndexError):
            return None
    first = _entry(words)
    if first is None:
        return None
    flags: dict[str, str | None] = {}
    rest = words[first:]
    i = 0
    while i < len(rest):
        w = rest[i]
        i += 1
        if w in ("&&", "||", ";", "|"):
            break
        if not w.startswith("--"):
            continue
        key, eq, value = w[2:].partition("=")
        key = {"model": "model-path", "dp": "dp-size", "tp": "tp-size"}.get(key.replace("_", "-"),
                                                                          key.replace("_", "-"))
        if eq:
            flags[key] = value
        elif key not in _BOOLEAN and i < len(rest) and not rest[i].startswith("--"):
            flags[key] = rest[i]
            i += 1
        else:
            flags[key] = None
    return SglangArgs(
        port=int(flags.get("port") or 30000), host=flags.get("host") or "127.0.0.1",
        model=flags.get("model-path"), served_model_name=flags.get("served-model-name"),
        dp_size=int(flags.get("dp-size") or 1), api_key=flags.get("api-key"), admin_key=flags.get("admin-api-key"),
        hicache="enable-hierarchical-cache" in flags, storage_backend=flags.get("hicache-storage-backend"),
        cache_report="enable-cache-report" in flags, metrics="enable-metrics" in flags,
        tp_size=int(flags.get("tp-size") or 1), extra_config=flags.get("hicache-storage-backend-extra-config"),
        tls=bool(flags.get("ssl-certfile") or flags.get("ssl-keyfile")), argv=tuple(words))


def _json(status: int, doc: Any) -> Response:
    return status, [("content-type", "application/json")], json.dumps(doc, separators=(",", ":")).encode()


def _text(status: int, body: bytes) -> Response:
    return status, [], body


class _Rank:
    """One DP rank: its radix cache (text -> tokens), host and storage tiers, busy deadline."""

    def __init__(self, warm: int, host: int, storage: int, busy_s: float) -> None:
        self.seen: dict[str, int] = {"<warm>": warm} if warm else {}
        self.host = host
        self.storage = storage
        self.busy_s = busy_s
        self.busy_until: float | None = None
        self.cached = {"device": 0, "host": 0, "storage": 0}

    def busy_left(self, now: float) -> float:
        if self.busy_s <= 0:
            return 0.0
        if self.busy_until is None:
            self.busy_until = now + self.busy_s
        return max(self.busy_until - now, 0.0)

    def tokens(self) -> int:
        return sum(self.seen.values())


class FakeSGLang:
    """One SGLang server on one port (module docstring); thread-safe. ``clock``/``sleep`` are
    replaceable for tests."""

    def __init__(self, args: SglangArgs, overrides: dict[str, Any] | None = None, *, version: str = VERSION,
                 clock: Any = time.monotonic, sleep: Any = time.sleep, storage_dir: Path | None = None,
                 seed: str = "") -> None:
        ov = dict(overrides or {})
        self.storage_dir = storage_dir if args.hicache and args.storage_backend == "file" else None
        self.args = args
        self.port = args.port
        self.version = version
        self.tls = args.tls
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        warm = 0 if ov.get("cold") else int(ov.get("warm_tokens", 64))
        host = int(ov.get("warm_host_tokens", 32)) if args.hicache and not ov.get("cold") else 0
        storage = int(ov.get("warm_storage_tokens", 32)) if args.hicache and args.storage_backend else 0
        busy = {int(k): float(v) for k, v in (ov.get("busy_ranks") or {}).items()}
        busy.setdefault(0, float(ov.get("busy_seconds", 0) or 0))
        self.ranks = [_Rank(warm, host, storage, busy.get(r, 0.0)) for r in range(max(args.dp_size, 1))]
        self._flushing = False
        self._prompt_seen = bool(ov.get("prompt_seen"))
        self.flush_calls = 0
        self._prompt_tokens = 0
        self._usage_gauge = 0.0
        self.flush_queries: list[str] = []
        self.auth_seen: list[str] = []
        if self.storage_dir is not None:
            self.storage_dir.mkdir(parents=True, exist_ok=True)   # HiCacheFile creates it at start
            for i in range(0 if ov.get("cold") else int(ov.get("warm_storage_files", 4))):
                key = hashlib.sha256(f"{seed}/{i}".encode()).hexdigest()
                (self.storage_dir / f"{key}{self.file_suffix}").write_bytes(b"\0" * 64)

    @property
    def file_suffix(self) -> str:
        """``_<model>_<tp rank 0>_<tp size>.bin``: what this server's page files end with."""
        name = "-".join((self.args.served_model_name or self.args.model or "").split("/"))
        return f"_{name}_0_{self.args.tp_size}.bin"

    def _storage(self, rank: _Rank) -> int:
        """Tokens in the storage tier: 8 per page file of this server present, with the file backend."""
        if self.storage_dir is None:
            return rank.storage
        try:
            return 8 * sum(1 for f in self.storage_dir.iterdir() if f.name.endswith(self.file_suffix))
        except OSError:
            return 0

    # ------------------------------------------------------------------ state
    def snapshot(self) -> dict[str, Any]:
        """Counters for /sim/v1/state (role ``sglang``; ``prefix_cache_blocks`` = radix tokens of
        every rank, as the vLLM fakes' field is read by generic checks)."""
        with self._lock:
            radix = [r.tokens() for r in self.ranks]
            return {"role": "sglang", "version": self.version, "dp_size": len(self.ranks),
                    "radix_tokens": radix, "host_tokens": [r.host for r in self.ranks],
                    "storage_tokens": [self._storage(r) for r in self.ranks], "cached_tokens": sum(radix),
                    "prefix_cache_blocks": sum(radix), "offload_cpu_blocks": sum(r.host for r in self.ranks),
                    "reset_calls": self.flush_calls, "flush_queries": list(self.flush_queries),
                    "auth_seen": list(self.auth_seen), "reset_mm_calls": 0, "reset_encoder_calls": 0,
                    "metrics_calls": 0}

    # ------------------------------------------------------------------ requests
    def _authorized(self, headers: dict[str, str], want: str | None) -> bool:
        if want is None:
            return True
        got = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        return got == f"Bearer {want}"

    def handle(self, method: str, path: str, query: str, headers: dict[str, str] | None = None, body: bytes = b"",
               *, scheme: str = "http", transport: str = "proxy") -> Response:
        """Answer one request as SGLang's FastAPI app does (module docstring). Never raises."""
        method, path, headers = method.upper(), path.rstrip("/") or "/", dict(headers or {})
        if scheme == "https" and not self.tls:
            return 502, [("content-type", "text/plain; charset=utf-8")], b"tls: first record does not look like TLS"
        if path == "/flush_cache":
            if method not in ("GET", "POST"):
                return _json(405, {"detail": "Method Not Allowed"})
            return self._flush(query, headers)
        if path in ("/health", "/health_generate") and method == "GET":
            return _text(200, b"")
        if path in ("/server_info", "/get_server_info") and method == "GET":
            return _json(200, self._server_info())
        if path in ("/model_info", "/get_model_info") and method == "GET":
            return _json(200, {"model_path": self.args.model, "is_generation": True})
        if path == "/hicache/storage-backend/clear" and method == "POST" and not self.args.storage_backend:
            return _text(400, CLEARED)  # without a storage backend: 400, and yet the "cleared." body
        if path == "/hicache/storage-backend/clear" and method == "POST" and self.storage_dir is not None:
            if not self._authorized(headers, self.args.admin_key or self.args.api_key):
                return _json(401, {"error": "Unauthorized"})
            for f in list(self.storage_dir.iterdir()):
                if f.name.endswith(".bin"):
                    f.unlink(missing_ok=True)   # every model's files (HiCacheFile.clear)
            return _text(200, CLEARED)
        if path == "/metrics" and method == "GET":
            if not self.args.metrics:
                return _json(404, {"detail": "Not Found"})
            return 200, [("content-type", "text/plain; version=0.0.4; charset=utf-8")], self._metrics().encode()
        if path == "/generate" and method == "POST":
            if not self._authorized(headers, self.args.api_key):
                return _json(401, {"error": "Unauthorized"})
            return self._generate(body)
        return _json(404, {"detail": "Not Found"})

    def _flush(self, query: str, headers: dict[str, str]) -> Response:
        want = self.args.admin_key or self.args.api_key
        with self._lock:
            self.flush_calls += 1
            self.flush_queries.append(query)
            self.auth_seen.append("ok" if self._authorized(headers, want) else "refused")
        if not self._authorized(headers, want):
            return 401, [("content-type", "application/json")], UNAUTHORIZED
        raw = (parse_qs(query).get("timeout") or ["0"])[-1]
        try:
            timeout = float(raw)
            error = None if timeout >= 0 else {"type": "greater_than_equal", "loc": ("query", "timeout"),
                                               "msg": "Input should be greater than or equal to 0", "input": raw,
                                               "ctx": {"ge": 0.0}}
        except ValueError:
            timeout, error = 0.0, {"type": "float_parsing", "loc": ("query", "timeout"),
                                   "msg": "Input should be a valid number, unable to parse string as a number",
                                   "input": raw}
        if error is not None:  # FastAPI's validation error as SGLang's handler words it
            message = (f"1 validation error:\n  {error!r}\n\n  File \".../site-packages/sglang/srt/entrypoints/"
                       f"http_server.py\", line 1025, in flush_cache\n    POST /flush_cache [{error!r}]")
            return _json(400, {"object": "error", "message": message, "type": "Bad Request", "param": None,
                               "code": 400})
        with self._lock:
            if self._flushing:
                return _text(400, IN_PROGRESS)
            self._flushing = True
        try:
            now = self._clock()
            with self._lock:
                lefts = [r.busy_left(now) for r in self.ranks]
            wait = min(max(lefts), timeout)
            if wait > 0 and timeout > 0:
                self._sleep(wait)
            results = []
            with self._lock:
                for rank, left in zip(self.ranks, lefts, strict=True):
                    ok = left <= 0 or (timeout > 0 and left <= timeout)
                    if ok:
                        rank.seen.clear()
                        rank.host = 0
                    results.append(ok)
        finally:
            with self._lock:
                self._flushing = False
        if results[0]:
            return _text(200, FLUSHED)  # only rank 0's reply is returned
        return _text(400, FAILED if timeout == 0 else TIMED_OUT)

    def _server_info(self) -> dict[str, Any]:
        a = self.args
        return {"version": self.version, "dp_size": len(self.ranks), "port": a.port, "host": a.host,
                "model_path": a.model, "served_model_name": a.served_model_name or a.model,
                "enable_hierarchical_cache": a.hicache, "hicache_storage_backend": a.storage_backend,
                "enable_cache_report": a.cache_report, "enable_metrics": a.metrics,
                "api_key": None if a.api_key is None else "<set>", "admin_api_key": None}

    def _generate(self, body: bytes) -> Response:
        try:
            doc = json.loads(body or b"{}")
            ids = doc.get("input_ids")
            text = " ".join(str(i) for i in ids) if isinstance(ids, list) else str(doc.get("text") or "")
            rank_no = int(doc.get("routed_dp_rank") or 0)
        except (ValueError, TypeError, AttributeError):
            return _json(400, {"error": {"message": "invalid request"}})
        if not 0 <= rank_no < len(self.ranks):
            return _json(400, {"error": {"message": f"routed_dp_rank {rank_no} out of range"}})
        tokens = max(len(text.split()), 1)
        with self._lock:
            rank = self.ranks[rank_no]
            seen = text in rank.seen or (self._prompt_seen and rank_no == 0)
            self._prompt_seen = False
            cached = tokens - 1 if seen else 0
            rank.seen[text] = tokens
            rank.cached["device"] += cached
            self._prompt_tokens += tokens
            self._usage_gauge = min(sum(r.tokens() for r in self.ranks) / 4096.0, 1.0)
        meta: dict[str, Any] = {"prompt_tokens": tokens, "completion_tokens": 1}
        if self.args.cache_report:
            meta["cached_tokens"] = cached
            meta["cached_tokens_details"] = {"device": cached, "host": 0} if cached else None
        return _json(200, {"text": " ok", "meta_info": meta})

    def _metrics(self) -> str:
        """The families the plugin reads, labelled as 0.5.23 labels them
        (``srt/observability/metrics_collector.py``): the tokenizer's counters
        ``sglang:cached_tokens_total{cache_source}`` and ``sglang:prompt_tokens_total`` with
        ``model_name`` and ``engine_type`` (one series for every rank), the scheduler's gauges with
        ``tp_rank``, ``pp_rank``, ``moe_ep_rank`` and, with data parallelism, ``dp_rank``. The usage
        gauges keep the value of the last ``/generate`` (a flush does not set them, as on the real
        server)."""
        model = self.args.served_model_name or self.args.model or ""
        common = f'engine_type="unified",model_name="{model}"'
        lines = ["# TYPE sglang:cached_tokens_total counter"]
        now = self._clock()
        with self._lock:
            for source in ("device", "host", "storage"):
                total = sum(r.cached[source] for r in self.ranks)
                lines.append(f'sglang:cached_tokens_total{{cache_source="{source}",{common}}} {float(total)}')
            lines.append("# TYPE sglang:prompt_tokens_total counter")
            lines.append(f"sglang:prompt_tokens_total{{{common}}} {float(self._prompt_tokens)}")

            def rank_labels(i: int) -> str:
                dp = f',dp_rank="{i}"' if len(self.ranks) > 1 else ""
                return f'{common},moe_ep_rank="0",pp_rank="0",tp_rank="0"{dp}'

            lines.append("# TYPE sglang:num_running_reqs gauge")
            lines += [f"sglang:num_running_reqs{{{rank_labels(i)}}} {1.0 if r.busy_left(now) > 0 else 0.0}"
                      for i, r in enumerate(self.ranks)]
            lines.append("# TYPE sglang:num_queue_reqs gauge")
            lines += [f"sglang:num_queue_reqs{{{rank_labels(i)}}} 0.0" for i in range(len(self.ranks))]
            lines.append("# TYPE sglang:token_usage gauge")
            lines += [f"sglang:token_usage{{{rank_labels(i)}}} {self._usage_gauge}" for i in range(len(self.ranks))]
        return "\n".join(lines) + "\n"


def answer(argv: Sequence[str], method: str, path: str, query: str = "", auth: str = "none",
           overrides: dict[str, Any] | None = None, body: Any = None) -> tuple[int, str | None, bytes]:
    """``(status, content_type, body)`` of one request to a fresh fake started with ``argv``;
    ``auth``: ``none`` (no header), ``admin`` (the ``--admin-api-key``, else the ``--api-key``),
    ``api`` (the ``--api-key``), ``wrong`` (another bearer token). The referee replays recorded
    real answers through it. ``body``: the request's JSON document (``/generate``), or None."""
    args = sglang_args(argv)
    if args is None:
        raise ValueError("argv does not start SGLang's server")
    server = FakeSGLang(args, overrides, sleep=lambda s: None)
    key = {"none": None, "admin": args.admin_key or args.api_key, "api": args.api_key, "wrong": "wrong-key"}[auth]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    data = json.dumps(body).encode() if body is not None else b""
    status, hdrs, out = server.handle(method, path, query, headers, data)
    content_type = next((v for k, v in hdrs if k.lower() == "content-type"), None)
    return status, content_type, out
