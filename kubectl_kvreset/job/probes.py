"""What the running servers say, read once per owner and pod template: ``GET /version`` and,
where dev mode may be on, ``GET /server_info?config_format=json`` (both at the same time), then
``GET /openapi.json`` for an unknown build and ``GET /metrics`` where the version answers the reset
for engine 0 only (its ``engine`` labels count the data-parallel engines behind the port,
:func:`~kubectl_kvreset.engines.vllm.api.engine_labels`). Pods of one template run the same image and command,
so one pod answers for all; a pod whose own answers later contradict its template's is probed
again on its own (:func:`contradicts`).

API requests: at most four per template (one pod list is shared by every template), so a
Deployment of 64 replicas costs two to four probe calls in all, not 64 or 128.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..engines import DEFAULT_ENGINE, Engine, engine_named
from ..engines.vllm.api import (
    MetricsParseError,
    ResetOutcome,
    engine_count,
    engine_labels,
    parse_version,
    reset_answers_for_every_engine,
)
from ..engines.vllm.liveconfig import (
    CONFIG_FORMAT_SINCE,
    LiveConfig,
    RouteSet,
    read_openapi,
    reconcile,
)
from ..kube import HttpAnswer
from ..podapi import (
    OPENAPI_MAX_BYTES,
    SERVER_INFO_MAX_BYTES,
    VERSION_TIMEOUT_S,
    CallFailure,
    PodCaller,
    PodRef,
    fetch_metrics,
    probe_version,
)
from ..pods import VllmPod
from ..pool import Cancel, NotRun, parallel

#: Pod labels that name a pod template: a Deployment's ReplicaSet, a StatefulSet's or
#: DaemonSet's ControllerRevision, a LeaderWorkerSet's template revision.
TEMPLATE_LABELS = ("pod-template-hash", "controller-revision-hash",
                   "leaderworkerset.sigs.k8s.io/template-revision-hash")


def template_key(pod: VllmPod) -> tuple[str, ...]:
    """The key of the pod template a pod comes from: namespace, owner, the template label
    (:data:`TEMPLATE_LABELS`), image and vLLM container. A pod without a template label is its own
    template."""
    revision = next((pod.labels[k] for k in TEMPLATE_LABELS if pod.labels.get(k)), None)
    return (pod.namespace, pod.owner.kind, pod.owner.name, revision or ("pod:" + (pod.uid or pod.name)),
            pod.image, pod.container)


@dataclass(frozen=True)
class Probe:
    """What one pod of a template answered.

    Attributes:
        version: the ``/version`` text, or None.
        failure: why the version is unknown (None when read).
        live: the live configuration (None: not read: dev mode off in the spec, or it failed).
        live_failure: why ``/server_info`` could not be read, for a note (None: read or not tried).
        routes: for an unknown build, the reset routes and parameters ``/openapi.json`` lists.
        engines: the ``engine`` label values ``GET /metrics`` shows on the first port (None: not
            read: the version answers for every engine, dev mode is off, or the read failed).
        engines_failure: why ``/metrics`` could not give them (None: read or not tried).
    """

    version: str | None
    failure: CallFailure | None
    live: LiveConfig | None = None
    live_failure: str | None = None
    routes: RouteSet | None = None
    engines: tuple[str, ...] | None = None
    engines_failure: str | None = None


def _server_info(caller: PodCaller, pod: VllmPod) -> LiveConfig | str:
    """The live configuration of ``pod``'s engine (vLLM: ``GET /server_info?config_format=json``)."""
    port = pod.ports[0]
    route = pod.engine.live_config_route
    if route is None:
        return f"{pod.engine.name} has no live configuration route"
    path, query = route
    got = caller.call(PodRef(pod.namespace, pod.name, pod.container), port.port, "GET", path,
                      list(query), scheme=port.scheme, timeout_s=VERSION_TIMEOUT_S,
                      max_bytes=SERVER_INFO_MAX_BYTES)
    if isinstance(got, CallFailure):
        return got.message
    if got.status == 404:
        return f"GET {path} answered 404 (dev mode off)"
    if got.status != 200:
        return f"GET {path} answered {got.status}"
    return pod.engine.read_live_config(got.body)


def _openapi(caller: PodCaller, pod: VllmPod) -> RouteSet | None:
    port = pod.ports[0]
    got = caller.call(PodRef(pod.namespace, pod.name, pod.container), port.port, "GET", "/openapi.json",
                      scheme=port.scheme, timeout_s=VERSION_TIMEOUT_S, max_bytes=OPENAPI_MAX_BYTES)
    if isinstance(got, HttpAnswer) and got.status == 200:
        return read_openapi(got.body)
    return None


def needs_engine_labels(version: str | None) -> bool:
    """True when a reset answer of this version may speak for engine 0 only, so the engine
    count behind the port decides whether it confirms the reset
    (:func:`~kubectl_kvreset.engines.vllm.api.reset_answers_for_every_engine`)."""
    return not reset_answers_for_every_engine(parse_version(version))


def _engine_labels(caller: PodCaller, pod: VllmPod) -> tuple[str, ...] | str:
    port = pod.ports[0]
    # retried as the metrics command reads it: one lost scrape must not drop the engine count
    got = fetch_metrics(caller, PodRef(pod.namespace, pod.name, pod.container), port.port, scheme=port.scheme)
    if got.text is None:
        return got.error or "no answer"
    try:
        return engine_labels(got.text)
    except MetricsParseError as exc:
        return str(exc)


def probe_pods(caller: PodCaller, pods: Sequence[VllmPod], max_concurrency: int, cancel: Cancel | None,
               dev_mode_on: Callable[[VllmPod], bool | None]) -> list[Probe | NotRun]:
    """Probe one pod per template (:func:`template_key`) and give each pod its template's
    :class:`Probe` (same order as ``pods``). ``/version`` and ``/server_info`` go out at the
    same time (``/server_info`` only where ``dev_mode_on`` is not False); ``/openapi.json``
    follows for a template whose build is unknown (:func:`~kubectl_kvreset.engines.vllm.liveconfig.release_version`).
    ``/metrics`` (retried as the ``metrics`` command reads it,
    :func:`~kubectl_kvreset.podapi.fetch_metrics`) follows for a template whose version answers the reset for
    engine 0 only (:func:`needs_engine_labels`) and whose dev mode may be on.
    A pod without ports gets ``Probe(None, CallFailure("no-port", ...))``. Never raises for a
    pod's failure."""
    firsts: dict[tuple[str, ...], VllmPod] = {}
    for pod in pods:
        if pod.ports:
            firsts.setdefault(template_key(pod), pod)
    by_key = probe_templates(caller, firsts, max_concurrency, cancel, dev_mode_on)
    return [by_key[template_key(p)] if p.ports else _NO_PORT for p in pods]


_NO_PORT = Probe(None, CallFailure("no-port", "no API port found in the vLLM command"))


def probe_templates(caller: PodCaller, firsts: dict[tuple[str, ...], VllmPod], max_concurrency: int,
                    cancel: Cancel | None,
                    dev_mode_on: Callable[[VllmPod], bool | None]) -> dict[tuple[str, ...], Probe | NotRun]:
    """The :class:`Probe` of each template key, read on the pod given for it (see :func:`probe_pods`)."""
    units: list[tuple[tuple[str, ...], str]] = [(k, "version") for k in firsts]
    units += [(k, "server_info") for k, pod in firsts.items()
              if dev_mode_on(pod) is not False and pod.engine.live_config_route is not None]

    def one(unit: tuple[tuple[str, ...], str]) -> str | CallFailure | LiveConfig:
        pod = firsts[unit[0]]
        if unit[1] == "version":
            return probe_version(caller, PodRef(pod.namespace, pod.name, pod.container), pod.ports[0].port,
                                 scheme=pod.ports[0].scheme, engine=pod.engine)
        return _server_info(caller, pod)

    answers = parallel(units, one, max_concurrency, cancel)
    versions: dict[tuple[str, ...], str | CallFailure | NotRun] = {}
    lives: dict[tuple[str, ...], LiveConfig | str | NotRun] = {}
    for (key, what), got in zip(units, answers, strict=True):
        if what == "version":
            versions[key] = got  # type: ignore[assignment]
        else:
            lives[key] = got  # type: ignore[assignment]
    unknown = [k for k, v in versions.items() if not isinstance(v, NotRun) and firsts[k].engine.routes_from_openapi
               and firsts[k].engine.release(v if isinstance(v, str) else None) is None]
    counting = [k for k, v in versions.items() if isinstance(v, str) and firsts[k].engine.counts_engines_by_metrics(v)
                and dev_mode_on(firsts[k]) is not False]
    second: list[tuple[tuple[str, ...], str]] = [(k, "openapi") for k in unknown] + [(k, "metrics") for k in counting]

    def then(unit: tuple[tuple[str, ...], str]) -> RouteSet | None | tuple[str, ...] | str:
        pod = firsts[unit[0]]
        return _openapi(caller, pod) if unit[1] == "openapi" else _engine_labels(caller, pod)

    opened: dict[tuple[str, ...], object] = {}
    labelled: dict[tuple[str, ...], object] = {}
    for (key, what), answer in zip(second, parallel(second, then, max_concurrency, cancel), strict=True):
        (opened if what == "openapi" else labelled)[key] = answer
    out: dict[tuple[str, ...], Probe | NotRun] = {}
    for key, v in versions.items():
        if isinstance(v, NotRun):
            out[key] = v
            continue
        live = lives.get(key)
        text = v if isinstance(v, str) else None
        release = firsts[key].engine.release(text)
        routes = opened.get(key)
        labels = labelled.get(key)
        out[key] = Probe(
            version=text,
            failure=v if isinstance(v, CallFailure) else (
                CallFailure("unknown-build", f"{text!r} is not a release this tool knows")
                if release is None else None),
            live=live if isinstance(live, LiveConfig) else None,
            live_failure=(live if isinstance(live, str) else
                          "an older vLLM's /server_info has no JSON form (config_format from 0.11.0)"
                          if isinstance(live, LiveConfig) and not live.readable and release is not None
                          and release < CONFIG_FORMAT_SINCE else None),
            routes=routes if isinstance(routes, RouteSet) else None,
            engines=labels if isinstance(labels, tuple) else None,
            engines_failure=labels if isinstance(labels, str) else None,
        )
    return out


def apply_probe(pod: VllmPod, probe: Probe | NotRun) -> VllmPod:
    """The pod as the running server describes it: its version, the live connectors and
    tiers where ``/server_info`` was read (the live answer wins; a disagreement becomes a note,
    :func:`~kubectl_kvreset.engines.vllm.liveconfig.reconcile`), and the data-parallel engine count where
    ``/metrics`` was read (its ``engine`` labels win over the serve flags; a disagreement, or a
    ``/metrics`` that could not be read, is noted, and a count neither source establishes stays
    in ``serve.engines_unknown``, :func:`~kubectl_kvreset.engines.vllm.api.engine_count`)."""
    if isinstance(probe, NotRun):
        return pod
    notes = list(pod.notes)
    layout = pod.layout
    if probe.live is not None:
        env = dict(pod.serve.env) if pod.serve.env else {}
        layout, note = reconcile(pod.layout, probe.live, env, pod.serve.unevaluated)
        if note is not None:
            notes.append(note)
        if probe.live.readable:
            notes = [n for n in notes if "not read: a kv-transfer-config set there is unknown" not in n]
    serve = pod.serve
    if probe.live is not None and probe.live.readable and probe.live.model:
        # the running server's model_config.model is the name its caches use
        if serve.model_unknown or (serve.model and serve.model != probe.live.model):
            notes.append(f"the running server's model is {probe.live.model!r} (the pod spec names "
                         f"{serve.model!r}): the server's is used")
        serve = replace(serve, model=probe.live.model, model_unknown=None, model_live=True)
    if probe.engines is not None or probe.engines_failure is not None:
        counted = engine_count(serve.engines_per_port, probe.engines, unread=probe.engines_failure,
                               port=pod.ports[0].port if pod.ports else None, flags_unknown=serve.engines_unknown,
                               flags_secret=serve.engines_secret)
        if counted.note is not None:
            notes.append(counted.note)
        serve = replace(serve, engines_per_port=counted.count, engines_unknown=counted.unknown,
                        engines_secret=serve.engines_secret and counted.source == "flags")
    return replace(pod, layout=layout, version=probe.version, notes=tuple(notes), serve=serve)


def contradicts(version: str | None, first: ResetOutcome | None, engine: Engine | None = None) -> bool:
    """True when a pod's own reset answer does not fit the version its template reported
    (:meth:`~kubectl_kvreset.engines.base.Engine.answer_contradicts` of the pod's ``engine``,
    vLLM's by default: a ``{"success": ...}`` body from a release before 0.26, or an empty 200
    from 0.26 on, vllm PR #46893). Such a pod runs another build (a ``:latest`` image pulled
    again) and is probed on its own."""
    return (engine or engine_named(DEFAULT_ENGINE)).answer_contradicts(version, first)
