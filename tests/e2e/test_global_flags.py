"""kubectl's global flags before the sub-command: same meaning as after it, through the zipapp
and through real kubectl as a plugin; completion for both placements."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.simctl import DEMO_MANIFEST, zipapp_path

NS = "llm-d-demo"


def vllm_states(cluster):
    return [st for pod in cluster.live_pods() for st in (pod.get("ports") or {}).values() if st.get("role") == "vllm"]


def test_dry_run_plan_is_the_same_on_either_side(sim) -> None:
    cluster = sim([DEMO_MANIFEST], namespace=NS)
    kc = str(cluster.kubeconfig)
    before = cluster.run("-n", NS, "--kubeconfig", kc, "clear", "--all", "--dry-run", "-o", "json")
    after = cluster.run("clear", "-n", NS, "--kubeconfig", kc, "--all", "--dry-run", "-o", "json")
    assert before.returncode == after.returncode == 0, (before.stderr, after.stderr)
    plan = json.loads(before.stdout)
    assert plan and all(r["kind"] == "PlannedReset" for r in plan)
    assert plan == json.loads(after.stdout)
    # -n given on both sides: the value after the sub-command wins
    both = cluster.run("-n", "elsewhere", "clear", "-n", NS, "--all", "--dry-run", "-o", "json")
    assert both.returncode == 0 and json.loads(both.stdout) == plan, both.stderr
    wrong = cluster.run("-n", NS, "clear", "-n", "elsewhere", "--all", "--dry-run", "-o", "json")
    assert wrong.returncode == 1 and "elsewhere" in wrong.stderr
    assert all(st["prefix_cache_blocks"] > 0 for st in vllm_states(cluster))  # a dry run changes nothing


def test_clear_with_flags_before_the_sub_command_empties_every_port(sim) -> None:
    cluster = sim([DEMO_MANIFEST], namespace=NS)
    done = cluster.run("-n", NS, "--kubeconfig", str(cluster.kubeconfig), "--request-timeout", "20s", "clear",
                       "--all", "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert {r["role"] for r in rows} == {"prefill", "decode"}
    assert all(r["result"] == "emptied" for r in rows), rows
    states = vllm_states(cluster)
    assert states and all(st["prefix_cache_blocks"] == 0 for st in states)


def test_all_namespaces_before_the_sub_command(sim) -> None:
    cluster = sim([DEMO_MANIFEST], namespace=NS)
    done = cluster.run("-A", "detect", "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows and {r["namespace"] for r in rows} == {NS}
    # -A wins over -n wherever each stands, as in kubectl
    crossed = cluster.run("-A", "clear", "-n", "elsewhere", "--all", "--dry-run", "-o", "json")
    assert crossed.returncode == 0, crossed.stderr
    assert {r["namespace"] for r in json.loads(crossed.stdout)} == {NS}
    table = cluster.run("-n", "elsewhere", "detect", "-A")
    assert table.returncode == 0 and table.stdout.startswith("NAMESPACE"), table.stderr


def test_through_kubectl_as_a_plugin(sim) -> None:
    if not shutil.which("kubectl"):
        pytest.skip("kubectl is not installed: the plugin cannot be run through it (apt-get install kubectl)")
    cluster = sim([DEMO_MANIFEST], namespace=NS)
    env = cluster.env()
    env["PATH"] = f"{zipapp_path().parent}{os.pathsep}{env.get('PATH', '')}"
    kc = str(cluster.kubeconfig)
    plan_before = subprocess.run(["kubectl", "kvreset", "-n", NS, "--kubeconfig", kc, "clear", "--all", "--dry-run",
                                  "-o", "json"], env=env, capture_output=True, text=True, timeout=120)
    plan_after = subprocess.run(["kubectl", "kvreset", "clear", "-n", NS, "--kubeconfig", kc, "--all", "--dry-run",
                                 "-o", "json"], env=env, capture_output=True, text=True, timeout=120)
    assert plan_before.returncode == 0, plan_before.stderr
    assert json.loads(plan_before.stdout) == json.loads(plan_after.stdout)
    done = subprocess.run(["kubectl", "kvreset", "-n", NS, "--kubeconfig", kc, "clear", "--all", "-o", "json"],
                          env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert all(r["result"] == "emptied" for r in json.loads(done.stdout))
    assert all(st["prefix_cache_blocks"] == 0 for st in vllm_states(cluster))


def test_options_lists_the_global_flags() -> None:
    # as kubectl: the top-level help names the command that lists them (kubectl options)
    top = subprocess.run([str(zipapp_path()), "--help"], capture_output=True, text=True, timeout=60)
    assert top.returncode == 0 and "kubectl kvreset options" in " ".join(top.stdout.split())
    done = subprocess.run([str(zipapp_path()), "options"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for flag in ("--kubeconfig", "--context", "--cluster", "--user", "-n, --namespace", "-A, --all-namespaces",
                 "-s, --server", "--token", "--certificate-authority", "--insecure-skip-tls-verify",
                 "--request-timeout", "--as ", "--as-group", "-v, --v"):
        assert flag in done.stdout, flag
