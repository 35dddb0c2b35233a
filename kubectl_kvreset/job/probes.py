"""What the running servers say, read once per owner and pod template: ``GET /version`` and,
where dev mode may be on, ``GET /server_info?config_format=json`` (both at the same time), then
``GET /openapi.json`` for an unknown build. Pods of one template run the same image and command,
so one pod answers for all; a pod whose own answers later contradict its template's is probed
again on its own (:func:`contradicts`).

API requests: at most three per template (one pod list is shared by every template), so a
Deployment of 64 replicas costs two or three probe calls in all, not 64 or 128.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..kube import HttpAnswer
from ..liveconfig import CONFIG_FORMAT_SINCE, LiveConfig, RouteSet, read_openapi, read_server_info, reconcile, release_version
from ..podapi import VERSION_TIMEOUT_S, CallFailure, PodCaller, PodRef, probe_version
from ..pods import VllmPod
from ..pool import Cancel, NotRun, parallel
from ..vllm_api import JSON_RESET_BODY_SINCE, ResetOutcome

#: Pod labels that name a pod template: a Deployment's ReplicaSet, a StatefulSet's or
#: DaemonSet's ControllerRevision, a LeaderWorkerSet's template revision.
TEMPLATE_LABELS = ("pod-template-hash", "controller-revision-hash", "leaderworkerset.sigs.k8s.io/template-revision-hash")


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
    """

    version: str | None
    failure: CallFailure | None
    live: LiveConfig | None = None
    live_failure: str | None = None
    routes: RouteSet | None = None


def _server_info(caller: PodCaller, pod: VllmPod) -> LiveConfig | str:
    port = pod.ports[0]
    got = caller.call(PodRef(pod.namespace, pod.name, pod.container), port.port, "GET", "/server_info",
                      [("config_format", "json")], scheme=port.scheme, timeout_s=VERSION_TIMEOUT_S)
    if isinstance(got, CallFailure):
        return got.message
    if got.status == 404:
        return "GET /server_info answered 404 (dev mode off)"
    if got.status != 200:
        return f"GET /server_info answered {got.status}"
    return read_server_info(got.body)


def _openapi(caller: PodCaller, pod: VllmPod) -> RouteSet | None:
    port = pod.ports[0]
    got = caller.call(PodRef(pod.namespace, pod.name, pod.container), port.port, "GET", "/openapi.json",
                      scheme=port.scheme, timeout_s=VERSION_TIMEOUT_S)
    if isinstance(got, HttpAnswer) and got.status == 200:
        return read_openapi(got.body)
    return None


def probe_pods(caller: PodCaller, pods: Sequence[VllmPod], max_concurrency: int, cancel: Cancel | None,
               dev_mode_on: Callable[[VllmPod], bool | None]) -> list[Probe | NotRun]:
    """Probe one pod per template (:func:`template_key`) and give each pod its template's
    :class:`Probe` (same order as ``pods``). ``/version`` and ``/server_info`` go out at the
    same time (``/server_info`` only where ``dev_mode_on`` is not False); ``/openapi.json``
    follows for a template whose build is unknown (:func:`~kubectl_kvreset.liveconfig.release_version`).
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
                    cancel: Cancel | None, dev_mode_on: Callable[[VllmPod], bool | None]) -> dict[tuple[str, ...], Probe | NotRun]:
    """The :class:`Probe` of each template key, read on the pod given for it (see :func:`probe_pods`)."""
    units: list[tuple[tuple[str, ...], str]] = [(k, "version") for k in firsts]
    units += [(k, "server_info") for k, pod in firsts.items() if dev_mode_on(pod) is not False]

    def one(unit: tuple[tuple[str, ...], str]) -> str | CallFailure | LiveConfig:
        pod = firsts[unit[0]]
        if unit[1] == "version":
            return probe_version(caller, PodRef(pod.namespace, pod.name, pod.container), pod.ports[0].port,
                                 scheme=pod.ports[0].scheme)
        return _server_info(caller, pod)

    answers = parallel(units, one, max_concurrency, cancel)
    versions: dict[tuple[str, ...], str | CallFailure | NotRun] = {}
    lives: dict[tuple[str, ...], LiveConfig | str | NotRun] = {}
    for (key, what), got in zip(units, answers, strict=True):
        if what == "version":
            versions[key] = got  # type: ignore[assignment]
        else:
            lives[key] = got  # type: ignore[assignment]
    unknown = [k for k, v in versions.items() if not isinstance(v, NotRun)
               and release_version(v if isinstance(v, str) else None) is None]
    opened = dict(zip(unknown, parallel(unknown, lambda k: _openapi(caller, firsts[k]), max_concurrency, cancel),
                      strict=True))
    out: dict[tuple[str, ...], Probe | NotRun] = {}
    for key, v in versions.items():
        if isinstance(v, NotRun):
            out[key] = v
            continue
        live = lives.get(key)
        text = v if isinstance(v, str) else None
        release = release_version(text)
        routes = opened.get(key)
        out[key] = Probe(
            version=text,
            failure=v if isinstance(v, CallFailure) else (
                CallFailure("unknown-build", f"{text!r} is not a release this tool knows") if release is None else None),
            live=live if isinstance(live, LiveConfig) else None,
            live_failure=(live if isinstance(live, str) else
                          "an older vLLM's /server_info has no JSON form (config_format from 0.11.0)"
                          if isinstance(live, LiveConfig) and not live.readable and release is not None
                          and release < CONFIG_FORMAT_SINCE else None),
            routes=None if isinstance(routes, NotRun) else routes,
        )
    return out


def apply_probe(pod: VllmPod, probe: Probe | NotRun) -> VllmPod:
    """The pod as the running server describes it: its version, and the live connectors and
    tiers where ``/server_info`` was read (the live answer wins; a disagreement becomes a note,
    :func:`~kubectl_kvreset.liveconfig.reconcile`)."""
    if isinstance(probe, NotRun):
        return pod
    notes = list(pod.notes)
    layout = pod.layout
    if probe.live is not None:
        env = dict(pod.serve.env) if pod.serve.env else {}
        layout, note = reconcile(pod.layout, probe.live, env)
        if note is not None:
            notes.append(note)
        if probe.live.readable:
            notes = [n for n in notes if "not read: a kv-transfer-config set there is unknown" not in n]
    return replace(pod, layout=layout, version=probe.version, notes=tuple(notes))


def contradicts(version: str | None, first: ResetOutcome | None) -> bool:
    """True when a pod's own reset answer does not fit the version its template reported: a
    ``{"success": ...}`` body from a release before 0.26, or an empty 200 from 0.26 on (vllm PR
    #46893). Such a pod runs another build (a ``:latest`` image pulled again) and is probed on
    its own."""
    release = release_version(version)
    if first in (ResetOutcome.CLEARED, ResetOutcome.BUSY):
        return release is not None and release < JSON_RESET_BODY_SINCE
    if first is ResetOutcome.UNCONFIRMED:
        return release is not None and release >= JSON_RESET_BODY_SINCE
    return False
