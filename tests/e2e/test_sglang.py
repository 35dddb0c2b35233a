"""SGLang servers as the built CLI sees them in the simulator (tests/sim/fakesglang.py): ``detect``
lists them with engine ``sglang``, role, port and tiers; ``clear`` sends ``POST
/flush_cache?timeout=<--busy-timeout>`` and empties the radix cache; a busy server is waited for
within the busy timeout; an admin key taken from a Secret is sent and never printed (``-v 9``);
with ``--dp-size 2`` a 200 is never ``emptied``; HiCache's file backend loses the target's pages
alone (another model's on the same claim stay; the same model's written by a pod outside the
targets need ``--shared-stores``); another storage backend is ``left``."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml

from tests.manifests import build
from tests.simctl import SimCluster

NS = "sg"
ADMIN_KEY = "sk-sglang-admin-e2e-4417"


def _container(args: list[str], env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "modelserver", "image": "lmsysorg/sglang:v0.5.23",
                         "command": ["python3", "-m", "sglang.launch_server"],
                         "args": ["--model-path", "org/model", "--host", "0.0.0.0", *args]}
    if env:
        c["env"] = env
    return c


def _write(tmp_path: Path, objs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "sglang.yaml"
    path.write_text(yaml.safe_dump_all(objs), encoding="utf-8")
    return path


def _sglang_ports(cluster: SimCluster) -> dict[str, dict[str, Any]]:
    """Pod name -> the fake SGLang snapshot of its first SGLang port."""
    out = {}
    for pod in cluster.live_pods():
        for snap in pod.get("ports", {}).values():
            if snap.get("role") == "sglang":
                out[pod["name"]] = snap
    return out


def _rows(rows: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["kind"] == kind]


def test_detect_and_clear(sim: Any, tmp_path: Path) -> None:
    pod_labels = {"app": "sgl", "llm-d.ai/engine-type": "sglang", "llm-d.ai/role": "decode"}
    dep = build.deployment("sgl", [_container(["--port", "8000", "--enable-metrics", "--enable-cache-report"])],
                           namespace=NS, labels={"app": "sgl"}, pod_labels=pod_labels)
    cluster = sim([_write(tmp_path, [dep])], namespace=NS)
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    (row,) = _rows(rows, "VllmPod")
    assert (row["engine"], row["ports"], row["role"]) == ("sglang", [8000], "decode"), row
    assert row["tiers"] == ["gpu"], row
    assert all(s["cached_tokens"] > 0 for s in _sglang_ports(cluster).values())
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "7")
    assert code == 0, (err, rows)
    (row,) = _rows(rows, "CacheReset")
    assert (row["engine"], row["result"]) == ("sglang", "emptied"), row
    (snap,) = _sglang_ports(cluster).values()
    assert snap["cached_tokens"] == 0 and snap["flush_queries"] == ["timeout=7"], snap


def test_busy_is_waited_for_then_emptied(sim: Any, tmp_path: Path) -> None:
    dep = build.deployment("sgl", [_container(["--port", "30000"])], namespace=NS)
    scenario = {"pods": [{"match": {"owner": "deployment/sgl"}, "busy_seconds": 1.5}]}
    cluster = sim([_write(tmp_path, [dep])], namespace=NS, scenario=scenario)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "6")
    assert code == 0, (err, rows)
    (row,) = _rows(rows, "CacheReset")
    assert row["result"] == "emptied", row
    assert list(_sglang_ports(cluster).values())[0]["cached_tokens"] == 0


def test_busy_past_the_timeout_is_not_emptied(sim: Any, tmp_path: Path) -> None:
    dep = build.deployment("sgl", [_container(["--port", "30000"])], namespace=NS)
    scenario = {"pods": [{"match": {"owner": "deployment/sgl"}, "busy_seconds": 60}]}
    cluster = sim([_write(tmp_path, [dep])], namespace=NS, scenario=scenario)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1")
    assert code == 1, (err, rows)
    (row,) = _rows(rows, "CacheReset")
    assert row["result"] != "emptied" and "busy" in json.dumps(row).lower(), row
    assert list(_sglang_ports(cluster).values())[0]["cached_tokens"] > 0


def test_admin_key_from_a_secret_is_sent_and_never_shown(sim: Any, tmp_path: Path) -> None:
    env = [{"name": "ADMIN_KEY", "valueFrom": {"secretKeyRef": {"name": "sg-keys", "key": "admin"}}}]
    dep = build.deployment("sgl", [_container(["--port", "30000", "--admin-api-key", "$(ADMIN_KEY)"], env)],
                           namespace=NS)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sg-keys", "namespace": NS},
              "type": "Opaque", "data": {"admin": base64.b64encode(ADMIN_KEY.encode()).decode()}}
    cluster = sim([_write(tmp_path, [secret, dep])], namespace=NS)
    done = cluster.run("clear", "-n", NS, "--all", "-v", "9", "-o", "json")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    (row,) = _rows(rows, "CacheReset")
    assert row["result"] == "emptied", row
    assert ADMIN_KEY not in done.stdout and ADMIN_KEY not in done.stderr
    assert ADMIN_KEY[-8:] not in done.stdout + done.stderr
    (snap,) = _sglang_ports(cluster).values()
    assert snap["auth_seen"] == ["ok"] and snap["cached_tokens"] == 0
    for fmt in ("wide", "yaml"):
        again = cluster.run("detect", "-n", NS, "-v", "9", "-o", fmt)
        assert again.returncode == 0 and ADMIN_KEY not in again.stdout + again.stderr


def test_missing_key_names_the_flag(sim: Any, tmp_path: Path) -> None:
    env = [{"name": "ADMIN_KEY", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "admin"}}}]
    dep = build.deployment("sgl", [_container(["--port", "30000", "--admin-api-key", "$(ADMIN_KEY)"], env)],
                           namespace=NS)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "absent", "namespace": NS},
              "type": "Opaque", "data": {"other": base64.b64encode(b"x").decode()}}
    cluster = sim([_write(tmp_path, [secret, dep])], namespace=NS)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 1, (err, rows)
    (row,) = _rows(rows, "CacheReset")
    assert row["result"] != "emptied" and "--admin-api-key" in json.dumps(row), row


def test_dp_rank_busy_is_never_emptied(sim: Any, tmp_path: Path) -> None:
    dep = build.deployment("sgl", [_container(["--port", "30000", "--dp-size", "2"])], namespace=NS)
    scenario = {"pods": [{"match": {"owner": "deployment/sgl"}, "busy_ranks": {1: 60}}]}
    cluster = sim([_write(tmp_path, [dep])], namespace=NS, scenario=scenario)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1")
    (row,) = _rows(rows, "CacheReset")
    assert row["result"] == "unconfirmed" and code == 3, (code, row)
    assert "first rank" in json.dumps(row), row
    (snap,) = _sglang_ports(cluster).values()
    assert snap["radix_tokens"][0] == 0 and snap["radix_tokens"][1] > 0


def test_hicache_storage_on_another_backend_is_left(sim: Any, tmp_path: Path) -> None:
    dep = build.deployment("sgl", [_container(["--port", "30000", "--enable-hierarchical-cache",
                                               "--hicache-storage-backend", "mooncake"])], namespace=NS)
    cluster = sim([_write(tmp_path, [dep])], namespace=NS)
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    (row,) = _rows(rows, "VllmPod")
    assert row["tiers"] == ["gpu", "cpu", "shared"], row
    assert any("--hicache-storage-prefetch-policy wait_complete" in n for n in row["notes"]), row
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    (row,) = _rows(rows, "CacheReset")
    text = json.dumps(row)
    assert code != 0 and row["result"] != "emptied" and "/hicache/storage-backend/clear" in text, row
    (snap,) = _sglang_ports(cluster).values()
    assert snap["cached_tokens"] == 0 and snap["host_tokens"] == [0] and snap["storage_tokens"][0] > 0


FILES = "/mnt/hicache"


def _hicache(name: str, served: str, claim: str = "hicache", *, extra: list[str] | None = None) -> dict[str, Any]:
    """A Deployment of SGLang with HiCache's file backend on ``FILES`` of the claim ``claim``."""
    c = _container(["--served-model-name", served, "--port", "30000", "--enable-hierarchical-cache",
                    "--hicache-storage-backend", "file", *(extra or [])],
                   [{"name": "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", "value": FILES}])
    c["volumeMounts"] = [{"name": "files", "mountPath": FILES}]
    return build.deployment(name, [c], namespace=NS, volumes=[build.pvc_volume("files", claim)])


def _claim(name: str = "hicache") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}


def _pages(cluster: SimCluster, claim: str = "hicache") -> list[str]:
    d = cluster.tmp / "state" / "pvc" / NS / claim
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".bin")) if d.is_dir() else []


def test_hicache_file_pages_of_the_target_go_and_another_models_stay(sim: Any, tmp_path: Path) -> None:
    cluster = sim([_write(tmp_path, [_claim(), _hicache("sgl-a", "org/model-a"), _hicache("sgl-b", "model-b")])],
                  namespace=NS)
    before = _pages(cluster)
    assert len([n for n in before if n.endswith("_org-model-a_0_1.bin")]) == 4, before
    assert len([n for n in before if n.endswith("_model-b_0_1.bin")]) == 4, before
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/sgl-a", "--yes")
    assert code == 0, (err, rows)
    (reset,) = _rows(rows, "CacheReset")
    assert reset["result"] == "emptied" and reset["shared"] == "emptied by clear-store", reset
    (store,) = _rows(rows, "StoreClear")
    assert (store["store"], store["scope"], store["result"], store["before"], store["after"]) == (
        "hicache-file", "model org-model-a", "emptied", 4, 0), store
    assert store["other_pods"] and store["kept_pods"], store
    after = _pages(cluster)
    assert after == [n for n in before if n.endswith("_model-b_0_1.bin")], after
    snaps = {name.split("-")[1]: s for name, s in _sglang_ports(cluster).items()}
    assert snaps["a"]["storage_tokens"] == [0] and snaps["b"]["storage_tokens"][0] > 0, snaps


def test_hicache_file_pages_written_by_a_pod_outside_the_targets_need_consent(sim: Any, tmp_path: Path) -> None:
    cluster = sim([_write(tmp_path, [_claim(), _hicache("sgl-a", "model-a"), _hicache("sgl-twin", "model-a")])],
                  namespace=NS)
    before = _pages(cluster)
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/sgl-a", "--yes")
    assert code != 0, (err, rows)
    (reset,) = _rows(rows, "CacheReset")
    assert reset["result"] != "emptied" and reset["shared"] == "left", reset
    (store,) = _rows(rows, "StoreClear")
    assert store["result"] == "left" and "--shared-stores" in store["message"], store
    assert _pages(cluster) == before
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/sgl-a", "--yes", "--shared-stores")
    assert code == 0, (err, rows)
    assert _pages(cluster) == []


def test_hicache_file_pages_in_a_system_directory_are_left(sim: Any, tmp_path: Path) -> None:
    dep = build.deployment("sgl", [_container(["--port", "30000", "--enable-hierarchical-cache",
                                               "--hicache-storage-backend", "file"])], namespace=NS)
    cluster = sim([_write(tmp_path, [dep])], namespace=NS)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code != 0, (err, rows)
    (reset,) = _rows(rows, "CacheReset")
    assert reset["result"] != "emptied" and reset["shared"] == "left", reset
    (store,) = _rows(rows, "StoreClear")
    assert store["store"] == "hicache-file" and store["result"] == "left" and "/tmp/hicache" in json.dumps(store)
    assert store["scope"] == "model org-model" and "*.bin (the names of its pages)" in store["method"], store


def test_hicache_file_dry_run_deletes_nothing_and_says_the_store_step_empties_it(sim: Any, tmp_path: Path) -> None:
    cluster = sim([_write(tmp_path, [_claim(), _hicache("sgl-a", "model-a")])], namespace=NS)
    before = _pages(cluster)
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/sgl-a", "--dry-run")
    assert code == 0, (rows, err)
    (store,) = _rows(rows, "StoreClear")
    assert (store["store"], store["result"], store["before"]) == ("hicache-file", "planned", 4), store
    assert "note: the hicache-file tier of sg/sgl-a-" in err and "emptied by the store step" in err, err
    assert _pages(cluster) == before


def test_wait_idle_reads_sglang_gauges(sim: Any, tmp_path: Path) -> None:
    dep = build.deployment("sgl", [_container(["--port", "30000", "--enable-metrics"])], namespace=NS)
    scenario = {"pods": [{"match": {"owner": "deployment/sgl"}, "busy_seconds": 1.5}]}
    cluster = sim([_write(tmp_path, [dep])], namespace=NS, scenario=scenario)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--wait-idle", "20", "--busy-timeout", "0")
    assert code == 0, (err, rows)
    (row,) = _rows(rows, "CacheReset")
    assert row["result"] == "emptied" and "still busy" not in err, (row, err)
    (snap,) = _sglang_ports(cluster).values()
    assert snap["flush_queries"] == ["timeout=0"], snap  # idle by then: the first flush needed no wait


def test_a_cache_aware_router_is_named_after_the_clear(sim: Any, tmp_path: Path) -> None:
    dep = build.deployment("sgl", [_container(["--port", "8000"])], namespace=NS)
    router = build.deployment("router", [{"name": "router", "image": "lmsysorg/sglang-router:v0.3.2",
                                          "command": ["python3", "-m", "sglang_router.launch_router"],
                                          "args": ["--host", "0.0.0.0", "--port", "8000", "--worker-urls",
                                                   "http://sgl:8000"]}], namespace=NS)
    rr = build.deployment("rr", [{"name": "router", "image": "lmsysorg/sglang-router:v0.3.2",
                                  "command": ["smg", "launch", "--policy", "round_robin"]}], namespace=NS)
    cluster = sim([_write(tmp_path, [dep, router, rr])], namespace=NS)
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0 and [r["engine"] for r in _rows(rows, "VllmPod")] == ["sglang"], (rows, err)
    assert f"sglang-router {NS}/deployment/router (policy cache_aware)" in err and "rr" not in err, err
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, (rows, err)
    assert [r["result"] for r in _rows(rows, "CacheReset")] == ["emptied"]
    assert "now cold: restart the router for cold routing" in err and "deployment/rr" not in err, err


def test_metrics_shows_the_counters_and_says_why_usage_is_not_shown(sim: Any, tmp_path: Path) -> None:
    dep = build.deployment("sgl", [_container(["--served-model-name", "tiny", "--port", "8000",
                                               "--enable-metrics"])], namespace=NS)
    cluster = sim([_write(tmp_path, [dep])], namespace=NS)
    code, rows, err = cluster.run_json("metrics", "-n", NS)
    assert code == 0, (rows, err)
    (row,) = rows
    assert row["model"] == "tiny" and row["prefix_hits"] == 0 and row["prefix_queries"] == 0, row
    assert row["usage"] is None and "sglang:token_usage" in row["note"], row
    table = cluster.run("metrics", "-n", NS)
    assert table.returncode == 0 and "NOTE" in table.stdout and "[1]" in table.stdout, table.stdout


def test_verify_says_plainly_that_it_does_not_prove_sglang_cold(sim: Any, tmp_path: Path) -> None:
    dep = build.deployment("sgl", [_container(["--port", "8000", "--enable-metrics", "--enable-cache-report"])],
                           namespace=NS)
    cluster = sim([_write(tmp_path, [dep])], namespace=NS)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify")
    (row,) = _rows(rows, "CacheReset")
    assert code == 3 and row["result"] == "emptied", (code, row, err)
    verify = row["verify"]
    assert verify.startswith("not verifiable: --verify proves vLLM servers only") and "vllm:" not in verify
    (snap,) = _sglang_ports(cluster).values()
    assert snap["flush_queries"] == ["timeout=30"], snap   # no canary was sent, one flush
