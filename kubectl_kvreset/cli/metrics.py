"""``kubectl kvreset metrics``: KV-cache figures per pod, port and engine."""

from __future__ import annotations

from typing import Any

import click

from .options import (
    EXIT_CODES_HELP,
    NotRun,
    concurrency_option,
    emit,
    handle_errors,
    kube_flags,
    output_option,
    parallel,
    target_options,
    transport_option,
)


@click.command(
    "metrics",
    epilog=(
        "\b\nExamples:\n"
        "  kubectl kvreset metrics -n llm-d\n"
        "  kubectl kvreset metrics deployment/decode -o json\n\n"
        "USAGE is vllm:kv_cache_usage_perc, or vllm:gpu_cache_usage_perc where a server exports "
        "only that; CPU is vllm:kv_offload_cpu_cache_usage_perc (the share of the CPU tier "
        "pinned by transfers). Usage does NOT drop on a reset: cached blocks nobody uses count "
        "as free already, so these figures are not proof that a reset happened; the prefix-cache "
        "hit counters show whether the next run starts cold. A missing family shows as '-'. "
        + EXIT_CODES_HELP
    ),
)
@target_options
@output_option
@concurrency_option
@transport_option
@kube_flags
@handle_errors
def command(**params: Any) -> None:
    """Show KV-cache usage and prefix-cache hit counters per pod, port and engine.

    Reads GET /metrics of every API port through the API server's pod proxy and parses it with
    prometheus_client. Without targets, every vLLM pod in the namespace is read.
    """
    from ..podapi import fetch_metrics
    from ..report import Column, ExitCode, Report
    from ..vllm_api import MetricsParseError, parse_metrics
    from .context import complete, nothing_found

    ctx = complete(params, default_all=True, pair_note=False)
    cols = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("PORT", "port"),
            Column("ENGINE", "engine"), Column("USAGE", "usage"), Column("CPU", "cpu_offload_usage"),
            Column("PREFIX HITS", "prefix_hits"), Column("PREFIX QUERIES", "prefix_queries"),
            Column("EXT HITS", "external_hits"), Column("EXT QUERIES", "external_queries"),
            Column("USAGE METRIC", "usage_metric", wide=True), Column("MODEL", "model", wide=True),
            Column("ERROR", "error")]
    if ctx.scope is not None:
        cols = cols[1:]
    report = Report("EngineMetrics", cols)
    units = [(pod, port) for pod in ctx.pods for port in pod.ports]
    scraped = parallel(units, lambda u: fetch_metrics(ctx.caller, ctx.ref(u[0]), u[1].port, scheme=u[1].scheme),
                       params["max_concurrency"])
    for (pod, port), got in zip(units, scraped, strict=True):
        base = {"namespace": pod.namespace, "pod": pod.name, "port": port.port, "role": pod.role,
                **dict.fromkeys(("engine", "model", "usage", "usage_metric", "cpu_offload_usage", "prefix_hits",
                                 "prefix_queries", "external_hits", "external_queries", "error"))}
        engines = []
        if isinstance(got, NotRun):
            report.add({**base, "engine": None, "error": "not read: interrupted"}, ExitCode.INTERRUPTED)
            continue
        error = got.error
        if got.text is not None:
            try:
                engines = parse_metrics(got.text)
            except MetricsParseError as exc:
                error = str(exc)
            if not engines and error is None:
                error = "no vllm: KV-cache metric in the scrape"
        if error is not None:
            report.add({**base, "engine": None, "error": f"unavailable: {error}"}, ExitCode.FAILED)
            continue
        for e in engines:
            report.add({**base, "engine": e.engine or None, "model": e.model, "usage": e.usage,
                        "usage_metric": e.usage_metric, "cpu_offload_usage": e.cpu_offload_usage,
                        "prefix_hits": tokens(e.prefix_hits), "prefix_queries": tokens(e.prefix_queries),
                        "external_hits": tokens(e.external_hits), "external_queries": tokens(e.external_queries),
                        "error": None})
    emit(report, params["output"], empty_message=nothing_found(ctx))


def tokens(value: float | None) -> int | float | None:
    """A token counter as an integer when it is one (Prometheus exposes counters as floats)."""
    return int(value) if value is not None and value.is_integer() else value
