"""Pods that do not run (Unschedulable, ContainerCreating, CrashLoopBackOff) and paused
Deployments, end to end against the simulator: each row names the pod's state and its cause,
nothing is sent to such a pod, and the exit code is 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.manifests import build

NS = "states"
VAR = "VLLM_SERVER_DEV_MODE"


def deployment(name: str, *, replicas: int = 1, gpus: int = 0, dev_mode: str | None = "1",
               version: str = "0.26.0", port: int = 8000, extra_env: list[dict[str, Any]] | None = None,
               env_from: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A plain vLLM Deployment: ``vllm serve`` on ``port``, ``gpus`` nvidia.com/gpu per pod,
    ``VLLM_SERVER_DEV_MODE`` as a literal (None: not set)."""
    env = ([{"name": VAR, "value": dev_mode}] if dev_mode is not None else []) + list(extra_env or [])
    container: dict[str, Any] = {
        "name": "vllm", "image": f"vllm/vllm-openai:v{version}", "command": ["vllm", "serve"],
        "args": ["Qwen/Qwen3-0.6B", f"--port={port}"], "env": env,
        "ports": [{"containerPort": port, "name": "http"}]}
    if env_from:
        container["envFrom"] = env_from
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    labels = {"app": name, "llm-d.ai/inference-serving": "true"}
    return build.deployment(name, [container], namespace=NS, replicas=replicas, labels=labels)


def write(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "states.yaml"
    path.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
                                        *docs]))
    return path


def by_pod(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["pod"]: r for r in rows}


def transport_calls(cluster: Any) -> int:
    """Requests that reach a pod (proxy, exec, port-forward) the API server counted."""
    return sum(n for k, n in cluster.state()["api_requests"].items()
               if any(s in k for s in ("pods/proxy", "pods/exec", "pods/portforward")))


def test_unschedulable_creating_and_crash_looping_pods_are_named_not_called(sim: Any, tmp_path: Path) -> None:
    manifest = write(tmp_path, [
        deployment("fits", replicas=2, gpus=2),          # 4 GPUs on the one node: both fit
        deployment("too-big", gpus=2),                   # the node is full: Unschedulable
        deployment("creating"),                          # held in ContainerCreating (scenario)
        deployment("crashing", dev_mode="true"),         # vLLM refuses "true": CrashLoopBackOff
    ])
    cluster = sim([manifest], namespace=NS, scenario={
        "gpus_per_node": 4, "pods": [{"match": {"owner": "deployment/creating"}, "container_creating": True}]})
    pods = {p["owner"]["name"]: p for p in cluster.live_pods()}
    assert pods["too-big"]["held"] == "unschedulable" and pods["creating"]["held"] == "container-creating"
    assert pods["crashing"]["crashed"] is True

    # what kubectl shows for the same pods (server-side table printing)
    listed = cluster.api(f"/api/v1/namespaces/{NS}/pods")["items"]
    phases = {p["metadata"]["labels"]["app"]: p["status"] for p in listed}
    big = phases["too-big"]
    assert big["phase"] == "Pending" and "nodeName" not in next(
        p["spec"] for p in listed if p["metadata"]["labels"]["app"] == "too-big")
    sched = next(c for c in big["conditions"] if c["type"] == "PodScheduled")
    assert sched["status"] == "False" and sched["reason"] == "Unschedulable"
    assert sched["message"].startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")

    before = transport_calls(cluster)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 1, err
    rows_by_owner = {r["owner"]: r for r in rows}
    assert all(r["result"] == "emptied" for r in rows if r["owner"] == "deployment/fits")
    assert len([r for r in rows if r["owner"] == "deployment/fits"]) == 2
    big_row = rows_by_owner["deployment/too-big"]
    assert big_row["result"] == "not running" and big_row["calls"] == 0
    assert "Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu" in big_row["message"]
    creating = rows_by_owner["deployment/creating"]
    assert creating["result"] == "not running" and "ContainerCreating" in creating["message"]
    crash = rows_by_owner["deployment/crashing"]
    assert crash["result"] == "not running" and "CrashLoopBackOff" in crash["message"]
    assert "last exit code 1 (Error)" in crash["message"] and "5 restarts" in crash["message"]
    assert f'{VAR}="true" is not an integer' in crash["message"]
    assert "kubectl kvreset devmode --enable deployment/crashing" in crash["message"]
    for row in (big_row, creating, crash):
        assert row["gpu"] == "left" and row["left"] and row["steps"] == []
        assert "dev mode off" not in row["message"]
        assert not any(s in row["message"] for s in ("BadRequest", "unable to upgrade", "container not found",
                                                     "unreachable", "refused"))
    # only the two running pods were called: one reset route set each, no transport for the others
    fits = [p for p in cluster.live_pods() if p["owner"]["name"] == "fits"]
    assert all(st["prefix_cache_blocks"] == 0 for p in fits for st in p["ports"].values())
    assert transport_calls(cluster) > before
    assert all(not p["ports"] or all(st["reset_calls"] == 0 for st in p["ports"].values())
               for p in cluster.live_pods() if p["owner"]["name"] != "fits")

    # dry-run and detect say the same, and send nothing to those pods
    code, plan, err = cluster.run_json("clear", "-n", NS, "--all", "--dry-run")
    planned = {r["owner"]: r for r in plan}
    assert any("Unschedulable" in s for s in planned["deployment/too-big"]["steps"])
    code, det, err = cluster.run_json("detect", "-n", NS)
    assert code == 1, err
    det_by = {r["owner"]: r for r in det}
    assert any("CrashLoopBackOff" in n for n in det_by["deployment/crashing"]["notes"])
    assert any("Unschedulable" in n for n in det_by["deployment/too-big"]["notes"])
    assert det_by["deployment/fits"]["version"] == "0.26.0"


def test_a_freed_gpu_schedules_the_pending_pod(sim: Any, tmp_path: Path) -> None:
    """Capacity is per node and follows deletions: scaling one owner down lets the pending pod
    of the other run, and clear then empties it."""
    manifest = write(tmp_path, [deployment("first", gpus=1), deployment("second", gpus=1)])
    cluster = sim([manifest], namespace=NS, scenario={"gpus_per_node": 1})
    held = [p for p in cluster.live_pods() if p.get("held")]
    assert len(held) == 1
    waiting = held[0]["owner"]["name"]
    other = "first" if waiting == "second" else "second"
    cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments/{other}", "PATCH", {"spec": {"replicas": 0}},
                content_type="application/merge-patch+json")
    cluster.wait_ready()
    live = [p for p in cluster.live_pods() if p["owner"]["name"] == waiting]
    assert live and live[0]["ready"] and not live[0].get("held")
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0, err
    assert [r["result"] for r in rows] == ["emptied"]


def test_devmode_enable_on_a_paused_deployment_is_refused(sim: Any, tmp_path: Path) -> None:
    dep = deployment("paused", dev_mode=None)
    dep["spec"]["paused"] = True
    cluster = sim([write(tmp_path, [dep])], namespace=NS)
    names = {p["name"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 1, err
    assert rows[0]["result"] == "refused" and "kubectl rollout resume deployment/paused" in rows[0]["message"]
    assert {p["name"] for p in cluster.live_pods()} == names


def configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": data}


def test_devmode_enable_on_value_from_shows_the_replacement_before_asking(sim: Any, tmp_path: Path) -> None:
    from .test_confirm import run_on_tty

    dep = deployment("vf", dev_mode=None, extra_env=[
        {"name": VAR, "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "dev"}}}])
    cluster = sim([write(tmp_path, [configmap("flags", {"dev": "0"}), dep])], namespace=NS)
    old = {p["name"] for p in cluster.live_pods()}
    # declined: the replacement was stated in the prompt, nothing changed
    done = run_on_tty(cluster, ["devmode", "--enable", "-n", NS, "--all"], "n\n")
    assert done.returncode == 1, done.stderr
    said = done.stderr
    line = 'VLLM_SERVER_DEV_MODE is read from configMapKeyRef ConfigMap/flags key \'dev\' (now "0"); ' \
           '--enable replaces that entry with the literal "1"'
    assert line in said and said.index(line) < said.index("Continue?"), said
    assert "nothing changed" in said and {p["name"] for p in cluster.live_pods()} == old
    dep_now = cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments/vf")
    assert dep_now["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]
    # without a terminal it runs, and says so on stderr before the patch and in the row
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0, err
    assert line in err and rows[0]["result"] == "enabled" and line in rows[0]["message"]
    env = cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments/vf")["spec"]["template"]["spec"][
        "containers"][0]["env"]
    assert env == [{"name": VAR, "value": "1"}]


def test_detect_and_devmode_agree_on_an_env_from_value(sim: Any, tmp_path: Path) -> None:
    dep = deployment("ef", dev_mode=None, env_from=[{"configMapRef": {"name": "vllm-env"}}])
    cluster = sim([write(tmp_path, [configmap("vllm-env", {VAR: "1"}), dep])], namespace=NS)
    code, det, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    code, dm, err2 = cluster.run_json("devmode", "-n", NS)
    assert code == 0, err2
    assert det[0]["dev_mode"] == "on" and dm[0]["dev_mode"] == "on"
    assert det[0]["dev_mode_value"] == dm[0]["value"] == "1"
    assert det[0]["dev_mode_source"] == dm[0]["source"] == "envFrom ConfigMap/vllm-env"
    # the simulator's pod env (what vLLM got) agrees with both
    assert cluster.live_pods()[0]["env"][VAR] == "1"
    # clear uses the reset routes (dev mode is on): emptied
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 0 and rows[0]["result"] == "emptied", (err, rows)
    # --enable states that its literal overrides the envFrom value
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0, err
    assert 'comes from envFrom ConfigMap/vllm-env (now "1"); --enable adds the literal "1"' in err


def test_detect_notes_an_image_tag_that_disagrees_with_the_server(sim: Any, tmp_path: Path) -> None:
    llmd = deployment("llmd", version="0.26.0")
    llmd["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/llm-d/llm-d-cuda:v0.8.0"
    manifest = write(tmp_path, [deployment("tagged", version="0.23.0"), deployment("agrees", version="0.26.0"),
                                llmd])
    cluster = sim([manifest], namespace=NS, scenario={"pods": [
        {"match": {"owner": "deployment/tagged"}, "vllm_version": "0.26.0"},
        {"match": {"owner": "deployment/llmd"}, "vllm_version": "0.26.0"}]})
    code, rows, err = cluster.run_json("detect", "-n", NS)
    assert code == 0, err
    by = {r["owner"]: r for r in rows}
    assert by["deployment/tagged"]["version"] == "0.26.0"
    assert ("version mismatch: the image vllm/vllm-openai:v0.23.0 says vLLM 0.23.0, but GET /version answers "
            "0.26.0") in " ".join(by["deployment/tagged"]["notes"])
    assert any("ghcr.io/llm-d/llm-d-cuda:v0.8.0 says vLLM 0.23.0" in n for n in by["deployment/llmd"]["notes"])
    assert not any("mismatch" in n for n in by["deployment/agrees"]["notes"])


def test_metrics_retries_5xx_and_lost_connections_and_hints_the_multiprocess_dir(sim: Any, tmp_path: Path) -> None:
    tmp_mounted = deployment("tmpvol")
    tmp_spec = tmp_mounted["spec"]["template"]["spec"]
    tmp_spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/tmp"}]
    tmp_spec["volumes"] = [{"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch"}}]
    multiproc = deployment("multiproc", extra_env=[{"name": "PROMETHEUS_MULTIPROC_DIR", "value": "/data/prom"}])
    manifest = write(tmp_path, [deployment("flaky"), deployment("dropped"), deployment("plain500"),
                                tmp_mounted, multiproc])
    cluster = sim([manifest], namespace=NS, scenario={
        "pods": [{"match": {"owner": "deployment/flaky"}, "metrics_fail_first": 1}] + [
                 {"match": {"owner": f"deployment/{n}"}, "metrics_status": 500}
                 for n in ("plain500", "tmpvol", "multiproc")],
        "faults": {"vllm": {"fraction": 1.0, "times": 1, "mode": "drop", "paths": ["/metrics"]}}})
    code, rows, err = cluster.run_json("metrics", "-n", NS, "--transport", "proxy")
    assert code == 1, err
    by = {r["pod"].rsplit("-", 2)[0]: r for r in rows}
    # a dropped connection (every pod's first scrape), then 500s: retried, bounded
    assert by["dropped"]["error"] is None and by["dropped"]["usage"] is not None
    assert by["flaky"]["error"] is None and by["flaky"]["usage"] is not None
    calls = {p["owner"]["name"]: sum(st["metrics_calls"] for st in p["ports"].values()) for p in cluster.live_pods()}
    assert calls["flaky"] == 2 and calls["dropped"] == 1  # the dropped call never reached the fake's counter
    assert calls["plain500"] == 2 and calls["tmpvol"] == 2  # 3 tries: one dropped, two 500s
    assert by["plain500"]["error"] == "unavailable: GET /metrics answered 500 (3 tries)"
    assert "hint" not in by["plain500"]["error"]
    assert "/tmp is the volume scratch" in by["tmpvol"]["error"] and "#49983" in by["tmpvol"]["error"]
    assert "PROMETHEUS_MULTIPROC_DIR is set to /data/prom" in by["multiproc"]["error"]


def test_clear_fallback_devmode_states_the_value_from_it_replaces(sim: Any, tmp_path: Path) -> None:
    dep = deployment("vfc", dev_mode=None, extra_env=[
        {"name": VAR, "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "dev"}}}])
    cluster = sim([write(tmp_path, [configmap("flags", {"dev": "0"}), dep])], namespace=NS)
    line = "VLLM_SERVER_DEV_MODE is read from configMapKeyRef ConfigMap/flags key 'dev' (now \"0\")"
    code, plan, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback=devmode", "--dry-run")
    assert code == 0, err
    assert any(line in s and "if vLLM answers 404" in s for s in plan[0]["steps"]), plan
    done = cluster.run("clear", "-n", NS, "--all", "--fallback=devmode", "-o", "json", "--timeout", "60s")
    assert done.returncode == 0, done.stderr
    assert f"note: {NS}/deployment/vfc: template container vllm: {line}" in done.stderr
    env = cluster.api(f"/apis/apps/v1/namespaces/{NS}/deployments/vfc")["spec"]["template"]["spec"][
        "containers"][0]["env"]
    assert env == [{"name": VAR, "value": "1"}]


def test_a_crash_loop_names_the_invalid_dev_mode_value_its_configmap_holds(sim: Any, tmp_path: Path) -> None:
    """vLLM 0.32.0 ``vllm/envs.py`` reads ``VLLM_SERVER_DEV_MODE`` with ``int()``: "true" from a
    ConfigMap key (``valueFrom``) or an ``envFrom`` ConfigMap makes it exit at start-up. The row
    names the ConfigMap, the key and the value; the ConfigMap is read once per run."""
    by_key = deployment("by-key", dev_mode=None, extra_env=[
        {"name": VAR, "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "dev"}}}])
    by_env_from = deployment("by-env-from", dev_mode=None, env_from=[{"configMapRef": {"name": "vllm-env"}}])
    fine = deployment("fine", dev_mode=None, extra_env=[
        {"name": VAR, "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "on"}}}])
    cluster = sim([write(tmp_path, [configmap("flags", {"dev": "true", "on": "1"}),
                                    configmap("vllm-env", {VAR: "yes"}), by_key, by_env_from, fine])],
                  namespace=NS)
    pods = {p["owner"]["name"]: p for p in cluster.live_pods()}
    assert pods["by-key"]["crashed"] is True and pods["by-env-from"]["crashed"] is True
    assert not pods["fine"].get("crashed")

    before = dict(cluster.state()["api_requests"])
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    assert code == 1, err
    after = cluster.state()["api_requests"]
    by = {r["owner"]: r for r in rows}
    key_row = by["deployment/by-key"]
    assert key_row["result"] == "not running" and "CrashLoopBackOff" in key_row["message"], key_row
    assert "last exit code 1 (Error)" in key_row["message"]
    assert (f'{VAR}="true" from ConfigMap flags key dev is not an integer, so vLLM exits at start-up '
            "(vllm/envs.py reads it with int()); fix it with: kubectl kvreset devmode --enable "
            f"deployment/by-key -n {NS}") in key_row["message"], key_row["message"]
    env_row = by["deployment/by-env-from"]
    assert env_row["result"] == "not running", env_row
    assert f'{VAR}="yes" from envFrom ConfigMap vllm-env key {VAR} is not an integer' in env_row["message"]
    assert by["deployment/fine"]["result"] == "emptied"
    for row in (key_row, env_row):
        assert row["calls"] == 0 and row["gpu"] == "left"
        assert not any(s in row["message"] for s in ("BadRequest", "unable to upgrade", "unreachable"))
    # each ConfigMap was read once, though the plan's dev-mode notes read them too
    reads = {k: after.get(k, 0) - before.get(k, 0) for k in after if "configmaps" in k}
    assert reads == {"get configmaps": 2}, reads

    # detect resolves the same values and names the same cause, with no extra request per pod
    code, det, err = cluster.run_json("detect", "-n", NS)
    assert code == 1, err
    det_by = {r["owner"]: r for r in det}
    assert any(f'{VAR}="true" from ConfigMap flags key dev is not an integer' in n
               for n in det_by["deployment/by-key"]["notes"]), det_by["deployment/by-key"]
    assert det_by["deployment/by-key"]["dev_mode"] == 'invalid ("true": vLLM will not start)'
    code, met, err = cluster.run_json("metrics", "-n", NS)
    assert code == 1, err
    crashed = [r for r in met if r["pod"].startswith("by-key-")]
    assert crashed and all(f'{VAR}="true" from ConfigMap flags key dev is not an integer' in r["error"]
                           for r in crashed), crashed


def test_a_crash_loop_whose_configmap_cannot_be_read_says_so(sim: Any, tmp_path: Path) -> None:
    """A user without ``get configmaps``: the value is not guessed, the row says it is unread."""
    from .test_rbac_role import ROLE_FILE

    text = ROLE_FILE.read_text().replace("NAMESPACE", NS).replace("USER", "alice")
    role, binding = [d for d in yaml.safe_load_all(text) if d]
    role["rules"] = [r for r in role["rules"] if "configmaps" not in r["resources"]]
    dep = deployment("hidden", dev_mode=None, extra_env=[
        {"name": VAR, "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "dev"}}}])
    cluster = sim([write(tmp_path, [configmap("flags", {"dev": "true"}), dep])], namespace=NS,
                  scenario={"users": [{"name": "alice"}], "rbac": [role, binding]})
    done = cluster.run("clear", "-n", NS, "--all", "-o", "json", "--context", "sim-alice")
    assert done.returncode == 1, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["result"] == "not running" and "CrashLoopBackOff" in row["message"], row
    assert (f"{VAR}: value from ConfigMap flags key dev unread: not permitted to read ConfigMap/flags"
            in row["message"]), row["message"]
    assert '"true"' not in row["message"]
