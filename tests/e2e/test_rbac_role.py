"""The least-privilege Role in rbac/ lets every sub-command work, and each of its rules is needed.

The Role and RoleBinding of ``rbac/kubectl-kvreset-role.yaml`` are loaded into the simulator
(scenario ``users:`` + ``rbac:``) for user ``alice``, and the built CLI runs as her
(``--context sim-alice``). With the whole Role every sub-command succeeds, each transport forced
in turn; with one rule removed (the admin replaces the Role through the API, which applies at
once), a command that needs it fails and names the permission.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.simctl import ROOT, SimCluster

from .conftest import fixture_file, require_sandbox

NS = "llmd"
USER = "alice"
ROLE_FILE = ROOT / "rbac" / "kubectl-kvreset-role.yaml"
ROLE_PATH = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles/kubectl-kvreset"


def role_documents() -> list[dict[str, Any]]:
    """The Role and RoleBinding from the repository, for namespace NS and user alice."""
    text = ROLE_FILE.read_text().replace("NAMESPACE", NS).replace("USER", USER)
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding"]
    return docs


def full_rules() -> list[dict[str, Any]]:
    return list(role_documents()[0]["rules"])


def start(prefix: str, dev_mode: str) -> SimCluster:
    require_sandbox()
    cluster = SimCluster([fixture_file(prefix)], namespace=NS, dev_mode=dev_mode, vllm_version="0.26.0",
                         scenario={"users": [{"name": USER}], "rbac": role_documents()}, ready_delay=0.05)
    cluster.wait_ready()
    return cluster


def set_rules(cluster: SimCluster, rules: list[dict[str, Any]]) -> None:
    """Replace the Role's rules (as the admin)."""
    role = cluster.api(ROLE_PATH)
    role["rules"] = rules
    cluster.api(ROLE_PATH, "PUT", role)


def as_alice(cluster: SimCluster, *args: str, timeout: float = 120.0) -> tuple[int, str]:
    """Run the CLI as alice; returns ``(exit code, stdout + stderr)``."""
    done = cluster.run(*args, "-n", NS, "--context", f"sim-{USER}", timeout=timeout)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def deployments() -> Iterator[SimCluster]:
    """llm-d's tiered prefix cache example (a Deployment with CPU and FS tiers), dev mode on."""
    cluster = start("05", "on")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def lws() -> Iterator[SimCluster]:
    """llm-d's wide-EP example (LeaderWorkerSets, prefill and decode), dev mode on."""
    cluster = start("06", "on")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def configs() -> Iterator[SimCluster]:
    """vLLM servers whose port and kv-transfer-config come from --config files mounted from a
    ConfigMap and a Secret (tests/manifests/config-file.yaml, moved to namespace NS)."""
    require_sandbox()
    docs = [d for d in yaml.safe_load_all((ROOT / "tests" / "manifests" / "config-file.yaml").read_text()) if d]
    for d in docs:
        if d["kind"] == "Namespace":
            d["metadata"]["name"] = NS
        else:
            d["metadata"]["namespace"] = NS
    path = Path(tempfile.mkdtemp(prefix="kvreset-rbac-")) / "config-file.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    cluster = SimCluster([path], namespace=NS, vllm_version="0.32.0",
                         scenario={"users": [{"name": USER}], "rbac": role_documents()}, ready_delay=0.05)
    cluster.wait_ready()
    yield cluster
    cluster.stop()


def test_full_role_reads_config_files(configs: SimCluster) -> None:
    for args in (["detect"], ["clear", "--all", "--yes"]):
        code, out = as_alice(configs, *args)
        assert code == 0, (args, out)
        assert "no permission" not in out, (args, out)


def test_manifest_is_a_namespaced_least_privilege_role() -> None:
    role, binding = role_documents()
    assert role["metadata"]["namespace"] == NS and binding["roleRef"]["name"] == role["metadata"]["name"]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        # read and reset only: never delete or update; secrets only read one by name (the one
        # `delete` is the HTTP method proxied to LMCache's worker API, DELETE /cache/clear)
        if rule["verbs"] == ["delete"]:
            assert rule["resources"] == ["pods/proxy"]
        else:
            assert set(rule["verbs"]) <= {"get", "list", "create", "patch"}
        assert "pods/log" not in rule["resources"]
        if set(rule["resources"]) & {"secrets", "configmaps"}:
            # a vLLM --config file mounted from them: read by name, never listed
            assert rule["verbs"] == ["get"] and set(rule["resources"]) == {"configmaps", "secrets"}


@pytest.mark.parametrize("transport", ["proxy", "exec", "port-forward"])
def test_full_role_read_and_clear_with_each_transport(deployments: SimCluster, transport: str) -> None:
    for args in (["detect"], ["metrics"], ["clear", "--all", "--yes"]):
        code, out = as_alice(deployments, *args, "--transport", transport)
        assert code == 0, (args, out)
        assert "forbidden" not in out.lower(), (args, out)


def test_full_role_clear_fs_devmode_restart(deployments: SimCluster) -> None:
    for args in (["clear-fs", "--all"], ["devmode"], ["devmode", "--disable", "--all", "--yes"],
                 ["devmode", "--enable", "--all", "--yes"], ["restart", "--all", "--yes"]):
        code, out = as_alice(deployments, *args)
        assert code == 0, (args, out)
        assert "forbidden" not in out.lower(), (args, out)


def test_full_role_leaderworkersets(lws: SimCluster) -> None:
    for args in (["detect"], ["devmode"], ["restart", "--all", "--yes"], ["clear", "--all", "--yes"]):
        code, out = as_alice(lws, *args)
        assert code == 0, (args, out)


# (index of the rule in the Role, fixture, command, words the failure must name)
NEEDED: list[tuple[int, str, list[str], list[str]]] = [
    (0, "deployments", ["detect"], ['cannot list resource "pods"']),
    (1, "deployments", ["metrics", "--transport", "proxy"], ["pods/proxy"]),
    (2, "deployments", ["clear", "--all", "--yes", "--transport", "proxy"], ["create", "pods/proxy"]),
    (3, "deployments", ["clear-fs", "--all"], ["pods/exec"]),
    (4, "deployments", ["clear", "--all", "--yes", "--transport", "port-forward"], ["pods/portforward"]),
    (5, "deployments", ["devmode"], ['cannot get resource "deployments"']),
    (6, "deployments", ["restart", "--all", "--yes"], ['cannot patch resource "deployments"']),
    (7, "lws", ["devmode"], ['cannot get resource "leaderworkersets"']),
    (8, "lws", ["restart", "--all", "--yes"], ['cannot patch resource "leaderworkersets"']),
    (9, "configs", ["detect", "-o", "json"], ["no permission to get configmaps"]),
]


# the rules clear-store needs (index, command, words the failure must name), checked against a
# real Redis in tests/peers/test_stores_rbac.py
STORE_NEEDED: list[tuple[int, list[str], list[str]]] = [
    (9, ["clear-store", "--all", "--yes", "--shared-stores"], ['cannot get resource "configmaps"']),
    (10, ["clear-store", "--all", "--yes", "--shared-stores"], ['not permitted: list on services in namespace']),
    (11, ["clear-store", "--all", "--yes", "--shared-stores"],
     ['not permitted: list on endpointslices.discovery.k8s.io in namespace']),
]


# the rule LMCache's worker API clear needs, checked against a real LMCache worker in
# tests/peers/test_stores_lmcache.py
LMCACHE_NEEDED: list[tuple[int, list[str], list[str]]] = [
    (12, ["clear-store", "--all", "--yes", "--shared-stores"], ['cannot delete resource "pods/proxy"']),
]


# rules whose absence a command says but survives (index, fixture, command, words the output names)
NOTED: list[tuple[int, str, list[str], list[str]]] = [
    (13, "deployments", ["clear-fs", "--all", "-o", "json"], ["cannot be read", "get on persistentvolumeclaims"]),
]


@pytest.mark.parametrize("index,which,args,named", NOTED, ids=[f"rule{i}" for i, *_ in NOTED])
def test_each_noted_rule_is_said_when_missing(request: pytest.FixtureRequest, index: int, which: str,
                                              args: list[str], named: list[str]) -> None:
    cluster: SimCluster = request.getfixturevalue(which)
    rules = full_rules()
    set_rules(cluster, copy.deepcopy(rules[:index] + rules[index + 1:]))
    try:
        code, out = as_alice(cluster, *args)
    finally:
        set_rules(cluster, rules)
    assert code == 0, (args, out)
    for word in named:
        assert word in out, (word, args, out)


def test_every_rule_is_checked() -> None:
    # the configmaps/secrets rule is needed both by --config files and by the store step
    checked = ({i for i, *_ in NEEDED} | {i for i, *_ in STORE_NEEDED} | {i for i, *_ in LMCACHE_NEEDED}
               | {i for i, *_ in NOTED})
    assert sorted(checked) == list(range(len(full_rules())))


@pytest.mark.parametrize("index,which,args,named", NEEDED,
                         ids=[f"rule{i}-{' '.join(a[:1])}" for i, _, a, _ in NEEDED])
def test_each_rule_is_needed(request: pytest.FixtureRequest, index: int, which: str, args: list[str],
                             named: list[str]) -> None:
    cluster: SimCluster = request.getfixturevalue(which)
    rules = full_rules()
    without = copy.deepcopy(rules[:index] + rules[index + 1:])
    set_rules(cluster, without)
    try:
        code, out = as_alice(cluster, *args)
    finally:
        set_rules(cluster, rules)
    assert code != 0, (args, out)
    for word in named:
        assert word in out, (word, args, out)
    assert "Traceback" not in out


def test_role_file_is_in_the_repository() -> None:
    assert ROLE_FILE.is_file() and Path(ROLE_FILE).read_text().startswith("# Least-privilege RBAC")
