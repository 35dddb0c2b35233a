"""Refusals named for what they are: a 403 is never reported as something missing, and the row
and stderr name the verb, the resource, the namespace and the Role rule that allows it.

The user is ``alice`` with the Role of ``rbac/`` minus one rule (scenario ``users:`` and
``rbac:``, see tests/sim/README.md), as in ``test_rbac_role.py``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.simctl import SimCluster

from .conftest import fixture_file, require_sandbox
from .test_rbac_role import NS, USER, role_documents
from .test_store_rows import _server, _vllm

RULE_TEXT = "rbac/kubectl-kvreset-role.yaml"


def _role(keep: Any) -> list[dict[str, Any]]:
    """The Role of rbac/ with only the rules ``keep(rule)`` accepts (the RoleBinding kept)."""
    docs = copy.deepcopy(role_documents())
    docs[0]["rules"] = [r for r in docs[0]["rules"] if keep(r)]
    return docs


def _as_alice(cluster: SimCluster, *args: str) -> Any:
    return cluster.run(*args, "-n", NS, "--context", f"sim-{USER}")


def test_no_get_pods_with_a_pod_down_3s_names_the_permission(sim) -> None:
    # pods: list only (discovery works); the pod whose vLLM refuses connections for 3 s cannot
    # be waited on: its row says forbidden with the permission, not "unreachable"
    rbac = _role(lambda r: True)
    for rule in rbac[0]["rules"]:
        if rule["resources"] == ["pods"]:
            rule["verbs"] = ["list"]
    scenario = {"users": [{"name": USER}], "rbac": rbac,
                "pods": [{"match": {"ordinal": 1}, "down_for": 3, "down_at": "first_reset"}]}
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario)
    done = _as_alice(cluster, "clear", "--all", "--yes", "-o", "json")
    assert done.returncode == 1, done.stderr
    rows = json.loads(done.stdout)
    bad = [r for r in rows if r["result"] != "emptied"]
    assert len(bad) == 1, [(r["result"], r["message"]) for r in rows]
    row = bad[0]
    assert row["result"] == "forbidden", row
    need = f"not permitted: get on pods in namespace {NS}"
    assert need in row["message"] and "connection refused" in row["message"], row["message"]
    assert '{apiGroups: [""], resources: [pods], verbs: [get]}' in row["message"] and RULE_TEXT in row["message"]
    assert f"error: {NS}/{row['pod']}: {need}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_pods_only_user_running_detect_is_told_why(sim) -> None:
    rbac = _role(lambda r: r["resources"] == ["pods"])
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0",
                  scenario={"users": [{"name": USER}], "rbac": rbac})
    done = _as_alice(cluster, "detect")
    assert done.returncode == 1, done.stderr
    # the table says why the version is missing, and stderr names the permission and the rule
    header, *lines = done.stdout.splitlines()
    notes = [line for line in lines if line.startswith("[")]  # the error, said once under the table
    lines = [line for line in lines if not line.startswith("[")]
    assert "ERROR" in header and len(lines) == 8, done.stdout
    assert all(line.endswith("[1]") for line in lines) and len(notes) == 1 and "forbidden" in notes[0], done.stdout
    assert f"get on pods/proxy in namespace {NS}" in done.stderr, done.stderr
    assert '{apiGroups: [""], resources: [pods/proxy], verbs: [get]}' in done.stderr, done.stderr
    assert RULE_TEXT in done.stderr and "Traceback" not in done.stderr
    code_json = _as_alice(cluster, "detect", "-o", "json")
    rows = json.loads(code_json.stdout)
    assert all(r["version"] is None and "pods/proxy" in r["error"] for r in rows), rows


def test_no_list_services_never_says_the_service_does_not_exist(sim, tmp_path: Path) -> None:
    require_sandbox()
    manifest = "---\n".join([
        f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n",
        _server("kv-infinistore", "infinistore:0.2.33",
                ["infinistore", "--service-port", "12345", "--manage-port", "18080", "--link-type", "Ethernet"], 12345),
        _vllm("i-one", "org/model-i", "infinistore://kv-infinistore:12345"),
    ])
    path = tmp_path / "m.yaml"
    path.write_text(manifest)
    rbac = _role(lambda r: r["resources"] != ["services"])
    cluster = sim([path], namespace=NS, scenario={"users": [{"name": USER}], "rbac": rbac,
                                                  "pods": [{"match": {"owner": "deployment/kv-infinistore"},
                                                            "infinistore_keys": 7}]})
    done = _as_alice(cluster, "clear-store", "i-one", "--shared-stores", "--yes", "-o", "json")
    assert done.returncode == 1, done.stderr
    [row] = json.loads(done.stdout)
    msg = row["message"]
    assert "does not exist" not in msg and row["resolved"] != "outside the cluster", row
    assert row["result"] == "left" and row["resolved"] == "unresolved (forbidden)", row
    assert f"not permitted: list on services in namespace {NS}" in msg, msg
    assert '{apiGroups: [""], resources: [services], verbs: [list]}' in msg and RULE_TEXT in msg, msg
    assert f"list on services in namespace {NS}" in done.stderr and "error:" in done.stderr, done.stderr
    store = next(p for p in cluster.live_pods() if p["name"].startswith("kv-infinistore"))["ports"]["18080"]
    assert store["keys"] == 7 and store["purge_calls"] == 0
