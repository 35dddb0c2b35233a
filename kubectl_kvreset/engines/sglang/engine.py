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
  so it is never called here. The file backend's pages are files named after the served model
  (:func:`file_name_regex`), so the store step deletes this server's files alone
  (:meth:`SglangEngine.file_tiers`); other backends' storage is left.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from ...tiers import KVLayout, Tier, TierKind
from ..base import (
    ConfigReader,
    Engine,
    EngineMetrics,
    FileTier,
    MetricsParseError,
    ResetAnswer,
    ResetOutcome,
    ServeConfig,
    TierReset,
)
from .cmdline import SglangConfig, parse_container

__all__ = ["FILE_STORE", "HICACHE_CONNECTOR", "SglangEngine", "file_model_name", "file_name_regex",
           "storage_left_reason"]

#: The store name of the HiCache file backend's pages (the tier's store and the StoreClear row's).
FILE_STORE = "hicache-file"
#: What every page file of the file backend ends with (``HiCacheFile._get_suffixed_key`` + ``.bin``).
FILE_SUFFIX = ".bin"
#: The page formats a host pool tags the model name with (sglang ``srt/managers/cache_controller.py``
#: ``storage_model_name``: ``<model>-<tag>``; ``mem_cache/pool_host/unified.py`` is the one that has one).
FORMAT_TAGS = ("unified-token-major",)
#: Gauges a flush does not reset (observed on 0.5.23; ``scheduler.py`` sets them at its batches).
STALE_GAUGES = ("sglang:token_usage", "sglang:num_used_tokens", "sglang:kv_used_tokens",
                "sglang:kv_evictable_tokens", "sglang:cache_hit_rate")
#: The pools other than the KV pool whose pages a hybrid model stores as ``<key>.<pool>`` (sglang
#: 0.5.23 ``srt/mem_cache/hicache_storage.py`` ``PoolName``, ``HiCacheFile._log_key``), as one
#: short expression (it travels in the exec request, which must stay under 8 KiB): a few names
#: more than 0.5.23 has (``deepseek_v4_c1_rope``), never one that goes on with an arbitrary word.
#: A pool a later release adds is not matched: its files are counted as other files, never taken.
POOLS = (r"mamba|swa|auxiliary_swa|indexer|draft(_indexer|_swa)?"
         r"|deepseek_v4_c(1|2|4|128)(_indexer)?(_scale|_rope|_state)?")


def file_model_name(config: SglangConfig) -> str | None:
    """The model name in the file backend's page names: the served model name (``--served-model-name``,
    which defaults to ``--model-path``: sglang ``srt/server_args.py``) with ``/`` made ``-``
    (``HiCacheFile.__init__``); None when neither is known or a construct was left unevaluated."""
    name = config.served_model_name or config.model
    if not name or "$" in name or any(lit in name for lit, _ in config.unevaluated):
        return None
    return "-".join(name.split("/"))


def file_name_regex(config: SglangConfig) -> str | None:
    """What the names of this server's page files match in full, ``.bin`` removed (sglang
    ``srt/mem_cache/hicache_storage.py`` ``HiCacheFile``, observed on 0.5.23 as
    ``<sha256 hex>_tiny-hc_0_1.bin``): the key (64 hex digits; a hybrid model's other pools add
    ``.<pool>`` of :data:`POOLS`), ``_<model>`` (with a host pool's
    format tag), then ``_<tp rank>_<tp size>`` (absent for MLA models, whose pages all ranks
    share), ``_<pp size>_<pp rank>`` with pipeline parallelism, ``_cp<rank>_<size>`` with attention
    context parallelism. The ranks are this server's (``--tp-size``, ``--pp-size``; the attention TP
    size ``tp / dp`` with ``--enable-dp-attention``), so a model
    whose name goes on with digits (``m_1_0``) is not taken for ``m``; None without a model."""
    model = file_model_name(config)
    if model is None:
        return None
    tags = "".join(f"(-{tag})?" for tag in FORMAT_TAGS[:1])
    # with --enable-dp-attention the pages carry the attention TP rank and size, tp / dp
    # (cache_controller.py _generate_storage_config: attn_tp_rank, attn_tp_size)
    size = max(config.tp_size // max(config.dp_size, 1), 1) if config.dp_attention else max(config.tp_size, 1)
    # the sizes are literal, the ranks any number: a name that goes on with digits only matches
    # where the sizes agree too (files_alike holds such models back)
    tp = f"(_\\d+_{size})?"
    pp = f"_{config.pp_size}_\\d+" if config.pp_size > 1 else ""
    # plain groups and \\d, not (?:...) and [0-9]: the expression travels URL-encoded in the exec request
    return f"[\\da-f]{{64}}(\\.({POOLS}))?_{_literal(model)}{tags}{tp}{pp}(_cp\\d+_\\d+)?"


def _literal(text: str) -> str:
    """``text`` as a regular expression matching itself, with only the characters that need it
    escaped (``re.escape`` also escapes ``-``, which lengthens the exec request for nothing)."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)

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
            elif tier.store == FILE_STORE:
                out.append(TierReset(False, "/flush_cache does not delete the file backend's pages: the store step "
                                     "deletes this server's files (the served model's names) in its directory", None))
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

    def file_tiers(self, config: ServeConfig, layout: KVLayout) -> tuple[FileTier, ...]:
        """The file backend's directory (:data:`FILE_STORE`), with this server's page names
        (:func:`file_name_regex`); ``HiCacheFile`` creates the directory when it starts."""
        if not isinstance(config, SglangConfig) or config.storage_backend != "file":
            return ()
        model = file_model_name(config)
        unknown = config.storage_dir_unknown
        where = config.storage_dir or "the file backend's directory"
        return (FileTier(FILE_STORE, "SGLang HiCache file storage",
                         f"{where} ({config.storage_dir_source or 'not known'})",
                         (config.storage_dir,) if config.storage_dir else (), FILE_SUFFIX, model,
                         file_name_regex(config), unknown),)

    def files_alike(self, other: str, model: str) -> bool:
        """The page names of ``other`` and ``model`` may be taken for each other (either way: a
        deletion of one by :func:`file_name_regex` may take the other's): the same name once ``/``
        is made ``-`` (``org/m``, ``org-m``), or one name followed by a format tag or by ``_<digits>``
        parts (``m_0_1``, whose MLA pages read as ``m``'s of rank 0 of 1, and the other way)."""
        mine, theirs = "-".join(model.split("/")), "-".join(other.split("/"))
        if other == model:
            return False
        tags = "|".join(re.escape(f"-{t}") for t in FORMAT_TAGS)

        def extends(longer: str, shorter: str) -> bool:
            tail = f"(?:{tags})?(?:_[0-9]+)*(?:_cp[0-9]+_[0-9]+)?"
            return re.fullmatch(re.escape(shorter) + tail, longer) is not None

        return theirs == mine or extends(theirs, mine) or extends(mine, theirs)

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

    def read_metrics(self, text: str) -> list[EngineMetrics]:
        """One figure set per ``dp_rank`` label (``""`` without one): prefix hits are
        ``sglang:cached_tokens_total`` over every ``cache_source`` (``device``, ``host``,
        ``storage``), queries ``sglang:prompt_tokens_total`` (counters, sglang
        ``srt/observability/metrics_collector.py``); the model is the ``model_name`` label. No usage:
        ``sglang:token_usage``, ``num_used_tokens``, ``kv_evictable_tokens`` and ``cache_hit_rate``
        are gauges the scheduler sets at its batches, and a flush leaves them as they were (observed
        on 0.5.23), so right after a clear they would show the cache before it as current: the
        row's note says so instead."""
        from ...lazyimport import prometheus_parser

        text_string_to_metric_families = prometheus_parser().text_string_to_metric_families
        hits: dict[str, float] = {}
        queries: dict[str, float] = {}
        models: dict[str, str] = {}
        gauges: set[str] = set()
        try:
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name.endswith("_created"):
                        continue
                    rank = sample.labels.get("dp_rank", "")
                    if family.name == "sglang:cached_tokens":
                        hits[rank] = hits.get(rank, 0.0) + float(sample.value)
                    elif family.name == "sglang:prompt_tokens":
                        queries[rank] = queries.get(rank, 0.0) + float(sample.value)
                    elif family.name in STALE_GAUGES:
                        gauges.add(family.name)
                    else:
                        continue
                    if "model_name" in sample.labels:
                        models.setdefault(rank, sample.labels["model_name"])
        except (ValueError, TypeError, IndexError) as exc:
            raise MetricsParseError(f"not Prometheus text format: {exc}") from exc
        note = (f"usage not shown: {', '.join(sorted(gauges))} are set at the scheduler's batches and a "
                "/flush_cache leaves them as they were, so after a clear they still show the cache before it"
                if gauges else None)
        ranks = sorted(set(hits) | set(queries), key=lambda r: (not r.isdigit(), int(r) if r.isdigit() else 0, r))
        return [EngineMetrics(rank, models.get(rank), None, None, None, hits.get(rank), queries.get(rank), None,
                              None, note) for rank in ranks]

    def secret_keys(self, config: ServeConfig) -> tuple[tuple[str, str, str], ...]:
        """The reset key's Secret, when the spec takes it from one."""
        key = config.reset_key if isinstance(config, SglangConfig) else None
        if key is None or key.value is not None or key.secret is None:
            return ()
        return ((key.flag, *key.secret),)
