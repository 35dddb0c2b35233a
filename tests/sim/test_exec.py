"""pods/exec over WebSocket: the official Python client, websocket-client, and real kubectl."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.beside import llm_d_fixture
from tests.sim.__main__ import Simulator, bwrap_works
from tests.sim.clusterbase import PodRecord
from tests.sim.execsandbox import exec_failure_message
from tests.sim.scenario import parse_scenario
from tests.sim.server import SimServer
from tests.sim.wsstream import is_upgrade

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client as k8s_client  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402
from kubernetes.stream import stream  # noqa: E402

PY_RESET = ("import urllib.request;print(urllib.request.urlopen(urllib.request.Request("
            "'http://localhost:8200/reset_prefix_cache?reset_external=true', method='POST'))"
            ".status)")


@pytest.fixture(scope="module")
def xsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    if not bwrap_works():
        pytest.skip("bubblewrap cannot run here: exec runs commands in the pod sandbox")
    f02 = llm_d_fixture("02-")
    s = Simulator([str(f02)], namespace="llm", dev_mode="on", ready_delay=0.05, sandbox=True,
                  scenario=parse_scenario({"replicas": {"deployment/pd-disaggregation-nvidia-"
                                                        "gpu-vllm-prefill": 1}}),
                  state_dir=tmp_path_factory.mktemp("xsim") / "state")
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def core(xsim: Simulator, tmp_path_factory: pytest.TempPathFactory) -> Any:
    kc = tmp_path_factory.mktemp("kc") / "kc.yaml"
    xsim.server.write_kubeconfig(kc)
    return k8s_client.CoreV1Api(k8s_config.new_client_from_config(str(kc)))


def _pod(sim: Simulator, part: str) -> PodRecord:
    return next(r for r in sim.cluster.records() if part in r.name and not r.deleted)


def _run(core: Any, pod: str, argv: list[str], container: str | None = "modelserver",
         **kw: Any) -> Any:
    extra: dict[str, Any] = {"container": container} if container else {}
    resp = stream(core.connect_get_namespaced_pod_exec, pod, "llm", command=argv,
                  stdin=kw.pop("stdin", False), stdout=True, stderr=True, tty=False,
                  _preload_content=False, **extra)
    return resp


def _plain_get(sim: Simulator, path: str) -> tuple[int, Any]:
    """A GET without any upgrade; (status, decoded JSON body)."""
    import urllib.error
    import urllib.request
    req = urllib.request.Request(sim.server.url + path,
                                 headers={"Authorization": f"Bearer {sim.server.admin_token}"})
    ctx = ssl.create_default_context(cadata=sim.server.ca_pem().decode())
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _state_pod(sim: Simulator, name: str) -> dict[str, Any]:
    return next(p for p in sim.server.state()["pods"] if p["name"] == name)


# ----------------------------------------------------------------------------- units


def test_exec_status_shapes() -> None:
    assert SimServer._exec_status(0, None, ["true"]) == {"metadata": {}, "status": "Success"}
    st = SimServer._exec_status(2, None, ["sh", "-c", "exit 2"])
    assert st == {"metadata": {}, "status": "Failure",
                  "message": "command terminated with non-zero exit code: error executing "
                             "command [sh -c exit 2], exit code 2",
                  "reason": "NonZeroExitCode",
                  "details": {"causes": [{"reason": "ExitCode", "message": "2"}]}}
    err = exec_failure_message('exec: "foo": executable file not found in $PATH', "ab" * 32)
    st = SimServer._exec_status(127, err, ["foo"])
    assert st["reason"] == "InternalError" and st["code"] == 500
    assert st["message"] == ("Internal error occurred: error executing command in container: "
                             f'failed to exec in container: failed to start exec "{"ab" * 32}": '
                             "OCI runtime exec failed: exec failed: unable to start container "
                             'process: exec: "foo": executable file not found in $PATH: unknown')
    assert st["details"]["causes"][0]["message"] == st["message"][len("Internal error occurred: "):]


def test_is_upgrade() -> None:
    assert is_upgrade({"Connection": "keep-alive, Upgrade", "Upgrade": "WebSocket"})
    assert not is_upgrade({"Connection": "Upgrade", "Upgrade": "SPDY/3.1"})
    assert not is_upgrade({})


# ----------------------------------------------------------------------------- python client


def test_exec_stdout_and_success(xsim: Simulator, core: Any) -> None:
    pod = _pod(xsim, "decode").name
    resp = _run(core, pod, ["printenv", "VLLM_SERVER_DEV_MODE"])
    resp.run_forever(timeout=10)
    assert resp.read_stdout() == "1\n"
    assert resp.returncode == 0
    assert xsim.server.api_requests().get("get pods/exec", 0) >= 1


def test_exec_nonzero_exit_and_stderr(xsim: Simulator, core: Any) -> None:
    pod = _pod(xsim, "decode").name
    resp = _run(core, pod, ["sh", "-c", "echo out; echo oops >&2; exit 2"])
    resp.run_forever(timeout=10)
    assert resp.read_stdout() == "out\n"
    assert resp.read_stderr() == "oops\n"
    status = json.loads(resp.peek_channel(3))
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "2"}]
    assert resp.returncode == 2


def test_exec_missing_command_does_not_hang(xsim: Simulator, core: Any) -> None:
    pod = _pod(xsim, "decode").name
    start = time.monotonic()
    resp = _run(core, pod, ["no-such-binary", "x"])
    resp.run_forever(timeout=10)
    assert time.monotonic() - start < 5
    status = json.loads(resp.read_channel(3))
    assert status["status"] == "Failure" and status["reason"] == "InternalError"
    assert status["message"].endswith(
        'exec: "no-such-binary": executable file not found in $PATH: unknown')
    resp = _run(core, pod, ["/bin/no-such"])
    resp.run_forever(timeout=10)
    assert 'exec: "/bin/no-such": stat /bin/no-such: no such file or directory' in \
        json.loads(resp.read_channel(3))["message"]


def test_exec_container_checks(xsim: Simulator, core: Any) -> None:
    pod = _pod(xsim, "decode").name
    with pytest.raises(Exception):  # noqa: B017 - the client turns the 400 into odd errors
        _run(core, pod, ["true"], container="nope")
    code, body = _plain_get(xsim, f"/api/v1/namespaces/llm/pods/{pod}/exec?command=true"
                                  "&container=nope")
    assert (code, body["reason"]) == (400, "BadRequest")
    assert body["message"] == f"container nope is not valid for pod {pod}"
    code, body = _plain_get(xsim, f"/api/v1/namespaces/llm/pods/{pod}/exec?command=true")
    assert code == 200 or body["message"] == "Upgrade request required"  # one container
    # the sidecar (an init container) is a valid exec target
    resp = _run(core, pod, ["printenv", "HOSTNAME"], container="routing-proxy")
    resp.run_forever(timeout=10)
    assert resp.read_stdout() == f"{pod}\n" and resp.returncode == 0


def test_exec_reset_through_localhost(xsim: Simulator, core: Any) -> None:
    rec = _pod(xsim, "decode")
    before = _state_pod(xsim, rec.name)["ports"]["8200"]["reset_calls"]
    resp = _run(core, rec.name, ["python3", "-c", PY_RESET])
    resp.run_forever(timeout=15)
    assert resp.read_stdout() == "200\n", resp.read_stderr()
    port = _state_pod(xsim, rec.name)["ports"]["8200"]
    assert port["reset_calls"] == before + 1
    assert port["last_transport"] == "exec"
    assert port["last_reset_query"] == "reset_external=true"
    assert port["prefix_cache_blocks"] == 0


@pytest.mark.skipif(not Path("/usr/bin/curl").exists(), reason="curl is not installed")
def test_exec_curl_localhost(xsim: Simulator, core: Any) -> None:
    rec = _pod(xsim, "prefill")
    resp = _run(core, rec.name, ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X",
                                 "POST", "localhost:8000/reset_prefix_cache?reset_external=true"])
    resp.run_forever(timeout=15)
    assert resp.read_stdout() == "200"
    port = _state_pod(xsim, rec.name)["ports"]["8000"]
    assert port["reset_calls"] == 1 and port["last_transport"] == "exec"
    resp = _run(core, rec.name, ["curl", "-s", "http://[::1]:8000/version"])
    resp.run_forever(timeout=15)
    assert json.loads(resp.read_stdout())["version"] == "0.23.0"
    # a port nothing serves is refused inside the sandbox (curl exit 7)
    resp = _run(core, rec.name, ["curl", "-s", "localhost:8999/"])
    resp.run_forever(timeout=15)
    assert resp.returncode == 7


def test_exec_filesystem_view(xsim: Simulator, core: Any) -> None:
    rec = _pod(xsim, "decode")
    script = ("touch /dev/shm/probe && echo shm-ok; "
              "touch /usr/probe 2>/dev/null || echo usr-ro; "
              "touch /.triton/probe && echo vol-ok; true")
    resp = _run(core, rec.name, ["sh", "-c", script])
    resp.run_forever(timeout=10)
    out = resp.read_stdout()
    assert "shm-ok" in out and "usr-ro" in out and "vol-ok" in out
    shm = xsim.cluster._pod_dir(rec) / "shm"
    assert (shm / "probe").exists()


def test_exec_stdin_v5_close(xsim: Simulator, core: Any) -> None:
    pod = _pod(xsim, "decode").name
    resp = _run(core, pod, ["cat"], stdin=True)
    assert resp.subprotocol == "v5.channel.k8s.io"
    resp.write_stdin("hello\n")
    resp.close_channel(0)
    resp.run_forever(timeout=10)
    assert resp.read_stdout() == "hello\n" and resp.returncode == 0


def test_exec_v4_subprotocol(xsim: Simulator) -> None:
    websocket = pytest.importorskip("websocket")
    pod = _pod(xsim, "decode").name
    url = (xsim.server.url.replace("https", "wss") + f"/api/v1/namespaces/llm/pods/{pod}/exec"
           "?command=sh&command=-c&command=echo%20hi%3B%20exit%203&container=modelserver"
           "&stdout=true&stderr=true")
    ca = xsim.server.ca_pem().decode()
    ctx = ssl.create_default_context(cadata=ca)
    ws = websocket.create_connection(
        url, header=[f"Authorization: Bearer {xsim.server.admin_token}"],
        subprotocols=["v4.channel.k8s.io"], sslopt={"context": ctx}, timeout=10)
    try:
        assert ws.subprotocol == "v4.channel.k8s.io"
        got: dict[int, bytes] = {}
        while True:
            try:
                op, data = ws.recv_data()
            except websocket.WebSocketConnectionClosedException:
                break
            if op == websocket.ABNF.OPCODE_CLOSE:
                break
            got[data[0]] = got.get(data[0], b"") + data[1:]
    finally:
        ws.close()
    assert got[1] == b"hi\n"
    assert json.loads(got[3])["details"]["causes"][0]["message"] == "3"


def test_exec_plain_request_needs_upgrade(xsim: Simulator) -> None:
    pod = _pod(xsim, "decode").name
    code, body = _plain_get(xsim, f"/api/v1/namespaces/llm/pods/{pod}/exec"
                                  "?command=true&container=modelserver")
    assert (code, body["message"]) == (400, "Upgrade request required")
    code, body = _plain_get(xsim, f"/api/v1/namespaces/llm/pods/{pod}/exec?container=modelserver")
    assert (code, body["message"]) == (400, "you must specify at least 1 command")
    code, body = _plain_get(xsim, "/api/v1/namespaces/llm/pods/nope/exec?command=true")
    assert (code, body["message"]) == (404, 'pods "nope" not found')


# ----------------------------------------------------------------------------- kubectl referee


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_exec(xsim: Simulator, tmp_path: Path) -> None:
    kc = tmp_path / "kc.yaml"
    xsim.server.write_kubeconfig(kc)
    kubectl = [shutil.which("kubectl") or "kubectl", "--kubeconfig", str(kc), "-n", "llm"]
    dec = _pod(xsim, "decode").name
    r = subprocess.run([*kubectl, "exec", dec, "-c", "modelserver", "--", "printenv",
                        "VLLM_SERVER_DEV_MODE"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "1\n"), r.stderr
    r = subprocess.run([*kubectl, "exec", dec, "-c", "modelserver", "--", "sh", "-c", "exit 3"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "command terminated with exit code 3" in r.stderr
    r = subprocess.run([*kubectl, "exec", dec, "-c", "bad", "--", "true"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"container bad is not valid for pod {dec}" in r.stderr
    if Path("/usr/bin/curl").exists():
        pre = _pod(xsim, "prefill").name
        before = _state_pod(xsim, pre)["ports"]["8000"]["reset_calls"]
        r = subprocess.run([*kubectl, "exec", pre, "--", "curl", "-s", "-X", "POST",
                            "localhost:8000/reset_prefix_cache?reset_external=true"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert _state_pod(xsim, pre)["ports"]["8000"]["reset_calls"] == before + 1
