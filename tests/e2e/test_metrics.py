"""metrics: family chosen by what the scrape holds; one failing pod does not hide the others."""

from __future__ import annotations

import pytest

from .conftest import fixture_file

NS = "llmd"


@pytest.mark.parametrize("version,family", [
    ("0.8.5", "vllm:gpu_cache_usage_perc"),
    ("0.11.0", "vllm:kv_cache_usage_perc"),
    ("0.12.0", "vllm:kv_cache_usage_perc"),
    ("0.26.0", "vllm:kv_cache_usage_perc"),
])
def test_usage_family_per_version(sim, version: str, family: str) -> None:
    cluster = sim([fixture_file("05")], namespace=NS, vllm_version=version)
    code, rows, err = cluster.run_json("metrics", "-n", NS)
    assert code == 0, err
    assert len(rows) == 2
    for r in rows:
        assert r["kind"] == "EngineMetrics" and r["usage_metric"] == family
        assert r["usage"] is not None and 0 <= r["usage"] <= 1
        assert r["engine"] == "0" and r["error"] is None
        assert r["prefix_queries"] is not None


def test_one_failing_metrics_endpoint(sim) -> None:
    scenario = {"pods": [{"match": {"ordinal": 1}, "metrics_status": 500}]}
    cluster = sim([fixture_file("02")], namespace=NS, scenario=scenario, vllm_version="0.26.0")
    code, rows, err = cluster.run_json("metrics", "-n", NS)
    assert code == 1
    failed = [r for r in rows if r["error"]]
    assert len(failed) == 2  # ordinal 1 of each Deployment
    assert all(r["error"].startswith("unavailable") for r in failed)
    assert len([r for r in rows if not r["error"]]) == 8
    table = cluster.run("metrics", "-n", NS)
    assert table.returncode == 1 and "unavailable" in table.stdout
