"""Exec credential plugins run by the adapter (client-go's protocol,
``plugin/pkg/client/auth/exec/exec.go``): the ExecCredential handed in and read back, and
messages that never carry the plugin's arguments or stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kubectl_kvreset.kube import (
    ExecPluginError,
    credential_error,
    exec_info,
    exec_user,
    run_exec_plugin,
)

V1 = "client.authentication.k8s.io/v1"
ECHO = """\
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
sys.stderr.write("token=leaked-on-stderr\\n")
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {"token": json.dumps(info) + "|" + os.environ.get("EXTRA", ""),
                             "expirationTimestamp": "2030-01-01T00:00:00Z"}}))
"""


def _plugin(tmp_path: Path, code: str) -> dict[str, object]:
    (tmp_path / "p.py").write_text(code)
    return {"apiVersion": V1, "command": sys.executable, "args": [str(tmp_path / "p.py"), "--client-secret=xyz"],
            "env": [{"name": "EXTRA", "value": "e1"}], "interactiveMode": "Never"}


def test_the_plugin_gets_exec_info_and_env_and_its_token_comes_back(tmp_path: Path) -> None:
    cfg = _plugin(tmp_path, ECHO)
    cfg["provideClusterInfo"] = True
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E=",
               "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "a"}}]}
    cred = run_exec_plugin(cfg, cluster, timeout_s=30)
    info_text, extra = str(cred.token).split("|")
    info = json.loads(info_text)
    assert info["kind"] == "ExecCredential" and info["apiVersion"] == V1 and extra == "e1"
    assert info["spec"]["interactive"] is False  # interactiveMode: Never
    assert info["spec"]["cluster"] == {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E=",
                                       "config": {"audience": "a"}}
    assert cred.expires is not None and cred.expires > 1.8e9
    assert exec_user(cred) == {"token": cred.token}
    assert "token=" not in repr(cred)


def test_no_cluster_info_unless_asked() -> None:
    assert exec_info({"apiVersion": V1}, {"server": "https://x"}, True) == {
        "kind": "ExecCredential", "apiVersion": V1, "spec": {"interactive": True}}


@pytest.mark.parametrize(("code", "message"), [
    ("import sys; sys.stderr.write('token=abc'); sys.exit(3)", "failed with exit code 3"),
    ("print('not json')", "wrote no ExecCredential JSON"),
    ("import json; print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential', "
     "'status': {'token': 't'}}))", "answered apiVersion"),
    ("import json; print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', "
     "'status': {}}))", "neither a token nor a client certificate"),
])
def test_failures_name_the_executable_only(tmp_path: Path, code: str, message: str) -> None:
    cfg = _plugin(tmp_path, code)
    with pytest.raises(ExecPluginError) as err:
        run_exec_plugin(cfg, {}, timeout_s=30)
    text = str(err.value)
    assert message in text and sys.executable in text
    assert "xyz" not in text and "token=abc" not in text and "p.py" not in text


def test_missing_command_unsupported_version_and_no_terminal(tmp_path: Path) -> None:
    with pytest.raises(ExecPluginError, match="executable kvreset-no-such-plugin not found"):
        run_exec_plugin({"apiVersion": V1, "command": "kvreset-no-such-plugin"}, {}, timeout_s=5)
    with pytest.raises(ExecPluginError, match="v1alpha1"):
        run_exec_plugin({"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}, {}, timeout_s=5)
    cfg = _plugin(tmp_path, ECHO)
    cfg["interactiveMode"] = "Always"
    with pytest.raises(ExecPluginError, match="needs a terminal"):
        run_exec_plugin(cfg, {}, timeout_s=5)  # pytest's stdin is no terminal


def test_credential_error_names_no_arguments() -> None:
    user = {"exec": {"command": "gke-login", "args": ["--client-secret", "xyz"], "installHint": "install it\n  here"}}
    text = credential_error("admin", user, "prod", "exec: executable gke-login failed with exit code 1")
    assert text == ('the exec credential plugin of user "admin" of context "prod" failed: '
                    "exec: executable gke-login failed with exit code 1; install it here")


def test_client_certificate_credentials(tmp_path: Path) -> None:
    code = ("import json; print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', "
            "'status': {'clientCertificateData': 'CERT', 'clientKeyData': 'KEY'}}))")
    cred = run_exec_plugin(_plugin(tmp_path, code), {}, timeout_s=30)
    assert exec_user(cred) == {"client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ"}


HUGE = """\
import sys
chunk = b"x" * (1 << 20)
for _ in range(200):  # 200 MiB, as a broken plugin might
    sys.stdout.buffer.write(chunk)
    sys.stderr.buffer.write(chunk)
"""


def test_a_plugin_writing_past_the_stdout_limit_is_stopped_with_a_clear_message(tmp_path: Path) -> None:
    import resource

    from kubectl_kvreset.kube import EXEC_STDOUT_LIMIT

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ExecPluginError) as err:
        run_exec_plugin(_plugin(tmp_path, HUGE), {}, timeout_s=60)
    assert str(err.value) == (f"exec: executable {sys.executable} wrote more than {EXEC_STDOUT_LIMIT >> 20} MiB on "
                              "stdout (an ExecCredential is a small JSON object): stopped it")
    # what was read is bounded by the limit, not by what the plugin wrote (KiB)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024

