"""clear plans and chains per pod: API reset, clear-fs, and the disruptive fallback."""

from __future__ import annotations

from .conftest import fixture_file

NS = "llmd"
TIERED_OWNER = "deployment/gpu-vllm-decode"


def vllm_states(cluster):
    return [(pod, st) for pod in cluster.live_pods() for st in pod["ports"].values() if st["role"] == "vllm"]


def test_tiered_026_dev_on_empties_every_tier_and_keeps_shm(sim) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    before = {p["name"]: p for p in cluster.live_pods()}
    assert all(p["fs_tier_files"] and p["shm_files"] for p in before.values())
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, (err, rows)
    for r in rows:
        assert (r["gpu"], r["cpu"], r["fs"], r["result"]) == ("emptied", "emptied", "emptied", "emptied"), r
        assert r["steps"] == ["api-reset", "clear-fs"]
    after = cluster.live_pods()
    assert {p["name"] for p in after} == set(before), "no pod was replaced"
    for _pod, st in vllm_states(cluster):
        assert st["prefix_cache_blocks"] == 0 and st["offload_cpu_blocks"] == 0
    for pod in after:
        assert pod["fs_tier_files"] == []
        assert pod["shm_files"] == before[pod["name"]]["shm_files"]


def test_tiered_dev_off_with_devmode_fallback_rolls_and_still_empties_fs(sim) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="off", vllm_version="0.26.0")
    old = {p["name"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback=devmode", "--timeout", "60s")
    assert code == 0, (err, rows)
    assert all(r["steps"] == ["clear-fs", "devmode"] and r["fs"] == "emptied" for r in rows)
    cluster.wait_ready()
    new = cluster.live_pods()
    assert new and not ({p["name"] for p in new} & old), "the dev-mode patch rolled the pods"
    for pod in new:
        assert pod["env"].get("VLLM_SERVER_DEV_MODE") == "1"
        assert pod["fs_tier_files"] == [], "clear-fs ran before the rollout and replacement pods start cold"
    for _pod, st in vllm_states(cluster):
        assert st["prefix_cache_blocks"] == 0 and st["offload_cpu_blocks"] == 0


def test_tiered_023_without_fallback_reports_cpu_not_emptied(sim) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="on", vllm_version="0.23.0")
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 1
    for r in rows:
        assert r["cpu"] == "left" and r["fs"] == "emptied" and r["result"] == "partial"
        assert any(item["tier"] == "cpu" and item["remedy"] == "--fallback=restart" for item in r["left"])
    for _pod, st in vllm_states(cluster):  # reported left: really still full
        assert st["offload_cpu_blocks"] > 0 and st["prefix_cache_blocks"] == 0


def test_tiered_023_with_restart_is_clear_fs_then_restart(sim) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="on", vllm_version="0.23.0")
    before = cluster.live_pods()
    generation = cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments/gpu-vllm-decode")["metadata"]["generation"]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--dry-run", "--fallback=restart")
    assert code == 0, err
    assert rows and all(r["steps"] == ["clear-fs /mnt/files-storage", f"restart {TIERED_OWNER}"] for r in rows), rows
    assert all(st["reset_calls"] == 0 for _, st in vllm_states(cluster))
    after_dry = cluster.live_pods()  # the dry run changed nothing
    assert [(p["name"], p["fs_tier_files"]) for p in after_dry] == [(p["name"], p["fs_tier_files"]) for p in before]
    assert cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments/gpu-vllm-decode")["metadata"]["generation"] == \
        generation
    old = {p["name"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback=restart", "--timeout", "60s")
    assert code == 0, (err, rows)
    assert all(r["steps"] == ["clear-fs", "restart"] and r["cpu"] == "emptied" for r in rows)
    cluster.wait_ready()
    new = cluster.live_pods()
    assert new and not ({p["name"] for p in new} & old)
    for _pod, st in vllm_states(cluster):
        assert st["reset_calls"] == 0, "cold because replaced, not because reset"
        assert st["prefix_cache_blocks"] == 0 and st["offload_cpu_blocks"] == 0
    assert all(p["fs_tier_files"] == [] for p in new)


def test_dry_run_prints_plans_and_changes_nothing(sim) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, dev_mode="off", vllm_version="0.26.0")
    before = cluster.live_pods()
    done = cluster.run("clear", "-n", NS, "--all", "--dry-run", "--fallback=devmode")
    assert done.returncode == 0, done.stderr
    assert "devmode" in done.stdout and "fs" in done.stdout and "POST /reset" not in done.stdout  # short codes
    done = cluster.run("clear", "-n", NS, "--all", "--dry-run", "--fallback=devmode", "-o", "wide")
    assert "devmode --enable deployment/gpu-vllm-decode" in done.stdout and "clear-fs" in done.stdout
    after = cluster.live_pods()
    assert [p["name"] for p in after] == [p["name"] for p in before]
    assert [p["fs_tier_files"] for p in after] == [p["fs_tier_files"] for p in before]
