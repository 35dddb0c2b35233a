"""``kubectl kvreset detect``: one row per vLLM server pod."""

from __future__ import annotations

from typing import Any

import click

from .options import (
    EXIT_CODES_READ,
    INTERRUPTED,
    concurrency_option,
    emit,
    handle_errors,
    info,
    kube_flags,
    output_option,
    target_options,
    transport_option,
)


@click.command(
    "detect",
    epilog=(
        "\b\nExamples:\n"
        "  kubectl kvreset detect -n llm-d\n"
        "  kubectl kvreset detect -A -o wide\n"
        "  kubectl kvreset detect deployment/decode -o json\n\n"
        "Without targets, every vLLM pod in the namespace is listed. The version comes from "
        "GET /version of each pod (through the API server's pod proxy). " + EXIT_CODES_READ
    ),
)
@target_options
@output_option
@concurrency_option
@transport_option
@kube_flags
@handle_errors
def command(**params: Any) -> None:
    """List the vLLM server pods: owner, role, container, API ports, version, dev mode, tiers.

    A pod counts as a vLLM server when a container runs `vllm serve` (or the OpenAI API server
    module); llm-d's labels of every era only name its role. The scheduler (EPP), tokenizer
    render pods and requester pods are left out.
    """
    from ..job.reads import detect_report, error_lines, router_lines
    from .context import complete, nothing_found

    ctx = complete(params, default_all=True, pair_note=False)
    report = detect_report(ctx, params["max_concurrency"], INTERRUPTED)
    for line in error_lines(report):
        info(line)
    for line in router_lines(ctx):
        info(line)
    emit(report, params["output"], empty_message=nothing_found(ctx))
