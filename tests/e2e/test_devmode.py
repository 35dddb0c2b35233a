"""devmode against the simulated cluster: status, --enable on every fixture owner (with the
variable set to "true", with and without an existing env, through valueFrom), a second run
that changes nothing, --disable, and refusal of a managed owner."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.sim.podspecs import is_vllm_container

from .conftest import fixture_file

NS = "llmd"
VAR = "VLLM_SERVER_DEV_MODE"
#: fewer replicas than the fixtures ask for keep the runs light; the code paths are the same
SMALL = {"replicas": {"deployment/optimized-baseline-nvidia-gpu-vllm-decode": 2,
                      "deployment/pd-disaggregation-nvidia-gpu-vllm-prefill": 2}}


def owners(cluster: Any, ns: str = NS) -> list[dict[str, Any]]:
    """Every Deployment and LeaderWorkerSet of the namespace, read with the admin token."""
    deps = cluster.api(f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]
    lws = cluster.api(f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets")["items"]
    for d in deps:
        d["kind"] = "Deployment"
    for d in lws:
        d["kind"] = "LeaderWorkerSet"
    out: list[dict[str, Any]] = deps + lws
    return out


def templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]
    if obj["kind"] == "Deployment":
        return [spec["template"]]
    lwt = spec["leaderWorkerTemplate"]
    return [lwt[k] for k in ("leaderTemplate", "workerTemplate") if k in lwt]


def dev_entries(obj: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Per vLLM container (by the simulator's own rule), the env entries naming the variable."""
    out = []
    for t in templates(obj):
        for c in t["spec"]["containers"]:
            if is_vllm_container(c):
                out.append([e for e in c.get("env") or [] if e.get("name") == VAR])
    return out


def vllm_owner_objs(cluster: Any) -> list[dict[str, Any]]:
    return [o for o in owners(cluster) if dev_entries(o)]


def live_vllm_pods(cluster: Any) -> list[dict[str, Any]]:
    return [p for p in cluster.live_pods() if p.get("vllm_container")]


@pytest.mark.parametrize("prefix", ["01", "02", "03", "05", "06"])
def test_enable_as_the_fixtures_ship(sim: Any, prefix: str) -> None:
    """The fixtures as they ship: an env list without the variable (or no env at all)."""
    cluster = sim([fixture_file(prefix)], namespace=NS, scenario=SMALL)
    assert all(e == [] for o in vllm_owner_objs(cluster) for e in dev_entries(o))
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0, (err, rows)
    assert {r["result"] for r in rows} == {"enabled"}
    # every rollout was waited for and completed: the warning says the caches were emptied
    assert "replaced the pods, which emptied their caches" in err and "not known to be emptied" not in err, err
    for obj in vllm_owner_objs(cluster):
        assert all(e == [{"name": VAR, "value": "1"}] for e in dev_entries(obj)), obj["metadata"]["name"]
    pods = live_vllm_pods(cluster)
    assert pods and all(p["ready"] and p["env"].get(VAR) == "1" for p in pods)
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0 and {r["result"] for r in rows} == {"unchanged"}, (err, rows)


@pytest.mark.parametrize("prefix", ["01", "02", "03", "05", "06"])
def test_enable_fixes_true_once_then_nothing_then_disable(sim: Any, prefix: str) -> None:
    cluster = sim([fixture_file(prefix)], namespace=NS, dev_mode="invalid", scenario=SMALL)
    code, rows, err = cluster.run_json("devmode", "-n", NS)
    assert code == 0, err
    assert rows and {r["dev_mode"] for r in rows} == {"invalid"} and all(r["accepted"] is False for r in rows)

    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0, (err, rows)
    assert {r["result"] for r in rows} == {"enabled"} and {r["dev_mode"] for r in rows} == {"on"}
    assert "--disable" in err and "authentication" in err
    for obj in vllm_owner_objs(cluster):
        assert all(e == [{"name": VAR, "value": "1"}] for e in dev_entries(obj)), obj["metadata"]["name"]
    pods = live_vllm_pods(cluster)
    assert pods and all(p["ready"] and p["env"].get(VAR) == "1" for p in pods)
    names = sorted(p["name"] for p in pods)

    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0, err
    assert {r["result"] for r in rows} == {"unchanged"}
    assert sorted(p["name"] for p in live_vllm_pods(cluster)) == names  # no pod replaced

    code, rows, err = cluster.run_json("devmode", "--disable", "-n", NS, "--all")
    assert code == 0, err
    assert {r["result"] for r in rows} == {"disabled"} and {r["dev_mode"] for r in rows} == {"off"}
    for obj in vllm_owner_objs(cluster) or owners(cluster):
        assert all(e == [] for e in dev_entries(obj))
    assert all(VAR not in p["env"] for p in live_vllm_pods(cluster))


def _variant(src: Path, dest: Path, edit: Any) -> Path:
    docs = [d for d in yaml.safe_load_all(src.read_text()) if isinstance(d, dict)]
    for d in docs:
        if d.get("kind") in ("Deployment", "LeaderWorkerSet"):
            for t in templates(d):
                for c in t["spec"]["containers"]:
                    if is_vllm_container(c):
                        edit(c)
    dest.write_text(yaml.safe_dump_all(docs))
    return dest


@pytest.mark.parametrize("prefix", ["02", "06"])
def test_enable_without_any_env(sim: Any, tmp_path: Path, prefix: str) -> None:
    manifest = _variant(fixture_file(prefix), tmp_path / "noenv.yaml", lambda c: c.pop("env", None))
    cluster = sim([manifest], namespace=NS, scenario=SMALL)
    assert all(not any(e for e in dev_entries(o)) for o in owners(cluster))
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0, err
    for obj in vllm_owner_objs(cluster):
        assert all(e == [{"name": VAR, "value": "1"}] for e in dev_entries(obj))
    assert all(p["env"].get(VAR) == "1" and p["ready"] for p in live_vllm_pods(cluster))
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0 and {r["result"] for r in rows} == {"unchanged"}


def test_enable_over_value_from_and_status_of_env_from(sim: Any, tmp_path: Path) -> None:
    def edit(c: dict[str, Any]) -> None:
        c["env"] = list(c.get("env") or []) + [
            {"name": VAR, "valueFrom": {"configMapKeyRef": {"name": "devmode", "key": "flag"}}},
            {"name": VAR, "value": "true"}]
        c["envFrom"] = [{"configMapRef": {"name": "devmode"}}]

    manifest = _variant(fixture_file("05"), tmp_path / "valuefrom.yaml", edit)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "devmode"},
          "data": {"flag": "true", VAR: "1"}}
    (tmp_path / "cm.yaml").write_text(yaml.safe_dump(cm))
    cluster = sim([manifest, tmp_path / "cm.yaml"], namespace=NS)
    code, rows, err = cluster.run_json("devmode", "-n", NS)
    assert code == 0, err
    assert rows[0]["dev_mode"] == "invalid" and rows[0]["value"] == "true"
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 0, err
    (obj,) = vllm_owner_objs(cluster)
    assert dev_entries(obj) == [[{"name": VAR, "value": "1"}]]
    # with the env entries gone, the envFrom ConfigMap's value is what vLLM gets
    code, rows, err = cluster.run_json("devmode", "--disable", "-n", NS, "--all")
    assert code == 0, err
    assert rows[0]["dev_mode"] == "on" and rows[0]["source"] == "envFrom ConfigMap/devmode"
    assert "still on through envFrom ConfigMap/devmode" in rows[0]["message"]


def test_managed_owner_is_refused_unless_ignore_owner(sim: Any, tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(fixture_file("05").read_text()) if isinstance(d, dict)]
    for d in docs:
        if d.get("kind") == "Deployment":
            d["metadata"].setdefault("annotations", {})["argocd.argoproj.io/tracking-id"] = \
                "bench:apps/Deployment:llmd/" + d["metadata"]["name"]
    manifest = tmp_path / "argo.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    cluster = sim([manifest], namespace=NS)
    before = copy.deepcopy(vllm_owner_objs(cluster))
    code, rows, err = cluster.run_json("devmode", "--enable", "-n", NS, "--all")
    assert code == 1
    assert rows[0]["result"] == "refused" and "Argo CD/bench" in rows[0]["message"]
    assert vllm_owner_objs(cluster)[0]["metadata"]["generation"] == before[0]["metadata"]["generation"]
    code, rows, err = cluster.run_json("devmode", "--enable", "--ignore-owner", "-n", NS, "--all")
    assert code == 0 and rows[0]["result"] == "enabled", err
