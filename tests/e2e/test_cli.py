"""The built zipapp as a command: help, version, start-up without the kubernetes package."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.simctl import ROOT, zipapp_path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(zipapp_path()), *args], capture_output=True, text=True, timeout=60)


def test_no_arguments_prints_help_and_exits_0() -> None:
    done = run()
    assert done.returncode == 0
    for name in ("detect", "clear", "metrics"):
        assert name in done.stdout
    assert "Examples:" in done.stdout and "Exit codes:" in done.stdout


def test_help_lists_subcommands_with_descriptions() -> None:
    done = run("--help")
    assert done.returncode == 0
    lines = [ln.strip() for ln in done.stdout.splitlines()]
    assert any(ln.startswith("clear") and "Empty" in ln for ln in lines)
    for sub in ("detect", "clear", "metrics"):
        sub_help = run(sub, "--help")
        assert sub_help.returncode == 0 and "Examples:" in sub_help.stdout and "--namespace" in sub_help.stdout


def test_version() -> None:
    done = run("--version")
    assert done.returncode == 0 and done.stdout.startswith("kubectl-kvreset ")


def test_help_does_not_import_kubernetes_in_the_zipapp() -> None:
    # run through the shebang, as a user does (the test venv's own interpreter would import
    # the package from the source tree through its editable install)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    done = subprocess.run([str(zipapp_path()), "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "kubectl_kvreset.cli.options" in imported  # the plugin itself was loaded and timed
    assert not any(m == "kubernetes" or m.startswith("kubernetes.") for m in imported)
    # the worker pool's module loads only when a command runs calls
    assert "concurrent.futures" not in imported, sorted(imported)


def test_help_does_not_import_kubernetes_from_source() -> None:
    code = ("import sys\nfrom kubectl_kvreset.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "for sub in ('detect', 'clear', 'metrics'):\n"
            "    try:\n        main([sub, '--help'])\n    except SystemExit:\n        pass\n"
            "print('LOADED' if any(m == 'kubernetes' or m.startswith('kubernetes.') for m in sys.modules) "
            "else 'CLEAN')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "CLEAN", done.stderr


def test_bad_flag_is_a_usage_error() -> None:
    done = run("detect", "--output", "xml")
    assert done.returncode == 2 and "xml" in done.stderr


def test_unreadable_kubeconfig_exits_2(tmp_path) -> None:
    bad = tmp_path / "config"
    bad.write_text("clusters: [unclosed")
    done = run("detect", "--kubeconfig", str(bad))
    assert done.returncode == 2 and "not valid YAML" in done.stderr and "Traceback" not in done.stderr


def test_verbose_logs_requests_and_never_the_token(tmp_path) -> None:
    from tests.simctl import DEMO_MANIFEST, SimCluster

    with SimCluster([DEMO_MANIFEST], namespace="llm-d-demo", ready_delay=0.05) as cluster:
        cluster.wait_ready()
        done = cluster.run("detect", "-n", "llm-d-demo", "-v", "8")
        assert done.returncode == 0, done.stderr
        assert "GET https://127.0.0.1:" in done.stderr and "/api/v1/namespaces/llm-d-demo/pods 200" in done.stderr
        assert cluster.admin_token not in done.stderr + done.stdout
        assert "<redacted>" in done.stderr
        quiet = cluster.run("detect", "-n", "llm-d-demo")
        assert "GET https://" not in quiet.stderr


def test_expected_failure_has_no_traceback_unless_verbose(tmp_path) -> None:
    bad = tmp_path / "config"
    bad.write_text("clusters: [unclosed")
    assert "Traceback" not in run("detect", "--kubeconfig", str(bad)).stderr
    verbose = run("detect", "--kubeconfig", str(bad), "-v", "6")
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr
