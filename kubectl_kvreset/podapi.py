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

import base64
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlencode

from .kube import ExecResult, HttpAnswer, Kube, KubeApiError, KubeConnectionError, status_message
from .vllm_api import ResetAnswer, ResetOutcome, read_reset_answer, version_from_body

VERSION_TIMEOUT_S = 10.0
METRICS_TIMEOUT_S = 15.0
RESET_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ReadAnswer:
    """The body ``text`` of a successful read, or the ``error`` that stopped it (one is None);
    ``status`` is vLLM's last HTTP status (None when it never answered), ``calls`` the number
    of requests made."""

    text: str | None
    error: str | None
    status: int | None = None
    calls: int = 1


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


class Transport(str, Enum):
    """How a request reaches a pod's port: the API server's pod proxy, ``pods/exec`` running
    Python's urllib inside the vLLM container (no curl needed), or ``pods/portforward``."""

    PROXY = "proxy"
    EXEC = "exec"
    PORT_FORWARD = "port-forward"


def permission(transport: Transport, method: str) -> str:
    """The RBAC a transport needs for an HTTP ``method``, as an error names it: the pod proxy is
    authorised by the proxied method (GET -> ``get``, POST -> ``create``); exec and port-forward
    by the WebSocket upgrade (``get`` on v1.32, ``create`` from 1.35: grant both)."""
    if transport is Transport.PROXY:
        return f"{'get' if method in ('GET', 'HEAD') else 'create'} on pods/proxy"
    resource = "pods/exec" if transport is Transport.EXEC else "pods/portforward"
    return f"get and create on {resource}"

#: The fixed program run through exec. It takes the method, URL and timeout as argv elements
#: (never interpolated into code or a shell), ignores proxy settings, and prints one JSON line.
EXEC_HTTP_SCRIPT = (
    "import base64,json,ssl,sys,urllib.error,urllib.request\n"
    "m,u,t=sys.argv[1],sys.argv[2],float(sys.argv[3])\n"
    "h=[urllib.request.ProxyHandler({})]\n"
    "if u.startswith('https:'):h.append(urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))\n"
    "o=urllib.request.build_opener(*h)\n"
    "r=urllib.request.Request(u,method=m,data=b'' if m=='POST' else None)\n"
    "try:\n"
    " x=o.open(r,timeout=t);c,b,ct=x.status,x.read(),x.headers.get('content-type','')\n"
    "except urllib.error.HTTPError as e:\n"
    " c,b,ct=e.code,e.read(),e.headers.get('content-type','')\n"
    "except Exception as e:\n"
    " print(json.dumps({'error':str(e)}));sys.exit(0)\n"
    "print(json.dumps({'status':c,'content_type':ct,'body':base64.b64encode(b).decode()}))\n"
)


@dataclass(frozen=True)
class PodRef:
    """Where to send a request: ``namespace``, ``pod`` name, the vLLM ``container`` (for exec)."""

    namespace: str
    pod: str
    container: str


class Transports:
    """The transports a run may use, in order, and what it learned about them.

    ``auto`` tries the pod proxy, then exec, then port-forward, moving on after a 403 and after
    an answer saying the API server cannot reach the pod (502/503 ``i/o timeout``, ``no route
    to host``). A refusal is remembered for the rest of the run per namespace, transport and
    verb (RBAC is per namespace, and the pod proxy's ``get`` and ``create`` are separate
    rights), so later calls skip it. Thread-safe.
    """

    def __init__(self, choice: str = "auto") -> None:
        self.order: tuple[Transport, ...] = (
            (Transport.PROXY, Transport.EXEC, Transport.PORT_FORWARD) if choice == "auto" else (Transport(choice),)
        )
        self.forbidden: set[tuple[str, Transport, str]] = set()
        self._lock = threading.Lock()

    @staticmethod
    def _key(namespace: str, transport: Transport, method: str) -> tuple[str, Transport, str]:
        verb = ("get" if method in ("GET", "HEAD") else "create") if transport is Transport.PROXY else "upgrade"
        return namespace, transport, verb

    def usable(self, namespace: str = "", method: str = "GET") -> list[Transport]:
        """Transports not yet refused for this namespace and method, in order."""
        with self._lock:
            return [t for t in self.order if self._key(namespace, t, method) not in self.forbidden]

    def refuse(self, transport: Transport, namespace: str = "", method: str = "GET") -> None:
        """Remember that the API server refused ``transport`` (403) for this namespace and method."""
        with self._lock:
            self.forbidden.add(self._key(namespace, transport, method))

    def all_refused(self, namespace: str, method: str) -> bool:
        """True when every transport was refused for this namespace and method."""
        return not self.usable(namespace, method)


def _call_one(kube: Kube, ref: PodRef, port: int, method: str, path: str, query: Sequence[tuple[str, str]],
              scheme: str, timeout_s: float, transport: Transport) -> HttpAnswer | CallFailure:
    bound = _bounded(kube, timeout_s)
    if transport is Transport.PROXY:
        try:
            answer = kube.pod_proxy(ref.namespace, ref.pod, port, method, path, query, scheme=scheme, timeout_s=bound)
        except KubeConnectionError as exc:
            if "no answer" in str(exc):
                return CallFailure("timeout", f"{ref.pod}:{port} did not answer {method} {path} within {bound:g} s")
            return CallFailure("apiserver", str(exc))
        if not answer.from_apiserver:
            return answer
        reason, message = status_message(answer.body)
        return _failure_from_status(answer.status, reason, message, transport, method)
    if transport is Transport.EXEC:
        url = f"{scheme}://localhost:{port}{path}" + ("?" + urlencode(list(query)) if query else "")
        try:
            result = kube.exec_command(ref.namespace, ref.pod, ref.container,
                                       ["python3", "-c", EXEC_HTTP_SCRIPT, method, url, f"{bound:g}"],
                                       timeout_s=bound + 5)
        except KubeApiError as exc:
            return _failure_from_status(exc.status, exc.reason, exc.message, transport, method)
        except KubeConnectionError as exc:
            return CallFailure("apiserver", str(exc))
        return _read_exec_answer(result)
    try:
        return kube.port_forward_http(ref.namespace, ref.pod, port, method, path, query, timeout_s=bound)
    except KubeApiError as exc:
        return _failure_from_status(exc.status, exc.reason, exc.message, transport, method)
    except KubeConnectionError as exc:
        return CallFailure("unreachable", str(exc))


def _failure_from_status(status: int, reason: str, message: str, transport: Transport, method: str) -> CallFailure:
    if status == 403:
        return CallFailure("forbidden", f"{message} (needs {permission(transport, method)})")
    if status == 404:
        return CallFailure("pod-gone", message or "pod not found")
    if status in (502, 503, 504):
        kind = "refused" if "connection refused" in message else "unreachable"
        return CallFailure(kind, message or f"{status} {reason}")
    if status == 401:
        return CallFailure("apiserver-error", f"{message or 'Unauthorized'} (401: the credentials were refused)")
    return CallFailure("apiserver-error", f"{status} {reason}: {message}")


def _read_exec_answer(result: ExecResult) -> HttpAnswer | CallFailure:
    if result.timed_out:
        return CallFailure("unreachable", f"exec: {result.message}")
    if result.exit_code != 0:
        text = (result.message or "") + " " + result.stderr.decode("utf-8", "replace")[-200:]
        if "executable file not found" in text or "No such file" in text or result.exit_code == 127:
            return CallFailure("no-python", "exec: python3 is not in the vLLM container")
        if result.exit_code is None:
            return CallFailure("exec-failed", f"exec stream ended without an exit status: {text.strip()[:200]}")
        return CallFailure("exec-failed", f"exec ended with exit code {result.exit_code}: {text.strip()[:200]}")
    try:
        doc = json.loads(result.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        shown = result.stdout[:120].decode("utf-8", "replace").strip() or "nothing"
        return CallFailure("exec-failed", f"exec printed no answer (stdout: {shown})")
    if "error" in doc:
        err = str(doc["error"])
        kind = "refused" if "refused" in err.lower() else "unreachable"
        return CallFailure(kind, f"exec: {err}")
    body = base64.b64decode(doc.get("body") or "")
    return HttpAnswer(int(doc["status"]), {"content-type": str(doc.get("content_type") or "")}, body)


def call(kube: Kube, namespace: str, pod: str, port: int, method: str, path: str,
         query: Sequence[tuple[str, str]] = (), *, scheme: str = "http", timeout_s: float,
         container: str = "", transports: Transports | None = None,
         wait_ready: Callable[[], bool] | None = None) -> HttpAnswer | CallFailure:
    """One HTTP call to ``pod:port`` over the first transport that works, no retries of the
    pod's own answers.

    Falls through to the next transport after a 403 (remembered for the run) or an answer
    saying the pod cannot be reached; a 503 ``connection refused`` (the port is not listening
    yet) calls ``wait_ready`` (bounded by the caller, e.g. 60 s for the pod to be Ready) and
    retries once on the same transport. Returns vLLM's answer (any status), or the
    :class:`CallFailure` of the last transport tried; when every transport was refused the
    failure names every permission.
    """
    chooser = transports or Transports("proxy")
    ref = PodRef(namespace, pod, container)
    last: CallFailure = CallFailure("forbidden", "no transport allowed")
    usable = chooser.usable(namespace, method)
    if not usable:
        return _all_forbidden(chooser, method)
    for transport in usable:
        got = _call_one(kube, ref, port, method, path, query, scheme, timeout_s, transport)
        if isinstance(got, CallFailure) and got.kind == "refused" and wait_ready is not None and wait_ready():
            got = _call_one(kube, ref, port, method, path, query, scheme, timeout_s, transport)
        if not isinstance(got, CallFailure):
            return got
        last = got
        if got.kind == "forbidden":
            chooser.refuse(transport, namespace, method)
            continue
        if got.kind in ("unreachable", "no-python", "exec-failed"):
            continue
        return got
    if chooser.all_refused(namespace, method):
        return _all_forbidden(chooser, method)
    return last


def _all_forbidden(chooser: Transports, method: str) -> CallFailure:
    needs = "; or ".join(permission(t, method) for t in chooser.order)
    return CallFailure("forbidden", f"every transport was refused: needs {needs}")


class PodCaller:
    """Calls to pods for one run: the connection, the :class:`Transports` it may use, and how
    long to wait for a pod to become Ready after ``connection refused`` (``ready_wait_s``)."""

    def __init__(self, kube: Kube, transports: Transports | None = None, *, ready_wait_s: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep, stop: Callable[[], bool] = lambda: False) -> None:
        self.kube = kube
        self.transports = transports or Transports("auto")
        self.ready_wait_s = ready_wait_s
        self.sleep = sleep
        self.stop = stop

    def call(self, ref: PodRef, port: int, method: str, path: str, query: Sequence[tuple[str, str]] = (),
             *, scheme: str = "http", timeout_s: float) -> HttpAnswer | CallFailure:
        """See :func:`call`."""
        return call(self.kube, ref.namespace, ref.pod, port, method, path, query, scheme=scheme,
                    timeout_s=timeout_s, container=ref.container, transports=self.transports,
                    wait_ready=lambda: self.wait_ready(ref))

    def wait_ready(self, ref: PodRef) -> bool:
        """Poll the pod until its Ready condition is True, up to ``ready_wait_s``; False when it
        is gone or never became Ready."""
        deadline = time.monotonic() + self.ready_wait_s
        while True:
            try:
                pod = self.kube.get_object("v1", "pods", ref.namespace, ref.pod)
            except KubeApiError:
                return False
            except KubeConnectionError:
                pod = {}
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                return True
            if time.monotonic() >= deadline or self.stop():
                return False
            self.sleep(1.0)


def probe_version(caller: PodCaller, ref: PodRef, port: int, *, scheme: str = "http",
                  attempts: int = 3) -> str | CallFailure:
    """``GET /version`` (not dev-gated, every vLLM since 0.7): the version string, or why not.

    A vLLM answer that is not ``{"version": ...}`` gives ``CallFailure("no-version", ...)``.
    """
    last: HttpAnswer | CallFailure = CallFailure("unreachable", "not tried")
    for attempt in range(attempts):
        last = caller.call(ref, port, "GET", "/version", scheme=scheme, timeout_s=VERSION_TIMEOUT_S)
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
            caller.sleep(0.5 * 2**attempt)
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


def reset(caller: PodCaller, ref: PodRef, port: int, route: str, query: Sequence[tuple[str, str]],
          *, scheme: str = "http", attempts: int = 3, busy_timeout_s: float = 30.0,
          clock: Callable[[], float] = time.monotonic) -> ResetResult:
    """POST a reset route (``/reset_prefix_cache`` with ``query``, ``/reset_mm_cache``, ...) on
    one port, applying the module's retry rules. Never raises for cluster answers."""
    sleep = caller.sleep
    start = clock()
    calls = busy = errors = 0
    delay = 0.25
    while True:
        if calls and caller.stop():
            return ResetResult(route, None, CallFailure("interrupted", "interrupted while retrying"), calls, busy,
                               clock() - start)
        calls += 1
        got = caller.call(ref, port, "POST", route, query, scheme=scheme, timeout_s=RESET_TIMEOUT_S)
        if isinstance(got, CallFailure):
            errors += 1
            if got.kind in ("forbidden", "pod-gone", "apiserver-error", "no-python") or errors >= attempts:
                return ResetResult(route, None, got, calls, busy, clock() - start)
            sleep(0.5 * 2 ** (errors - 1))
            continue
        answer = read_reset_answer(got.status, got.body, got.headers)
        if answer.outcome is ResetOutcome.BUSY:
            busy += 1
            remaining = busy_timeout_s - (clock() - start)
            if remaining <= 0:
                return ResetResult(route, answer, None, calls, busy, clock() - start)
            sleep(min(delay, remaining))  # the last try lands at the deadline
            delay = min(delay * 2, 2.0)
            continue
        if answer.retryable:
            errors += 1
            if errors < attempts:
                sleep(0.5 * 2 ** (errors - 1))
                continue
        return ResetResult(route, answer, None, calls, busy, clock() - start)


#: Failures of a read worth another try: the pod or the API server did not answer this time.
_TRANSIENT = ("unreachable", "refused", "apiserver")


def fetch_metrics(caller: PodCaller, ref: PodRef, port: int, *, scheme: str = "http",
                  attempts: int = 3) -> ReadAnswer:
    """``GET /metrics`` (each call bounded by ``METRICS_TIMEOUT_S``): the text, or why not.

    A read is idempotent, so vLLM's 5xx answers and lost connections (the proxy's 502/503, a
    refused connection, an API server that did not answer) are retried up to
    ``attempts`` calls in all, 0.5 s then 1 s apart; any other answer is final. The error
    says how many calls were made when more than one."""
    last: HttpAnswer | CallFailure = CallFailure("unreachable", "not tried")
    calls = 0
    for attempt in range(max(attempts, 1)):
        if attempt and caller.stop():
            break
        calls += 1
        last = caller.call(ref, port, "GET", "/metrics", scheme=scheme, timeout_s=METRICS_TIMEOUT_S)
        if isinstance(last, HttpAnswer):
            if last.status == 200:
                return ReadAnswer(last.text(), None, 200, calls)
            if last.status < 500:
                break
        elif last.kind not in _TRANSIENT:
            break
        if attempt + 1 < attempts:
            caller.sleep(0.5 * 2**attempt)
    tries = f" ({calls} tries)" if calls > 1 else ""
    if isinstance(last, CallFailure):
        return ReadAnswer(None, last.message + tries, None, calls)
    return ReadAnswer(None, f"GET /metrics answered {last.status}{tries}", last.status, calls)
