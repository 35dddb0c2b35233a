"""Errors, flags and answers of the Kubernetes API adapter: the exception types, the kubectl flags
that select a cluster (:class:`KubeFlags`), an HTTP answer (:class:`HttpAnswer`), and how an API
server's ``Status`` and ``Retry-After`` are read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

_LOG = logging.getLogger("kubectl_kvreset")

#: kubectl's default ``--request-timeout`` is 0 (unbounded); this tool bounds every request.
DEFAULT_REQUEST_TIMEOUT_S = 30.0
#: How many times one API request is sent again after a 429 or a server error.
MAX_RETRIES = 5
#: How many times an idempotent request is sent again after a lost or refused connection.
CONNECTION_RETRIES = 2
#: Default cap on an answer read from a pod or Service through the API server's proxy or a
#: port-forward, bytes (callers set tighter ones per route: ``podapi``). Reading stops there.
POD_ANSWER_MAX_BYTES = 16 << 20
#: Default cap on what a command run with ``pods/exec`` prints (stdout and stderr together).
EXEC_OUTPUT_MAX_BYTES = 32 << 20
#: What a port-forwarded HTTP answer's status line and headers may add to its body's cap.
_HEAD_ALLOWANCE = 64 << 10

_PATH_KEYS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


class KubeError(Exception):
    """Base of every error this adapter raises; ``str()`` is a message fit for a user."""


class KubeConfigError(KubeError):
    """The kubeconfig or a kubectl flag is unusable (no file, no context, bad duration).

    The CLI maps it to exit code 2 (usage or configuration error before any work).
    """


class KubeConnectionError(KubeError):
    """The API server could not be reached or did not answer within the request timeout."""


class KubeAnswerTooLarge(KubeConnectionError):
    """An answer longer than the cap its caller set: reading stopped at the cap, so a hostile or
    broken server cannot make this process hold more. ``limit`` is the cap in bytes; ``str()``
    names the request and the cap. A subclass of :class:`KubeConnectionError`: code that only
    knows that one reports it as an answer that could not be read, never as success."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


def size_text(n: int) -> str:
    """``8 MiB``, ``64 KiB``, ``900 bytes``: a cap for a message."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def _too_large(what: str, limit: int) -> KubeAnswerTooLarge:
    return KubeAnswerTooLarge(f"{what}: the answer is larger than the {size_text(limit)} cap; reading stopped there",
                              limit)


class KubeCredentialError(KubeConfigError):
    """The kubeconfig user's exec credential plugin or auth provider failed before any request.

    ``str()`` is one message naming the user, the context, the command and its
    ``installHint`` (client-go ``plugin/pkg/client/auth/exec/exec.go`` prints the hint when the
    command is not found). The CLI maps it to exit code 2, as any configuration error.
    """


@dataclass(frozen=True)
class KubeApiError(KubeError):
    """A non-2xx answer of the API server, read from its ``Status`` body where it sent one.

    Attributes: ``status`` (HTTP code), ``reason`` (``Status.reason`` such as ``NotFound`` or
    ``Forbidden``, else the HTTP reason), ``message`` (``Status.message``), ``body`` (raw bytes).
    """

    status: int
    reason: str
    message: str
    body: bytes = b""

    def __str__(self) -> str:
        return f"{self.message} ({self.status} {self.reason})" if self.message else f"{self.status} {self.reason}"


@dataclass(frozen=True)
class KubeFlags:
    """kubectl's global flags as the user gave them (``kubectl options``).

    ``request_timeout`` is a kubectl duration string (``"30s"``, ``"1m"``, ``"0"`` = no bound)
    or None for this tool's default of 30 s. ``impersonate`` is ``--as``,
    ``impersonate_groups`` is ``--as-group`` (repeatable).
    """

    kubeconfig: str | None = None
    context: str | None = None
    cluster: str | None = None
    user: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    server: str | None = None
    token: str | None = None
    certificate_authority: str | None = None
    insecure_skip_tls_verify: bool = False
    request_timeout: str | None = None
    impersonate: str | None = None
    impersonate_groups: tuple[str, ...] = ()
    verbosity: int = 0


@dataclass(frozen=True)
class HttpAnswer:
    """An HTTP answer: ``status`` code, lower-cased ``headers``, raw ``body`` bytes.

    ``from_apiserver`` is True when the answer is the API server's own ``Status`` (a proxy
    error such as 503 ``connect: connection refused``) rather than the pod's answer passed
    through the pod proxy; see :func:`is_apiserver_status`.
    """

    status: int
    headers: Mapping[str, str]
    body: bytes
    from_apiserver: bool = False

    def text(self) -> str:
        """The body decoded as UTF-8 (invalid bytes replaced)."""
        return self.body.decode("utf-8", "replace")


def retry_after_seconds(value: str | None, attempt: int) -> float:
    """Seconds to wait before re-sending after a 429: the ``Retry-After`` header (seconds, as
    the API server's priority and fairness sends it) capped at 10 s, else exponential backoff
    from 0.5 s. An HTTP-date value counts as 1 s."""
    if value:
        try:
            return max(0.0, min(float(value.strip()), 10.0))
        except ValueError:
            return 1.0
    return float(min(0.5 * 2.0 ** (attempt - 1), 8.0))


def is_apiserver_status(answer_body: bytes, headers: Mapping[str, str]) -> bool:
    """True when a body is a Kubernetes ``Status`` object (the API server's own error).

    A vLLM answer passed through the pod proxy keeps vLLM's status and body; a proxy failure
    (pod unreachable, port closed) is a JSON ``{"kind":"Status","apiVersion":"v1",...}``.
    This tells the two apart by the body, not by the status code.
    """
    if "json" not in headers.get("content-type", "") and not answer_body.startswith(b"{"):
        return False
    try:
        doc = json.loads(answer_body)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and doc.get("kind") == "Status" and doc.get("apiVersion") == "v1"


def status_message(body: bytes) -> tuple[str, str]:
    """``(reason, message)`` of a ``Status`` body, or ``("", text)`` for anything else."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "", body.decode("utf-8", "replace").strip()[:300]
    if isinstance(doc, dict):
        return str(doc.get("reason") or ""), str(doc.get("message") or "")
    return "", str(doc)[:300]


def resource_path(group_version: str, plural: str, namespace: str | None) -> str:
    """The REST path of a resource collection, e.g. ``/apis/apps/v1/namespaces/ns/deployments``."""
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    if namespace:
        return f"{base}/namespaces/{quote(namespace, safe='')}/{plural}"
    return f"{base}/{plural}"


def _short(exc: BaseException) -> str:
    text = str(exc)
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "no such host"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "TLS certificate verification failed (check certificate-authority or --insecure-skip-tls-verify)"
    return text.split(": ", 1)[-1][:200]


def _http_reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase.replace(" ", "")
    except ValueError:
        return "Error"
