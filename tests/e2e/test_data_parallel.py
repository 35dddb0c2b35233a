"""Data parallel inside one vLLM server (internal load balancing: several engines behind one
API port): the reset answer is engine 0's alone before vLLM 0.32.0, the AND of every engine's
from 0.32.0 (kubectl_kvreset.engines.vllm.api.RESET_ALL_ENGINES_SINCE)."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.manifests import build
from tests.simctl import ROOT, SimCluster

NS = "llm"
ROLE_FILE = ROOT / "rbac" / "kubectl-kvreset-role.yaml"


def dp_deployment(name: str, dp: int, *flags: str) -> dict[str, Any]:
    """A Deployment whose one vLLM server runs ``dp`` data-parallel engines behind port 8000."""
    return build.deployment(name, [{
        "name": "vllm", "image": "vllm/vllm-openai:v0.26.0",
        "command": ["vllm", "serve", "Qwen/Qwen3-0.6B", "--port", "8000", "--data-parallel-size", str(dp), *flags],
    }])


def start(sim: Callable[..., SimCluster], tmp_path: Path, version: str, docs: list[dict[str, Any]],
          busy_engines: dict[int, int] | None = None, metrics_fail_first: int | None = None,
          more: dict[str, Any] | None = None) -> SimCluster:
    path = tmp_path / "dp.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    rule: dict[str, Any] = {}
    if busy_engines:
        rule["busy_engines"] = busy_engines
    if metrics_fail_first is not None:
        rule["metrics_fail_first"] = metrics_fail_first
    scenario: dict[str, Any] | None = {"pods": [rule]} if rule else None
    if more:
        scenario = {**(scenario or {}), **more}
    return sim([path], namespace=NS, dev_mode="on", vllm_version=version, scenario=scenario)


def engines(cluster: SimCluster) -> list[dict[str, Any]]:
    (pod,) = cluster.live_pods()
    return pod["ports"]["8000"]["engines"]


@pytest.mark.parametrize("version", ["0.26.0", "0.31.0"])
def test_engine_zero_only_answer_is_unconfirmed_and_names_the_others(sim, tmp_path: Path, version: str) -> None:
    cluster = start(sim, tmp_path, version, [dp_deployment("dp", 4)], busy_engines={2: 1000})
    assert [e["prefix_cache_blocks"] > 0 for e in engines(cluster)] == [True] * 4
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 3, (err, rows)
    (row,) = rows
    assert row["result"] == "unconfirmed" and row["gpu"] == "unconfirmed", row
    assert "engines 1-3 of the 4" in row["message"] and version in row["message"], row["message"]
    assert row["left"] == [] and [u["tier"] for u in row["unconfirmed"]] == ["gpu"], row
    assert "engines 1-3" in row["unconfirmed"][0]["reason"]
    # engine 2 was busy: vLLM said success (engine 0's answer) while engine 2 stays warm
    blocks = [e["prefix_cache_blocks"] for e in engines(cluster)]
    assert blocks[0] == 0 and blocks[1] == 0 and blocks[3] == 0 and blocks[2] > 0, blocks


def test_aggregating_version_reports_the_busy_engine(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, "0.32.0", [dp_deployment("dp", 4)], busy_engines={2: 1000})
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 1, (err, rows)
    (row,) = rows
    assert row["result"] == "busy" and row["gpu"] == "not emptied", row
    assert [lt["tier"] for lt in row["left"]] == ["gpu"] and "--preempt-running" in row["left"][0]["remedy"]
    assert engines(cluster)[2]["prefix_cache_blocks"] > 0


def test_aggregating_version_with_every_engine_free_is_emptied(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, "0.32.0", [dp_deployment("dp", 4)])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, (err, rows)
    assert [r["result"] for r in rows] == ["emptied"] and rows[0]["unconfirmed"] == []
    assert [e["prefix_cache_blocks"] for e in engines(cluster)] == [0, 0, 0, 0]


def test_external_load_balancing_is_one_engine_per_server(sim, tmp_path: Path) -> None:
    # a server per DP rank (--data-parallel-external-lb): its answer is its own engine's
    cluster = start(sim, tmp_path, "0.26.0", [dp_deployment("ext", 4, "--data-parallel-external-lb")])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, (err, rows)
    assert [r["result"] for r in rows] == ["emptied"]


def hidden_dp_deployment(name: str, version: str) -> dict[str, Any]:
    """Four engines whose count the spec does not show: ``--data-parallel-size $(DP_SIZE)`` with
    ``DP_SIZE`` from a ConfigMap (``envFrom``), which the kubelet expands and the pod spec does not."""
    dep = dp_deployment(name, 4)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["image"] = f"vllm/vllm-openai:v{version}"
    container["command"][-1] = "$(DP_SIZE)"
    container["envFrom"] = [{"configMapRef": {"name": "dp-env"}}]
    return dep


DP_ENV = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dp-env", "namespace": NS},
          "data": {"DP_SIZE": "4"}}


def metrics_calls(cluster: SimCluster) -> int:
    (pod,) = cluster.live_pods()
    return sum(st.get("metrics_calls", 0) for st in pod["ports"].values())


def restricted(user: str, *, configmaps: bool = True, secrets: bool = True) -> dict[str, Any]:
    """A scenario where ``user`` holds the repository's Role in NS, its ConfigMap and Secret
    rule narrowed to what is given."""
    text = ROLE_FILE.read_text().replace("NAMESPACE", NS).replace("USER", user)
    role, binding = [d for d in yaml.safe_load_all(text) if d][:2]
    role = copy.deepcopy(role)
    kept = [kind for kind, keep in (("configmaps", configmaps), ("secrets", secrets)) if keep]
    rules = []
    for rule in role["rules"]:
        if "configmaps" in rule["resources"]:
            if not kept:
                continue
            rule = {**rule, "resources": kept}
        rules.append(rule)
    role["rules"] = rules
    return {"users": [{"name": user}], "rbac": [role, binding]}


def test_engines_the_flags_hide_are_counted_from_the_metrics_engine_labels(sim, tmp_path: Path) -> None:
    # the ConfigMap that sets the size cannot be read: the engine labels of /metrics count
    cluster = start(sim, tmp_path, "0.26.0", [DP_ENV, hidden_dp_deployment("hidden", "0.26.0")],
                    busy_engines={2: 1000}, more=restricted("bob", configmaps=False, secrets=False))
    assert len(engines(cluster)) == 4  # what the server runs: the ConfigMap's four engines
    code, det, err = cluster.run_json("detect", "-n", NS, "--context", "sim-bob")
    assert code == 0, err
    note = ("data-parallel engines behind port 8000: the serve flags do not establish the count, the engine labels "
            "of GET /metrics show 4 (engines 0-3); the /metrics count is used")
    assert note in det[0]["notes"], det[0]["notes"]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s", "--context", "sim-bob")
    assert code == 3, (err, rows)
    (row,) = rows
    assert row["result"] == "unconfirmed" and row["gpu"] == "unconfirmed", row
    assert ("vLLM 0.26.0 answers the reset for engine 0 only: engines 1-3 of the 4 data-parallel engines behind "
            "port 8000 (the engine labels of GET /metrics) are not confirmed") in row["message"], row["message"]
    assert note in row["message"]
    assert [u["tier"] for u in row["unconfirmed"]] == ["gpu"] and "engines 1-3" in row["unconfirmed"][0]["reason"]
    blocks = [e["prefix_cache_blocks"] for e in engines(cluster)]
    assert blocks[2] > 0 and blocks[0] == blocks[1] == blocks[3] == 0, blocks
    assert metrics_calls(cluster) == 2  # one /metrics read per command (detect, clear), for the template


def keyed_dp_deployment(name: str, version: str, kind: str) -> dict[str, Any]:
    """``--data-parallel-size $(DP)`` with ``DP`` from a key of ConfigMap or Secret ``dp-size``
    (``valueFrom``), four engines."""
    dep = hidden_dp_deployment(name, version)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    del container["envFrom"]
    container["command"][-1] = "$(DP)"
    ref = "configMapKeyRef" if kind == "ConfigMap" else "secretKeyRef"
    container["env"] = [{"name": "DP", "valueFrom": {ref: {"name": "dp-size", "key": "engines"}}}]
    return dep


def dp_source(kind: str) -> dict[str, Any]:
    meta = {"name": "dp-size", "namespace": NS}
    if kind == "ConfigMap":
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"engines": "4"}}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
            "data": {"engines": base64.b64encode(b"4").decode()}}


def test_a_config_map_size_and_a_metrics_that_fails_once_are_unconfirmed(sim, tmp_path: Path) -> None:
    # vLLM before 0.32, --data-parallel-size $(DP) from a ConfigMap key, /metrics failing its first
    # scrape: read again, as the metrics command does, the engine labels count four engines
    cluster = start(sim, tmp_path, "0.26.0",
                    [dp_source("ConfigMap"), keyed_dp_deployment("keyed", "0.26.0", "ConfigMap")],
                    busy_engines={2: 1000}, metrics_fail_first=1)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 3, (err, rows)
    (row,) = rows
    assert row["result"] == "unconfirmed" and row["gpu"] == "unconfirmed", row
    assert "engines 1-3 of the 4 data-parallel engines behind port 8000 (the engine labels of GET /metrics)" in \
        row["message"], row["message"]
    assert metrics_calls(cluster) == 2  # the failed scrape and the one after it
    assert engines(cluster)[2]["prefix_cache_blocks"] > 0  # engine 2 kept its blocks, and the row says so


def test_a_config_map_size_counts_when_metrics_never_answers(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, "0.26.0",
                    [dp_source("ConfigMap"), keyed_dp_deployment("keyed", "0.26.0", "ConfigMap")],
                    busy_engines={2: 1000}, metrics_fail_first=1000)
    code, det, err = cluster.run_json("detect", "-n", NS)
    assert "data-parallel size read from the container's ConfigMap env: --data-parallel-size 4" in det[0]["notes"]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 3, (err, rows)
    (row,) = rows
    assert row["result"] == "unconfirmed", row
    assert "engines 1-3 of the 4 data-parallel engines behind port 8000 (the serve flags)" in row["message"]
    assert "GET /metrics not read (GET /metrics answered 500 (3 tries)); the serve flags' count (4) is used" in \
        row["message"], row["message"]


def test_a_size_that_cannot_be_read_with_metrics_failing_is_unconfirmed(sim, tmp_path: Path) -> None:
    # the Secret is not readable and /metrics answers 500 every time: the count is not known,
    # so engine 0's success confirms nothing beyond it
    cluster = start(sim, tmp_path, "0.26.0", [dp_source("Secret"), keyed_dp_deployment("keyed", "0.26.0", "Secret")],
                    busy_engines={2: 1000}, metrics_fail_first=1000, more=restricted("bob", secrets=False))
    done = cluster.run("clear", "-n", NS, "--all", "--busy-timeout", "1s", "-o", "json", "--context", "sim-bob")
    assert done.returncode == 3, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["result"] == "unconfirmed" and row["gpu"] == "unconfirmed", row
    assert ("vLLM 0.26.0 answers the reset for engine 0 only, and the number of data-parallel engines behind port "
            "8000 is not known (--data-parallel-size $(DP): DP: not permitted to read Secret/dp-size") in \
        row["message"], row["message"]
    assert "GET /metrics not read (GET /metrics answered 500 (3 tries))" in row["message"]
    assert [u["tier"] for u in row["unconfirmed"]] == ["gpu"], row
    assert engines(cluster)[2]["prefix_cache_blocks"] > 0


def test_a_secret_size_is_used_and_never_shown(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, "0.26.0", [dp_source("Secret"), keyed_dp_deployment("keyed", "0.26.0", "Secret")],
                    busy_engines={2: 1000}, metrics_fail_first=1000)
    outputs = []
    for args in (("detect", "-o", "json"), ("clear", "--all", "--dry-run", "-o", "json"), ("detect", "-o", "wide"),
                 ("clear", "--all", "--busy-timeout", "1s", "-o", "json")):
        done = cluster.run(*args, "-n", NS, "-v", "6")
        outputs.append(done.stdout + done.stderr)
    assert done.returncode == 3, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["result"] == "unconfirmed", row
    assert ("the other data-parallel engines behind port 8000 (their count is read from a Secret, not shown) are "
            "not confirmed") in row["message"], row["message"]
    for text in outputs:
        assert "--data-parallel-size 4" not in text and "of the 4" not in text and "count (4)" not in text
    assert "data-parallel size read from a Secret of the container's env (not shown)" in outputs[0]


def test_an_aggregating_version_reads_metrics_only_for_the_busy_split(sim, tmp_path: Path) -> None:
    # 0.32.0 ANDs every engine's answer: the count is not needed for the reset's own row, and
    # /metrics is read only by the busy split (one scrape before and one after the second reset
    # of the busy port); this pod has a KV connector, so no engine is established as emptied
    cluster = start(sim, tmp_path, "0.32.0", [DP_ENV, hidden_dp_deployment("hidden", "0.32.0")],
                    busy_engines={2: 1000})
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--busy-timeout", "1s")
    assert code == 1, (err, rows)
    assert rows[0]["result"] == "busy" and rows[0]["gpu"] == "not emptied", rows[0]
    assert rows[0]["message"].startswith("engines 0-3 not established"), rows[0]["message"]
    assert metrics_calls(cluster) == 2


def test_hybrid_load_balancing_names_the_node_local_ranks(sim, tmp_path: Path) -> None:
    # the second node of a hybrid deployment: ranks 2 and 3 behind this API server
    dep = dp_deployment("hybrid", 4, "--data-parallel-size-local", "2", "--data-parallel-start-rank", "2",
                        "--data-parallel-hybrid-lb")
    cluster = start(sim, tmp_path, "0.26.0", [dep])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 3, (err, rows)
    (row,) = rows
    assert row["result"] == "unconfirmed", row
    assert ("answers the reset for engine 2 only: engine 3 of the 2 data-parallel engines behind port 8000 "
            "(the engine labels of GET /metrics) are not confirmed") in row["message"], row["message"]
    assert "the serve flags give" not in row["message"]  # flags and labels agree
