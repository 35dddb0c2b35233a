"""``kubectl kvreset metrics``: KV-cache figures per pod, port and engine."""

from __future__ import annotations

from typing import Any

import click

from .options import (
    EXIT_CODES_READ,
    INTERRUPTED,
    concurrency_option,
    emit,
    handle_errors,
    kube_flags,
    output_option,
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
        + EXIT_CODES_READ
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
    from ..job.reads import metrics_report
    from .context import complete, nothing_found

    ctx = complete(params, default_all=True, pair_note=False)
    report = metrics_report(ctx, params["max_concurrency"], INTERRUPTED)
    emit(report, params["output"], empty_message=nothing_found(ctx))
