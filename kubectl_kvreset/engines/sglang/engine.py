"""SGLang as an :class:`~kubectl_kvreset.engines.base.Engine`. Pure: no I/O.

Facts (sgl-project/sglang, ``python/sglang/srt/``):

* ``POST /flush_cache`` (also ``GET``; ``entrypoints/http_server.py``), query ``timeout`` (seconds,
  ``float >= 0``, default 0: refuse at once when requests run). 200 ``Cache flushed.`` (plain text,
  no content type) when the radix tree and the HiCache host pool were emptied; 400 ``Flush cache
  failed.`` (requests running, no timeout), ``Timed out waiting for idle state.``, ``Another
  flush_cache is already in progress.`` (``managers/scheduler_components/flush_wrapper.py``); a
  query that does not validate is FastAPI's 422/400 JSON ``detail``. Not gated by a dev mode.
* Auth (``utils/auth.py``): ``/flush_cache`` is ADMIN_OPTIONAL: the ``--admin-api-key`` when set,
  else the ``--api-key`` when set, else open; a missing or wrong key gets 401 ``{"error":
  "Unauthorized"}``. ``/server_info`` stays open (``version``, ``dp_size``, the server args).
* With ``--dp-size`` > 1 the tokenizer returns the first rank's reply only
  (``managers/tokenizer_control_mixin.py``; sglang issue #39562): a 200 does not say the other
  ranks flushed, so it is ``unconfirmed``.
* HiCache (``--enable-hierarchical-cache``): the host tier is emptied by the flush; the storage
  tier (``--hicache-storage-backend``) is not. ``POST /hicache/storage-backend/clear`` empties it
  but the file backend deletes every file of its directory, every model's (``mem_cache/hicache_storage.py``),
  so it is never called here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from ...tiers import KVLayout, Tier, TierKind
from ..base import ConfigReader, Engine, ResetAnswer, ResetOutcome, ServeConfig, TierReset
from .cmdline import SglangConfig, parse_container

__all__ = ["HICACHE_CONNECTOR", "SglangEngine", "storage_left_reason"]

#: The connector name of SGLang's HiCache tiers in the layout.
HICACHE_CONNECTOR = "sglang-hicache"

#: The 400 bodies that mean "requests were running: not flushed" (retried until the busy timeout).
BUSY_BODIES = ("Flush cache failed.", "Timed out waiting for idle state.",
               "Another flush_cache is already in progress.")


def storage_left_reason(backend: str) -> str:
    """Why the HiCache storage tier on ``backend`` stays (and what empties it)."""
    return (f"SGLang's /flush_cache does not empty the HiCache storage tier ({backend} backend); "
            "POST /hicache/storage-backend/clear would, but it deletes every model's entries on that backend "
            "(the file backend deletes every file of its directory), so the plugin does not call it: delete this "
            "model's entries on the backend, or clear the backend when no other server uses it")


class SglangEngine(Engine):
    """SGLang's HTTP server (``python3 -m sglang.launch_server``, ``sglang serve``):
    ``POST /flush_cache?timeout=N``; ``GET /server_info`` for its version; no dev mode."""

    name = "sglang"
    version_route = "/server_info"
    reset_route = "/flush_cache"
    live_config_route = None
    dev_mode_env = None
    step_codes = (("POST /flush_cache", "flush"),)

    def server_config(self, container: Mapping[str, Any], env: Mapping[str, str],
                      config_reader: ConfigReader | None = None) -> ServeConfig | None:
        """:func:`.cmdline.parse_container` (raises :class:`~kubectl_kvreset.engines.base.ServerCommandError`)."""
        return parse_container(container, env)

    def kv_layout(self, config: ServeConfig, env: Mapping[str, str]) -> KVLayout:
        """The GPU radix cache; with HiCache its host tier (CPU) and, with a storage backend,
        its storage tier (SHARED, store ``hicache-<backend>``)."""
        tiers = [Tier(TierKind.GPU, None, None)]
        connectors: tuple[str, ...] = ()
        if isinstance(config, SglangConfig) and config.hierarchical_cache:
            connectors = (HICACHE_CONNECTOR,)
            tiers.append(Tier(TierKind.CPU, HICACHE_CONNECTOR, None))
            if config.storage_backend:
                tiers.append(Tier(TierKind.SHARED, HICACHE_CONNECTOR, None, tier_type=config.storage_backend,
                                  store=f"hicache-{config.storage_backend}"))
        return KVLayout(connectors, tuple(tiers), None)

    def tier_resets(self, layout: KVLayout, release: Version | None) -> tuple[TierReset, ...] | None:
        """GPU and host tiers emptied by ``/flush_cache``; the storage tier left
        (:func:`storage_left_reason`)."""
        out: list[TierReset] = []
        for tier in layout.tiers:
            if tier.kind is TierKind.GPU:
                out.append(TierReset(True, "/flush_cache empties the radix cache "
                                     "(sglang srt/managers/scheduler.py flush_cache)", None))
            elif tier.kind is TierKind.CPU:
                out.append(TierReset(True, "/flush_cache empties the HiCache host pool too "
                                     "(sglang srt/mem_cache/hiradix_cache.py reset)", None))
            else:
                out.append(TierReset(False, storage_left_reason(tier.tier_type or "storage"), None))
        return tuple(out)

    def read_version(self, body: bytes) -> str | None:
        """``version`` of the ``/server_info`` JSON, or None."""
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return None
        version = doc.get("version") if isinstance(doc, dict) else None
        return version.strip() or None if isinstance(version, str) else None

    def release(self, version: str | None) -> Version | None:
        """``0.5.23`` -> 0.5.23; ``0.5.23.post1`` and dev builds count as their release."""
        if not version:
            return None
        try:
            parsed = Version(version)
        except InvalidVersion:
            return None
        return Version(parsed.base_version)

    def busy_query(self, busy_timeout_s: float) -> list[tuple[str, str]]:
        """``timeout`` = the busy timeout: the server waits that long for its requests to end."""
        return [("timeout", f"{max(busy_timeout_s, 0.0):g}")]

    def reset_headers(self, config: ServeConfig, keys: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """``Authorization: Bearer KEY`` with the key ``/flush_cache`` asks for, when known (from
        the spec, or read from its Secret into ``keys``, keyed by flag)."""
        key = config.reset_key if isinstance(config, SglangConfig) else None
        value = None if key is None else (key.value or keys.get(key.flag))
        return (("Authorization", f"Bearer {value}"),) if value else ()

    def read_reset_answer(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> ResetAnswer:
        """200 cleared; the busy 400s busy; 401 refused (which key: :meth:`read_reset_answer_for`);
        422/other 400 bad request; 5xx server error (retryable); else unexpected."""
        text = body.decode("utf-8", "replace").strip()
        if status == 200:
            return ResetAnswer(ResetOutcome.CLEARED, "SGLang: cache flushed", False)
        if status == 400 and any(text.startswith(b) for b in BUSY_BODIES):
            return ResetAnswer(ResetOutcome.BUSY, f"SGLang answered busy: {text[:120]}", True)
        if status == 401:
            return ResetAnswer(ResetOutcome.BAD_REQUEST, "SGLang refused the request (401 Unauthorized)", False)
        if status in (400, 405, 422):
            return ResetAnswer(ResetOutcome.BAD_REQUEST, f"SGLang refused the request ({status}): {text[:200]}", False)
        if status == 404:
            return ResetAnswer(ResetOutcome.UNEXPECTED, "404: no /flush_cache on this port (not an SGLang server?)",
                               False)
        if status >= 500:
            return ResetAnswer(ResetOutcome.SERVER_ERROR, f"SGLang answered {status}: {text[:200]}", True)
        return ResetAnswer(ResetOutcome.UNEXPECTED, f"SGLang answered {status}: {text[:200]}", False)

    def read_reset_answer_for(self, config: ServeConfig, status: int, body: bytes,
                              headers: Mapping[str, str] | None = None) -> ResetAnswer:
        """:meth:`read_reset_answer`, told by the command line which key a 401 wanted and that a
        200 from a data-parallel server vouches for its first rank only."""
        answer = self.read_reset_answer(status, body, headers)
        sg = config if isinstance(config, SglangConfig) else None
        if sg is None:
            return answer
        if status == 401:
            key = sg.reset_key
            if key is None:
                need = "an API key the pod spec does not show (--admin-api-key or --api-key)"
            elif key.value is None and key.secret is not None:
                need = (f"the {key.flag} from Secret {key.secret[0]} key {key.secret[1]}, which could not be read "
                        "(get on that Secret is needed) or is not the server's")
            elif key.value is None:
                need = f"the {key.flag}, whose value the pod spec does not hold ({key.unread})"
            else:
                need = f"the {key.flag} of the pod spec, which the server did not accept"
            return ResetAnswer(ResetOutcome.BAD_REQUEST, f"SGLang refused the request (401 Unauthorized): it needs "
                               f"{need}", False)
        if answer.outcome is ResetOutcome.CLEARED and sg.dp_size > 1:
            return ResetAnswer(ResetOutcome.UNCONFIRMED, (
                f"SGLang answered 200 for --dp-size {sg.dp_size}, but only the first rank's reply is returned "
                "(sglang issue #39562): a busy rank keeps its cache; not confirmed for every rank"), False)
        return answer

    def request_counts(self, metrics: str) -> dict[str, tuple[int, int]] | None:
        """``sglang:num_running_reqs`` / ``sglang:num_queue_reqs`` per ``dp_rank`` label (gauges,
        sglang ``srt/observability/metrics_collector.py``); None without them (metrics off)."""
        from ...lazyimport import prometheus_parser

        text_string_to_metric_families = prometheus_parser().text_string_to_metric_families

        counts: dict[str, list[int]] = {}
        seen = False
        for family in text_string_to_metric_families(metrics):
            for sample in family.samples:
                slot = {"sglang:num_running_reqs": 0, "sglang:num_queue_reqs": 1}.get(sample.name)
                if slot is not None:
                    seen = True
                    counts.setdefault(sample.labels.get("dp_rank", ""), [0, 0])[slot] += int(sample.value)
        return {k: (v[0], v[1]) for k, v in counts.items()} if seen else None

    def secret_keys(self, config: ServeConfig) -> tuple[tuple[str, str, str], ...]:
        """The reset key's Secret, when the spec takes it from one."""
        key = config.reset_key if isinstance(config, SglangConfig) else None
        if key is None or key.value is not None or key.secret is None:
            return ()
        return ((key.flag, *key.secret),)
