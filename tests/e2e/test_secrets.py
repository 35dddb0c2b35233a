"""Secrets never reach any output: every kind of secret a cluster and a kubeconfig can hold is
planted in one simulated cluster, and every sub-command runs in every output format at ``-v``
0, 6 and 9; stdout and stderr are searched for each planted value.

Planted: the values of ``--hf-token``/``--api-key``/``--admin-api-key`` (``--flag value``,
``--flag=value`` and vLLM's several ``--api-key k1 k2``, also from a ``--config`` file's list,
and abbreviated as vLLM's argparse parser takes them: ``--hf-tok``, ``--api-ke``),
secret fields of ``--kv-transfer-config`` JSON at two depths (``password``, and ``auth``/``pwd``
in a list and under a dotted key), a Redis URL's password (env ``LMCACHE_REMOTE_URL`` and
``lmcache.remote_url``), env values named like a secret (``REDISCLI_AUTH``), a Secret read
through ``envFrom``, the kubeconfig's token (handed out by an exec
credential plugin) and client key, and the plugin's own arguments and stderr.

Also: an exec credential plugin that hangs is stopped at ``--request-timeout`` with its whole
process group, exit 2, its arguments in no message or ``-v 9`` traceback; one that floods stdout
is stopped past 1 MiB, exit 2; a failing one gives kubectl's one-line message only.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.manifests import build
from tests.simctl import SimCluster, zipapp_path

from .conftest import require_sandbox

NS = "sec"
MODEL = "Qwen/Qwen3-0.6B"

SECRETS = {
    "hf_token": "hfSECRETvalue0001",
    "api_key": "apiSECRETvalue0002",
    "admin_api_key": "admSECRETvalue0003",
    "lmcache_api_key": "lmkSECRETvalue0004",
    "nested_password": "nestSECRETvalue0005",
    "redis_password": "redisSECRETvalue0006",
    "remote_url_password": "rurlSECRETvalue0007",
    "env_token": "envSECRETvalue0008",
    "secret_object": "objSECRETvalue0009",
    "offload_token": "offSECRETvalue0010",
    "plugin_argv": "argvSECRETvalue0011",
    "plugin_argv_eq": "argveqSECRETvalue0012",
    "plugin_stderr": "stderrSECRETvalue0013",
    "api_key_second": "api2SECRETvalue0014",
    "config_api_key": "cfgkSECRETvalue0015",
    "config_api_key_second": "cfgk2SECRETvalue0016",
    "nested_auth": "authSECRETvalue0017",
    "nested_pwd": "pwdSECRETvalue0018",
    "rediscli_auth": "rclSECRETvalue0019",
    "hf_token_abbrev": "hfabSECRETvalue0020",
    "api_key_abbrev": "apiabSECRETvalue0021",
}
#: The lmc pods' ``--config`` file (a ConfigMap): a list of API keys, as vLLM reads
#: ``api-key: [a, b]`` into ``--api-key a b``.
CONFIG_FILE = (f"port: 8000\napi-key: [{SECRETS['config_api_key']}, {SECRETS['config_api_key_second']}]\n"
               "max-num-seqs: 64\n")

SUCCESS_PLUGIN = """\
import json, pathlib, sys
sys.stderr.write("token=%s refreshed\\n" % sys.argv[3])
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": pathlib.Path(sys.argv[1]).read_text().strip()}}))
"""


def _documents() -> list[dict[str, Any]]:
    offload = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
               "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 30,
                                             "block_size": 256, "auth_token": SECRETS["offload_token"],
                                             "secondary_tiers": [{"type": "fs", "root_dir": "/mnt/files-storage"}]}}
    lmcache = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
               "kv_connector_extra_config": {
                   "lmcache.api_key": SECRETS["lmcache_api_key"],
                   "lmcache.remote_url": f"redis://cache:{SECRETS['remote_url_password']}@redis.example.com:6379",
                   "deep": {"deeper": {"password": SECRETS["nested_password"]}},
                   "servers": [{"host": "peer-0", "auth": SECRETS["nested_auth"]}],
                   "lmcache.x": {"pwd": SECRETS["nested_pwd"]}}}

    def deployment(name: str, command: list[str], env: list[dict[str, Any]], fs: bool) -> dict[str, Any]:
        labels = {"app": name}
        container: dict[str, Any] = {"name": "vllm", "image": "vllm/vllm-openai:v0.32.0", "command": command,
                                     "env": env, "envFrom": [{"secretRef": {"name": "vllm-env"}}],
                                     "ports": [{"name": "http", "containerPort": 8000}]}
        if fs:
            container["volumeMounts"] = [{"name": "kv", "mountPath": "/mnt/files-storage"}]
            volumes = [build.pvc_volume("kv", "kv-cache")]
        else:
            container["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/vllm"}]
            volumes = [{"name": "cfg", "configMap": {"name": "vcfg"}}]
        return build.deployment(name, [container], namespace=NS, volumes=volumes,
                                pod_labels={**labels, "llm-d.ai/inference-serving": "true"})

    dev = {"name": "VLLM_SERVER_DEV_MODE", "value": "1"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vcfg", "namespace": NS},
         "data": {"config.yaml": CONFIG_FILE}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vllm-env", "namespace": NS}, "type": "Opaque",
         "data": {"HF_TOKEN": base64.b64encode(SECRETS["secret_object"].encode()).decode()}},
        deployment("offload", ["vllm", "serve", MODEL, "--port", "8000", f"--hf-token={SECRETS['hf_token']}",
                               "--api-key", SECRETS["api_key"], SECRETS["api_key_second"], "--max-model-len", "4096",
                               "--kv-cache-dtype", "auto", "--enable-prefix-caching",
                               "--kv-transfer-config", json.dumps(offload)],
                   [dev, {"name": "VLLM_API_KEY", "value": SECRETS["env_token"]}], fs=True),
        deployment("lmc", ["vllm", "serve", "org/model-l", "--port", "8000",
                           "--admin-api-key", SECRETS["admin_api_key"], "--kv-transfer-config", json.dumps(lmcache),
                           # abbreviations vLLM's argparse parser takes for --hf-token and --api-key
                           "--hf-tok", SECRETS["hf_token_abbrev"], "--api-ke", SECRETS["api_key_abbrev"],
                           "--config", "/etc/vllm/config.yaml"],
                   [dev, {"name": "REDISCLI_AUTH", "value": SECRETS["rediscli_auth"]}, {"name": "LMCACHE_REMOTE_URL",
                          "value": f"redis://default:{SECRETS['redis_password']}@redis.example.com:6379/0"}],
                   fs=False),
    ]


def _client_cert(tmp: Path) -> tuple[str, str]:
    """A throw-away client certificate and key (PEM), made with openssl."""
    key, crt = tmp / "client.key", tmp / "client.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(crt), "-subj", "/CN=kvreset-test", "-days", "1"], check=True, capture_output=True)
    return crt.read_text(), key.read_text()


class Planted:
    """The running cluster, the kubeconfig holding its secrets, and every value to look for."""

    def __init__(self, cluster: SimCluster, kubeconfig: Path, values: list[str]) -> None:
        self.cluster, self.kubeconfig, self.values = cluster, kubeconfig, values

    def run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        env = self.cluster.env()
        env["KUBECONFIG"] = str(self.kubeconfig)
        return subprocess.run([str(zipapp_path()), *args], env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def leaks(self, text: str) -> list[str]:
        return [v for v in self.values if v in text]


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Planted]:
    require_sandbox()
    tmp = tmp_path_factory.mktemp("secrets")
    manifest = tmp / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all(_documents()))
    with SimCluster([manifest], namespace=NS, dev_mode="on", ready_delay=0.05) as cluster:
        cluster.wait_ready()
        crt, key = _client_cert(tmp)
        (tmp / "token").write_text(cluster.admin_token)
        (tmp / "plugin.py").write_text(SUCCESS_PLUGIN)
        cfg = yaml.safe_load(cluster.kubeconfig.read_text())
        for entry in cfg["users"]:
            if entry["name"] == "admin":
                entry["user"] = {
                    "client-certificate-data": base64.b64encode(crt.encode()).decode(),
                    "client-key-data": base64.b64encode(key.encode()).decode(),
                    "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                             "args": [str(tmp / "plugin.py"), str(tmp / "token"),
                                      f"--oidc-client-secret={SECRETS['plugin_argv_eq']}",
                                      SECRETS["plugin_stderr"], "--client-secret", SECRETS["plugin_argv"]],
                             "interactiveMode": "Never"}}
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(cfg))
        kubeconfig.chmod(0o600)
        key_body = "".join(line for line in key.splitlines() if "-----" not in line)
        values = [*SECRETS.values(), cluster.admin_token, key_body[:40], key_body[-40:],
                  base64.b64encode(key.encode()).decode()[:40]]
        yield Planted(cluster, kubeconfig, values)


#: Every sub-command, run far enough to print its rows (``restart`` runs: stdin is no terminal).
COMMANDS = {
    "detect": ["detect", "-n", NS],
    "devmode": ["devmode", "-n", NS],
    "clear-dry-run": ["clear", "-n", NS, "--all", "--dry-run"],
    "clear": ["clear", "-n", NS, "--all", "--yes"],
    "clear-fs-dry-run": ["clear-fs", "-n", NS, "--all", "--dry-run"],
    "clear-store-dry-run": ["clear-store", "-n", NS, "--all", "--dry-run"],
    "clear-store": ["clear-store", "-n", NS, "--all", "--yes"],
    "restart": ["restart", "-n", NS, "deployment/lmc", "--yes"],
    "metrics": ["metrics", "-n", NS],
}
FORMATS = ("table", "wide", "json", "yaml")
LEVELS = ("0", "6", "9")
#: kubectl's printers, each with a value that prints every field of every row
PRINTERS = {"name": "name", "jsonpath": "jsonpath={.items}",
            "custom-columns": "custom-columns=POD:.pod,ARGV:.argv,MESSAGE:.message,NOTES:.notes,ERROR:.error,"
                              "ADDRESS:.address"}


def test_the_output_formats_are_all_covered() -> None:
    from kubectl_kvreset.report import OUTPUT_FORMATS

    assert set(OUTPUT_FORMATS) == set(FORMATS) | set(PRINTERS)


@pytest.mark.parametrize("fmt", list(PRINTERS))
@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_planted_secret_in_kubectl_printers(planted: Planted, name: str, fmt: str) -> None:
    done = planted.run(*COMMANDS[name], "-o", PRINTERS[fmt])
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip(), (done.returncode, done.stdout, done.stderr)
    if fmt == "jsonpath":
        assert isinstance(json.loads(done.stdout), list), done.stdout
    assert not planted.leaks(done.stdout), (planted.leaks(done.stdout), done.stdout)
    assert not planted.leaks(done.stderr), (planted.leaks(done.stderr), done.stderr)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_planted_secret_in_any_output(planted: Planted, name: str, fmt: str, level: str) -> None:
    done = planted.run(*COMMANDS[name], "-o", fmt, "-v", level)
    assert "Traceback" not in done.stderr or level != "0", done.stderr
    # each command got as far as its rows (the json/yaml list, or a table with a header)
    if fmt in ("json", "yaml"):
        rows = json.loads(done.stdout) if fmt == "json" else yaml.safe_load(done.stdout)
        assert isinstance(rows, list) and rows, (done.returncode, done.stdout, done.stderr)
    else:
        assert done.stdout.strip() and done.stdout.splitlines()[0].isupper(), (done.stdout, done.stderr)
    if level == "9":
        assert " in " in done.stderr and "ms" in done.stderr, done.stderr  # requests were logged
    assert not planted.leaks(done.stdout), (planted.leaks(done.stdout), done.stdout)
    assert not planted.leaks(done.stderr), (planted.leaks(done.stderr), done.stderr)


def test_rows_keep_what_is_not_secret(planted: Planted) -> None:
    done = planted.run("detect", "-n", NS, "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    argv = {r["pod"].split("-")[0]: r["argv"] for r in rows}
    # a note that names a flag is text, not a command line: the note after it stays
    notes = next(r["notes"] for r in rows if r["pod"].startswith("lmc"))
    assert "--config /etc/vllm/config.yaml: flags read from ConfigMap vcfg key config.yaml" in notes, notes
    assert "***" not in notes, notes
    off = argv["offload"]
    assert "--hf-token=***" in off and off[off.index("--api-key") + 1:off.index("--api-key") + 3] == ["***", "***"]
    for kept in ("--max-model-len", "4096", "--kv-cache-dtype", "auto", "--enable-prefix-caching", MODEL):
        assert kept in off, off
    ktc = json.loads(off[off.index("--kv-transfer-config") + 1])
    assert ktc["kv_connector"] == "OffloadingConnector" and ktc["kv_connector_extra_config"]["auth_token"] == "***"
    for abbrev in ("--hf-tok", "--api-ke"):
        assert argv["lmc"][argv["lmc"].index(abbrev) + 1] == "***", argv["lmc"]
    lmc = json.loads(argv["lmc"][argv["lmc"].index("--kv-transfer-config") + 1])["kv_connector_extra_config"]
    assert lmc["lmcache.remote_url"] == "redis://cache:***@redis.example.com:6379"
    # the plugin still connects with the real password-bearing URL: the store row says where it is
    done = planted.run("clear-store", "-n", NS, "--all", "--dry-run", "-o", "json")
    assert any("redis.example.com" in json.dumps(r) for r in json.loads(done.stdout)), done.stdout


# ---------------------------------------------------------------------------------------------
# exec credential plugins that hang or fail
# ---------------------------------------------------------------------------------------------

HANGING_PLUGIN = """\
import os, subprocess, sys, time
# a child in the same process group, as a shell script's sleep would be
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(sys.argv[1], "w").write(f"{os.getpgrp()} {child.pid}")
time.sleep(300)
"""

FAILING_PLUGIN = """\
import sys
sys.stderr.write("token=%s\\n" % sys.argv[1])
sys.exit(1)
"""


def _kubeconfig_with_exec(cluster: SimCluster, path: Path, exec_cfg: dict[str, Any]) -> Path:
    cfg = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in cfg["users"]:
        if entry["name"] == "admin":
            entry["user"] = {"exec": exec_cfg}
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pgid: int, bound: float = 10.0) -> bool:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return True
        time.sleep(0.05)
    return False


def test_hanging_exec_plugin_stopped_at_the_request_timeout(planted: Planted, tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text(HANGING_PLUGIN)
    pids = tmp_path / "pids"
    kubeconfig = _kubeconfig_with_exec(planted.cluster, tmp_path / "kubeconfig", {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(tmp_path / "plugin.py"), str(pids), f"--oidc-client-secret={SECRETS['plugin_argv_eq']}",
                 "--api-key", SECRETS["plugin_argv"]],
        "interactiveMode": "Never"})
    for level in ("0", "9"):  # at -v 9 with the traceback, which must not show the plugin's argv
        pids.unlink(missing_ok=True)
        started = time.monotonic()
        done = subprocess.run([str(zipapp_path()), "detect", "-n", NS, "--request-timeout", "2s", "-v", level,
                               "--kubeconfig", str(kubeconfig)], env=planted.cluster.env(), capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
        took = time.monotonic() - started
        assert done.returncode == 2, done.stderr
        assert took < 15, took
        lines = done.stderr.strip().splitlines()
        assert "within 2 s (--request-timeout)" in lines[-1], done.stderr
        assert len(lines) == 1 or level != "0", done.stderr
        for value in (SECRETS["plugin_argv_eq"], SECRETS["plugin_argv"], "plugin.py"):
            assert value not in done.stderr, (value, done.stderr)
        pgid, child = (int(n) for n in pids.read_text().split())
        assert pgid != os.getpgrp()  # it ran in its own process group
        assert _wait_gone(pgid), f"process group {pgid} (child {child}) still running"


def test_plugin_killed_while_its_exec_plugin_hangs_leaves_no_child(planted: Planted, tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text(HANGING_PLUGIN)
    pids = tmp_path / "pids"
    kubeconfig = _kubeconfig_with_exec(planted.cluster, tmp_path / "kubeconfig", {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(tmp_path / "plugin.py"), str(pids)], "interactiveMode": "Never"})
    for sig in (signal.SIGINT, signal.SIGTERM):
        pids.unlink(missing_ok=True)
        proc = subprocess.Popen([str(zipapp_path()), "detect", "-n", NS, "--kubeconfig", str(kubeconfig)],
                                env=planted.cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids.exists(), "the exec plugin never started"
        pgid, _child = (int(n) for n in pids.read_text().split())
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode != 0, err
        assert "Traceback" not in err, err
        assert _wait_gone(pgid), f"{sig.name}: process group {pgid} still running"


def _process_gone(pid: int, bound: float = 10.0) -> bool:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_plugin_sigkilled_while_its_exec_plugin_hangs_takes_the_exec_plugin_down(planted: Planted,
                                                                                  tmp_path: Path) -> None:
    # SIGKILL cannot be caught: the exec plugin's own process is sent SIGKILL by the kernel when
    # its parent dies (PR_SET_PDEATHSIG); what it started itself is the one thing left (say so)
    (tmp_path / "plugin.py").write_text(HANGING_PLUGIN)
    pids = tmp_path / "pids"
    kubeconfig = _kubeconfig_with_exec(planted.cluster, tmp_path / "kubeconfig", {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(tmp_path / "plugin.py"), str(pids)], "interactiveMode": "Never"})
    proc = subprocess.Popen([str(zipapp_path()), "detect", "-n", NS, "--kubeconfig", str(kubeconfig)],
                            env=planted.cluster.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pgid, child = (int(n) for n in pids.read_text().split())
    try:
        proc.kill()
        proc.wait(30)
        assert _process_gone(pgid), f"the exec plugin {pgid} outlived a SIGKILL of its parent"
    finally:
        try:
            os.killpg(pgid, signal.SIGKILL)  # the grandchild, so the test leaves nothing behind
        except ProcessLookupError:
            pass
    assert _wait_gone(pgid)
    del child


def test_failing_exec_plugin_gives_kubectls_message_only(planted: Planted, tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text(FAILING_PLUGIN)
    kubeconfig = _kubeconfig_with_exec(planted.cluster, tmp_path / "kubeconfig", {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(tmp_path / "plugin.py"), SECRETS["plugin_stderr"],
                 f"--oidc-client-secret={SECRETS['plugin_argv_eq']}"], "interactiveMode": "Never"})
    for level in LEVELS:
        done = subprocess.run([str(zipapp_path()), "detect", "-n", NS, "-v", level, "--kubeconfig", str(kubeconfig)],
                              env=planted.cluster.env(), capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert f"executable {sys.executable} failed with exit code 1" in done.stderr, done.stderr
        assert 'user "admin"' in done.stderr, done.stderr
        for value in (SECRETS["plugin_stderr"], SECRETS["plugin_argv_eq"], "plugin.py", "token="):
            assert value not in done.stderr, (value, done.stderr)
        if level == "0":
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr


FLOODING_PLUGIN = """\
import sys
chunk = b"x" * (1 << 20)
for _ in range(200):  # 200 MiB on stdout
    sys.stdout.buffer.write(chunk)
"""


def test_exec_plugin_flooding_stdout_is_stopped_with_exit_2(planted: Planted, tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text(FLOODING_PLUGIN)
    kubeconfig = _kubeconfig_with_exec(planted.cluster, tmp_path / "kubeconfig", {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(tmp_path / "plugin.py"), "--api-key", SECRETS["plugin_argv"]], "interactiveMode": "Never"})
    done = subprocess.run([str(zipapp_path()), "detect", "-n", NS, "--kubeconfig", str(kubeconfig)],
                          env=planted.cluster.env(), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert f"executable {sys.executable} wrote more than 1 MiB on stdout" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and SECRETS["plugin_argv"] not in done.stderr, done.stderr
