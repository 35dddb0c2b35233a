"""clear through the pod proxy: every port, every role, per-version answers."""

from __future__ import annotations

from urllib.parse import parse_qs

from .conftest import fixture_file

NS = "llmd"


def vllm_ports(cluster):
    """(pod, port, port state) for every vLLM (not sidecar) port of every live pod."""
    for pod in cluster.live_pods():
        for port, st in (pod.get("ports") or {}).items():
            if st.get("role") == "vllm":
                yield pod, int(port), st


def test_clear_all_resets_both_roles_of_the_pd_fixture(sim) -> None:
    cluster = sim([fixture_file("02")], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    before = list(vllm_ports(cluster))
    assert before and all(st["prefix_cache_blocks"] > 0 for _, _, st in before)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, (err, [r for r in rows if r["result"] != "emptied"])
    assert len(rows) == 10 and {r["role"] for r in rows} == {"prefill", "decode"}
    assert all(r["result"] == "emptied" and r["gpu"] == "emptied" for r in rows)
    after = list(vllm_ports(cluster))
    assert len(after) == 10
    for pod, port, st in after:
        assert st["prefix_cache_blocks"] == 0, (pod["name"], port)
        assert parse_qs(st["last_reset_query"]) == {"reset_external": ["true"]}
        assert st["last_transport"] == "proxy"
    decode_ports = {int(p) for pod in cluster.live_pods() for p, st in pod["ports"].items() if "decode" in pod["name"]}
    assert 8200 in decode_ports


def test_clear_on_the_fixture_version_is_unconfirmed(sim) -> None:
    """The fixture's image is vLLM 0.23, which answers an empty 200: done, unconfirmed, exit 3."""
    cluster = sim([fixture_file("02")], namespace=NS, dev_mode="on")
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 3, err
    assert {r["result"] for r in rows} == {"unconfirmed"}
    assert all("empty 200" in r["message"] for r in rows)
    assert all(st["prefix_cache_blocks"] == 0 for _, _, st in vllm_ports(cluster))


def test_wide_ep_every_port_called_exactly_once(sim) -> None:
    cluster = sim([fixture_file("06")], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, err
    assert len(rows) == 4 * 8
    seen = 0
    for pod in cluster.live_pods():
        for port, st in pod["ports"].items():
            if st["role"] == "vllm":
                seen += 1
                assert st["reset_calls"] == 1, (pod["name"], port)
                assert st["prefix_cache_blocks"] == 0
            else:
                assert st["reset_calls"] == 0, (pod["name"], port)
    assert seen == 32


def test_busy_twice_then_free_ends_ok(sim) -> None:
    scenario = {"pods": [{"match": {"owner": "deployment/optimized-baseline-nvidia-gpu-vllm-decode", "ordinal": 0},
                          "busy": 2}]}
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, err
    busy_rows = [r for r in rows if r["busy_answers"]]
    assert len(busy_rows) == 1 and busy_rows[0]["busy_answers"] == 2 and busy_rows[0]["calls"] >= 3
    assert all(r["result"] == "emptied" for r in rows)


def test_busy_past_the_timeout_says_preempt_running(sim) -> None:
    scenario = {"pods": [{"match": {"ordinal": 0}, "busy": 1000}]}
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 1
    busy = [r for r in rows if r["result"] == "busy"]
    assert len(busy) == 1 and "--preempt-running" in busy[0]["message"]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--preempt-running", "--busy-timeout", "1s")
    assert all(r["gpu"] == "emptied" for r in rows), rows
    for _, _, st in vllm_ports(cluster):
        assert parse_qs(st["last_reset_query"]) == {"reset_external": ["true"], "reset_running_requests": ["true"]}


def test_vllm_025_is_unconfirmed(sim) -> None:
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.25.0")
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 3, err
    assert {r["result"] for r in rows} == {"unconfirmed"} and {r["gpu"] for r in rows} == {"unconfirmed"}


def test_dev_mode_off_on_some_pods(sim) -> None:
    scenario = {"pods": [{"match": {"owner": "deployment/pd-disaggregation-nvidia-gpu-vllm-decode"},
                          "dev_mode": "off"}]}
    cluster = sim([fixture_file("02")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 1
    off = [r for r in rows if r["result"] == "dev mode off"]
    assert {r["role"] for r in off} == {"decode"} and len(off) == 2
    assert all("--fallback=devmode|restart" in r["message"] for r in off)
    assert err.count("VLLM_SERVER_DEV_MODE=1") == 1  # the explanation, once
    assert all(r["result"] == "emptied" for r in rows if r["role"] == "prefill")
    for pod, _, st in vllm_ports(cluster):
        assert (st["prefix_cache_blocks"] == 0) == ("prefill" in pod["name"])


def test_dry_run_changes_nothing(sim) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="on", vllm_version="0.23.0")
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--dry-run")
    assert code == 0, err
    assert all(r["kind"] == "PlannedReset" for r in rows)
    assert rows[0]["steps"][0] == "POST /reset_prefix_cache?reset_external=true"
    assert "gpu" in rows[0]["empties"] and any(x.startswith("cpu") for x in rows[0]["leaves"])
    assert all(st["reset_calls"] == 0 and st["prefix_cache_blocks"] > 0 for _, _, st in vllm_ports(cluster))


def test_clear_without_targets_is_a_usage_error(sim) -> None:
    cluster = sim([fixture_file("01")], namespace=NS)
    done = cluster.run("clear", "-n", NS)
    assert done.returncode == 2 and "--all" in done.stderr


def test_dev_mode_unset_in_the_spec_is_asked_of_vllm(sim) -> None:
    """Unset in the spec (the image or a webhook may set it): the reset is sent and the 404 decides."""
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="off", vllm_version="0.26.0")
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 1
    assert {r["result"] for r in rows} == {"dev mode off"} and len(rows) == 8
    assert all("--fallback=devmode" in r["message"] and r["gpu"] == "not emptied" for r in rows)
    assert all(st["prefix_cache_blocks"] > 0 for _, _, st in vllm_ports(cluster))
    # each pod got its reset routes once (prefix, mm, encoder on 0.26), all answered 404
    assert cluster.state()["api_requests"].get("create pods/proxy") == 8 * 3


def test_dev_mode_on_through_the_image_is_found_by_asking(sim) -> None:
    scenario = {"pods": [{"dev_mode": "on"}]}  # the spec has no VLLM_SERVER_DEV_MODE; the server has it on
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="off", vllm_version="0.26.0", scenario=scenario)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback=restart")
    assert code == 0, (err, rows)
    assert {r["result"] for r in rows} == {"emptied"} and all(r["steps"] == ["api-reset"] for r in rows)
    assert all(st["prefix_cache_blocks"] == 0 for _, _, st in vllm_ports(cluster))
