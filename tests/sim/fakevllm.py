"""A fake vLLM OpenAI-compatible server for one API port, behaving like the release it claims.

Every behaviour here was read from vLLM's release wheels (PyPI ``vllm==X``; the paths are
the same in ``vllm-project/vllm``):

- ``POST /reset_prefix_cache``: dev-mode only; query parameters per release (0.8.x-0.11.0
  ``device``, vllm PR #15003; 0.12 ``reset_running_requests``, vLLM PR #28827; >= 0.13 also
  ``reset_external``, vLLM PR #27170; unknown parameters ignored; a bad boolean -> 400 with vLLM's
  error body); body per release (empty 200 before 0.26, ``{"success":bool}`` from 0.26, vLLM
  PR #46893); ``success:false`` while blocks are held unless ``reset_running_requests`` preempts; a
  forced reset that still fails -> 500 (JSON body from 0.18,
  ``vllm/entrypoints/serve/exception_handling/``; Starlette's plain text before). The connector
  is reset even when the local reset fails. The route: ``vllm/entrypoints/openai/api_server.py``
  up to 0.13, ``vllm/entrypoints/serve/cache/api_router.py`` 0.14-0.22,
  ``vllm/entrypoints/serve/dev/cache/api_router.py`` from 0.23; the engine side
  ``vllm/v1/core/sched/scheduler.py::reset_prefix_cache`` and ``reset_connector_cache``.
- ``VLLM_SERVER_DEV_MODE`` parsed as ``bool(int(value))`` (``vllm/envs.py``); a bad value
  crashes startup.
- ``/reset_mm_cache`` (>= 0.11.1), ``/reset_encoder_cache`` (>= 0.16.0): dev-only, empty 200.
- ``/health`` (empty 200), ``/version`` (``{"version": ...}``), ``/load``
  (``vllm/entrypoints/serve/instrumentator/health.py``, ``basic.py``; ``api_server.py`` earlier).
- ``/metrics`` families per release (``vllm/v1/metrics/loggers.py``), labels ``model_name`` and
  ``engine``; the usage gauge does not move on reset (``vllm/v1/core/block_pool.py::get_usage``).
- what ``reset_external=true`` clears per connector/spec/release: each connector's
  ``reset_cache`` hook (``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` and the
  connectors'; the releases and files per tier are in docs/reset-rules.md).

Checked against the real 0.32.0 CPU build by the referee suite (``tests/referee``), which also
fixed: the 400 message text (``loc`` dotted), ``/openapi.json``, ``/server_info`` (text, json, a
bad ``config_format``), 0.32.0's ``/metrics`` families, streamed completions during which a
reset fails (or preempts), and prefix-cache hits counted by prompt content. Settled from the
installed 0.32.0 sources:

- **Data-parallel aggregation.** One API server's reset answer is the AND over every engine it
  manages: ``vllm/v1/engine/core_client.py::AsyncMPClient.reset_prefix_cache_async`` returns
  ``all(await self.call_utility_all_async("reset_prefix_cache", ...))``, and neither
  ``DPAsyncMPClient`` nor ``DPLBAsyncMPClient`` overrides it (``DPLBAsyncMPClient`` overrides
  only ``call_utility_async``, "only the result from the first engine", which other utilities
  use). ``vllm/v1/engine/async_llm.py::AsyncLLM.reset_prefix_cache`` calls it;
  ``vllm/entrypoints/serve/dev/cache/api_router.py::reset_prefix_cache`` wraps it as
  ``{"success": bool(success)}``. So from 0.32.0 (the 0.33.0 wheel's ``core_client.py`` does
  the same; 0.29-0.31 stay unread) one busy engine makes the answer ``false``. Up to 0.28
  (the 0.28.0 wheel's ``core_client.py``) the reset went through ``call_utility_async``,
  which under internal DP load balancing fans out to every engine and answers engine 0's
  result alone; this fake answers so below 0.32.0. ``engines`` > 1 models several engines behind one API
  port (``--data-parallel-size`` without external load balancing), each with its own blocks
  and busy state (override ``busy_engines``), each reset unless it is busy.
- **MooncakeStoreConnector.** Its ``reset_cache`` runs ``remove_all`` in 0.32.0:
  ``vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/connector.py::
  MooncakeStoreConnector.reset_cache`` (scheduler role) calls ``scheduler.py::
  MooncakeStoreScheduler.reset_store``, whose ``worker.py::LookupKeyClient.reset`` sends
  ``RESET_MSG`` to worker rank 0, where
  ``worker.py::LookupKeyServer`` drains the send queue and calls
  ``store.remove_all(force=True)``; True on the worker's ACK, False on NACK or RPC error (then
  the reset answers ``success:false``, ``v1/core/sched/scheduler.py::reset_connector_cache``).
  The hook exists from 0.23.0 (vllm PR #42694; docs/reset-rules.md). Here it is
  ``store_hook`` (tests/sim/mooncakestore.py): where the pod's ``MOONCAKE_CONFIG_PATH`` names a
  real master of the cluster, ``reset_external=true`` empties it through the master's admin
  ``POST /api/v1/remove_all?force=true`` (the stand-in for the store client's ``remove_all``),
  so a test reads what was really removed; without a master nothing is called and the hook
  counts as success.
- **LMCacheMPConnector.** vLLM 0.32.0 loads LMCache's own class for that name unless
  ``LMCACHE_USE_UPSTREAM_MP`` is set (``.../kv_connector/v1/lmcache_mp_connector.py::
  _resolve_lmcache_mp_connector``), and LMCache 0.5.6's ``reset_cache`` clears the MP server's
  L1 (seen on the real CPU build). Here it is ``mp_hook`` (tests/sim/mpstore.py): where the
  connector's ``lmcache.mp.host`` names a server this cluster can reach, ``reset_external=true``
  clears its L1 through the server's HTTP ``POST /cache/clear``; the hook is modelled from 0.13
  (``reset_external``), lmcache 0.5.6 in the image assumed.
- **No connector** counts as success (``reset_connector_cache`` returns True).

This module holds the server and its reset; its endpoints are in tests/sim/fakevllmapi.py, its
metrics in tests/sim/fakemetrics.py, the shared pieces (response shape, errors, streamed body)
in tests/sim/fakevllmbase.py.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Iterable
from typing import Any

from packaging.version import Version

from . import vllm032
from .connectorinfo import ConnectorInfo
from .fakevllmapi import FakeVLLMEndpoints
from .fakevllmbase import (
    _FALSE,
    _TRUE,
    BLOCK_SIZE,
    EXTERNAL_STORES,
    Response,
    StreamBody,
    _Counters,
    _json,
    _not_found,
    _validation_error,
    dev_mode_state,
    parse_version,
    reset_clears_cpu_tier,
)
from .kvtiers import EngineCache, FsBlocks
from .mooncakestore import MooncakeStoreHook
from .mpstore import LMCacheMPHook

__all__ = [
    "BLOCK_SIZE",
    "FakeVLLM",
    "Response",
    "StreamBody",
    "dev_mode_state",
    "parse_version",
    "reset_clears_cpu_tier",
]

"""(HTTP status, headers as (name, value) pairs, body)."""

"""Tokens per KV block of the fake (vLLM's GPU default; the CPU build uses 128). Prefix-cache
hits count whole blocks only, as ``vllm/v1/core/kv_cache_manager.py`` does."""


class FakeVLLM(FakeVLLMEndpoints):
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
            ``reset_delay_ms`` (int), ``metrics_status`` (int), ``metrics_fail_first`` (int: the
            first N scrapes answer 500, later ones 200), ``warm_blocks`` (int, default
            512), ``warm_cpu_blocks`` (int, default 4 x warm_blocks), ``token_delay_ms`` (int,
            default 10: the pace of a streamed completion), ``behaves_as`` (str: the release whose
            routes and answers a build serves while ``/version`` says ``version``, e.g. ``dev``),
            ``busy_engines`` (``{engine: N}``: the first N reset calls find that engine's blocks
            held; engine 0 follows ``busy``), ``metrics_bloat_mb`` (int: a hostile ``/metrics``
            of about that many MB, whose extra samples carry a 1 MB ``model_name``).
        engines: engines (DP ranks) behind this port; engine 0 is the one ``busy`` and the
            other counters describe.
        first_engine: the DP rank of the first engine, its ``engine`` label on ``/metrics``
            (the others follow: ``first_engine + i``).
        tls: the server speaks HTTPS (``--ssl-certfile``).
        env: the server's environment (for ``/server_info``'s ``vllm_env``).
        kv_transfer_config: the resolved ``--kv-transfer-config`` object, for
            ``/server_info?config_format=json`` (None: no connector).
        store_hook: the ``MooncakeStoreConnector``'s store (module docstring), or None.
        mp_hook: the ``LMCacheMPConnector``'s MP server (module docstring), or None.
        fs_block_dirs: host directories of the FS offload tier's block files
            (:class:`tests.sim.kvtiers.FsBlocks`), empty without an FS tier.

    Each engine keeps its own blocks per tier (:class:`tests.sim.kvtiers.EngineCache`:
    ``cache_salt``, block-aligned hits, the hit counters by source). A completion goes to the
    engine its ``X-data-parallel-rank`` header names (the DP rank; vLLM's
    ``vllm/entrypoints/openai/engine/serving.py`` reads it for internal load balancing), else to
    the first engine. ``usage.prompt_tokens_details`` is ``{"cached_tokens": N, ...}`` with
    ``--enable-prompt-tokens-details`` (override ``prompt_tokens_details``), else null.

    A request is running while a streamed completion is being read (:class:`StreamBody`): a
    reset without ``reset_running_requests`` then answers ``success:false``; with it, every
    running request is preempted (``vllm:num_preemptions`` +1 each) and the request completes
    (``vllm/v1/core/sched/scheduler.py::reset_prefix_cache``, seen on the 0.32.0 CPU build).

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
        env: dict[str, str] | None = None,
        kv_transfer_config: dict[str, Any] | None = None,
        engines: int = 1,
        first_engine: int = 0,
        api_servers: int = 1,
        store_hook: MooncakeStoreHook | None = None,
        mp_hook: LMCacheMPHook | None = None,
        fs_block_dirs: Iterable[Any] = (),
    ) -> None:
        self.port = port
        self.store_hook = store_hook
        self.mp_hook = mp_hook
        self.engines = max(1, int(engines))
        #: the ``engine`` label of each engine on /metrics: its DP rank (``str(index)``)
        self.engine_labels = tuple(str(max(0, int(first_engine)) + i) for i in range(self.engines))
        #: several API server processes share one registry through prometheus_client's
        #: multiprocess mode (vLLM sets PROMETHEUS_MULTIPROC_DIR for them)
        self.multiprocess = int(api_servers) > 1
        self.version = version
        # a build whose /version says nothing usable (``dev``, a fork) may still have a
        # release's routes: ``behaves_as`` names that release
        self.v = parse_version(str((overrides or {}).get("behaves_as") or version))
        self.dev_mode = dev_mode
        self.model = model
        self.served_model_name = served_model_name or model
        self.connectors = list(connectors)
        self.overrides = dict(overrides or {})
        self.tls = tls
        self.env = dict(env or {})
        self.kv_transfer_config = kv_transfer_config
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
        #: tokens per KV block (``block_size`` override; the CPU build uses 128)
        self.block_size = int(self.overrides.get("block_size") or BLOCK_SIZE)
        host = any(c.cpu_tier for c in self.connectors)
        external = any(c.name in EXTERNAL_STORES for c in self.connectors)
        dirs = tuple(fs_block_dirs)
        self._engines = [EngineCache(host=set() if host else None, external=set() if external else None,
                                     fs=FsBlocks(dirs) if dirs else None) for _ in range(self.engines)]
        # Token counters only ever grow (they are Prometheus counters): the warm-up traffic.
        e0 = self._engines[0]
        e0.queries, e0.hits = float(warm * 16 * 2), float(warm * 16)
        e0.ext_queries = float(self._c.offload_cpu_blocks * 16 * 2)
        e0.ext_hits = float(self._c.offload_cpu_blocks * 16)
        e0.by_source["device"], e0.by_source["host"] = e0.hits, e0.ext_hits
        #: requests sent to each engine, by the ``X-data-parallel-rank`` header (engine index)
        self.completions_by_engine = [0] * self.engines
        busy_engines = {int(k): int(v or 0) for k, v in (self.overrides.get("busy_engines") or {}).items()}
        #: engines 1.. (engine 0 is ``self._c``): [prefix_cache_blocks, busy_left, reset_calls]
        self._others = [[warm, busy_engines.get(i, 0), 0] for i in range(1, self.engines)]
        self._total_blocks = max(4096, warm * 8)
        self._warm_usage_blocks = warm // 4
        self._created = time.time()

    # ------------------------------------------------------------------ state
    def snapshot(self) -> dict[str, Any]:
        """Counters for /sim/v1/state: role ``vllm``, reset_calls, last_reset_query,
        last_transport, prefix_cache_blocks, offload_cpu_blocks, reset_mm_calls,
        reset_encoder_calls, metrics_calls, plus version and dev_mode of this server;
        ``mooncake_resets``: each call of the MooncakeStoreConnector's reset hook
        (:meth:`~tests.sim.mooncakestore.MooncakeStoreHook.snapshot`); ``mp_resets``: the same for
        the LMCacheMPConnector's (:meth:`~tests.sim.mpstore.LMCacheMPHook.snapshot`)."""
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
                "mooncake_resets": self.store_hook.snapshot() if self.store_hook is not None else [],
                "mp_resets": self.mp_hook.snapshot() if self.mp_hook is not None else [],
                "engines": [{"engine": 0, "prefix_cache_blocks": c.prefix_cache_blocks, "reset_calls": c.reset_calls}]
                + [{"engine": i, "prefix_cache_blocks": e[0], "reset_calls": e[2]}
                   for i, e in enumerate(self._others, start=1)],
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
            return (502, [("content-type", "text/plain; charset=utf-8")],
                    b"tls: first record does not look like a TLS handshake")
        if scheme == "http" and self.tls:
            return 400, [("content-type", "text/plain; charset=utf-8")], b"Invalid HTTP request received."
        route = self._routes().get(path.rstrip("/") or "/")
        if route is None:
            return _not_found()
        allowed, handler = route
        if method not in allowed:
            return _json(405, {"detail": "Method Not Allowed"}, [("allow", ", ".join(sorted(allowed)))])
        if path.rstrip("/") in ("/v1/completions", "/v1/chat/completions"):
            return self._completion(body, chat=path.rstrip("/") == "/v1/chat/completions", headers=headers or {})
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
            "/openapi.json": ({"GET", "HEAD"}, lambda q, b, t: self._openapi()),
        }
        if self.dev_mode and v >= Version("0.32.0"):
            # listed by 0.32.0 (and in /openapi.json); the ones not modelled answer 501
            for path, methods in vllm032.DEV_ROUTES.items():
                routes[path] = (set(methods), lambda q, b, t: _json(501, {"detail": "Not modelled by the simulator"}))
        if self.dev_mode:
            routes["/server_info"] = ({"GET"}, lambda q, b, t: self._server_info(q))
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
        parsed = self._reset_params(query)
        if len(parsed) == 3:  # the 422 answer (a Response)
            return parsed  # type: ignore[return-value]
        params, flags = parsed  # type: ignore[misc]
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
            busy = c.busy_left > 0 or self._engines[0].running > 0
            if c.busy_left > 0:
                c.busy_left -= 1
            if busy and forced and self.overrides.get("busy_forced"):
                return self._internal_error(
                    "Call to reset_prefix_cache method failed: Failed to reset KV cache even when all the "
                    "running requests are preempted and moved to the waiting queue. This is likely due to "
                    "the presence of running requests waiting for remote KV transfer, which is not supported yet."
                )
            local_ok = (not busy) or forced
            if busy and forced:
                c.preemptions += self._engines[0].running
            if local_ok:
                c.prefix_cache_blocks = 0
                self._engines[0].device.clear()
            every_ok = self._reset_other_engines(forced) and local_ok
            if external:
                for conn in self.connectors:
                    if reset_clears_cpu_tier(conn, v):
                        c.offload_cpu_blocks = 0
                        for eng in self._engines:
                            if eng.host is not None:
                                eng.host.clear()
            # 0.32.0 ANDs every engine's answer; before, engine 0's alone (module docstring)
            success = every_ok if v >= Version("0.32.0") else local_ok
        store_cleared = False
        if external and v >= Version("0.23.0") and self.store_hook is not None \
                and any(conn.name == "MooncakeStoreConnector" for conn in self.connectors):
            # reset_connector_cache runs even when the local reset failed; False makes it fail
            store_cleared = self.store_hook.reset() is not False
            success = store_cleared and success
        if external and v >= Version("0.13.0") and self.mp_hook is not None:
            store_cleared = self.mp_hook.reset() is not False
            success = store_cleared and success
        if store_cleared:
            with self._lock:
                for eng in self._engines:
                    if eng.external is not None:
                        eng.external.clear()
        if v >= Version("0.26.0"):
            return _json(200, {"success": success})
        return 200, [], b""

    def _reset_params(self, query: str) -> tuple[dict[str, str], dict[str, bool]] | Response:
        """``(query parameters, boolean flags)`` of a reset, the flags this release takes
        (``reset_running_requests`` from 0.12, ``reset_external`` from 0.13); a flag that is no
        boolean answers FastAPI's 422."""
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
        return params, flags

    def _reset_other_engines(self, forced: bool) -> bool:
        """Engines 1.. each get the call and reset unless busy (or ``forced``, which preempts
        their running requests); True when every one reset. Called under the lock."""
        c = self._c
        every_ok = True
        for i, other in enumerate(self._others, start=1):
            other[2] += 1
            other_busy = other[1] > 0 or self._engines[i].running > 0
            if other[1] > 0:
                other[1] -= 1
            if other_busy and forced:
                c.preemptions += self._engines[i].running
            if not other_busy or forced:
                other[0] = 0
                self._engines[i].device.clear()
            every_ok = every_ok and (not other_busy or forced)
        return every_ok

    def _internal_error(self, message: str) -> Response:
        if self.v >= Version("0.18.0"):
            return _json(500, {"error": {"message": message, "type": "InternalServerError", "param": None,
                                         "code": 500}})
        return 500, [("content-type", "text/plain; charset=utf-8")], b"Internal Server Error"

    def _engine_of(self, headers: dict[str, str]) -> int:
        """The engine index a request goes to: its ``X-data-parallel-rank`` header (a DP rank
        among this server's ``engine`` labels), else the first engine."""
        rank = next((v for k, v in headers.items() if k.lower() == "x-data-parallel-rank"), None)
        if rank is not None and rank.strip() in self.engine_labels:
            return self.engine_labels.index(rank.strip())
        return 0


