"""The first seconds of a run, on the built zipapp against the simulated cluster: what it
imports of the ``kubernetes`` client, how many TLS connections it opens, and what a failing
credential source (an exec plugin) looks like to the user."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.simctl import SimCluster, zipapp_path

BENCH_MANIFEST = Path(__file__).resolve().parents[1] / "bench" / "bench-deployment.yaml"
NS = "bench"


def start_bench(sim: Any, replicas: int = 8) -> SimCluster:
    """The bench Deployment (plain vLLM 0.26, dev mode on, one API port) with ``replicas`` pods."""
    cluster: SimCluster = sim([BENCH_MANIFEST], namespace=NS,
                              scenario={"replicas": {"deployment/bench-vllm": replicas}})
    return cluster


def handshakes(cluster: SimCluster) -> int:
    """TLS handshakes the simulator completed so far, this query's own included."""
    return int(cluster.state()["tls_handshakes"])


def test_a_run_never_imports_the_client_models(sim) -> None:
    # -X importtime lists every module the interpreter imports (on stderr): the credential
    # loaders are there, the 770 model modules and the generated APIs are not
    cluster = start_bench(sim)
    done = subprocess.run([sys.executable, "-X", "importtime", str(zipapp_path()), "detect", "-n", NS],
                          env=cluster.env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    # (modules the adapter imports with importlib are not listed; those they import are)
    assert {"kubernetes.config.exec_provider", "kubernetes.client.exceptions"} <= imported, sorted(imported)
    assert "kubernetes.client.models" not in imported
    assert not any(m.startswith(("kubernetes.client.models", "kubernetes.client.api.", "kubernetes.dynamic",
                                 "kubernetes.watch", "kubernetes.stream")) for m in imported), sorted(imported)
    assert len(done.stdout.splitlines()) == 9  # the header and 8 pods


def test_tls_handshakes_stay_within_the_pool(sim) -> None:
    # 8 pods worked on 3 at a time: the pool keeps 3 keep-alive connections and never opens more
    cluster = start_bench(sim)
    before = handshakes(cluster)
    done = cluster.run("clear", "-n", NS, "--all", "--yes", "-o", "json", "--max-concurrency", "3")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 8 and all(r["result"] == "emptied" for r in rows), rows
    opened = handshakes(cluster) - before - 1  # (the second query's own handshake)
    assert 1 <= opened <= 3, opened
    requests = sum(cluster.state()["api_requests"].values())
    assert requests > opened * 4  # connections were reused: many requests per handshake


def test_insecure_skip_tls_verify_prints_no_library_warning(sim) -> None:
    cluster = start_bench(sim)
    done = cluster.run("detect", "-n", NS, "--insecure-skip-tls-verify")
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "warnings.warn" not in done.stderr, done.stderr


def _kubeconfig_with_user(cluster: SimCluster, user: dict[str, Any], path: Path) -> Path:
    cfg = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in cfg["users"]:
        if entry["name"] == "admin":
            entry["user"] = user
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


MISSING_PLUGIN = {"exec": {
    "apiVersion": "client.authentication.k8s.io/v1", "command": "kvreset-test-no-such-login",
    "args": ["token", "--cluster", "sim"], "interactiveMode": "Never",
    "installHint": "kvreset-test-no-such-login is needed to log in:\n  install it from the cluster's portal"}}


def test_missing_exec_plugin_is_one_message_and_exit_2(sim, tmp_path: Path) -> None:
    cluster = start_bench(sim)
    kubeconfig = _kubeconfig_with_user(cluster, MISSING_PLUGIN, tmp_path / "kubeconfig")
    before = sum(cluster.state()["api_requests"].values())
    done = subprocess.run([str(zipapp_path()), "detect", "-n", NS, "--kubeconfig", str(kubeconfig)],
                          env=cluster.env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    msg = lines[0]
    assert "ERROR:root" not in done.stderr and "Traceback" not in done.stderr
    for part in ('user "admin"', 'context "sim"', "executable kvreset-test-no-such-login not found",
                 "install it from the cluster's portal"):
        assert part in msg, msg
    assert "--cluster sim" not in msg  # the plugin's arguments are never printed
    # nothing was sent: the failure was found before the first request
    assert sum(cluster.state()["api_requests"].values()) == before


FAILING_REFRESH_PLUGIN = """\
import fcntl, json, pathlib, sys
here = pathlib.Path(sys.argv[1])
with open(here / "count", "a+") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    n = int(f.read() or 0)
    f.seek(0); f.truncate(); f.write(str(n + 1))
if n:
    sys.stderr.write("login session ended: run 'sim-login' again\\n")
    sys.exit(1)
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": (here / "token").read_text().strip()}}))
"""


def test_refresh_failing_mid_run_gives_rows_and_exit_1(sim, tmp_path: Path) -> None:
    # the plugin's first token stops working after 12 requests (discovery fits in them); the
    # plugin then fails: every row not done names the user, the context and the executable
    cluster = start_bench(sim)
    token = cluster.api("/sim/v1/tokens", method="POST", body={"user": "admin", "ttl": 12})["token"]
    (tmp_path / "token").write_text(token)
    (tmp_path / "plugin.py").write_text(FAILING_REFRESH_PLUGIN)
    kubeconfig = _kubeconfig_with_user(cluster, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(tmp_path / "plugin.py"), str(tmp_path)], "interactiveMode": "Never",
        "installHint": "see the sim-login page"}}, tmp_path / "kubeconfig")
    done = subprocess.run([str(zipapp_path()), "clear", "-n", NS, "--all", "--yes", "-o", "json",
                           "--kubeconfig", str(kubeconfig)],
                          env=cluster.env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr and "ERROR:root" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 8, rows
    failed = [r for r in rows if r["result"] != "emptied"]
    assert failed, rows
    for row in failed:
        assert 'user "admin"' in row["message"] and "failed with exit code 1" in row["message"], row
        assert "sim-login page" in row["message"], row
        # kubectl's message only: neither the plugin's arguments nor what it wrote on stderr
        assert "plugin.py" not in row["message"] and "login session ended" not in row["message"], row
    assert "login session ended" not in done.stderr and "plugin.py" not in done.stderr, done.stderr
    assert int((tmp_path / "count").read_text()) >= 2
