"""devmode under contention and with two vLLM containers per pod, against the simulated
cluster: two ``devmode --enable`` runs at once leave one entry and one rollout (the second run
gets 409 Conflict, reads the owner again and says ``unchanged``); every vLLM container of a
pod is read and patched, and ``clear --fallback devmode`` rolls a pod whose second container
has dev mode off."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.manifests import build
from tests.simctl import SimCluster, zipapp_path

NS = "llm"
VAR = "VLLM_SERVER_DEV_MODE"
DEP = f"/apis/apps/v1/namespaces/{NS}/deployments"


def server(name: str, model: str, port: int, env: list[dict[str, str]] | None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "vllm/vllm-openai:v0.26.0",
                         "command": ["vllm", "serve", model, "--port", str(port)]}
    if env is not None:
        c["env"] = env
    return c


def deployment(name: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    return build.deployment(name, containers)


def entries(obj: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Per container of the template, the env entries naming the variable."""
    return [[e for e in c.get("env") or [] if e.get("name") == VAR]
            for c in obj["spec"]["template"]["spec"]["containers"]]


def wait_rolled(cluster: SimCluster, name: str, check: Callable[[dict[str, Any]], bool], timeout: float = 60.0) -> None:
    """Until the Deployment's rollout is complete and every live pod passes ``check``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = cluster.api(f"{DEP}/{name}")
        st = d.get("status") or {}
        pods = cluster.live_pods()
        if (st.get("observedGeneration") == d["metadata"]["generation"] and st.get("updatedReplicas") == 1
                and st.get("replicas") == 1 and pods and all(p["ready"] and check(p) for p in pods)):
            return
        time.sleep(0.1)
    raise TimeoutError(f"deployment/{name} did not roll out")


def test_two_enables_at_once_give_one_entry_and_one_rollout(sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    path = tmp_path / "solo.yaml"
    path.write_text(yaml.safe_dump(deployment("solo", [server("vllm", "org/m", 8000, [{"name": "A", "value": "a"}])])))
    # every PATCH of the Deployment is held 1.5 s before the server applies it, so the other run,
    # started at the same moment, reads the owner before the first patch lands
    scenario = {"faults": {"api": [{"verb": "patch", "resource": "deployments", "name": "solo", "delay_ms": 1500}]}}
    cluster = sim([path], namespace=NS, scenario=scenario)
    argv = [str(zipapp_path()), "devmode", "--enable", "deployment/solo", "-n", NS, "-o", "json"]
    for rnd in range(10):
        before = cluster.api(f"{DEP}/solo")
        assert entries(before) == [[]], rnd
        procs = [subprocess.Popen(argv, env=cluster.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=180) for p in procs]
        rows = [json.loads(out)[0] for out, _ in outs]
        assert [p.returncode for p in procs] == [0, 0], (rnd, outs)
        assert sorted(r["result"] for r in rows) == ["enabled", "unchanged"], (rnd, rows)
        after = cluster.api(f"{DEP}/solo")
        assert entries(after) == [[{"name": VAR, "value": "1"}]], (rnd, after["spec"]["template"])
        assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1, rnd  # one rollout
        assert all(p["env"].get(VAR) == "1" and p["ready"] for p in cluster.live_pods()), rnd
        # reset for the next round: the variable removed, the pods rolled back
        index = next(i for i, e in enumerate(after["spec"]["template"]["spec"]["containers"][0]["env"])
                     if e["name"] == VAR)
        cluster.api(f"{DEP}/solo", "PATCH", [{"op": "remove", "path": f"/spec/template/spec/containers/0/env/{index}"}],
                    content_type="application/json-patch+json")
        wait_rolled(cluster, "solo", lambda p: VAR not in p["env"])
    # the race was real: runs did collide, and each collision was settled by a re-read
    conflicts = cluster.state()["api_errors"].get("patch deployments 409 Conflict", 0)
    assert conflicts >= 1, cluster.state()["api_errors"]


def two_models(second: list[dict[str, str]] | None) -> dict[str, Any]:
    return deployment("pair", [server("model-a", "org/model-a", 8000, [{"name": VAR, "value": "1"}]),
                               server("model-b", "org/model-b", 8001, second)])


def start_pair(sim: Callable[..., SimCluster], tmp_path: Path, second: list[dict[str, str]] | None) -> SimCluster:
    path = tmp_path / "pair.yaml"
    path.write_text(yaml.safe_dump(two_models(second)))
    return sim([path], namespace=NS)


def test_second_container_invalid_is_seen_and_fixed(sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    cluster = start_pair(sim, tmp_path, [{"name": VAR, "value": "true"}])
    code, rows, err = cluster.run_json("detect", "-n", NS)
    by = {r["container"]: r for r in rows}
    assert by["model-a"]["dev_mode"] == "on" and by["model-b"]["dev_mode"].startswith("invalid"), rows
    code, rows, err = cluster.run_json("devmode", "-n", NS)
    assert rows[0]["dev_mode"] == "mixed" and "template/model-b" in rows[0]["templates"], rows
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0 and rows[0]["result"] == "enabled", (err, rows)
    assert entries(cluster.api(f"{DEP}/pair")) == [[{"name": VAR, "value": "1"}]] * 2
    assert rows[0]["templates"] == {"template/model-a": "on", "template/model-b": "on"}
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0 and sorted((r["container"], r["result"]) for r in rows) == [
        ("model-a", "emptied"), ("model-b", "emptied")], (err, rows)


def test_clear_fallback_devmode_rolls_a_pod_whose_second_container_is_off(
        sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    cluster = start_pair(sim, tmp_path, [{"name": VAR, "value": "0"}])
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert {r["container"]: r["dev_mode"] for r in rows} == {"model-a": "on", "model-b": "off"}, rows
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback", "devmode")
    assert code == 0, (err, rows)
    assert sorted((r["container"], r["result"]) for r in rows) == [("model-a", "emptied"), ("model-b", "emptied")]
    assert all(r["steps"] == ["devmode"] for r in rows), rows
    assert entries(cluster.api(f"{DEP}/pair")) == [[{"name": VAR, "value": "1"}]] * 2
    assert all(p["env"].get(VAR) == "1" for p in cluster.live_pods())


def both_models(first: list[dict[str, str]] | None, second: list[dict[str, str]] | None) -> dict[str, Any]:
    return deployment("pair", [server("model-a", "org/model-a", 8000, first),
                               server("model-b", "org/model-b", 8001, second)])


def start_both(sim: Callable[..., SimCluster], tmp_path: Path, first: list[dict[str, str]] | None,
               second: list[dict[str, str]] | None) -> SimCluster:
    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump(both_models(first, second)))
    return sim([path], namespace=NS)


def test_clear_fallback_devmode_with_the_second_container_invalid_empties_both(
        sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    # model-a on, model-b "true" (vLLM refuses it at start-up: that container crash-loops):
    # the fallback turns dev mode on in both and both rows end emptied
    cluster = start_pair(sim, tmp_path, [{"name": VAR, "value": "true"}])
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert {r["container"]: r["dev_mode"].split(" ")[0] for r in rows} == {"model-a": "on", "model-b": "invalid"}, rows
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback", "devmode")
    assert code == 0, (err, rows)
    assert sorted((r["container"], r["result"]) for r in rows) == [("model-a", "emptied"), ("model-b", "emptied")]
    assert entries(cluster.api(f"{DEP}/pair")) == [[{"name": VAR, "value": "1"}]] * 2
    (pod,) = cluster.live_pods()
    assert pod["ready"] and pod["env"].get(VAR) == "1", pod


def test_devmode_enable_and_disable_handle_both_containers(sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    # neither container has the variable: both are off, both get enabled, then both disabled
    cluster = start_both(sim, tmp_path, None, [{"name": "OTHER", "value": "x"}])
    code, rows, err = cluster.run_json("devmode", "-n", NS)
    assert code == 0 and rows[0]["dev_mode"] == "off", (err, rows)
    assert rows[0]["templates"] == {"template/model-a": "off", "template/model-b": "off"}, rows
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0 and rows[0]["result"] == "enabled", (err, rows)
    assert entries(cluster.api(f"{DEP}/pair")) == [[{"name": VAR, "value": "1"}]] * 2
    assert rows[0]["templates"] == {"template/model-a": "on", "template/model-b": "on"}, rows
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert {r["container"]: r["dev_mode"] for r in rows} == {"model-a": "on", "model-b": "on"}, rows
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0 and rows[0]["result"] == "unchanged", (err, rows)
    code, rows, err = cluster.run_json("devmode", "--disable", "-n", NS, "--all")
    assert code == 0 and rows[0]["result"] == "disabled", (err, rows)
    after = cluster.api(f"{DEP}/pair")
    assert entries(after) == [[], []]
    assert after["spec"]["template"]["spec"]["containers"][1]["env"] == [{"name": "OTHER", "value": "x"}]
    code, rows, err = cluster.run_json("devmode", "-n", NS)
    assert rows[0]["dev_mode"] == "off" and set(rows[0]["templates"].values()) == {"off"}, rows
