"""The OpenAI-style and introspection endpoints of the fake vLLM server (tests/sim/fakevllm.py):
``/v1/models``, completions (plain and streamed), ``/openapi.json``, ``/server_info``, ``/metrics``."""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

from packaging.version import Version
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from . import vllm032
from .fakemetrics import (
    _engine_values,
    _MetricsCollector,
    _PerEngine,
)
from .fakevllmbase import (
    _SSE,
    Response,
    StreamBody,
    _json,
    _literal_error,
    _prompt_tokens,
)
from .kvtiers import EngineCache, salt_error


class FakeVLLMEndpoints:
    """Endpoints of one fake vLLM server (a mixin of :class:`tests.sim.fakevllm.FakeVLLM`)."""

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

    def _completion(self, body: bytes, *, chat: bool, headers: dict[str, str] | None = None) -> Response:
        """A canned completion. Prefill on the engine :meth:`_engine_of` picks
        (:meth:`tests.sim.kvtiers.EngineCache.prefill`: block-aligned hits per tier, the salt, the
        counters). The snapshot's ``prefix_cache_blocks`` grows by 16 per request (and the CPU
        tier's by 16). ``"stream": true`` answers server-sent events, one token per chunk
        (``max_tokens``, default 16), as a :class:`StreamBody`; the request runs while it is
        read. A ``cache_salt`` vLLM refuses is its 400."""
        tokens = _prompt_tokens(body, chat)
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        refused = salt_error(doc.get("cache_salt"))
        if refused is not None:
            return _json(400, {"error": {"message": refused, "type": "BadRequestError", "param": "cache_salt",
                                         "code": 400}})
        salt = doc.get("cache_salt")
        stream = doc.get("stream") is True
        try:
            max_tokens = max(1, int(doc.get("max_tokens") or doc.get("max_completion_tokens") or 16))
        except (TypeError, ValueError):
            max_tokens = 16
        index = self._engine_of(headers or {})
        with self._lock:
            c = self._c
            c.completion_calls += 1
            self.completions_by_engine[index] += 1
            engine = self._engines[index]
            cached, _split = engine.prefill(tokens, self.block_size, salt if isinstance(salt, str) else None,
                                            caching=self.overrides.get("prefix_caching", True) is not False)
            c.prompt_tokens += len(tokens)
            c.prefix_cache_blocks += 16
            if self.cpu_tier:
                c.offload_cpu_blocks += 16
            n = c.completion_calls
        created = int(time.time())
        rid = f"cmpl-sim-{self.port}-{n}"
        if stream:
            return self._stream(rid, created, chat, max_tokens, engine)
        with self._lock:
            self._c.generation_tokens += 1
            self._c.finished_stop += 1
        if chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": "ok"},
                                      "finish_reason": "stop"}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": "ok", "finish_reason": "stop"}
            obj = "text_completion"
        details = ({"cached_tokens": cached, "created_cache_tokens": None, "multimodal_tokens": None}
                   if self.overrides.get("prompt_tokens_details") else None)
        return _json(200, {
            "id": rid, "object": obj, "created": created, "model": self.served_model_name,
            "choices": [choice], "usage": {"prompt_tokens": len(tokens), "total_tokens": len(tokens) + 1,
                                           "completion_tokens": 1, "prompt_tokens_details": details},
        })

    def _stream(self, rid: str, created: int, chat: bool, n_tokens: int, engine: EngineCache) -> Response:
        obj = "chat.completion.chunk" if chat else "text_completion"
        parts = []
        for i in range(n_tokens):
            finish = "length" if i == n_tokens - 1 else None
            if chat:
                choice: dict[str, Any] = {"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": f" w{i}", "logprobs": None, "finish_reason": finish,
                          "stop_reason": None}
            chunk = {"id": rid, "object": obj, "created": created, "model": self.served_model_name,
                     "choices": [choice]}
            parts.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
        parts.append(b"data: [DONE]\n\n")
        pace = int(self.overrides.get("token_delay_ms", 10) or 0) / 1000.0

        def start() -> None:
            with self._lock:
                engine.running += 1

        def end() -> None:
            with self._lock:
                engine.running -= 1
                self._c.generation_tokens += n_tokens
                self._c.finished_length += 1

        return 200, list(_SSE), StreamBody(parts, pace, start, end)

    def _openapi(self) -> Response:
        """``/openapi.json``: 0.32.0's document (:func:`tests.sim.vllm032.openapi`) from 0.32.0 on;
        before, the same form listing the routes this fake serves."""
        if self.v >= Version("0.32.0"):
            return _json(200, vllm032.openapi(self.dev_mode))
        doc = vllm032.openapi(False)
        doc["paths"] = {}
        for path, (methods, _h) in sorted(self._routes().items()):
            if path == "/openapi.json":
                continue
            ops: dict[str, Any] = {m.lower(): {"responses": {"200": {"description": "Successful Response"}}}
                                   for m in sorted(methods - {"HEAD"})}
            if path == "/reset_prefix_cache" and self.v >= Version("0.12.0"):
                names = ["reset_running_requests"] + (["reset_external"] if self.v >= Version("0.13.0") else [])
                ops["post"]["parameters"] = [
                    {"name": n, "in": "query", "required": False, "schema": {"type": "boolean", "default": False}}
                    for n in names
                ]
            doc["paths"][path] = ops
        return _json(200, doc)

    def _server_info(self, query: str) -> Response:
        """``GET /server_info`` (dev mode): ``config_format`` ``text`` (default) or ``json``
        from 0.11.0, anything else a 400 naming ``query.config_format``; ``vllm_env`` and
        ``system_env`` from 0.14.0 (the dev routes' ``/server_info`` of those wheels). Shapes follow 0.32.0
        (:mod:`tests.sim.vllm032`; older releases are served the same shape)."""
        fmt = "text"
        for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
            if key == "config_format":
                fmt = value
        if self.v < Version("0.11.0"):
            fmt = "text"
        elif fmt not in ("text", "json"):
            return _literal_error("config_format", fmt, ("text", "json"))
        env = dict(self.env)
        env["VLLM_SERVER_DEV_MODE"] = env.get("VLLM_SERVER_DEV_MODE", "1")
        doc: dict[str, Any] = {
            "vllm_config": vllm032.config_text(self.model, self.served_model_name) if fmt == "text"
            else vllm032.config_json(self.model, self.served_model_name, self._kv_transfer_config()),
        }
        if self.v >= Version("0.14.0"):
            doc["vllm_env"] = vllm032.vllm_env(env)
            doc["system_env"] = dict(vllm032.SYSTEM_ENV, vllm_version=self.version)
        return _json(200, doc)

    def _kv_transfer_config(self) -> dict[str, Any] | None:
        if self.kv_transfer_config is not None:
            return self.kv_transfer_config
        if not self.connectors:
            return None
        if len(self.connectors) == 1:
            return {"kv_connector": self.connectors[0].name, "kv_role": "kv_both"}
        return {"kv_connector": "MultiConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"connectors": [
                    {"kv_connector": c.name, "kv_role": "kv_both"} for c in self.connectors]}}

    # ------------------------------------------------------------------ metrics
    def _metrics(self) -> Response:
        with self._lock:
            self._c.metrics_calls += 1
            e0 = self._engines[0]
            tokens = (e0.queries, e0.hits, e0.ext_queries, e0.ext_hits)
            per_engine = {label: _engine_values(eng)
                          for label, eng in zip(self.engine_labels, self._engines, strict=True)}
            live = {"running": float(e0.running), "preemptions": float(self._c.preemptions),
                    "prompt": self._c.prompt_tokens, "generation": self._c.generation_tokens,
                    "length": float(self._c.finished_length), "stop": float(self._c.finished_stop)}
        status = self.overrides.get("metrics_status")
        with self._lock:
            calls = self._c.metrics_calls
        if int(self.overrides.get("metrics_fail_first", 0) or 0) >= calls:
            status = 500   # a transient failure: the first N scrapes answer 500
        if status is not None and int(status) != 200:
            return int(status), [("content-type", "text/plain; charset=utf-8")], b"Internal Server Error"
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_PerEngine(_MetricsCollector(self, tokens, live), self.engine_labels,
                                     multiprocess=self.multiprocess, served=live["prompt"] > 0,
                                     per_engine=per_engine))
        body = generate_latest(registry)
        bloat = int(self.overrides.get("metrics_bloat_mb", 0) or 0)
        if bloat > 0:
            # a hostile or broken server: valid exposition text, one 1 MB served model name per
            # sample, as many samples as make the body about ``bloat`` MB
            line = b'vllm:num_requests_running{engine="0",model_name="' + b"m" * (1 << 20) + b'"} 0.0\n'
            body += line * max(1, (bloat << 20) // len(line))
        return 200, [("content-type", CONTENT_TYPE_LATEST)], body
