"""Calls to a pod's vLLM HTTP API through the API server's pod proxy, with the retry rules
this tool applies to them.

Time bounds (each call, on top of ``--request-timeout`` when that is shorter):
``GET /version`` 10 s, ``GET /metrics`` 15 s, each reset call 30 s.

Retry rules: a reset is idempotent (vLLM ``reset_prefix_cache`` only drops hashes), so vLLM's
own 5xx answers, lost connections and the proxy's 502/503 are retried up to ``attempts`` times
with exponential backoff; ``{"success": false}`` (blocks still held) is retried until
``busy_timeout_s``; every other answer is final. A 403 from the API server names the RBAC
permission that is missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .kube import HttpAnswer, Kube, KubeConnectionError, status_message
from .vllm_api import ResetAnswer, ResetOutcome, read_reset_answer, version_from_body

VERSION_TIMEOUT_S = 10.0
METRICS_TIMEOUT_S = 15.0
RESET_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ReadAnswer:
    """The body ``text`` of a successful read, or the ``error`` that stopped it (one is None)."""

    text: str | None
    error: str | None


@dataclass(frozen=True)
class CallFailure:
    """Why a call produced no vLLM answer: ``kind`` is ``forbidden`` (403 from the API server),
    ``pod-gone`` (404 for the pod), ``unreachable`` (proxy 502/503, i/o timeout, connection
    refused), ``apiserver`` (the API server did not answer) or ``apiserver-error``; ``message``
    is fit for a report row."""

    kind: str
    message: str


def _bounded(kube: Kube, own: float) -> float:
    return min(own, kube.timeout_s) if kube.timeout_s else own


def call(kube: Kube, namespace: str, pod: str, port: int, method: str, path: str,
         query: Sequence[tuple[str, str]] = (), *, scheme: str = "http", timeout_s: float) -> HttpAnswer | CallFailure:
    """One HTTP call to ``pod:port`` through the pod proxy, no retries.

    Returns vLLM's answer (any status), or a :class:`CallFailure` when the API server answered
    for itself or not at all.
    """
    try:
        answer = kube.pod_proxy(namespace, pod, port, method, path, query, scheme=scheme, timeout_s=_bounded(kube, timeout_s))
    except KubeConnectionError as exc:
        return CallFailure("apiserver", str(exc))
    if not answer.from_apiserver:
        return answer
    reason, message = status_message(answer.body)
    if answer.status == 403:
        verb = "create" if method != "GET" else "get"
        return CallFailure("forbidden", f"{message} (needs {verb} on pods/proxy)")
    if answer.status == 404:
        return CallFailure("pod-gone", message or f"pod {pod} not found")
    if answer.status in (502, 503, 504):
        return CallFailure("unreachable", message or f"{answer.status} {reason}")
    return CallFailure("apiserver-error", f"{answer.status} {reason}: {message}")


def probe_version(kube: Kube, namespace: str, pod: str, port: int, *, scheme: str = "http",
                  attempts: int = 3, sleep: Callable[[float], None] = time.sleep) -> str | CallFailure:
    """``GET /version`` (not dev-gated, every vLLM since 0.7): the version string, or why not.

    A vLLM answer that is not ``{"version": ...}`` gives ``CallFailure("no-version", ...)``.
    """
    last: HttpAnswer | CallFailure = CallFailure("unreachable", "not tried")
    for attempt in range(attempts):
        last = call(kube, namespace, pod, port, "GET", "/version", scheme=scheme, timeout_s=VERSION_TIMEOUT_S)
        if isinstance(last, HttpAnswer):
            if last.status == 200:
                version = version_from_body(last.body)
                if version:
                    return version
            if last.status < 500:
                return CallFailure("no-version", f"GET /version answered {last.status}")
        elif last.kind in ("forbidden", "pod-gone"):
            return last
        if attempt + 1 < attempts:
            sleep(0.5 * 2**attempt)
    if isinstance(last, HttpAnswer):
        return CallFailure("no-version", f"GET /version answered {last.status}")
    return last


@dataclass(frozen=True)
class ResetResult:
    """How a reset route ended on one port after retries: the final ``answer`` (or
    ``failure`` when vLLM never answered), the number of ``calls`` made and ``busy_answers``
    seen, and the ``elapsed_s`` seconds."""

    route: str
    answer: ResetAnswer | None
    failure: CallFailure | None
    calls: int
    busy_answers: int
    elapsed_s: float

    @property
    def outcome(self) -> ResetOutcome | None:
        """The final vLLM outcome, None when vLLM never answered."""
        return self.answer.outcome if self.answer else None


def reset(kube: Kube, namespace: str, pod: str, port: int, route: str, query: Sequence[tuple[str, str]],
          *, scheme: str = "http", attempts: int = 3, busy_timeout_s: float = 30.0,
          sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> ResetResult:
    """POST a reset route (``/reset_prefix_cache`` with ``query``, ``/reset_mm_cache``, ...) on
    one port, applying the module's retry rules. Never raises for cluster answers."""
    start = clock()
    calls = busy = errors = 0
    delay = 0.25
    while True:
        calls += 1
        got = call(kube, namespace, pod, port, "POST", route, query, scheme=scheme, timeout_s=RESET_TIMEOUT_S)
        if isinstance(got, CallFailure):
            errors += 1
            if got.kind in ("forbidden", "pod-gone", "apiserver-error") or errors >= attempts:
                return ResetResult(route, None, got, calls, busy, clock() - start)
            sleep(0.5 * 2 ** (errors - 1))
            continue
        answer = read_reset_answer(got.status, got.body, got.headers)
        if answer.outcome is ResetOutcome.BUSY:
            busy += 1
            if clock() - start + delay > busy_timeout_s:
                return ResetResult(route, answer, None, calls, busy, clock() - start)
            sleep(delay)
            delay = min(delay * 2, 2.0)
            continue
        if answer.retryable:
            errors += 1
            if errors < attempts:
                sleep(0.5 * 2 ** (errors - 1))
                continue
        return ResetResult(route, answer, None, calls, busy, clock() - start)


def fetch_metrics(kube: Kube, namespace: str, pod: str, port: int, *, scheme: str = "http") -> ReadAnswer:
    """``GET /metrics`` once (bounded by ``METRICS_TIMEOUT_S``): the text, or why not."""
    got = call(kube, namespace, pod, port, "GET", "/metrics", scheme=scheme, timeout_s=METRICS_TIMEOUT_S)
    if isinstance(got, CallFailure):
        return ReadAnswer(None, got.message)
    if got.status != 200:
        return ReadAnswer(None, f"GET /metrics answered {got.status}")
    return ReadAnswer(got.text(), None)
