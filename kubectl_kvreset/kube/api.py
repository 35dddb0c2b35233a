"""The connection to one cluster (:class:`Kube`): requests with retries and bounds, lists and
watches, and the pod-side calls (proxy, exec, port-forward) built on :mod:`.streams`.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from .client import client_parts
from .connect import ConfigLoader
from .credentials import _detail, credential_error
from .errors import (
    _HEAD_ALLOWANCE,
    CONNECTION_RETRIES,
    EXEC_OUTPUT_MAX_BYTES,
    MAX_RETRIES,
    POD_ANSWER_MAX_BYTES,
    HttpAnswer,
    KubeAnswerTooLarge,
    KubeApiError,
    KubeConfigError,
    KubeConnectionError,
    KubeFlags,
    _http_reason,
    _short,
    _too_large,
    is_apiserver_status,
    resource_path,
    retry_after_seconds,
    status_message,
)
from .kubeconfig import parse_duration
from .streams import ExecResult, _exec, _port_forward_http, _port_forward_socket, parse_http_response
from .transport import Transport, _KeepAlive

_LOG = logging.getLogger("kubectl_kvreset")

@dataclass
class Kube:
    """A connection to one cluster as the user's kubeconfig and flags describe it.

    Create with :meth:`connect`. Thread-safe: the urllib3 pool is shared, sized by
    ``pool_size``. Every request is bounded by ``timeout_s`` (None: unbounded, ``--request-timeout=0``).
    """

    host: str
    namespace: str
    context: str
    timeout_s: float | None
    _transport: Any
    _headers: dict[str, str] = field(default_factory=dict)
    _impersonate_groups: tuple[str, ...] = ()
    _reload: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    retries_made: int = 0
    #: the kubeconfig user's name and entry (for credential messages)
    user_name: str = ""
    _user: Mapping[str, Any] = field(default_factory=dict)
    #: the last credential refresh's failure, said again if the API server then answers 401
    _refresh_failure: str | None = None
    #: the kubeconfig cluster's name (``--cluster`` or the context's), ``(in-cluster)`` inside a pod
    cluster: str = ""

    @classmethod
    def connect(cls, flags: KubeFlags, *, pool_size: int = 16) -> Kube:
        """Resolve the kubeconfig (or the in-cluster config) and build a client whose pool
        holds at most ``pool_size`` keep-alive connections (``--max-concurrency``).

        Credentials are obtained here, before any request: an exec credential plugin runs now.

        Raises:
            KubeCredentialError: the user's exec plugin or auth provider failed (one message
                naming the user, the context, the command and its ``installHint``).
            KubeConfigError: no usable kubeconfig, an unknown context, a bad flag value.
        """
        timeout = parse_duration(flags.request_timeout)
        loader = ConfigLoader.for_flags(flags, client_parts(), timeout)

        transport_box: list[Transport] = []

        def reload() -> Any:
            try:
                configuration = loader.load()[0]
            except KubeConfigError as exc:
                raise KubeConnectionError(
                    f"the API server refused the credentials (401) and rebuilding them failed: {exc}") from exc
            old = transport_box[0]
            if (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file,
                    bool(configuration.verify_ssl)) == old.tls_material:
                old.configuration = configuration  # same TLS material: keep the pool and its connections
                return old
            fresh = Transport(configuration, old.pool_size)
            transport_box[0] = fresh
            return fresh

        configuration, namespace, ctx_name = loader.load()
        try:
            transport = Transport(configuration, pool_size)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise KubeConfigError(f"kubeconfig context {ctx_name!r}: cannot use its TLS files: {exc}") from exc
        transport_box.append(transport)
        headers: dict[str, str] = {"User-Agent": "kubectl-kvreset"}
        if flags.impersonate:
            headers["Impersonate-User"] = flags.impersonate
        kube = cls(
            host=configuration.host.rstrip("/"),
            namespace=namespace,
            context=ctx_name,
            timeout_s=timeout,
            _transport=transport,
            _headers=headers,
            _impersonate_groups=flags.impersonate_groups,
            _reload=reload,
            user_name=loader.user_name,
            _user=loader.user,
            cluster=loader.cluster or ("(from --server)" if flags.server else ""),
        )
        return kube

    def where(self, all_namespaces: bool = False) -> str:
        """``context "c", cluster "k" (https://host), namespace "ns"`` (``all namespaces`` with
        ``-A``), for the confirmation prompt and the ``-v`` line."""
        from ..redact import redact_url

        ns = "all namespaces" if all_namespaces else f'namespace "{self.namespace}"'
        return f'context "{self.context}", cluster "{self.cluster}" ({redact_url(self.host)}), {ns}'

    @property
    def pool_size(self) -> int:
        """How many keep-alive connections the pool holds at most."""
        return int(getattr(self._transport, "pool_size", 0))

    def _auth_headers(self) -> dict[str, str]:
        """``Authorization`` for the next request (refreshing an expired exec token first).
        A failed refresh is remembered and said if the API server then refuses the old token."""
        value, messages = self._transport.authorization()
        if messages:
            self._refresh_failure = credential_error(self.user_name, self._user, self.context, _detail(messages))
        return {"Authorization": value} if value else {}

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        content_type: str | None = None,
        accept: str = "application/json",
        timeout_s: float | None | bool = False,
        retry_server_errors: bool | None = None,
        max_bytes: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpAnswer:
        """Send a request to the API server and return its answer whatever the status.
        ``headers``: more request headers (a pod proxy passes them on to the pod).

        ``path`` is the URL path (already percent-encoded where needed); ``timeout_s`` False
        means the connection's bound (each attempt is bounded). ``max_bytes`` caps the body
        read (None: no cap, as for the API server's own lists); a longer answer raises
        :class:`KubeAnswerTooLarge` at once (never retried).

        Retries, bounded (client-go's rules for the same cases):

        - 429 ``TooManyRequests`` from the API server: the request was not processed, so any
          method is sent again after ``Retry-After`` seconds (capped at 10 s), up to
          :data:`MAX_RETRIES` times;
        - 401: the credentials are rebuilt from the kubeconfig once (an exec credential plugin
          or token file then gives a fresh token) and the request sent again;
        - the API server's own 500/502/503/504 and lost connections: only when
          ``retry_server_errors`` (default: GET and HEAD, which are idempotent), with
          exponential backoff. A PATCH or POST is never re-sent blindly: the caller re-reads.

        Raises:
            KubeConnectionError: connection refused, TLS failure, or the bound was hit (after
                the retries that apply).
        """
        import time

        retry_errors = method in ("GET", "HEAD") if retry_server_errors is None else retry_server_errors
        refreshed = False
        attempt = 0
        while True:
            try:
                answer = self._send(method, path, query=query, body=body, content_type=content_type,
                                    accept=accept, timeout_s=timeout_s, max_bytes=max_bytes, extra=headers)
            except KubeAnswerTooLarge:
                raise
            except KubeConnectionError:
                if not retry_errors or attempt >= CONNECTION_RETRIES:
                    raise
                attempt += 1
                self._count_retry()
                time.sleep(min(0.25 * 2**attempt, 4.0))
                continue
            if answer.status == 401 and not refreshed and self._reload is not None:
                refreshed = True
                self._transport = self._reload()
                self._count_retry()
                continue
            if answer.status == 401 and self._refresh_failure:
                raise KubeConnectionError(self._refresh_failure)
            if answer.status == 429 and answer.from_apiserver and attempt < MAX_RETRIES:
                attempt += 1
                self._count_retry()
                time.sleep(retry_after_seconds(answer.headers.get("retry-after"), attempt))
                continue
            if (retry_errors and answer.from_apiserver and answer.status in (500, 502, 503, 504)
                    and attempt < MAX_RETRIES):
                attempt += 1
                self._count_retry()
                time.sleep(min(0.25 * 2**attempt, 4.0))
                continue
            return answer

    def _count_retry(self) -> None:
        with self._lock:
            self.retries_made += 1

    def _send(self, method: str, path: str, *, query: Sequence[tuple[str, str]], body: bytes | None,
              content_type: str | None, accept: str, timeout_s: float | None | bool,
              max_bytes: int | None = None, extra: Mapping[str, str] | None = None) -> HttpAnswer:
        """One attempt of :meth:`request`."""
        headers = dict(self._headers)
        headers.update(extra or {})
        headers["Accept"] = accept
        if content_type:
            headers["Content-Type"] = content_type
        headers.update(self._auth_headers())
        target = path + "?" + urlencode(list(query)) if query else path
        url = self.host + target
        bound = self.timeout_s if timeout_s is False else timeout_s
        transport = self._transport
        keep_alive = getattr(transport, "keep_alive", None)
        if self._impersonate_groups:
            # urllib3 headers are a mapping: several Impersonate-Group values join with commas
            headers["Impersonate-Group"] = ",".join(self._impersonate_groups)
        started = time.monotonic()
        if _LOG.isEnabledFor(logging.DEBUG):
            from ..redact import is_secret_name

            # Authorization, Proxy-Authorization, Cookie, X-Api-Key: never their values
            shown = ", ".join(f"{k}: {'<redacted>' if is_secret_name(k) else v}" for k, v in headers.items())
            _LOG.debug("request headers: %s", shown)  # as kubectl -v=8 prints them, not a Python repr
        if keep_alive is not None:
            status, hdrs, data = self._send_keep_alive(keep_alive, method, path, target, body, headers, bound,
                                                       max_bytes)
        else:
            status, hdrs, data = self._send_urllib3(method, path, url, body, headers, bound, max_bytes)
        _LOG.info("%s %s %s in %.0f ms", method, url, status, (time.monotonic() - started) * 1000)
        return HttpAnswer(status, hdrs, data, from_apiserver=status >= 400 and is_apiserver_status(data, hdrs))

    def _send_keep_alive(self, keep_alive: _KeepAlive, method: str, path: str, target: str, body: bytes | None,
                         headers: dict[str, str], bound: float | None,
                         max_bytes: int | None = None) -> tuple[int, dict[str, str], bytes]:
        import http.client

        try:
            return keep_alive.request(method, target, body, headers, bound, max_bytes)
        except KubeAnswerTooLarge as exc:
            raise _too_large(f"{method} {path}", exc.limit) from exc
        except TimeoutError as exc:  # socket.timeout is TimeoutError
            limit = f"{bound:g} s (--request-timeout)" if bound else "30 s (connect)"
            raise KubeConnectionError(f"{method} {path}: no answer from {self.host} within {limit}") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise KubeConnectionError(
                f"cannot reach the API server at {self.host}: {_short(exc) or type(exc).__name__}") from exc

    def _send_urllib3(self, method: str, path: str, url: str, body: bytes | None, headers: dict[str, str],
                      bound: float | None, max_bytes: int | None = None) -> tuple[int, dict[str, str], bytes]:
        import urllib3

        transport = self._transport
        timeout = transport.timeout(bound) if isinstance(transport, Transport) else \
            (urllib3.Timeout(total=bound) if bound else urllib3.Timeout(connect=30.0))
        try:
            r = transport.pool.request(method, url, body=body, headers=headers, timeout=timeout, retries=False,
                                       preload_content=max_bytes is None)
            if max_bytes is not None:
                data = r.read(max_bytes + 1)
                if len(data) > max_bytes:
                    r.close()  # the rest is never read: the connection is dropped, not reused
                    raise _too_large(f"{method} {path}", max_bytes)
                r.release_conn()
                return r.status, {k.lower(): v for k, v in r.headers.items()}, data
        except urllib3.exceptions.NewConnectionError as exc:
            # a subclass of ConnectTimeoutError in urllib3 2.x: a refused connection is not a timeout
            raise KubeConnectionError(f"cannot reach the API server at {self.host}: {_short(exc)}") from exc
        except urllib3.exceptions.TimeoutError as exc:
            limit = f"{bound:g} s (--request-timeout)" if bound else "30 s (connect)"
            raise KubeConnectionError(f"{method} {path}: no answer from {self.host} within {limit}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise KubeConnectionError(f"cannot reach the API server at {self.host}: {_short(exc)}") from exc
        return r.status, {k.lower(): v for k, v in r.headers.items()}, r.data or b""

    def get_json(self, path: str, *, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        """GET an API path and decode its JSON.

        Raises:
            KubeApiError: a non-2xx answer (with the ``Status`` reason and message).
            KubeConnectionError: see :meth:`request`.
        """
        answer = self.request("GET", path, query=query)
        return self._decode(answer, "GET", path)

    def send_json(self, method: str, path: str, body: Any, *, content_type: str = "application/json",
                  query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        """Send a JSON body (POST, PUT, PATCH with its patch content type) and decode the answer.

        Raises:
            KubeApiError, KubeConnectionError: as :meth:`get_json`.
        """
        answer = self.request(method, path, query=query, body=json.dumps(body).encode(), content_type=content_type)
        return self._decode(answer, method, path)

    @staticmethod
    def _decode(answer: HttpAnswer, method: str, path: str) -> dict[str, Any]:
        if answer.status >= 300:
            reason, message = status_message(answer.body)
            raise KubeApiError(answer.status, reason or _http_reason(answer.status), message or f"{method} {path}",
                               answer.body)
        try:
            doc = json.loads(answer.body)
        except ValueError as exc:
            raise KubeApiError(answer.status, "BadResponse", f"{method} {path}: answer is not JSON",
                               answer.body) from exc
        if not isinstance(doc, dict):
            raise KubeApiError(answer.status, "BadResponse", f"{method} {path}: answer is not an object", answer.body)
        return doc

    def list_items(self, group_version: str, plural: str, namespace: str | None,
                   *, label_selector: str | None = None, field_selector: str | None = None) -> list[dict[str, Any]]:
        """List objects of one resource: ``group_version`` ``"v1"`` or ``"apps/v1"``; ``namespace``
        None lists across all namespaces. Returns the ``items`` (each with ``kind`` filled in).

        Raises:
            KubeApiError, KubeConnectionError: as :meth:`get_json`.
        """
        path = resource_path(group_version, plural, namespace)
        query: list[tuple[str, str]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        doc = self.get_json(path, query=query)
        kind = str(doc.get("kind", "")).removesuffix("List")
        items: list[dict[str, Any]] = doc.get("items") or []
        for item in items:
            item.setdefault("kind", kind)
        return items

    def get_object(self, group_version: str, plural: str, namespace: str | None, name: str) -> dict[str, Any]:
        """GET one object by name.

        Raises:
            KubeApiError: 404 ``NotFound`` when absent, 403 ``Forbidden``; KubeConnectionError.
        """
        return self.get_json(resource_path(group_version, plural, namespace) + "/" + quote(name, safe=""))

    def pod_proxy(self, namespace: str, pod: str, port: int, method: str, path: str,
                  query: Sequence[tuple[str, str]] = (), *, scheme: str = "http",
                  body: bytes | None = None, content_type: str | None = None,
                  timeout_s: float | None | bool = False, max_bytes: int | None = POD_ANSWER_MAX_BYTES,
                  headers: Mapping[str, str] | None = None) -> HttpAnswer:
        """Send an HTTP request to ``pod:port`` through the API server's pod proxy
        (``headers``: more request headers, which the proxy passes on to the pod).

        ``path`` starts with ``/`` (e.g. ``/reset_prefix_cache``); ``query`` is sent as the
        proxied request's query string; ``body`` with ``content_type`` (the API server passes
        the header on: a FastAPI server needs ``application/json`` to read a JSON body). URL form
        ``/api/v1/namespaces/NS/pods/[https:]POD:PORT/proxy/PATH`` (kubernetes PR #14876). The
        answer is the pod's own unless ``from_apiserver``.
        RBAC: ``create`` on ``pods/proxy`` for POST, ``get`` for GET, ``delete`` for DELETE.
        ``max_bytes`` caps the answer read (default :data:`POD_ANSWER_MAX_BYTES`).

        Raises:
            KubeAnswerTooLarge: the answer is longer than ``max_bytes`` (reading stopped there).
            KubeConnectionError: the API server itself could not be reached in time.
        """
        target = f"{scheme}:{pod}:{port}" if scheme == "https" else f"{pod}:{port}"
        url = (
            f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(target, safe=':')}/proxy"
            + quote(path, safe="/")
        )
        return self.request(method, url, query=query, body=body, accept="*/*", timeout_s=timeout_s,
                            retry_server_errors=False, content_type=content_type, max_bytes=max_bytes,
                            headers=headers)

    def exec_command(self, namespace: str, pod: str, container: str, argv: Sequence[str],
                     *, timeout_s: float = 60.0, max_output: int = EXEC_OUTPUT_MAX_BYTES) -> ExecResult:
        """Run ``argv`` (a list: never a shell string) in ``container`` of ``pod`` through
        ``pods/exec`` over WebSocket and wait for its exit status up to ``timeout_s``.
        ``max_output`` caps stdout and stderr together (bytes, default
        :data:`EXEC_OUTPUT_MAX_BYTES`): past it the stream is closed.

        RBAC: ``get`` and ``create`` on ``pods/exec`` (a v1.32 server authorises the WebSocket
        upgrade as ``get``; 1.35 requires ``create``, kubernetes PR #134577).

        Raises:
            KubeApiError: the upgrade was refused (403 Forbidden, 404 pod, 400 container).
            KubeAnswerTooLarge: the command printed more than ``max_output``.
            KubeConnectionError: the API server could not be reached.
        """
        return _exec(self, namespace, pod, container, argv, timeout_s, max_output)

    def port_forward_socket(self, namespace: str, pod: str, port: int, *, timeout_s: float = 30.0) -> socket.socket:
        """A connected stream socket whose bytes go to ``pod:port`` over ``pods/portforward``
        (WebSocket ``v4.channel.k8s.io``, as :meth:`port_forward_http`): one end of a
        ``socket.socketpair()``, the other end pumped to and from the stream by one daemon
        thread (:class:`ForwardLoop`: one ``selectors`` loop per stream, so the TLS connection is
        never used by two threads at once). Any client library that takes a socket (a RESP client,
        TLS wrapping) works on it; closing it ends the stream. ``timeout_s`` bounds the upgrade only.

        RBAC: ``get`` and ``create`` on ``pods/portforward``.

        Raises:
            KubeApiError: the upgrade was refused. KubeConnectionError: the API server could not
            be reached. A pod that refuses the port (text on the error channel) ends the stream:
            the socket then reads end of file.
        """
        return _port_forward_socket(self, namespace, pod, port, timeout_s)

    def port_forward_http(self, namespace: str, pod: str, port: int, method: str, path: str,
                          query: Sequence[tuple[str, str]] = (), *, timeout_s: float = 30.0,
                          max_bytes: int = POD_ANSWER_MAX_BYTES, body: bytes = b"",
                          headers: Mapping[str, str] | None = None) -> HttpAnswer:
        """Send one HTTP request to ``pod:port`` over ``pods/portforward`` (WebSocket,
        ``v4.channel.k8s.io``: data channel 0, error channel 1, each starting with the port as
        two little-endian bytes) and return the pod's answer.

        RBAC: ``get`` and ``create`` on ``pods/portforward``. ``max_bytes`` caps the answer
        (its status line and headers get 64 KiB on top). ``body`` and ``headers`` (names and
        values without CR or LF) are sent with the request.

        Raises:
            KubeApiError: the upgrade was refused. KubeAnswerTooLarge: the answer is longer
            than the cap. KubeConnectionError: no answer, or nothing listens on the port.
        """
        target = path + ("?" + urlencode(list(query)) if query else "")
        more = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()
                       if not any(c in k + v for c in "\r\n"))
        request = (f"{method} {target} HTTP/1.1\r\nHost: localhost:{port}\r\nUser-Agent: kubectl-kvreset\r\n"
                   f"Accept: */*\r\n{more}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
        raw = _port_forward_http(self, namespace, pod, port, request, timeout_s, max_bytes + _HEAD_ALLOWANCE)
        return parse_http_response(raw)
