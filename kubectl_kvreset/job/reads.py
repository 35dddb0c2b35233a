"""The read-only jobs: ``detect`` (one row per vLLM pod, with its version read) and ``metrics``
(one row per pod, port and engine from ``GET /metrics``). Each returns its report; the command
line prints it."""

from __future__ import annotations

from ..devmode import DevModeReading
from ..engines.base import EngineMetrics, MetricsParseError
from ..engines.vllm.imagever import version_mismatch
from ..otherpods import OtherPod, unsupported_reason
from ..podapi import ReadAnswer, fetch_metrics
from ..pods import ApiPort, VllmPod
from ..podstate import NotRunning, metrics_500_hint
from ..pool import Cancel, NotRun, parallel
from ..report import Column, ExitCode, Report, fold_ports
from ..rollout import pod_dev_modes
from .planning import crash_dev_modes, dev_mode_on, pod_not_running
from .probes import Probe, apply_probe, probe_pods
from .scope import Scope


def detect_report(ctx: Scope, max_concurrency: int, cancel: Cancel | None = None) -> Report:
    """The ``VllmPod`` report of the targeted pods: owner, role, container, ports, the version
    read with ``GET /version``, dev mode, connectors, tiers. The version and, where dev mode may
    be on, the live configuration (``/server_info``) are read once per owner and pod template
    (:func:`kubectl_kvreset.job.probes.probe_pods`); the live connectors and tiers win over the
    spec's, with a note. A pod whose version could not be read, or whose ``--config`` file could
    not be read, earns exit code 1 (130 when the run was cancelled first)."""
    report = Report("VllmPod", _detect_columns(ctx.namespace))
    running = [p for p in ctx.pods if pod_not_running(p) is None]
    answers = dict(zip((id(p) for p in running),
                       probe_pods(ctx.caller, running, max_concurrency, cancel, dev_mode_on), strict=True))
    dev_modes = pod_dev_modes(ctx.kube, [pod.raw for pod in ctx.pods], containers=[pod.container for pod in ctx.pods])
    for spec_pod, dev in zip(ctx.pods, dev_modes, strict=True):
        down = pod_not_running(spec_pod, dev)  # the value resolved just above explains a crash loop
        got = answers.get(id(spec_pod))
        pod = apply_probe(spec_pod, got) if got is not None else spec_pod
        version, error, notes, code = _version_read(pod, got, down)
        report.add(_detect_row(pod, dev, version, notes, error), code)
    for other in ctx.others:
        report.add(other_detect_row(other))
    if ctx.others:  # which engine each row is, and that these are not emptied
        at = next(i for i, c in enumerate(report.columns) if c.key == "pod") + 1
        report.columns = [*report.columns[:at], Column("ENGINE", "engine"), *report.columns[at:]]
    if any(r["error"] for r in report.rows):  # why a row earns exit 1, in the table too
        report.columns = [*report.columns[:-1], Column("ERROR", "error", notes=True), report.columns[-1]]
    return report


def _detect_columns(namespace: str | None) -> list[Column]:
    """The ``VllmPod`` table's columns (NAMESPACE only across namespaces)."""
    columns = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("OWNER", "owner", wide=True),
               Column("ROLE", "role"), Column("CONTAINER", "container"), Column("PORTS", "ports", short=fold_ports),
               Column("FRONT", "front_ports", wide=True, short=fold_ports), Column("VERSION", "version"),
               Column("DEV MODE", "dev_mode"), Column("CONNECTOR", "connectors"), Column("TIERS", "tiers"),
               Column("FS ROOTS", "fs_roots", wide=True), Column("READY", "ready", wide=True),
               Column("MATCHED BY", "matched_by", wide=True), Column("NOTES", "notes", wide=True)]
    return columns[1:] if namespace is not None else columns


def _version_read(pod: VllmPod, got: Probe | NotRun | None,
                  down: NotRunning | None) -> tuple[str | None, str | None, list[str], ExitCode]:
    """``(version, error, notes, exit code)`` of one pod's row from its probe ``got`` (None:
    not probed) and why it is not running (``down``)."""
    notes = list(pod.notes)
    code = ExitCode.OK
    version: str | None = None
    error: str | None = None
    if isinstance(got, NotRun):
        notes.append("version not read: interrupted")
        code = ExitCode.INTERRUPTED
    elif down is not None or got is None:
        error = down.describe() if down is not None else "not probed"
        notes.append(error)
        code = ExitCode.FAILED
    elif got.version is None and got.failure is not None:
        notes.append(f"version unknown: {got.failure.message}")
        error = f"{got.failure.kind}: version not read: {got.failure.message}"
        code = ExitCode.FAILED
    else:
        version = got.version
        if got.failure is not None:
            notes.append(f"an unknown build ({got.failure.message}): the oldest behaviour is assumed"
                         + ("; /openapi.json decides the reset routes" if got.routes is not None else ""))
        mismatch = version_mismatch(pod.image, version)
        if mismatch:
            notes.append(mismatch)
    if got is not None and not isinstance(got, NotRun) and got.live_failure is not None:
        notes.append(f"live configuration not read: {got.live_failure}")
    if pod.serve.config_error is not None and code is ExitCode.OK:
        code = ExitCode.FAILED  # the port or the tiers set in its --config file are not known
        error = f"config unread: --config {pod.serve.config_file}: {pod.serve.config_error}"
    return version, error, notes, code


def _detect_row(pod: VllmPod, dev: DevModeReading, version: str | None, notes: list[str],
                error: str | None) -> dict[str, object]:
    """The ``VllmPod`` row of one vLLM container (the README documents its fields)."""
    return {
        "namespace": pod.namespace,
        "pod": pod.name,
        "owner": pod.owner.ref(),
        "role": pod.role,
        "container": pod.container,
        "engine": pod.engine.name,
        "image": pod.image,
        "ports": [p.port for p in pod.ports],
        "front_ports": [p.front for p in pod.ports if p.front is not None],
        "scheme": pod.ports[0].scheme if pod.ports else None,
        "version": version,
        "dev_mode": dev.describe(),
        "dev_mode_value": dev.value,
        "dev_mode_source": dev.source,
        "connectors": list(pod.layout.connectors),
        "tiers": [t.kind.value for t in pod.layout.tiers],
        "fs_roots": [t.root_dir for t in pod.layout.tiers if t.root_dir],
        "shared_stores": [t.store for t in pod.layout.tiers if t.store],
        "ready": pod.ready,
        "phase": pod.phase,
        "matched_by": pod.matched_by,
        "argv": list(pod.serve.argv),
        "config_file": pod.serve.config_file,
        "config_source": pod.serve.config_source,
        "config_error": pod.serve.config_error,
        "notes": notes,
        "error": error,
    }


def other_detect_row(pod: OtherPod) -> dict[str, object]:
    """The ``VllmPod`` row of an inference pod this version cannot empty: its engine, container
    and port when known, the vLLM-only fields empty, and a note that ``clear`` leaves it (exit 0:
    ``detect`` only lists)."""
    return {
        "namespace": pod.namespace, "pod": pod.name, "owner": pod.owner.ref(), "role": pod.role,
        "container": pod.container, "engine": pod.engine, "image": pod.image,
        "ports": [pod.port] if pod.port is not None else [], "front_ports": [], "scheme": None, "version": None,
        "dev_mode": None, "dev_mode_value": None, "dev_mode_source": None, "connectors": [], "tiers": [],
        "fs_roots": [], "shared_stores": [], "ready": pod.ready, "phase": pod.phase, "matched_by": pod.matched_by,
        "argv": [], "config_file": None, "config_source": None, "config_error": None,
        "notes": [*pod.notes, f"{unsupported_reason(pod)}: clear reports it left (--fallback restart restarts "
                  f"{pod.owner.ref()})"],
        "error": None,
    }


def error_lines(report: Report) -> list[str]:
    """``error:`` lines for stderr, one per distinct ``error`` of the rows (the pod's name
    left out when comparing), naming the first pod and how many others share it."""
    seen: dict[str, list[str]] = {}
    for row in report.rows:
        if row.get("error"):
            seen.setdefault(str(row["error"]).replace(str(row["pod"]), "POD"), []).append(
                f"{row['namespace']}/{row['pod']}")
    return [f"error: {pods[0]}" + (f" (and {len(pods) - 1} more)" if len(pods) > 1 else "") + ": "
            + text.replace("POD", pods[0].split("/", 1)[1]) for text, pods in seen.items()]


def metrics_report(ctx: Scope, max_concurrency: int, cancel: Cancel | None = None) -> Report:
    """The ``EngineMetrics`` report: one row per pod, port and engine of ``GET /metrics``
    (read by the pod's engine, :meth:`~kubectl_kvreset.engines.base.Engine.read_metrics`); a port that could not be read
    or parsed gets one row with the error and exit code 1, as does a pod whose port is set in a
    ``--config`` file that could not be read. A crash-looping pod whose ``VLLM_SERVER_DEV_MODE``
    comes from a ConfigMap or Secret costs one GET per such object
    (:func:`~kubectl_kvreset.job.planning.crash_dev_modes`), so its row names the value."""
    cols = [Column("NAMESPACE", "namespace"), Column("POD", "pod"), Column("PORT", "port"),
            Column("ENGINE", "engine"), Column("USAGE", "usage"), Column("CPU", "cpu_offload_usage"),
            Column("PREFIX HITS", "prefix_hits"), Column("PREFIX QUERIES", "prefix_queries"),
            Column("EXT HITS", "external_hits"), Column("EXT QUERIES", "external_queries"),
            Column("USAGE METRIC", "usage_metric", wide=True), Column("MODEL", "model", wide=True),
            Column("ERROR", "error", notes=True)]
    if ctx.namespace is not None:
        cols = cols[1:]
    report = Report("EngineMetrics", cols)
    for pod in ctx.pods:
        if not pod.ports and pod.serve.config_error is not None:
            report.add({"namespace": pod.namespace, "pod": pod.name, "port": None, "role": pod.role,
                        **dict.fromkeys(("engine", "model", "usage", "usage_metric", "cpu_offload_usage",
                                         "prefix_hits", "prefix_queries", "external_hits", "external_queries")),
                        "error": f"unavailable: --config {pod.serve.config_file}: {pod.serve.config_error}"},
                       ExitCode.FAILED)
    units = [(pod, port) for pod in ctx.pods for port in pod.ports]
    dev_modes = crash_dev_modes(ctx)  # a crash loop's dev-mode value from a ConfigMap/Secret, if any

    def scrape(unit: tuple[VllmPod, ApiPort]) -> ReadAnswer:
        pod, port = unit
        down = pod_not_running(pod, dev_modes.get((pod.namespace, pod.name, pod.container)))
        if down is not None:
            return ReadAnswer(None, down.describe())
        return fetch_metrics(ctx.caller, ctx.ref(pod), port.port, scheme=port.scheme)

    scraped = parallel(units, scrape, max_concurrency, cancel)
    for (pod, port), got in zip(units, scraped, strict=True):
        base = {"namespace": pod.namespace, "pod": pod.name, "port": port.port, "role": pod.role,
                **dict.fromkeys(("engine", "model", "usage", "usage_metric", "cpu_offload_usage", "prefix_hits",
                                 "prefix_queries", "external_hits", "external_queries", "error"))}
        engines: list[EngineMetrics] = []
        if isinstance(got, NotRun):
            report.add({**base, "engine": None, "error": "not read: interrupted"}, ExitCode.INTERRUPTED)
            continue
        error = got.error
        if got.text is not None:
            try:
                engines = pod.engine.read_metrics(got.text)
            except MetricsParseError as exc:
                error = str(exc)
            if not engines and error is None:
                error = f"no {pod.engine.name}: KV-cache metric in the scrape"
        if error is not None:
            hint = metrics_500_hint(pod.raw, pod.container) if got.status == 500 else None
            error = f"{error}; {hint}" if hint else error
            report.add({**base, "engine": None, "error": f"unavailable: {error}"}, ExitCode.FAILED)
            continue
        for e in engines:
            report.add({**base, "engine": e.engine or None, "model": e.model, "usage": e.usage,
                        "usage_metric": e.usage_metric, "cpu_offload_usage": e.cpu_offload_usage,
                        "prefix_hits": tokens(e.prefix_hits), "prefix_queries": tokens(e.prefix_queries),
                        "external_hits": tokens(e.external_hits), "external_queries": tokens(e.external_queries),
                        "error": None, **({"note": e.note} if e.note else {})})
    if any(r.get("note") for r in report.rows):  # what a figure not shown would have misled about
        for r in report.rows:
            r.setdefault("note", None)
        report.columns = [*report.columns[:-1], Column("NOTE", "note", notes=True), report.columns[-1]]
    return report


def tokens(value: float | None) -> int | float | None:
    """A token counter as an integer when it is one (Prometheus exposes counters as floats)."""
    return int(value) if value is not None and value.is_integer() else value


def router_lines(ctx: Scope) -> list[str]:
    """``detect``'s note on the sglang-router pods beside the SGLang servers it lists (what a
    clear leaves in their routing: :func:`kubectl_kvreset.job.others.router_notes`)."""
    from .others import router_notes

    return router_notes(ctx.kube, ctx.pods, cleared=False)
