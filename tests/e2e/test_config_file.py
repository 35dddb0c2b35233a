"""vLLM ``--config FILE`` from a ConfigMap or Secret (tests/manifests/config-file.yaml): the port
and the kv-transfer-config set in the file count for detect and clear exactly as the same flags
on the command line do (each config-* Deployment has a cli-* twin); the simulator reads the file
from the pod's volume on its own, so the fake vLLM listens where the file says. With the
ConfigMap and Secret unreadable (a Role without them) the rows say so and exit 1."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.simctl import ROOT, SimCluster

NS = "cfg"
MANIFEST = ROOT / "tests" / "manifests" / "config-file.yaml"
ROLE_FILE = ROOT / "rbac" / "kubectl-kvreset-role.yaml"
TWINS = {"config-plain": "cli-plain", "config-projected": "cli-projected"}
PORTS = {"config-plain": 8123, "config-projected": 8125}


def owner_of(pod_name: str) -> str:
    return pod_name.rsplit("-", 2)[0]


def by_owner(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {owner_of(r["pod"]): r for r in rows}


def without_config_rule(user: str) -> list[dict[str, Any]]:
    """The repository's Role and binding for ``user`` in NS, minus the configmaps/secrets rule."""
    text = ROLE_FILE.read_text().replace("NAMESPACE", NS).replace("USER", user)
    docs = [d for d in yaml.safe_load_all(text) if d]
    role = copy.deepcopy(docs[0])
    role["rules"] = [r for r in role["rules"] if "configmaps" not in r["resources"]]
    assert len(role["rules"]) == len(docs[0]["rules"]) - 1
    return [role, docs[1]]


@pytest.mark.parametrize("version", ["0.32.0", "0.21.0"])
def test_detect_and_clear_read_the_port_and_tiers_from_the_file(sim, version: str) -> None:
    cluster: SimCluster = sim([MANIFEST], namespace=NS, vllm_version=version)
    listening = {owner_of(p["name"]): sorted(int(x) for x in p["ports"]) for p in cluster.live_pods()}
    assert listening["config-plain"] == [8123] and listening["config-projected"] == [8125]

    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    found = by_owner(rows)
    for cfg, cli in TWINS.items():
        assert found[cfg]["ports"] == [PORTS[cfg]] == found[cli]["ports"]
        assert found[cfg]["connectors"] == ["OffloadingConnector"] == found[cli]["connectors"]
        assert found[cfg]["tiers"] == ["gpu", "cpu"] == found[cli]["tiers"]
        assert found[cfg]["config_source"] and found[cfg]["config_error"] is None
        assert not any("not read" in n for n in found[cfg]["notes"])

    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--yes")
    cleared = by_owner(rows)
    for cfg, cli in TWINS.items():
        a, b = cleared[cfg], cleared[cli]
        assert a["port"] == PORTS[cfg]
        assert (a["gpu"], a["cpu"], a["result"]) == (b["gpu"], b["cpu"], b["result"]), (a, b)
    if version == "0.32.0":
        assert code == 0, err
        assert all(r["cpu"] == "emptied" and r["result"] == "emptied" for r in rows)
    else:  # OffloadingConnector's CPU tier has no reset before 0.22: left, never "emptied"
        assert code == 1
        assert all(r["cpu"] != "emptied" for r in rows)
    for pod in cluster.live_pods():
        if owner_of(pod["name"]) in PORTS:
            assert pod["ports"][str(PORTS[owner_of(pod["name"])])]["reset_calls"] >= 1


def test_unreadable_config_map_is_said_and_never_emptied(sim) -> None:
    user = "bob"
    cluster: SimCluster = sim([MANIFEST], namespace=NS, vllm_version="0.32.0",
                              scenario={"users": [{"name": user}], "rbac": without_config_rule(user)})

    def as_bob(*args: str) -> tuple[int, list[dict[str, Any]], str]:
        return cluster.run_json(*args, "-n", NS, "--context", f"sim-{user}")

    code, rows, err = as_bob("detect")
    assert code == 1, (rows, err)
    found = by_owner(rows)
    for cfg in TWINS:
        assert "no permission to get" in (found[cfg]["config_error"] or "")
        assert any("no permission" in n for n in found[cfg]["notes"])
    assert found["config-plain"]["ports"] == []          # only the file names its port
    assert found["config-projected"]["ports"] == [8125]  # the command line names this one
    assert all(not found[cli]["config_error"] for cli in TWINS.values())

    code, rows, err = as_bob("clear", "--all", "--yes")
    assert code == 1, (rows, err)
    cleared = by_owner(rows)
    for cfg, cli in TWINS.items():
        assert cleared[cfg]["result"] == "config unread", cleared[cfg]
        assert "not reported emptied" in cleared[cfg]["message"]
        assert cleared[cli]["result"] == "emptied"

    code, rows, err = as_bob("metrics")
    assert code == 1, (rows, err)
    plain = [r for r in rows if r["pod"].startswith("config-plain-")]
    assert len(plain) == 1 and "no permission" in plain[0]["error"]
