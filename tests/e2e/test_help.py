"""Help as kubectl gives it: the global flags listed once (``kubectl kvreset options``), each
command's exit codes, one ``error:`` prefix."""

from __future__ import annotations

import subprocess

import pytest

from kubectl_kvreset.cli.commands import COMMANDS
from tests.simctl import zipapp_path

GLOBAL_ONLY = ("--kubeconfig", "--context", "--cluster", "--token", "--certificate-authority",
               "--insecure-skip-tls-verify", "--request-timeout", "--as-group")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(zipapp_path()), *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_options_lists_every_global_flag_once() -> None:
    done = _run("options")
    assert done.returncode == 0, done.stderr
    for flag in (*GLOBAL_ONLY, "--namespace", "--all-namespaces", "--server", "--as"):
        assert done.stdout.count(flag + " ") + done.stdout.count(flag + ",") >= 1, (flag, done.stdout)
    assert "options" in _run("--help").stdout


@pytest.mark.parametrize("name", [c for c in COMMANDS if c != "options"])
def test_sub_command_help_names_options_instead_of_repeating_them(name: str) -> None:
    done = _run(name, "--help")
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("Options:\n", 1)[1].split("\n\n", 1)[0]
    listed = [line.split()[0].rstrip(",") for line in section.splitlines() if line.startswith("  -")]
    for flag in GLOBAL_ONLY:
        assert flag not in listed, (flag, done.stdout)
    assert "--namespace" in " ".join(done.stdout.split())  # -n/-A stay: every example uses them
    assert "kubectl kvreset options" in done.stdout.replace("\n  ", " ")
    text = " ".join(done.stdout.split())
    assert "Exit codes: 0" in text
    if name in ("detect", "metrics"):
        assert "every pod answered" in text and "tier" not in text.split("Exit codes:")[1]
    if name in ("restart", "devmode"):
        assert "every owner done and ready" in text and "--dry-run" in text
    # hidden from help, still accepted
    assert _run(name, "--context", "nope", "--help").returncode == 0


def test_usage_errors_have_one_prefix() -> None:
    for args in (["clear", "--no-such"], ["detect", "-o", "xml"], ["clera"], ["clear", "--dry-run=server"]):
        done = _run(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("error: ") and "Error:" not in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert "Did you mean this?\n\tclear\n" in _run("clera").stderr
