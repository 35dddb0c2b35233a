"""The adapter's retry rules: 429 with Retry-After, 401 rebuilds credentials once, server
errors retried only for idempotent requests, pod-proxy answers never retried here."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubectl_kvreset import kube as kube_mod
from kubectl_kvreset.kube import HttpAnswer, Kube, KubeConnectionError, retry_after_seconds


def status(code: int, reason: str) -> HttpAnswer:
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                       "code": code}).encode()
    return HttpAnswer(code, {"content-type": "application/json", "retry-after": "1"}, body, from_apiserver=True)


OK = HttpAnswer(200, {"content-type": "application/json"}, b'{"items": []}')


class Scripted(Kube):
    """A Kube whose attempts are scripted: each item is an HttpAnswer or an exception."""

    def __init__(self, script: list[Any], reload: Any = None) -> None:
        super().__init__(host="https://x", namespace="ns", context="c", timeout_s=30.0, _transport=object(),
                         _reload=reload)
        self.script = list(script)
        self.sent: list[str] = []

    def _send(self, method: str, path: str, **kwargs: Any) -> HttpAnswer:
        self.sent.append(method)
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)
    return slept


def test_429_is_resent_after_retry_after_for_any_method(no_sleep: list[float]) -> None:
    k = Scripted([status(429, "TooManyRequests"), status(429, "TooManyRequests"), OK])
    assert k.request("PATCH", "/apis/apps/v1/x", body=b"{}").status == 200
    assert k.sent == ["PATCH"] * 3 and no_sleep == [1.0, 1.0] and k.retries_made == 2


def test_401_rebuilds_credentials_once() -> None:
    rebuilt: list[int] = []
    k = Scripted([status(401, "Unauthorized"), OK], reload=lambda: rebuilt.append(1) or object())
    assert k.request("GET", "/api/v1/pods").status == 200 and rebuilt == [1]
    k = Scripted([status(401, "Unauthorized"), status(401, "Unauthorized")], reload=lambda: object())
    assert k.request("GET", "/api/v1/pods").status == 401 and len(k.sent) == 2


def test_server_errors_retried_for_get_only() -> None:
    k = Scripted([status(503, "ServiceUnavailable"), status(500, "InternalError"), OK])
    assert k.request("GET", "/api/v1/pods").status == 200 and len(k.sent) == 3
    k = Scripted([status(500, "InternalError"), OK])
    assert k.request("PATCH", "/apis/apps/v1/x", body=b"{}").status == 500 and k.sent == ["PATCH"]


def test_lost_connection_retried_for_get_bounded() -> None:
    k = Scripted([KubeConnectionError("reset")] * 10)
    with pytest.raises(KubeConnectionError):
        k.request("GET", "/api/v1/pods")
    assert len(k.sent) == kube_mod.CONNECTION_RETRIES + 1
    k = Scripted([KubeConnectionError("reset"), OK])
    with pytest.raises(KubeConnectionError):
        k.request("POST", "/api/v1/x", body=b"{}")


def test_pod_proxy_503_is_left_to_the_caller() -> None:
    k = Scripted([status(503, "ServiceUnavailable"), OK])
    assert k.pod_proxy("ns", "p", 8000, "GET", "/version").status == 503 and len(k.sent) == 1


def test_retry_after_values() -> None:
    assert retry_after_seconds("3", 1) == 3.0
    assert retry_after_seconds("120", 1) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2026 07:28:00 GMT", 1) == 1.0
    assert retry_after_seconds(None, 1) == 0.5 and retry_after_seconds(None, 3) == 2.0
