"""The salted canary of ``clear --verify``, as vLLM reads it: a prompt that fills whole blocks,
the request that seeds or probes it (``cache_salt`` keeps it apart from every user's prefixes),
the cached-token count in its answer, and the per-source prefix-cache counters of ``/metrics``.
Pure: no I/O (:mod:`kubectl_kvreset.job.verify` sends the requests)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .api import MetricsParseError, engine_order

#: Where a cached prompt token came from: the ``source`` values of
#: ``vllm:prompt_tokens_cached_by_source`` (vLLM 0.32.0 ``vllm/v1/metrics/loggers.py``) and the
#: tier each names (``gpu``: the engine's own cache; ``cpu``: the CPU offload tier; ``fs``: the
#: disk tier; ``shared``: a connector's store, local or remote).
SOURCE_TIERS = {"device": "gpu", "host": "cpu", "disk": "fs", "p2p": "shared", "external_unspecified": "shared",
                "external": "shared"}
#: What a salt may not hold: vLLM 0.32.0 refuses (400) a ``cache_salt`` that is empty, longer
#: than 128 characters or holds ``@``, ``/``, ``\\`` or NUL (seen on the CPU build).
SALT_MAX_CHARS = 128
_SALT_REFUSED = "@/\\\x00"


def valid_salt(salt: str) -> bool:
    """True when vLLM takes ``salt`` as a ``cache_salt`` (:data:`SALT_MAX_CHARS`)."""
    return 0 < len(salt) <= SALT_MAX_CHARS and not any(ch in salt for ch in _SALT_REFUSED)


def canary_tokens(salt: str, block_size: int) -> list[int]:
    """The canary's prompt: ``2 * block_size + 1`` token ids (two whole blocks hit on a repeat;
    the block holding the last token never counts, ``vllm/v1/core/kv_cache_manager.py``), drawn
    from ``salt`` in 100..999 (inside any real vocabulary, clear of special tokens)."""
    import hashlib

    out: list[int] = []
    counter = 0
    while len(out) < 2 * block_size + 1:
        digest = hashlib.sha256(f"{salt}/{counter}".encode()).digest()
        out += [100 + int.from_bytes(digest[i:i + 2], "big") % 900 for i in range(0, len(digest), 2)]
        counter += 1
    return out[:2 * block_size + 1]


def canary_body(model: str, tokens: Sequence[int], salt: str) -> bytes:
    """``POST /v1/completions`` body of a canary: the token ids, ``max_tokens=1``,
    ``temperature=0``, the ``cache_salt``."""
    return json.dumps({"model": model, "prompt": list(tokens), "max_tokens": 1, "temperature": 0,
                       "cache_salt": salt}, separators=(",", ":")).encode()


def cached_tokens(body: bytes) -> tuple[int | None, int | None]:
    """``(usage.prompt_tokens_details.cached_tokens, usage.prompt_tokens)`` of a completion
    answer; None for what it does not hold (``prompt_tokens_details`` is null unless the
    server runs with ``--enable-prompt-tokens-details``)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None, None
    usage = doc.get("usage") if isinstance(doc, dict) else None
    if not isinstance(usage, dict):
        return None, None
    prompt = usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return int(details["cached_tokens"]), prompt
    return None, prompt


@dataclass(frozen=True)
class CacheCounters:
    """What one ``/metrics`` scrape says of one engine for the canary: ``block_size`` (the
    ``block_size`` label of ``vllm:cache_config_info``), ``model`` (``model_name``), the token
    counters (``hits``/``queries``: ``vllm:prefix_cache_*``; ``ext_hits``: external), ``by_source``
    (``vllm:prompt_tokens_cached_by_source`` per ``source``; empty where the family is absent)
    and the gauges ``running``/``waiting`` (``vllm:num_requests_*``). None: absent."""

    engine: str
    block_size: int | None = None
    model: str | None = None
    hits: float | None = None
    queries: float | None = None
    ext_hits: float | None = None
    by_source: Mapping[str, float] = field(default_factory=dict)
    running: float | None = None
    waiting: float | None = None


def cache_counters(text: str) -> dict[str, CacheCounters]:
    """Engine label -> :class:`CacheCounters` of one ``/metrics`` scrape (``""`` for a scrape
    without the ``engine`` label).

    Raises:
        MetricsParseError: the text is not Prometheus text exposition format.
    """
    from ...lazyimport import prometheus_parser
    text_string_to_metric_families = prometheus_parser().text_string_to_metric_families

    vals: dict[str, dict[str, Any]] = {}
    names = {"vllm:prefix_cache_hits": "hits", "vllm:gpu_prefix_cache_hits": "hits",
             "vllm:prefix_cache_queries": "queries", "vllm:gpu_prefix_cache_queries": "queries",
             "vllm:external_prefix_cache_hits": "ext_hits", "vllm:num_requests_running": "running",
             "vllm:num_requests_waiting": "waiting"}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                e = vals.setdefault(sample.labels.get("engine", ""), {"by_source": {}})
                if "model_name" in sample.labels:
                    e.setdefault("model", sample.labels["model_name"])
                if family.name == "vllm:cache_config_info" and str(sample.labels.get("block_size", "")).isdigit():
                    e["block_size"] = int(sample.labels["block_size"])
                elif family.name == "vllm:prompt_tokens_cached_by_source" and "source" in sample.labels:
                    src = sample.labels["source"]
                    e["by_source"][src] = e["by_source"].get(src, 0.0) + float(sample.value)
                elif family.name in names:
                    key = names[family.name]
                    e[key] = e.get(key, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"not Prometheus text format: {exc}") from exc
    out: dict[str, CacheCounters] = {}
    for engine in sorted(vals, key=engine_order):
        if engine == "" and len(vals) > 1 and not vals[engine].get("hits"):
            continue  # samples without the label (admission_rejections) beside labelled engines
        out[engine] = CacheCounters(engine=engine, **vals[engine])
    return out
