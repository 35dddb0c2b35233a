"""``/metrics`` of the fake vLLM server (tests/sim/fakevllm.py): the metric families of each release
(``vllm/v1/metrics/loggers.py``), per engine, in Prometheus text."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from packaging.version import Version
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from . import vllm032
from .kvtiers import EngineCache


class _PerEngine:
    """Gives every sample the collector labels ``engine="0"`` once per engine of the server,
    labelled with that engine's DP rank as vLLM does (0.32.0 ``vllm/v1/metrics/loggers.py``
    ``PrometheusStatLogger``: ``per_engine_labelvalues = {idx: [model_name, str(idx)]}`` over
    the client's ``engine_ranks_managed``); the fake's counters are the first engine's. Samples
    without the label (``vllm:admission_rejections``) stay as they are.

    ``multiprocess``: several API server processes (``api_server_count`` > 1, the default under
    internal DP load balancing): prometheus_client's multiprocess collector exposes no
    ``_created`` samples, and a ``mostrecent`` gauge has no sample until a process set it, so
    the scheduler gauges (:data:`SCHEDULER_GAUGES`) are absent until the server has ``served`` a
    request. Seen on the real 0.32.0 CPU build with ``--data-parallel-size 2``."""

    def __init__(self, inner: _MetricsCollector, labels: tuple[str, ...], *, multiprocess: bool = False,
                 served: bool = False, per_engine: dict[str, dict[tuple[str, str], float]] | None = None) -> None:
        self.inner = inner
        self.labels = labels
        self.multiprocess = multiprocess
        self.served = served
        #: engine label -> (family, source label or "") -> value: each engine's own counters
        self.per_engine = per_engine or {}

    def _own(self, fam_name: str, sample: Sample) -> Sample:
        values = self.per_engine.get(sample.labels.get("engine", ""))
        if values is None or sample.name.endswith("_created"):
            return sample
        key = (fam_name, sample.labels.get("source", ""))
        return sample._replace(value=values[key]) if key in values else sample

    def collect(self) -> Iterable[Metric]:
        for fam in self.inner.collect():
            if self.labels != ("0",):
                own = [s for s in fam.samples if s.labels.get("engine") == "0"]
                rest = [s for s in fam.samples if s.labels.get("engine") != "0"]
                fam.samples[:] = rest + [s._replace(labels=dict(s.labels, engine=e)) for e in self.labels for s in own]
            fam.samples[:] = [self._own(fam.name, s) for s in fam.samples]
            if self.multiprocess:
                fam.samples[:] = [s for s in fam.samples if not s.name.endswith("_created")]
                if fam.name in SCHEDULER_GAUGES and not self.served:
                    fam.samples[:] = []
            yield fam


def _engine_values(eng: EngineCache) -> dict[tuple[str, str], float]:
    """The per-engine samples an engine's own state gives (family, source label or "")."""
    out = {("vllm:prefix_cache_queries", ""): eng.queries, ("vllm:prefix_cache_hits", ""): eng.hits,
           ("vllm:gpu_prefix_cache_queries", ""): eng.queries, ("vllm:gpu_prefix_cache_hits", ""): eng.hits,
           ("vllm:external_prefix_cache_queries", ""): eng.ext_queries,
           ("vllm:external_prefix_cache_hits", ""): eng.ext_hits,
           ("vllm:prompt_tokens_cached", ""): eng.hits + eng.ext_hits,
           ("vllm:num_requests_running", ""): float(eng.running),
           ("vllm:num_requests_waiting", ""): float(eng.waiting)}
    for src, value in eng.by_source.items():
        out[("vllm:prompt_tokens_cached_by_source", src)] = value
    return out


#: The ``mostrecent`` gauges the scheduler's stats set (0.32.0 ``vllm/v1/metrics/loggers.py``):
#: empty in multiprocess mode before the first request.
SCHEDULER_GAUGES = frozenset({"vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                              "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason"})


class _MetricsCollector:
    """Builds the vLLM metric families of one release (``vllm/v1/metrics/loggers.py`` of each release)."""

    def __init__(self, server: Any, tokens: tuple[float, float, float, float],
                 live: dict[str, float] | None = None) -> None:
        self.s = server  # the tests.sim.fakevllm.FakeVLLM whose metrics these are
        self.tokens = tokens
        self.live = live or {}

    def _collect_032(self, usage: float) -> Iterable[Metric]:
        """Every family of :data:`tests.sim.vllm032.METRIC_FAMILIES` (0.32.0's
        ``v1/metrics/loggers.py``), counters with ``_created``, histograms with a few buckets."""
        s = self.s
        queries, hits, ext_queries, ext_hits = self.tokens
        live = self.live
        prompt = live.get("prompt", 0.0)
        values: dict[str, float] = {
            "vllm:num_requests_running": live.get("running", 0.0),
            "vllm:kv_cache_usage_perc": usage,
            "vllm:prefix_cache_queries": queries, "vllm:prefix_cache_hits": hits,
            "vllm:external_prefix_cache_queries": ext_queries, "vllm:external_prefix_cache_hits": ext_hits,
            "vllm:prompt_tokens_cached": hits, "vllm:num_preemptions": live.get("preemptions", 0.0),
            "vllm:prompt_tokens": prompt, "vllm:generation_tokens": live.get("generation", 0.0),
        }
        by_label: dict[tuple[str, str], float] = {
            ("vllm:prompt_tokens_by_source", "local_compute"): max(0.0, prompt - hits),
            ("vllm:prompt_tokens_by_source", "local_cache_hit"): hits,
            ("vllm:prompt_tokens_cached_by_source", "device"): hits,
            ("vllm:prompt_tokens_cached_by_source", "external_unspecified"): ext_hits,
            ("vllm:request_success", "length"): live.get("length", 0.0),
            ("vllm:request_success", "stop"): live.get("stop", 0.0),
            ("vllm:engine_sleep_state", "awake"): 1.0,
        }
        for name, kind, labels in vllm032.METRIC_FAMILIES:
            base = {"engine": "0", "model_name": s.served_model_name}
            if name == "vllm:cache_config_info":
                g = GaugeMetricFamily(name, "Information of the LLMEngine CacheConfig", labels=labels)
                info = dict(vllm032.CACHE_CONFIG_INFO, engine="0", block_size=str(s.block_size))
                g.add_metric([info[k] for k in labels], 1.0)
                yield g
                continue
            extra = [k for k in labels if k not in base]
            rows: list[tuple[list[str], float]] = []
            if extra:
                (label,) = extra
                for val in vllm032.LABEL_VALUES[name][label]:
                    lv = dict(base, **{label: val})
                    rows.append(([lv[k] for k in labels], by_label.get((name, val), 0.0)))
            else:
                rows.append(([base[k] for k in labels], values.get(name, 0.0)))
            fam: Metric
            if kind == "counter":
                fam = CounterMetricFamily(name, name, labels=labels)
                for lv_list, value in rows:
                    fam.add_metric(lv_list, value, created=s._created)
            elif kind == "gauge":
                fam = GaugeMetricFamily(name, name, labels=labels)
                for lv_list, value in rows:
                    fam.add_metric(lv_list, value)
            else:
                fam = HistogramMetricFamily(name, name, labels=labels)
                for lv_list, _value in rows:
                    fam.add_metric(lv_list, [("1.0", 0.0), ("+Inf", 0.0)], 0.0)
                    fam.samples.append(Sample(name + "_created", dict(zip(labels, lv_list, strict=True)), s._created))
            yield fam
        if s.offload_metric:
            g = GaugeMetricFamily(
                "vllm:kv_offload_cpu_cache_usage_perc",
                "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = saturated).",
                labels=["model_name", "engine"])
            g.add_metric([s.served_model_name, "0"], 0.0)
            yield g

    def collect(self) -> Iterable[Metric]:
        s, v = self.s, self.s.v
        if v >= Version("0.8.0"):
            names, values = ["model_name", "engine"], [s.served_model_name, "0"]
        else:
            names, values = ["model_name"], [s.served_model_name]
        created = s._created
        # usage = 1 - free/total; cached blocks nobody references are free, so it stays where the
        # warm-up left it and does not drop on reset (vllm/v1/core/block_pool.py::get_usage).
        usage = round(min(1.0, s._warm_usage_blocks / s._total_blocks), 6)
        queries, hits, ext_queries, ext_hits = self.tokens
        if v >= Version("0.32.0"):
            yield from self._collect_032(usage)
            return

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
        # the CacheConfig as an info gauge (every release here; 0.32.0's full label set above)
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                 labels=["block_size", "enable_prefix_caching", *names[1:]])
        info.add_metric([str(s.block_size), "True", *values[1:]], 1.0)
        yield info
        if v >= Version("0.9.0"):
            yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
        if v < Version("0.11.0"):
            doc = "GPU KV-cache usage. 1 means 100 percent usage."
            if v >= Version("0.9.2"):
                doc += " DEPRECATED: Use vllm:kv_cache_usage_perc instead."
            yield gauge("vllm:gpu_cache_usage_perc", doc, usage)
            yield counter("vllm:gpu_prefix_cache_queries",
                          "GPU prefix cache queries, in terms of number of queried tokens.", queries)
            yield counter("vllm:gpu_prefix_cache_hits",
                          "GPU prefix cache hits, in terms of number of cached tokens.", hits)
        if v >= Version("0.9.0"):
            yield counter("vllm:prefix_cache_queries",
                          "Prefix cache queries, in terms of number of queried tokens.", queries)
            yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", hits)
        if v >= Version("0.11.1"):
            yield counter(
                "vllm:external_prefix_cache_queries",
                "External prefix cache queries from KV connector cross-instance cache sharing, "
                "in terms of number of queried tokens.",
                ext_queries,
            )
            yield counter(
                "vllm:external_prefix_cache_hits",
                "External prefix cache hits from KV connector cross-instance cache sharing, "
                "in terms of number of cached tokens.",
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
