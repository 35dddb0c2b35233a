"""clear on a terminal: the plan is shown, a needed fallback is offered, one confirmation."""

from __future__ import annotations

import os
import pty
import subprocess

from tests.simctl import zipapp_path

from .conftest import fixture_file

NS = "llmd"


def run_on_tty(cluster, args: list[str], answers: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI with a terminal as stdin, typing ``answers``."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([str(zipapp_path()), *args], env=cluster.env(), stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.write(master, answers.encode())
        out, err = proc.communicate(timeout=120)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        os.close(master)
        os.close(slave)


def test_terminal_offers_the_fallback_and_asks_once(sim) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="on", vllm_version="0.23.0")
    old = {p["name"] for p in cluster.live_pods()}
    done = run_on_tty(cluster, ["clear", "-n", NS, "--all", "-o", "json", "--timeout", "60s"], "restart\ny\n")
    assert done.returncode == 0, done.stderr
    assert "restart would empty them" in done.stderr and "Run these steps on " in done.stderr
    assert done.stderr.count("Run these steps on ") == 1
    cluster.wait_ready()
    assert not ({p["name"] for p in cluster.live_pods()} & old)


def test_terminal_decline_changes_nothing(sim) -> None:
    cluster = sim([fixture_file("02")], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    done = run_on_tty(cluster, ["clear", "-n", NS, "--all"], "n\n")
    assert done.returncode == 1 and "nothing changed" in done.stderr
    # the prompt names where the plan runs: the context, the cluster and the namespace
    import re
    asked = re.search(r'Run these steps on context "([^"]+)", cluster "([^"]+)" \(https://[^)]+\), '
                      r'namespace "([^"]+)"\?',
                      done.stderr)
    assert asked and asked.group(3) == NS and all(asked.groups()), done.stderr
    verbose = cluster.run("detect", "-n", NS, "-v", "1")
    assert f'using context "{asked.group(1)}", cluster "{asked.group(2)}"' in verbose.stderr
    assert f'namespace "{NS}"' in verbose.stderr
    assert all(st["reset_calls"] == 0 for p in cluster.live_pods() for st in p["ports"].values())


def test_yes_on_a_terminal_runs_only_the_non_disruptive_plan(sim) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="on", vllm_version="0.23.0")
    old = {p["name"] for p in cluster.live_pods()}
    done = run_on_tty(cluster, ["clear", "-n", NS, "--all", "--yes"], "")
    assert done.returncode == 1  # the CPU tier is left: no --fallback
    assert "Run these steps on " not in done.stderr
    assert {p["name"] for p in cluster.live_pods()} == old
    assert "--fallback=restart" in done.stdout
