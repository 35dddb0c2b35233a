"""``clear --verify`` on the simulator: a salted canary per API port and engine proves the
server cold, or finds the tier that still answers (the fake vLLM models the blocks per engine
and tier: tests/sim/kvtiers.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.manifests import build
from tests.simctl import SimCluster

NS = "llm"


def deployment(name: str, *flags: str, image: str = "vllm/vllm-openai:v0.32.0",
               volumes: list[dict[str, Any]] | None = None,
               mounts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return build.deployment(name, [{"name": "vllm", "image": image,
                                    "command": ["vllm", "serve", "Qwen/Qwen3-0.6B", "--port", "8000", *flags],
                                    "volumeMounts": mounts or []}], volumes=volumes or [])


def start(sim: Callable[..., SimCluster], tmp_path: Path, docs: list[dict[str, Any]], *, dev_mode: str = "on",
          version: str | None = None, **overrides: Any) -> SimCluster:
    path = tmp_path / "verify.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    scenario = {"pods": [overrides]} if overrides else None
    kwargs: dict[str, Any] = {"vllm_version": version} if version else {}
    return sim([path], namespace=NS, dev_mode=dev_mode, scenario=scenario, **kwargs)


def test_a_reset_server_proves_cold_with_cached_tokens(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, [deployment("m")], prompt_tokens_details=True, block_size=128)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify")
    assert code == 0, (err, rows)
    (row,) = rows
    assert row["result"] == "emptied" and row["verify"] == "cold", row
    (proof,) = row["proof"]
    assert proof["engine"] == "0" and proof["block_size"] == 128 and proof["canary_tokens"] == 257
    assert proof["control"]["cached_tokens"] == 256 and proof["control"]["method"] == "cached_tokens"
    assert [(p["point"], p["cached_tokens"]) for p in proof["probes"]] == [("api-reset", 0)]
    assert proof["probes"][0]["counters"]["prefix_cache_hits"] == 0
    assert proof["final_reset"] == "success"


def test_counters_measure_where_cached_tokens_are_null(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, [deployment("m")])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify")
    assert code == 0, (err, rows)
    (proof,) = rows[0]["proof"]
    assert proof["control"]["method"] == "counters" and proof["control"]["cached_tokens"] == 32
    assert proof["control"]["counters"]["prefix_cache_hits"] == 32
    assert proof["probes"][0]["method"] == "counters" and proof["probes"][0]["cached_tokens"] == 0
    done = cluster.run("clear", "-n", NS, "--all", "--verify")
    assert done.returncode == 0 and "VERIFY" in done.stdout.splitlines()[0] and " cold " in done.stdout, done.stdout


def test_dev_mode_off_is_found_warm_and_exits_1(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, [deployment("m")], dev_mode="off")
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify")
    assert code == 1, (err, rows)
    (row,) = rows
    assert row["result"] == "dev mode off" and row["verify"] == "warm: 32 cached tokens from device", row
    assert row["gpu"] != "emptied"
    assert any(lt["tier"] == "gpu" and "--preempt-running" in lt["remedy"] for lt in row["left"]), row["left"]
    assert "canaries' own blocks stay" in row["proof"][0]["final_reset"]


def test_a_cpu_tier_the_reset_leaves_is_found_warm_from_host(sim, tmp_path: Path) -> None:
    ktc = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
           "kv_connector_extra_config": {"cpu_bytes_to_use": 1 << 30}}
    cluster = start(sim, tmp_path, [deployment("m", "--kv-transfer-config", json.dumps(ktc),
                                               mounts=[{"name": "shm", "mountPath": "/dev/shm"}],
                                               volumes=[{"name": "shm", "emptyDir": {"medium": "Memory"}}])],
                    version="0.21.0")
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify")
    assert code == 1, (err, rows)
    (row,) = rows
    # 0.21 has no split by source: the connector's hits are "external", the pod's CPU tier
    assert row["verify"] == "warm: 32 cached tokens from external", row
    assert row["cpu"] in ("left", "warm") and row["gpu"] != "warm", row
    assert any(lt["tier"] == "cpu" and "--fallback=restart" in lt["remedy"] for lt in row["left"]), row["left"]


def tiering(root: str) -> str:
    return json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 30,
                                                     "secondary_tiers": [{"type": "fs", "root_dir": root}]}})


def test_an_fs_tier_clear_fs_empties_is_cold_after_it(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, [deployment("m", "--kv-transfer-config", tiering("/mnt/kv"),
                                               mounts=[{"name": "kv", "mountPath": "/mnt/kv"},
                                                       {"name": "shm", "mountPath": "/dev/shm"}],
                                               volumes=[{"name": "kv", "emptyDir": {}},
                                                        {"name": "shm", "emptyDir": {"medium": "Memory"}}])])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify")
    assert code == 0, (err, rows)
    (row,) = rows
    probes = row["proof"][0]["probes"]
    # after the API reset the FS tier still answers; after clear-fs it does not
    assert [(p["point"], p["cached_tokens"], p["sources"]) for p in probes] == \
        [("api-reset", 32, {"disk": 32}), ("clear-fs", 0, {})], probes
    assert row["verify"] == "cold" and row["fs"] == "emptied"


def test_an_fs_tier_left_on_purpose_is_found_warm_from_disk(sim, tmp_path: Path) -> None:
    # a root on no volume (the container's writable layer): clear-fs leaves it, a restart empties it
    cluster = start(sim, tmp_path, [deployment("m", "--kv-transfer-config", tiering("/var/kv"),
                                               mounts=[{"name": "shm", "mountPath": "/dev/shm"}],
                                               volumes=[{"name": "shm", "emptyDir": {"medium": "Memory"}}])])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify")
    assert code == 1, (err, rows)
    (row,) = rows
    assert row["verify"] == "warm: 32 cached tokens from disk", row
    assert row["fs"] != "emptied" and any(lt["tier"] == "fs" and "clear-fs" in lt["remedy"] for lt in row["left"]), row


def dp(name: str) -> dict[str, Any]:
    return deployment(name, "--data-parallel-size", "2")


def test_one_busy_rank_is_warm_and_the_other_cold(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, [dp("dp")], busy_engines={1: 1000})
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify", "--busy-timeout", "1s")
    assert code == 1, (err, rows)
    (row,) = rows
    states = {p["engine"]: p["result"] for p in row["proof"]}
    assert states == {"0": "cold", "1": "warm"}, row["proof"]
    assert row["verify"] == "engine 0: cold; engine 1: warm: 32 cached tokens from device", row


def test_preempt_running_makes_both_ranks_cold(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, [dp("dp")], busy_engines={1: 1000})
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify", "--preempt-running")
    assert code == 0, (err, rows)
    (row,) = rows
    assert [(p["engine"], p["result"]) for p in row["proof"]] == [("0", "cold"), ("1", "cold")]
    assert row["verify"] == "cold (engines 0, 1)"


def test_prefix_caching_off_is_not_verifiable_never_cold(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, [deployment("m")], prefix_caching=False)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify")
    (row,) = rows
    assert row["verify"].startswith("not verifiable: "), row
    assert code == 3, (err, rows)


def test_the_certificate_validates_against_its_schema(sim, tmp_path: Path) -> None:
    import jsonschema

    from kubectl_kvreset.job.certificate import schema

    cluster = start(sim, tmp_path, [deployment("m"), dp("dp")], busy_engines={1: 1000})
    cert = tmp_path / "cert.json"
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify", "--busy-timeout", "1s",
                                       "--certificate", str(cert))
    assert code == 1, (err, rows)
    doc = json.loads(cert.read_text())
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.validate(doc, schema(), format_checker=jsonschema.FormatChecker())
    assert doc["result"] == "warm" and doc["exit_code"] == 1
    assert doc["where"] == {"context": "sim", "cluster": "sim", "server": cluster.server, "namespace": NS}
    by_pod = {t["owner"]: t for t in doc["targets"]}
    assert set(by_pod) == {"deployment/m", "deployment/dp"}
    engines = by_pod["deployment/dp"]["proof"]["engines"]
    assert [(e["engine"], e["result"]) for e in engines] == [("0", "cold"), ("1", "warm")]
    assert engines[1]["probes"][-1]["cached_tokens"] == 32
    assert by_pod["deployment/m"]["proof"]["engines"][0]["result"] == "cold"
    assert {"tier": "gpu", "state": "emptied"} in by_pod["deployment/m"]["tiers"]

    unverified = tmp_path / "plain.json"
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/m", "--certificate", str(unverified))
    assert code == 0, (err, rows)
    plain = json.loads(unverified.read_text())
    jsonschema.validate(plain, schema())
    assert plain["result"] == "unverified" and plain["targets"][0]["proof"]["method"] == "answer"


def test_a_pod_replaced_by_the_fallback_is_verified_in_its_successor(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, [deployment("m")], dev_mode="off")
    (old,) = [p["name"] for p in cluster.live_pods()]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify", "--fallback=restart", "--yes",
                                       timeout=300)
    (row,) = rows
    probes = row["proof"][0]["probes"]
    assert [p["point"] for p in probes] == ["api-reset", "rollout"], probes
    assert probes[0]["pod"] == old and probes[0]["cached_tokens"] == 32  # the 404: still warm
    assert probes[1]["pod"] != old and probes[1]["cached_tokens"] == 0, probes  # the new pod starts cold
    assert row["verify"] == "cold" and code == 0, (err, rows)


def test_the_canary_reaches_the_engines_over_exec_and_port_forward(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, [dp("dp")])
    for transport in ("exec", "port-forward"):
        code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify", "--transport", transport)
        assert code == 0, (transport, err, rows)
        (row,) = rows
        assert row["verify"] == "cold (engines 0, 1)", (transport, row)
        assert [p["control"]["cached_tokens"] for p in row["proof"]] == [32, 32], (transport, row["proof"])


def test_the_dry_run_lists_the_verify_steps_per_port(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, [deployment("m")])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--verify", "--dry-run")
    assert code == 0, (err, rows)
    (row,) = rows
    assert row["kind"] == "PlannedReset"
    (port,) = row["verify"]
    assert port["port"] == 8000, port
    assert [s.split(":", 1)[0] for s in port["steps"]] == ["seed", "control", "probe after api-reset", "final reset"]
    assert port["steps"][-1].startswith("final reset: POST /reset_prefix_cache?reset_external=true"), port
    table = cluster.run("clear", "-n", NS, "--all", "--verify", "--dry-run")
    assert table.returncode == 0, table.stderr
    head, line = table.stdout.splitlines()[:2]
    assert "VERIFY" in head.split() and "8000: seed,control,probe:api-reset,final-reset" in line, table.stdout
    # without --verify the plan has no VERIFY column
    plain = cluster.run("clear", "-n", NS, "--all", "--dry-run")
    assert "VERIFY" not in plain.stdout.splitlines()[0], plain.stdout
