"""Transport choice and retry rules of calls to vLLM, against a scripted stand-in for Kube."""

from __future__ import annotations

import json
from typing import Any

from kubectl_kvreset.engines.vllm.api import ResetOutcome
from kubectl_kvreset.kube import ExecResult, HttpAnswer, KubeApiError
from kubectl_kvreset.podapi import CallFailure, PodCaller, PodRef, Transport, Transports, probe_version, reset

REF = PodRef("ns", "pod-a", "vllm")


def status(code: int, reason: str, message: str) -> HttpAnswer:
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                       "message": message, "code": code}).encode()
    return HttpAnswer(code, {"content-type": "application/json"}, body, from_apiserver=True)


def vllm(code: int, body: bytes = b"") -> HttpAnswer:
    return HttpAnswer(code, {"content-type": "application/json"}, body)


class FakeKube:
    """Answers from scripted lists, one item per call, per transport."""

    timeout_s = 30.0

    def __init__(self, proxy: list[Any] = (), exec_: list[Any] = (), pf: list[Any] = (), ready: bool = True) -> None:
        self.proxy, self.exec_, self.pf = list(proxy), list(exec_), list(pf)
        self.calls: list[str] = []
        self.ready = ready

    def _next(self, queue: list[Any], name: str) -> Any:
        self.calls.append(name)
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        return item

    def pod_proxy(self, *args: Any, **kwargs: Any) -> HttpAnswer:
        return self._next(self.proxy, "proxy")

    def exec_command(self, ns: str, pod: str, container: str, argv: list[str], **kwargs: Any) -> ExecResult:
        assert container == "vllm" and argv[0] == "python3" and argv[1] == "-c"
        assert argv[4].startswith("http://localhost:")  # the URL is an argv element, not code
        return self._next(self.exec_, "exec")

    def port_forward_http(self, *args: Any, **kwargs: Any) -> HttpAnswer:
        return self._next(self.pf, "pf")

    def get_object(self, *args: Any) -> dict[str, Any]:
        self.calls.append("get-pod")
        return {"status": {"conditions": [{"type": "Ready", "status": "True" if self.ready else "False"}]}}


def exec_ok(code: int, body: bytes) -> ExecResult:
    import base64

    line = json.dumps({"status": code, "content_type": "application/json", "body": base64.b64encode(body).decode()})
    return ExecResult(0, line.encode() + b"\n", b"")


def caller(kube: FakeKube, choice: str = "auto") -> PodCaller:
    return PodCaller(kube, Transports(choice), ready_wait_s=2, sleep=lambda s: None)  # type: ignore[arg-type]


def test_proxy_answer_is_used() -> None:
    kube = FakeKube(proxy=[vllm(200, b'{"success":true}')])
    got = reset(caller(kube), REF, 8000, "/reset_prefix_cache", [("reset_external", "true")])
    assert got.outcome is ResetOutcome.CLEARED and kube.calls == ["proxy"]


def test_forbidden_proxy_falls_through_to_exec_and_is_remembered() -> None:
    kube = FakeKube(proxy=[status(403, "Forbidden", 'pods "pod-a:8000" is forbidden')],
                    exec_=[exec_ok(200, b'{"success":true}')])
    c = caller(kube)
    assert reset(c, REF, 8000, "/reset_prefix_cache", []).outcome is ResetOutcome.CLEARED
    assert reset(c, REF, 8001, "/reset_prefix_cache", []).outcome is ResetOutcome.CLEARED
    assert kube.calls == ["proxy", "exec", "exec"]
    assert c.transports.forbidden == {("ns", Transport.PROXY, "create")}


def test_a_refusal_is_remembered_per_namespace_and_verb() -> None:
    t = Transports("auto")
    t.refuse(Transport.PROXY, "team-a", "POST")
    assert t.usable("team-a", "POST") == [Transport.EXEC, Transport.PORT_FORWARD]
    assert t.usable("team-a", "GET")[0] is Transport.PROXY  # get on pods/proxy is another right
    assert t.usable("team-b", "POST")[0] is Transport.PROXY  # RBAC is per namespace


def test_unreachable_pod_network_moves_to_port_forward() -> None:
    timeout = status(503, "ServiceUnavailable", "error trying to reach service: dial tcp 10.0.0.5:8000: i/o timeout")
    kube = FakeKube(proxy=[timeout],
                    exec_=[ExecResult(None, b"", b"", 'exec: "python3": executable file not found in $PATH')],
                    pf=[vllm(200, b'{"version":"0.26.0"}')])
    assert probe_version(caller(kube), REF, 8000) == "0.26.0"
    assert kube.calls == ["proxy", "exec", "pf"]


def test_every_transport_forbidden_names_every_permission() -> None:
    denied = KubeApiError(403, "Forbidden", "forbidden")
    kube = FakeKube(proxy=[status(403, "Forbidden", "no")], exec_=[denied], pf=[denied])
    got = reset(caller(kube), REF, 8000, "/reset_prefix_cache", [])
    assert got.failure is not None and got.failure.kind == "forbidden"
    for perm in ("pods/proxy", "pods/exec", "pods/portforward"):
        assert perm in got.failure.message


def test_connection_refused_waits_for_ready_and_retries_once_on_the_same_transport() -> None:
    refused = status(503, "ServiceUnavailable", "dial tcp 10.0.0.5:8000: connect: connection refused")
    kube = FakeKube(proxy=[refused, vllm(200, b'{"success":true}')])
    got = reset(caller(kube, "proxy"), REF, 8000, "/reset_prefix_cache", [])
    assert got.outcome is ResetOutcome.CLEARED
    assert kube.calls == ["proxy", "get-pod", "proxy"]


def test_vllm_5xx_is_retried_a_bounded_number_of_times() -> None:
    kube = FakeKube(proxy=[vllm(500, b"Internal Server Error")])
    got = reset(caller(kube, "proxy"), REF, 8000, "/reset_prefix_cache", [], attempts=3)
    assert got.outcome is ResetOutcome.SERVER_ERROR and got.calls == 3


def test_busy_retries_until_free() -> None:
    kube = FakeKube(proxy=[vllm(200, b'{"success":false}'), vllm(200, b'{"success":false}'),
                           vllm(200, b'{"success":true}')])
    got = reset(caller(kube, "proxy"), REF, 8000, "/reset_prefix_cache", [])
    assert (got.outcome, got.busy_answers, got.calls) == (ResetOutcome.CLEARED, 2, 3)


def test_busy_past_the_timeout_stays_busy() -> None:
    ticks = iter(range(0, 1000, 10))
    kube = FakeKube(proxy=[vllm(200, b'{"success":false}')])
    got = reset(caller(kube, "proxy"), REF, 8000, "/reset_prefix_cache", [], busy_timeout_s=25,
                clock=lambda: next(ticks))
    assert got.outcome is ResetOutcome.BUSY and got.busy_answers >= 1


def test_dev_mode_off_is_final() -> None:
    kube = FakeKube(proxy=[vllm(404, b'{"detail":"Not Found"}')])
    got = reset(caller(kube), REF, 8000, "/reset_prefix_cache", [])
    assert got.outcome is ResetOutcome.DEV_MODE_OFF and kube.calls == ["proxy"]


def test_pod_gone_is_not_retried() -> None:
    kube = FakeKube(proxy=[status(404, "NotFound", 'pods "pod-a" not found')])
    got = reset(caller(kube), REF, 8000, "/reset_prefix_cache", [])
    assert isinstance(got.failure, CallFailure) and got.failure.kind == "pod-gone" and got.calls == 1


class FakeClock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_pod_that_stays_down_is_waited_on_for_the_bound_in_all_not_per_try() -> None:
    # vLLM refuses every connection and the pod never becomes Ready: the reset's 3 tries (and
    # the backoff between them) share one 60 s deadline, so the run gives up after about 60 s,
    # not 60 s per try (a pod down 90 s was waited on for 91 s)
    refused = status(503, "ServiceUnavailable", "dial tcp 10.0.0.5:8000: connect: connection refused")
    kube = FakeKube(proxy=[refused], ready=False)
    clock = FakeClock()
    pc = PodCaller(kube, Transports("proxy"), ready_wait_s=60, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    got = reset(pc, REF, 8000, "/reset_prefix_cache", [], clock=clock)
    assert got.failure is not None and got.failure.kind == "refused"
    assert "did not become Ready within 60 s" in got.failure.message
    waited = clock.now - 1000.0
    assert 60 <= waited <= 60 + 0.5 + 1.0 + 0.01, waited  # the bound, plus the reset's own backoff
    assert max(clock.slept) <= 1.0  # polled about once a second, never past the deadline
    # another route of the same pod later in the run: no second 60 s
    before = clock.now
    again = reset(pc, REF, 8000, "/reset_mm_cache", [], clock=clock)
    assert again.failure is not None and clock.now - before <= 0.5 + 1.0 + 0.01


def test_the_deadline_lands_exactly_on_the_bound() -> None:
    kube = FakeKube(ready=False)
    clock = FakeClock()
    pc = PodCaller(kube, Transports("proxy"), ready_wait_s=2.5, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    not_ready = pc.wait_ready(REF)
    assert not_ready is not None and not_ready.kind == "timeout"
    assert clock.now - 1000.0 == 2.5 and clock.slept == [1.0, 1.0, 0.5]


def test_a_refused_ready_wait_names_the_permission_and_its_role_rule() -> None:
    class NoGet(FakeKube):
        def get_object(self, *args: Any) -> dict[str, Any]:
            raise KubeApiError(403, "Forbidden", 'pods "p" is forbidden: User "alice" cannot get resource "pods" '
                                                 'in API group "" in the namespace "ns"')

    refused = status(503, "ServiceUnavailable", "dial tcp 10.0.0.5:8000: connect: connection refused")
    got = reset(caller(NoGet(proxy=[refused])), REF, 8000, "/reset_prefix_cache", [])
    assert got.failure is not None and got.failure.kind == "forbidden", got
    msg = got.failure.message
    assert "connection refused" in msg and "not permitted: get on pods in namespace ns" in msg, msg
    assert '{apiGroups: [""], resources: [pods], verbs: [get]}' in msg and "rbac/kubectl-kvreset-role.yaml" in msg
    assert got.calls == 1  # a refusal is not retried
