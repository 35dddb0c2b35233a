"""detect against the simulator loaded with the real llm-d fixtures."""

from __future__ import annotations

from collections import Counter

import pytest

from .conftest import fixture_file

NS = "llmd"

# owner -> (role, container, API ports, number of pods)
EXPECTED = {
    "01": {"deployment/optimized-baseline-nvidia-gpu-vllm-decode": ("decode", "modelserver", [8000], 8)},
    "02": {"deployment/pd-disaggregation-nvidia-gpu-vllm-decode": ("decode", "modelserver", [8200], 2),
           "deployment/pd-disaggregation-nvidia-gpu-vllm-prefill": ("prefill", "modelserver", [8000], 8)},
    "03": {"deployment/pd-llm-d-modelservice-decode": ("decode", "vllm", [8200], 1),
           "deployment/pd-llm-d-modelservice-prefill": ("prefill", "vllm", [8000], 1)},
    "05": {"deployment/gpu-vllm-decode": ("decode", "modelserver", [8000], 2)},
    "06": {"leaderworkerset/wide-ep-llm-d-decode": ("decode", "vllm", list(range(8200, 8208)), 2),
           "leaderworkerset/wide-ep-llm-d-prefill": ("prefill", "vllm", list(range(8000, 8008)), 2)},
}


@pytest.mark.parametrize("prefix", sorted(EXPECTED))
def test_detect_lists_exactly_the_vllm_pods(sim, prefix: str) -> None:
    cluster = sim([fixture_file(prefix)], namespace=NS, dev_mode="on")
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    expected = EXPECTED[prefix]
    assert Counter(r["owner"] for r in rows) == {o: e[3] for o, e in expected.items()}
    for row in rows:
        role, container, ports, _ = expected[row["owner"]]
        assert (row["role"], row["container"], row["ports"]) == (role, container, ports), row
        assert row["kind"] == "VllmPod" and row["dev_mode"] == "on" and row["version"]
    live = {p["name"] for p in cluster.live_pods() if p["namespace"] == NS and p.get("vllm_container")}
    assert {r["pod"] for r in rows} == live


def test_recorded_argv_and_the_plugin_parse_agree(sim) -> None:
    for prefix in sorted(EXPECTED):
        cluster = sim([fixture_file(prefix)], namespace=NS)
        code, rows, err = cluster.run_json("detect", "-n", NS)
        assert code == 0, err
        state = {p["name"]: p for p in cluster.live_pods()}
        for row in rows:
            recorded = state[row["pod"]]["recorded_argv"][row["container"]]
            assert row["argv"] == recorded, (prefix, row["pod"])
        cluster.stop()


def test_epp_pod_is_not_listed_in_its_namespace(sim) -> None:
    cluster = sim([fixture_file("03")], namespace=NS)
    assert any(p["namespace"] == "default" and "epp" in p["name"] for p in cluster.live_pods())
    code, rows, err = cluster.run_json("detect", "-n", "default")
    assert code == 0, err
    assert rows == []
    code, rows, _ = cluster.run_json("detect", "-A")
    assert all("epp" not in r["pod"] for r in rows) and len(rows) == 2


def test_decode_behind_sidecar_reports_vllm_port_and_front(sim) -> None:
    cluster = sim([fixture_file("02")], namespace=NS)
    code, rows, err = cluster.run_json("detect", "deployment/pd-disaggregation-nvidia-gpu-vllm-decode", "-n", NS)
    assert code == 0, err
    assert {(tuple(r["ports"]), tuple(r["front_ports"])) for r in rows} == {((8200,), (8000,))}


def test_wide_ep_reports_eight_ports_not_the_supervisor(sim) -> None:
    cluster = sim([fixture_file("06")], namespace=NS)
    code, rows, err = cluster.run_json("detect", "-n", NS, "leaderworkerset/wide-ep-llm-d-decode")
    assert code == 0, err
    assert len(rows) == 2
    for row in rows:
        assert row["ports"] == list(range(8200, 8208)) and 8208 not in row["ports"]
        assert row["front_ports"] == list(range(8000, 8008))


def test_tiered_fixture_reports_cpu_and_fs_tier(sim) -> None:
    cluster = sim([fixture_file("05")], namespace=NS)
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    for row in rows:
        assert row["tiers"] == ["gpu", "cpu", "fs"]
        assert row["fs_roots"] == ["/mnt/files-storage"]
        assert row["connectors"] == ["OffloadingConnector"]


def test_table_output_and_other_role_note(sim) -> None:
    cluster = sim([fixture_file("02")], namespace=NS)
    done = cluster.run("detect", "-n", NS, "deployment/pd-disaggregation-nvidia-gpu-vllm-decode")
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split()
    assert header[:3] == ["POD", "ROLE", "CONTAINER"]  # the owner is the pod name's prefix: -o wide shows it
    wide = cluster.run("detect", "-n", NS, "deployment/pd-disaggregation-nvidia-gpu-vllm-decode", "-o", "wide")
    assert wide.stdout.splitlines()[0].split()[:3] == ["POD", "OWNER", "ROLE"], wide.stdout
    assert "is not targeted" not in done.stderr  # a read-only listing needs no pair note
    dry = cluster.run("clear", "-n", NS, "deployment/pd-disaggregation-nvidia-gpu-vllm-decode", "--dry-run")
    assert "its other role, deployment/pd-disaggregation-nvidia-gpu-vllm-prefill, is not targeted" in dry.stderr


def test_unknown_owner_names_it(sim) -> None:
    cluster = sim([fixture_file("01")], namespace=NS)
    done = cluster.run("clear", "-n", NS, "deployment/nope", "--yes")
    assert done.returncode == 1
    assert "deployment/nope" in done.stderr and "Traceback" not in done.stderr
