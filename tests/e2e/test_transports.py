"""--transport: each path works; auto moves past what RBAC forbids; all forbidden names every permission."""

from __future__ import annotations

import pytest

from .conftest import fixture_file

NS = "llmd"
READ = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["replicasets", "deployments"], "verbs": ["get", "list"]}]
PROXY = {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get", "create"]}
EXEC = {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}
PF = {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["get", "create"]}


def scenario_for(*rules: dict) -> dict:
    return {"users": [{"name": "alice"}],
            "rbac": [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                      "metadata": {"name": "kvreset", "namespace": NS}, "rules": READ + list(rules)},
                     {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                      "metadata": {"name": "alice", "namespace": NS},
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kvreset"},
                      "subjects": [{"kind": "User", "name": "alice"}]}]}


def transports_used(cluster) -> set[str]:
    return {st["last_transport"] for pod in cluster.live_pods() for st in pod["ports"].values()
            if st["role"] == "vllm"}


@pytest.mark.parametrize("transport,recorded", [("proxy", "proxy"), ("exec", "exec"), ("port-forward", "portforward")])
def test_each_forced_transport_works(sim, transport: str, recorded: str) -> None:
    cluster = sim([fixture_file("02")], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--transport", transport)
    assert code == 0, (err, rows)
    assert len(rows) == 10 and all(r["result"] == "emptied" for r in rows)
    assert transports_used(cluster) == {recorded}
    code, rows, err = cluster.run_json("metrics", "-n", NS, "--transport", transport)
    assert code == 0 and len(rows) == 10, err


def test_without_pod_proxy_auto_goes_through_exec(sim) -> None:
    cluster = sim([fixture_file("02")], namespace=NS, dev_mode="on", vllm_version="0.26.0",
                  scenario=scenario_for(EXEC, PF))
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--context", "sim-alice")
    assert code == 0, (err, rows)
    assert transports_used(cluster) == {"exec"}
    requests = cluster.state()["api_requests"]
    # every call first tried the proxy at most once (refused), then exec
    assert requests.get("get pods/exec", 0) >= 10
    assert requests.get("get pods/proxy", 0) + requests.get("create pods/proxy", 0) <= 40


def test_without_proxy_and_exec_auto_goes_through_port_forward(sim) -> None:
    cluster = sim([fixture_file("02")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario_for(PF))
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--context", "sim-alice")
    assert code == 0, (err, rows)
    assert transports_used(cluster) == {"portforward"}


def test_all_three_forbidden_exits_1_naming_the_permissions(sim) -> None:
    cluster = sim([fixture_file("02")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario_for())
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--context", "sim-alice")
    assert code == 1
    assert rows and all(r["result"] == "forbidden" for r in rows)
    for perm in ("pods/proxy", "pods/exec", "pods/portforward"):
        assert perm in rows[0]["message"]
    assert all(st["reset_calls"] == 0 for pod in cluster.live_pods() for st in pod["ports"].values())


def test_listing_forbidden_is_a_clear_error(sim) -> None:
    cluster = sim([fixture_file("01")], namespace=NS, scenario={"users": [{"name": "bob"}]})
    done = cluster.run("detect", "-n", NS, "--context", "sim-bob")
    assert done.returncode == 1
    assert 'User "bob" cannot list resource "pods"' in done.stderr and "Traceback" not in done.stderr


def test_without_replicaset_rights_owners_are_read_from_names(sim) -> None:
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}, PROXY]
    scenario = scenario_for()
    scenario["rbac"][0]["rules"] = rules
    cluster = sim([fixture_file("02")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario)
    code, rows, err = cluster.run_json("detect", "-n", NS, "--context", "sim-alice")
    assert code == 0, err
    assert {r["owner"] for r in rows} == {"deployment/pd-disaggregation-nvidia-gpu-vllm-decode",
                                          "deployment/pd-disaggregation-nvidia-gpu-vllm-prefill"}
    # pod-template-hash names the Deployment: no ReplicaSet list is needed (nor refused)
    assert cluster.state()["api_requests"].get("list replicasets", 0) == 0
    assert not any("no permission to list replicasets" in n for r in rows for n in r["notes"])
