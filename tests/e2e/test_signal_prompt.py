"""A signal before anything changed ends the run at once: at a confirmation prompt on a
terminal, while an exec credential plugin hangs; json/yaml print ``[]`` then."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.simctl import SimCluster, zipapp_path

from .conftest import fixture_file

NS = "llmd"

HANGING_PLUGIN = """\
import sys, time
open(sys.argv[1], "w").write("started")
time.sleep(300)
"""


def _warm_env(cluster: SimCluster, tmp_path: Path) -> dict[str, str]:
    """The cluster's environment with a private SHIV_ROOT, extracted once, so that each run
    starts without unpacking the zipapp."""
    env = dict(cluster.env(), SHIV_ROOT=str(tmp_path / "shiv"))
    subprocess.run([str(zipapp_path()), "--version"], env=env, check=True, capture_output=True, timeout=120)
    return env


def _signal_at_prompt(env: dict[str, str], args: list[str], sig: signal.Signals) -> tuple[int | None, str, str, float]:
    """Run the CLI with a terminal as stdin and stderr (stdout a pipe), send ``sig`` the moment
    the prompt's ``[y/N]`` appears; returns (exit code or None if still running after 10 s,
    terminal text, stdout, seconds from the signal to the exit)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(zipapp_path()), *args], env=env, stdin=slave, stdout=subprocess.PIPE,
                            stderr=slave, start_new_session=True)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"[y/N]" not in seen and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
        assert b"[y/N]" in seen, seen.decode(errors="replace")
        proc.send_signal(sig)
        sent = time.monotonic()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - sent
        code = proc.poll()
        while True:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        if code is None:  # still blocked: end it so the test leaves nothing behind
            proc.kill()
            proc.wait(10)
        out = proc.stdout.read().decode() if proc.stdout else ""
        return code, seen.decode(errors="replace"), out, took
    finally:
        if proc.stdout:
            proc.stdout.close()
        os.close(master)


def test_a_signal_at_the_prompt_ends_the_run_at_once(sim, tmp_path) -> None:
    # the race: a signal landing just as the read of the answer begins (or handled by another
    # thread) was left pending until a line was typed; 20 tries, alternately SIGINT and SIGTERM
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    env = _warm_env(cluster, tmp_path)
    dep = cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments")["items"][0]
    failures = []
    for i in range(20):
        sig = signal.SIGTERM if i % 2 else signal.SIGINT
        code, text, out, took = _signal_at_prompt(env, ["restart", "-n", NS, "--all", "-o", "json"], sig)
        want = (143, "terminated (SIGTERM) before anything was changed") if sig == signal.SIGTERM else \
            (130, "interrupted (SIGINT) before anything was changed")
        try:
            rows = json.loads(out)
        except ValueError:
            rows = None
        if code != want[0] or want[1] not in text or "Traceback" in text or rows != []:
            failures.append((i, sig.name, code, f"{took:.1f}s", text[-300:], out))
    assert not failures, failures
    after = cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments")["items"][0]
    assert after["metadata"]["generation"] == dep["metadata"]["generation"]
    assert "kubectl.kubernetes.io/restartedAt" not in (after["spec"]["template"]["metadata"].get("annotations") or {})
    assert not [k for k, n in cluster.state()["api_requests"].items() if k.startswith("patch") and n], \
        cluster.state()["api_requests"]


def test_answering_the_prompt_still_works(sim, tmp_path) -> None:
    # the answer is read line by line from the terminal: an invalid answer asks again, "n" declines
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    env = _warm_env(cluster, tmp_path)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([str(zipapp_path()), "restart", "-n", NS, "--all"], env=env, stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.write(master, b"maybe\nn\n")
        _out, err = proc.communicate(timeout=120)
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 1, err
    assert err.count("Continue? [y/N]") == 2 and "error: invalid input" in err and "nothing changed" in err, err
    dep = cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments")["items"][0]
    assert "kubectl.kubernetes.io/restartedAt" not in (dep["spec"]["template"]["metadata"].get("annotations") or {})


def _kubeconfig_with_hanging_exec(cluster: SimCluster, tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "plugin.py").write_text(HANGING_PLUGIN)
    started = tmp_path / "started"
    cfg: Any = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in cfg["users"]:
        if entry["name"] == "admin":
            entry["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                                      "args": [str(tmp_path / "plugin.py"), str(started)],
                                      "interactiveMode": "Never"}}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path, started


def test_a_signal_while_the_exec_plugin_hangs_says_so_and_prints_an_empty_list(sim, tmp_path) -> None:
    # the exec credential plugin never answers, so the signal lands before anything is changed,
    # in every command: SIGTERM says "terminated", SIGINT "interrupted"; json and yaml print []
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    env = _warm_env(cluster, tmp_path)
    kubeconfig, started = _kubeconfig_with_hanging_exec(cluster, tmp_path)
    runs = [("detect", "json", signal.SIGTERM), ("clear-fs", "json", signal.SIGTERM),
            ("clear-fs", "yaml", signal.SIGINT), ("clear", "yaml", signal.SIGTERM),
            ("restart", "json", signal.SIGINT), ("devmode", "yaml", signal.SIGTERM),
            ("clear-store", "json", signal.SIGTERM), ("metrics", "yaml", signal.SIGTERM)]
    failures = []
    for cmd, fmt, sig in runs:
        started.unlink(missing_ok=True)
        args = [cmd, "-n", NS, "-o", fmt, "--kubeconfig", str(kubeconfig)]
        if cmd not in ("detect", "metrics"):
            args += ["--all", "--yes"]
        if cmd == "devmode":
            args += ["--enable"]
        proc = subprocess.Popen([str(zipapp_path()), *args], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        code, word = (143, "terminated (SIGTERM)") if sig == signal.SIGTERM else (130, "interrupted (SIGINT)")
        loaded = json.loads(out) if fmt == "json" and out.strip() else yaml.safe_load(out) if out.strip() else None
        if (proc.returncode != code or err.strip() != f"{word} before anything was changed" or loaded != []):
            failures.append((cmd, fmt, sig.name, proc.returncode, err[-300:], out[-200:]))
    assert not failures, failures
    assert not [k for k, n in cluster.state()["api_requests"].items() if k.startswith("patch") and n]
