"""``kubectl kvreset detect``: one row per vLLM server pod."""

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
    "detect",
    epilog=(
        "\b\nExamples:\n"
        "  kubectl kvreset detect -n llm-d\n"
        "  kubectl kvreset detect -A -o wide\n"
        "  kubectl kvreset detect deployment/decode -o json\n\n"
        "Without targets, every vLLM pod in the namespace is listed. The version comes from "
        "GET /version of each pod (through the API server's pod proxy). " + EXIT_CODES_HELP
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
    from ..podapi import CallFailure, probe_version
    from ..report import Column, ExitCode, Report
    from .context import complete, nothing_found

    ctx = complete(params, default_all=True, pair_note=False)
    columns = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("OWNER", "owner"),
               Column("ROLE", "role"), Column("CONTAINER", "container"), Column("PORTS", "ports"),
               Column("FRONT", "front_ports", wide=True), Column("VERSION", "version"),
               Column("DEV MODE", "dev_mode"), Column("CONNECTOR", "connectors"), Column("TIERS", "tiers"),
               Column("FS ROOTS", "fs_roots", wide=True), Column("READY", "ready", wide=True),
               Column("MATCHED BY", "matched_by", wide=True), Column("NOTES", "notes", wide=True)]
    if ctx.scope is not None:
        columns = columns[1:]
    report = Report("VllmPod", columns)

    def probe(pod: Any) -> Any:
        if not pod.ports:
            return CallFailure("no-port", "no API port found")
        first = pod.ports[0]
        return probe_version(ctx.caller, ctx.ref(pod), first.port, scheme=first.scheme)

    versions = parallel(ctx.pods, probe, params["max_concurrency"])
    for pod, version in zip(ctx.pods, versions, strict=True):
        notes = list(pod.notes)
        code = ExitCode.OK
        if isinstance(version, NotRun):
            notes.append("version not read: interrupted")
            code = ExitCode.INTERRUPTED
            version = None
        elif isinstance(version, CallFailure):
            notes.append(f"version unknown: {version.message}")
            code = ExitCode.FAILED
            version = None
        report.add({
            "namespace": pod.namespace,
            "pod": pod.name,
            "owner": pod.owner.ref(),
            "role": pod.role,
            "container": pod.container,
            "image": pod.image,
            "ports": [p.port for p in pod.ports],
            "front_ports": [p.front for p in pod.ports if p.front is not None],
            "scheme": pod.ports[0].scheme if pod.ports else None,
            "version": version,
            "dev_mode": pod.dev_mode.describe(),
            "dev_mode_value": pod.dev_mode.value,
            "connectors": list(pod.layout.connectors),
            "tiers": [t.kind.value for t in pod.layout.tiers],
            "fs_roots": [t.root_dir for t in pod.layout.tiers if t.root_dir],
            "shared_stores": [t.store for t in pod.layout.tiers if t.store],
            "ready": pod.ready,
            "phase": pod.phase,
            "matched_by": pod.matched_by,
            "argv": list(pod.serve.argv),
            "notes": notes,
        }, code)
    emit(report, params["output"], empty_message=nothing_found(ctx))
