"""Calls to a pod's vLLM HTTP API through the API server's pod proxy, with the retry rules
this tool applies to them.

Time bounds (each call, on top of ``--request-timeout`` when that is shorter):
``GET /version`` 10 s, ``GET /metrics`` 15 s, each reset call 30 s.

Size caps (each answer, over every transport; reading stops at the cap, so a hostile or
broken server cannot make this process hold more, and the call fails with kind
``too-large`` naming the pod, port, route and cap): ``/metrics`` 8 MiB (a real vLLM's is
about 20 KB per engine: some hundred KB with many engines), ``/server_info`` and
``/openapi.json`` 4 MiB (some hundred KB at most), ``/version`` and the reset answers
64 KiB (a few bytes of JSON), anything else 16 MiB.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlencode

from .engines import DEFAULT_ENGINE, Engine, engine_named
from .engines.base import ResetAnswer, ResetOutcome, ServeConfig
from .kube import (
    ExecResult,
    HttpAnswer,
    Kube,
    KubeAnswerTooLarge,
    KubeApiError,
    KubeConnectionError,
    size_text,
    status_message,
)
from .permissions import Permission, from_forbidden

VERSION_TIMEOUT_S = 10.0
METRICS_TIMEOUT_S = 15.0
RESET_TIMEOUT_S = 30.0

#: Caps on answers read from a pod, bytes (see the module docstring for the sizes they fit).
METRICS_MAX_BYTES = 8 << 20
SERVER_INFO_MAX_BYTES = 4 << 20
OPENAPI_MAX_BYTES = 4 << 20
VERSION_MAX_BYTES = 64 << 10
RESET_MAX_BYTES = 64 << 10
DEFAULT_MAX_BYTES = 16 << 20


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
    refused), ``apiserver`` (the API server did not answer), ``apiserver-error`` or
    ``too-large`` (the answer passed its size cap: reading stopped, nothing of it is used);
    ``message`` is fit for a report row."""

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

#: The fixed program run through exec. It takes the method, URL, timeout, size cap and, for a
#: request with a body, the body (base64) and headers (a JSON object) as argv elements (never
#: interpolated into code or a shell), ignores proxy settings, reads at most the cap plus one
#: byte of the answer, and prints one JSON line.
EXEC_HTTP_SCRIPT = (
    "import base64,json,ssl,sys,urllib.error,urllib.request\n"
    "m,u,t=sys.argv[1],sys.argv[2],float(sys.argv[3])\n"
    "n=int(sys.argv[4]) if len(sys.argv)>4 else -1\n"
    "h=[urllib.request.ProxyHandler({})]\n"
    "if u.startswith('https:'):h.append(urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))\n"
    "o=urllib.request.build_opener(*h)\n"
    "d=base64.b64decode(sys.argv[5]) if len(sys.argv)>5 else b''\n"
    "hd=json.loads(sys.argv[6]) if len(sys.argv)>6 else {}\n"
    "r=urllib.request.Request(u,method=m,data=d if m=='POST' else None,headers=hd)\n"
    "try:\n"
    " x=o.open(r,timeout=t);c,b,ct=x.status,x.read(n+1 if n>=0 else -1),x.headers.get('content-type','')\n"
    "except urllib.error.HTTPError as e:\n"
    " c,b,ct=e.code,e.read(n+1 if n>=0 else -1),e.headers.get('content-type','')\n"
    "except Exception as e:\n"
    " print(json.dumps({'error':str(e)}));sys.exit(0)\n"
    "if n>=0 and len(b)>n:\n"
    " print(json.dumps({'too_large':n}));sys.exit(0)\n"
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


def too_large(ref: PodRef, port: int, method: str, path: str, limit: int, transport: Transport) -> CallFailure:
    """The ``too-large`` failure of an answer past its cap, naming the pod, port, route, cap."""
    via = "" if transport is Transport.PROXY else f" (over {transport.value})"
    return CallFailure("too-large", f"{method} {path} on {ref.namespace}/{ref.pod}:{port}{via}: the answer is larger "
                       f"than the {size_text(limit)} cap for this route; reading stopped there and nothing of it "
                       "was used")


@dataclass(frozen=True)
class Payload:
    """A request's JSON ``body`` (bytes) and its extra ``headers`` (e.g. vLLM's
    ``X-data-parallel-rank``); ``Content-Type: application/json`` is added."""

    body: bytes
    headers: tuple[tuple[str, str], ...] = ()

    def all_headers(self) -> dict[str, str]:
        """The headers to send, ``Content-Type`` included."""
        return {"Content-Type": "application/json", **dict(self.headers)}


def _call_one(kube: Kube, ref: PodRef, port: int, method: str, path: str, query: Sequence[tuple[str, str]],
              scheme: str, timeout_s: float, transport: Transport,
              max_bytes: int = DEFAULT_MAX_BYTES, payload: Payload | None = None) -> HttpAnswer | CallFailure:
    bound = _bounded(kube, timeout_s)
    try:
        return _call_capped(kube, ref, port, method, path, query, scheme, bound, transport, max_bytes, payload)
    except KubeAnswerTooLarge:
        return too_large(ref, port, method, path, max_bytes, transport)


def _call_capped(kube: Kube, ref: PodRef, port: int, method: str, path: str, query: Sequence[tuple[str, str]],
                 scheme: str, bound: float, transport: Transport, max_bytes: int,
                 payload: Payload | None = None) -> HttpAnswer | CallFailure:
    if transport is Transport.PROXY:
        try:
            if payload is None:
                answer = kube.pod_proxy(ref.namespace, ref.pod, port, method, path, query, scheme=scheme,
                                        timeout_s=bound, max_bytes=max_bytes)
            else:
                answer = kube.pod_proxy(ref.namespace, ref.pod, port, method, path, query, scheme=scheme,
                                        timeout_s=bound, max_bytes=max_bytes, body=payload.body,
                                        content_type="application/json", headers=dict(payload.headers))
        except KubeAnswerTooLarge:
            raise
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
            # the answer comes back base64-encoded in one JSON line: 4/3 of the cap, plus room
            more = [] if payload is None else [base64.b64encode(payload.body).decode(),
                                               json.dumps(payload.all_headers())]
            result = kube.exec_command(ref.namespace, ref.pod, ref.container,
                                       ["python3", "-c", EXEC_HTTP_SCRIPT, method, url, f"{bound:g}", str(max_bytes),
                                        *more],
                                       timeout_s=bound + 5, max_output=max_bytes * 4 // 3 + (64 << 10))
        except KubeApiError as exc:
            return _failure_from_status(exc.status, exc.reason, exc.message, transport, method)
        except KubeAnswerTooLarge:
            raise
        except KubeConnectionError as exc:
            return CallFailure("apiserver", str(exc))
        got = _read_exec_answer(result)
        if isinstance(got, CallFailure) and got.kind == "too-large":
            raise KubeAnswerTooLarge(got.message, max_bytes)
        return got
    try:
        if payload is None:
            return kube.port_forward_http(ref.namespace, ref.pod, port, method, path, query, timeout_s=bound,
                                          max_bytes=max_bytes)
        return kube.port_forward_http(ref.namespace, ref.pod, port, method, path, query, timeout_s=bound,
                                      max_bytes=max_bytes, body=payload.body, headers=payload.all_headers())
    except KubeApiError as exc:
        return _failure_from_status(exc.status, exc.reason, exc.message, transport, method)
    except KubeAnswerTooLarge:
        raise
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
    if "too_large" in doc:
        return CallFailure("too-large", f"the answer is larger than {doc['too_large']} bytes")
    if "error" in doc:
        err = str(doc["error"])
        kind = "refused" if "refused" in err.lower() else "unreachable"
        return CallFailure(kind, f"exec: {err}")
    body = base64.b64decode(doc.get("body") or "")
    return HttpAnswer(int(doc["status"]), {"content-type": str(doc.get("content_type") or "")}, body)


@dataclass(frozen=True)
class NotReady:
    """Why the wait for a pod to become Ready ended without it: ``kind`` is ``forbidden`` (the
    API server refused ``get`` on the pod: ``message`` names the permission and its Role rule),
    ``gone`` or ``timeout``."""

    kind: str
    message: str


def call(kube: Kube, namespace: str, pod: str, port: int, method: str, path: str,
         query: Sequence[tuple[str, str]] = (), *, scheme: str = "http", timeout_s: float,
         container: str = "", transports: Transports | None = None,
         wait_ready: Callable[[], NotReady | None] | None = None,
         max_bytes: int = DEFAULT_MAX_BYTES, payload: Payload | None = None) -> HttpAnswer | CallFailure:
    """One HTTP call to ``pod:port`` over the first transport that works, no retries of the
    pod's own answers.

    Falls through to the next transport after a 403 (remembered for the run) or an answer
    saying the pod cannot be reached; a 503 ``connection refused`` (the port is not listening
    yet) calls ``wait_ready`` (bounded by the caller, e.g. 60 s for the pod to be Ready; None
    when it is Ready) and retries once on the same transport. Returns vLLM's answer (any
    status), or the :class:`CallFailure` of the last transport tried, which says why the wait
    ended (a refused wait is ``forbidden``, naming the permission); when every transport was
    refused the failure names every permission. ``max_bytes`` caps the answer (a ``too-large``
    failure past it, final: another transport would read the same answer). ``payload``: a
    JSON body and headers to send (every transport sends them).
    """
    chooser = transports or Transports("proxy")
    ref = PodRef(namespace, pod, container)
    last: CallFailure = CallFailure("forbidden", "no transport allowed")
    usable = chooser.usable(namespace, method)
    if not usable:
        return _all_forbidden(chooser, method, namespace)
    if payload is not None and any(k.lower() == "authorization" for k, _ in payload.headers):
        usable = [t for t in usable if t is not Transport.PROXY]  # the API server's proxy drops it (its own)
        if not usable:
            return CallFailure("forbidden", "the server wants an Authorization header, which the API server's pod "
                               "proxy does not pass on: use --transport exec or port-forward")
    for transport in usable:
        got = _call_one(kube, ref, port, method, path, query, scheme, timeout_s, transport, max_bytes, payload)
        if isinstance(got, CallFailure) and got.kind == "refused" and wait_ready is not None:
            not_ready = wait_ready()
            if not_ready is None:
                got = _call_one(kube, ref, port, method, path, query, scheme, timeout_s, transport, max_bytes,
                                payload)
            else:
                got = CallFailure("forbidden" if not_ready.kind == "forbidden" else got.kind,
                                  f"{got.message}; {not_ready.message}")
                if not_ready.kind == "forbidden":
                    return got  # another transport reaches the same port that is not listening
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
        return _all_forbidden(chooser, method, namespace)
    return last


def _all_forbidden(chooser: Transports, method: str, namespace: str = "") -> CallFailure:
    where = f" in namespace {namespace}" if namespace else ""
    needs = "; or ".join(permission(t, method) + where for t in chooser.order)
    first = Permission("get" if method in ("GET", "HEAD") else "create", "pods/proxy", "", namespace or None)
    if chooser.order[0] is not Transport.PROXY:
        first = Permission("create", "pods/exec" if chooser.order[0] is Transport.EXEC else "pods/portforward", "",
                           namespace or None)
    return CallFailure("forbidden", f"every transport was refused: needs {needs}; for the first, {first.advice()}")


class PodCaller:
    """Calls to pods for one run: the connection, the :class:`Transports` it may use, and how
    long to wait for a pod to become Ready after ``connection refused`` (``ready_wait_s``, in
    all for the pod: the deadline starts at its first wait and every later wait of the run,
    another route's or a retry's, ends at the same deadline)."""

    def __init__(self, kube: Kube, transports: Transports | None = None, *, ready_wait_s: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep, stop: Callable[[], bool] = lambda: False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.transports = transports or Transports("auto")
        self.ready_wait_s = ready_wait_s
        self.sleep = sleep
        self.stop = stop
        self.clock = clock
        self._deadlines: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def call(self, ref: PodRef, port: int, method: str, path: str, query: Sequence[tuple[str, str]] = (),
             *, scheme: str = "http", timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES,
             payload: Payload | None = None) -> HttpAnswer | CallFailure:
        """See :func:`call`."""
        return call(self.kube, ref.namespace, ref.pod, port, method, path, query, scheme=scheme,
                    timeout_s=timeout_s, container=ref.container, transports=self.transports,
                    wait_ready=lambda: self.wait_ready(ref), max_bytes=max_bytes, payload=payload)

    def ready_deadline(self, ref: PodRef) -> float:
        """The ``clock()`` time the waits for ``ref``'s pod end at: ``ready_wait_s`` after its first wait."""
        with self._lock:
            return self._deadlines.setdefault((ref.namespace, ref.pod), self.clock() + self.ready_wait_s)

    def wait_ready(self, ref: PodRef) -> NotReady | None:
        """Poll the pod (``get`` on it, about once a second) until its Ready condition is True,
        up to its :meth:`ready_deadline`: None when Ready, else why not (``forbidden``: the
        ``get`` was refused, named with the Role rule that allows it; ``gone``; ``timeout``)."""
        deadline = self.ready_deadline(ref)
        while True:
            try:
                pod = self.kube.get_object("v1", "pods", ref.namespace, ref.pod)
            except KubeApiError as exc:
                if exc.status == 403:
                    perm = from_forbidden(exc.message or str(exc)) or Permission("get", "pods", "", ref.namespace)
                    return NotReady("forbidden", perm.refused(f"to wait for pod {ref.pod} to become Ready"))
                return NotReady("gone", f"pod {ref.pod} could not be read while waiting for it: {exc}")
            except KubeConnectionError:
                pod = {}
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                return None
            if self.stop():
                return NotReady("timeout", f"the wait for pod {ref.pod} to become Ready was interrupted")
            left = deadline - self.clock()
            if left <= 0:
                return NotReady("timeout", f"pod {ref.pod} did not become Ready within {self.ready_wait_s:g} s")
            self.sleep(min(1.0, left))


def probe_version(caller: PodCaller, ref: PodRef, port: int, *, scheme: str = "http",
                  attempts: int = 3, engine: Engine | None = None) -> str | CallFailure:
    """``GET`` the ``engine``'s version route (vLLM's by default: ``/version``, not dev-gated,
    every vLLM since 0.7): the version string, or why not.

    An answer the engine reads no version from (vLLM: not ``{"version": ...}``) gives
    ``CallFailure("no-version", ...)``.
    """
    engine = engine or engine_named(DEFAULT_ENGINE)
    route = engine.version_route
    last: HttpAnswer | CallFailure = CallFailure("unreachable", "not tried")
    for attempt in range(attempts):
        last = caller.call(ref, port, "GET", route, scheme=scheme, timeout_s=VERSION_TIMEOUT_S,
                           max_bytes=VERSION_MAX_BYTES)
        if isinstance(last, HttpAnswer):
            if last.status == 200:
                version = engine.read_version(last.body)
                if version:
                    return version
            if last.status < 500:
                return CallFailure("no-version", f"GET {route} answered {last.status}")
        elif last.kind in ("forbidden", "pod-gone", "too-large"):
            return last
        if attempt + 1 < attempts:
            caller.sleep(0.5 * 2**attempt)
    if isinstance(last, HttpAnswer):
        return CallFailure("no-version", f"GET {route} answered {last.status}")
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
          clock: Callable[[], float] = time.monotonic,
          on_busy: Callable[[float], None] | None = None, engine: Engine | None = None,
          serve: ServeConfig | None = None, headers: Sequence[tuple[str, str]] = ()) -> ResetResult:
    """POST a reset route (``/reset_prefix_cache`` with ``query``, ``/reset_mm_cache``, ...) on
    one port, applying the module's retry rules; the server's answers are read by ``engine``
    (:meth:`~kubectl_kvreset.engines.base.Engine.read_reset_answer`; vLLM's by default). Never
    raises for cluster answers. ``on_busy``: called with the seconds left before the busy
    deadline each time the server answers busy and another try follows (a progress display).
    ``serve``: the command line its engine reads answers by (``read_reset_answer_for``); ``headers``:
    sent with each call (never logged in clear); a ``timeout`` query adds to :data:`RESET_TIMEOUT_S`."""
    chosen = engine or engine_named(DEFAULT_ENGINE)
    def read_answer(status: int, body: bytes, hdrs: Mapping[str, str] | None) -> ResetAnswer:
        if serve is None:
            return chosen.read_reset_answer(status, body, hdrs)
        return chosen.read_reset_answer_for(serve, status, body, hdrs)
    extra = {"payload": Payload(b"", tuple(headers))} if headers else {}  # vLLM's calls send none
    call_timeout = RESET_TIMEOUT_S + max([float(v) for k, v in query if k == "timeout"] or [0.0])
    sleep = caller.sleep
    start = clock()
    calls = busy = errors = 0
    delay = 0.25
    while True:
        if calls and caller.stop():
            return ResetResult(route, None, CallFailure("interrupted", "interrupted while retrying"), calls, busy,
                               clock() - start)
        calls += 1
        got = caller.call(ref, port, "POST", route, query, scheme=scheme, timeout_s=call_timeout,
                          max_bytes=RESET_MAX_BYTES, **extra)
        if isinstance(got, CallFailure):
            errors += 1
            if got.kind in ("forbidden", "pod-gone", "apiserver-error", "no-python", "too-large") or errors >= attempts:
                return ResetResult(route, None, got, calls, busy, clock() - start)
            sleep(0.5 * 2 ** (errors - 1))
            continue
        answer = read_answer(got.status, got.body, got.headers)
        if answer.outcome is ResetOutcome.BUSY:
            busy += 1
            remaining = busy_timeout_s - (clock() - start)
            if remaining <= 0:
                return ResetResult(route, answer, None, calls, busy, clock() - start)
            if on_busy is not None:
                on_busy(remaining)
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
        last = caller.call(ref, port, "GET", "/metrics", scheme=scheme, timeout_s=METRICS_TIMEOUT_S,
                           max_bytes=METRICS_MAX_BYTES)
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


#: Time bound of one canary completion (a one-token prefill of a few hundred tokens: 13-14 ms
#: on the CPU build; a loaded GPU server may queue it).
COMPLETION_TIMEOUT_S = 60.0
#: Cap on a completion's answer (one token: some hundred bytes).
COMPLETION_MAX_BYTES = 256 << 10


def post_json(caller: PodCaller, ref: PodRef, port: int, path: str, body: bytes, *,
              headers: Sequence[tuple[str, str]] = (), scheme: str = "http",
              attempts: int = 3) -> HttpAnswer | CallFailure:
    """POST a JSON ``body`` with extra ``headers`` (``/v1/completions`` with
    ``X-data-parallel-rank``), each call bounded by :data:`COMPLETION_TIMEOUT_S`. Lost
    connections and the proxy's 502/503 are retried (``attempts`` calls in all, 0.5 s then 1 s
    apart): the caller's request must be safe to repeat. vLLM's own answers, 5xx included, are
    returned as they are."""
    last: HttpAnswer | CallFailure = CallFailure("unreachable", "not tried")
    payload = Payload(body, tuple(headers))
    for attempt in range(max(attempts, 1)):
        if attempt and caller.stop():
            break
        last = caller.call(ref, port, "POST", path, (), scheme=scheme, timeout_s=COMPLETION_TIMEOUT_S,
                           max_bytes=COMPLETION_MAX_BYTES, payload=payload)
        if isinstance(last, HttpAnswer) or last.kind not in _TRANSIENT:
            return last
        if attempt + 1 < attempts:
            caller.sleep(0.5 * 2**attempt)
    return last
