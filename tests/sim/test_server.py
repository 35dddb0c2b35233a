"""Tests of the simulator's API server through HTTP, kubectl and the official client (one simulator for the module)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.sim.__main__ import Simulator
from tests.sim.scenario import parse_scenario
from tests.sim.simapikit import (
    ALPHA,
    MANIFEST,
    SCENARIO,
    STANDIN,
    Client,
    StandInRuntime,
)

# ----------------------------------------------------------------------------- the simulator


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    d = tmp_path_factory.mktemp("sim")
    (d / "m.yaml").write_text(MANIFEST)
    StandInRuntime.instances.clear()
    s = Simulator([str(d / "m.yaml")], namespace="ns1", scenario=parse_scenario(SCENARIO),
                  state_dir=d / "state", ready_delay=0.05, backend=STANDIN, dev_mode="on")
    s.server.unreachable_delay = 0.05
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def api(sim: Simulator) -> Client:
    return Client(sim)


# ----------------------------------------------------------------------------- discovery


def test_discovery_version_and_core(api: Client) -> None:
    code, v, _ = api.call("GET", "/version")
    assert code == 200 and v["gitVersion"] == "v1.32.4" and v["minor"] == "32"
    assert v["platform"] == "linux/amd64"
    code, a, _ = api.call("GET", "/api")
    assert a["kind"] == "APIVersions" and a["versions"] == ["v1"]
    code, rl, _ = api.call("GET", "/api/v1")
    res = {r["name"]: r for r in rl["resources"]}
    assert rl["groupVersion"] == "v1"
    for name in ("pods", "pods/proxy", "pods/exec", "pods/portforward", "pods/log", "namespaces",
                 "configmaps", "secrets", "services", "serviceaccounts",
                 "persistentvolumeclaims", "events"):
        assert name in res, name
    assert res["pods"]["shortNames"] == ["po"] and res["pods"]["namespaced"] is True
    assert res["namespaces"]["namespaced"] is False and res["namespaces"]["shortNames"] == ["ns"]
    assert res["configmaps"]["shortNames"] == ["cm"]
    assert res["pods/proxy"]["kind"] == "PodProxyOptions"
    assert "create" in res["pods/proxy"]["verbs"] and "get" in res["pods/exec"]["verbs"]


def test_discovery_groups(api: Client) -> None:
    code, gl, _ = api.call("GET", "/apis")
    names = {g["name"]: g for g in gl["groups"]}
    for g in ("apps", "leaderworkerset.x-k8s.io", "rbac.authorization.k8s.io", "example.com"):
        assert g in names
    assert names["example.com"]["preferredVersion"]["groupVersion"] == "example.com/v1alpha1"
    code, rl, _ = api.call("GET", "/apis/apps/v1")
    res = {r["name"]: r for r in rl["resources"]}
    assert res["deployments"]["shortNames"] == ["deploy"] and res["deployments"]["kind"] == \
        "Deployment"
    assert res["deployments/scale"]["group"] == "autoscaling"
    code, rl, _ = api.call("GET", "/apis/leaderworkerset.x-k8s.io/v1")
    assert [r["kind"] for r in rl["resources"] if r["name"] == "leaderworkersets"] == \
        ["LeaderWorkerSet"]
    code, rl, _ = api.call("GET", "/apis/example.com/v1alpha1")
    assert rl["resources"][0]["name"] == "gadgets"
    code, _, _ = api.call("GET", "/apis/nosuch.io")
    assert code == 404
    code, body, _ = api.call("GET", "/openapi/v2")
    assert code == 404 and body["kind"] == "Status"


# ----------------------------------------------------------------------------- auth


def test_auth(sim: Simulator) -> None:
    code, body, _ = Client(sim, token="").call("GET", "/api/v1/pods")
    assert code == 401 and body["reason"] == "Unauthorized" and body["message"] == "Unauthorized"
    code, body, _ = Client(sim, token="wrong").call("GET", "/api/v1/pods")
    assert code == 401
    alice = Client(sim, token=sim.server.user_tokens["alice"])
    code, body, _ = alice.call("GET", "/api/v1/namespaces/ns1/pods")
    assert code == 200
    code, body, _ = alice.call("GET", "/sim/v1/state")
    assert code == 403 and body["reason"] == "Forbidden"
    # RBAC (the scenario's Role grants get/list on pods in ns1 only)
    code, body, _ = alice.call("GET", "/apis/apps/v1/namespaces/ns1/deployments")
    assert code == 403 and body["message"] == (
        'deployments.apps is forbidden: User "alice" cannot list resource "deployments" in API '
        'group "apps" in the namespace "ns1"')


def test_forbidden_shape_via_authorizer(sim: Simulator) -> None:
    previous = sim.server.authorizer
    sim.server.authorizer = lambda user, verb, res, group, ns, name: res != "pods/proxy"
    try:
        alice = Client(sim, token=sim.server.user_tokens["alice"])
        pod = _pods(Client(sim), "ns1", "app=web")[0]["metadata"]["name"]
        code, body, _ = alice.call("POST", f"/api/v1/namespaces/ns1/pods/{pod}:8000/proxy/x", b"")
        assert code == 403 and body["reason"] == "Forbidden"
        # the request's resource name is the URL segment as given, port included
        assert body["message"] == (f'pods "{pod}:8000" is forbidden: User "alice" cannot create '
                                   'resource "pods/proxy" in API group "" in the namespace "ns1"')
    finally:
        sim.server.authorizer = previous


def test_kubeconfig_contexts(sim: Simulator, tmp_path: Path) -> None:
    out = tmp_path / "kc.yaml"
    sim.server.write_kubeconfig(out)
    kc = yaml.safe_load(out.read_text())
    assert kc["current-context"] == "sim"
    ctx = {c["name"]: c["context"] for c in kc["contexts"]}
    assert ctx["sim"] == {"cluster": "sim", "user": "admin", "namespace": "ns1"}
    assert ctx["sim-alice"]["user"] == "alice"
    assert kc["clusters"][0]["cluster"]["server"] == sim.server.url
    assert out.stat().st_mode & 0o077 == 0


# ----------------------------------------------------------------------------- objects


def _pods(api: Client, ns: str, selector: str = "") -> list[dict[str, Any]]:
    q = f"?labelSelector={urllib.parse.quote(selector)}" if selector else ""
    code, body, _ = api.call("GET", f"/api/v1/namespaces/{ns}/pods{q}")
    assert code == 200, body
    return body["items"]  # type: ignore[no-any-return]


def test_deployment_pods_names_owners_and_status(api: Client) -> None:
    pods = _pods(api, "ns1", "app=web")
    assert len(pods) == 3  # scenario replicas override the manifest's 2
    code, rss, _ = api.call("GET", "/apis/apps/v1/namespaces/ns1/replicasets")
    (rs,) = rss["items"]
    assert re.fullmatch(f"web-{ALPHA}{{10}}", rs["metadata"]["name"])
    h = rs["metadata"]["name"].split("-")[-1]
    for p in pods:
        assert re.fullmatch(f"web-{h}-{ALPHA}{{5}}", p["metadata"]["name"])
        assert p["metadata"]["labels"] == {"app": "web", "tier": "front", "pod-template-hash": h}
        ref = p["metadata"]["ownerReferences"][0]
        assert ref["kind"] == "ReplicaSet" and ref["name"] == rs["metadata"]["name"]
        assert ref["controller"] is True
        assert p["status"]["phase"] == "Running"
        assert re.fullmatch(r"127\.\d+\.\d+\.\d+", p["status"]["podIP"])  # loopback only
    assert len({p["status"]["podIP"] for p in pods}) == 3
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    code, dep, _ = api.call("GET", "/apis/apps/v1/namespaces/ns1/deployments/web")
    st = dep["status"]
    assert (st["replicas"], st["readyReplicas"], st["availableReplicas"], st["updatedReplicas"],
            st["observedGeneration"]) == (3, 3, 3, 3, 1)
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Available"]["status"] == "True"
    assert conds["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert dep["metadata"]["uid"] and int(dep["metadata"]["resourceVersion"]) > 0


def test_lws_pods_labels_and_env(api: Client, sim: Simulator) -> None:
    pods = {p["metadata"]["name"]: p for p in _pods(api, "team")}
    assert set(pods) == {"grp-0", "grp-0-1", "grp-0-2", "grp-1", "grp-1-1", "grp-1-2"}
    w = pods["grp-1-2"]
    lab = w["metadata"]["labels"]
    assert lab["leaderworkerset.sigs.k8s.io/name"] == "grp"
    assert lab["leaderworkerset.sigs.k8s.io/group-index"] == "1"
    assert lab["leaderworkerset.sigs.k8s.io/worker-index"] == "2"
    assert lab["role"] == "decode"
    assert w["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"
    env = {e["name"]: e.get("value") for e in w["spec"]["containers"][0]["env"]}
    assert env["LWS_LEADER_ADDRESS"] == "grp-1.grp.team"
    assert env["LWS_GROUP_SIZE"] == "3" and env["LWS_WORKER_INDEX"] == "2"
    assert env["VLLM_SERVER_DEV_MODE"] == "1"  # --dev-mode on reached the LWS template
    # leader of group 0 crash-loops (scenario): not Ready, CrashLoopBackOff, LWS group not ready
    leader = pods["grp-0"]
    cs = leader["status"]["containerStatuses"][0]
    assert cs["ready"] is False and cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    code, lws, _ = api.call("GET", "/apis/leaderworkerset.x-k8s.io/v1/namespaces/team/"
                            "leaderworkersets/grp")
    assert lws["status"]["replicas"] == 2 and lws["status"]["readyReplicas"] == 1


def test_env_resolution_and_volumes(sim: Simulator) -> None:
    rec = next(r for r in sim.cluster.records() if r.owner == ("Deployment", "web"))
    rt = next(i for i in StandInRuntime.instances if i.ctx.uid == rec.uid)
    env = rt.ctx.env_by_container["vllm"]
    assert env["A"] == "1" and env["B"] == "x-1-$(A)"
    assert env["POD"] == rec.name and env["IP"] == rec.pod_ip and env["APP"] == "web"
    assert env["TOK"] == "secret" and env["CM"] == "v"
    assert env["CFG_k"] == "v" and env["CFG_other"] == "o"
    assert "MISSING" not in env
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    vd = rt.ctx.volume_dirs
    assert set(vd) == {"data", "shm", "scratch", "cfgvol"}
    # a configMap volume is a per-pod directory with one file per key, as the kubelet lays it
    assert {f.name: f.read_text() for f in vd["cfgvol"].iterdir()} == {"k": "v", "other": "o"}
    assert vd["shm"] == rt.ctx.shm_dir
    others = [i for i in StandInRuntime.instances if i.ctx.uid != rec.uid and
              "data" in i.ctx.volume_dirs]
    assert others and all(o.ctx.volume_dirs["data"] == vd["data"] for o in others)
    assert all(o.ctx.volume_dirs["scratch"] != vd["scratch"] for o in others)
    assert rt.ctx.sandbox is False and rt.ctx.default_version is None


def test_list_selectors(api: Client) -> None:
    assert len(_pods(api, "team", "role=decode,leaderworkerset.sigs.k8s.io/worker-index=0")) == 2
    assert len(_pods(api, "team", "leaderworkerset.sigs.k8s.io/worker-index in (1,2)")) == 4
    assert len(_pods(api, "team", "leaderworkerset.sigs.k8s.io/worker-index notin (0)")) == 4
    assert len(_pods(api, "team", "leaderworkerset.sigs.k8s.io/worker-index!=0")) == 4
    assert len(_pods(api, "ns1", "pod-template-hash")) == 3
    assert [p["metadata"]["name"] for p in _pods(api, "ns1", "!pod-template-hash")] == [
        "bare", "lonely"]
    code, body, _ = api.call("GET", "/api/v1/pods?labelSelector=app%3D%3Dweb")
    assert len(body["items"]) == 3 and body["kind"] == "PodList"
    code, body, _ = api.call("GET", "/api/v1/pods?fieldSelector=metadata.name%3Dgrp-0-1")
    assert [p["metadata"]["namespace"] for p in body["items"]] == ["team"]
    code, body, _ = api.call("GET", "/api/v1/namespaces/ns1/pods?fieldSelector="
                             "status.phase%3DRunning,spec.nodeName%3Dsim-node-0")
    assert len(body["items"]) == 5
    code, body, _ = api.call("GET", "/api/v1/pods?fieldSelector=spec.foo%3Dx")
    assert code == 400 and body["reason"] == "BadRequest"
    code, body, _ = api.call("GET", "/api/v1/namespaces")
    assert {"ns1", "team", "default"} <= {n["metadata"]["name"] for n in body["items"]}
    code, body, _ = api.call("GET", "/apis/example.com/v1alpha1/namespaces/ns1/gadgets/g1")
    assert code == 200 and body["spec"] == {"size": 1}


def test_not_found_shape(api: Client) -> None:
    code, body, _ = api.call("GET", "/api/v1/namespaces/ns1/pods/x")
    assert code == 404
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": 'pods "x" not found', "reason": "NotFound",
                    "details": {"name": "x", "kind": "pods"}, "code": 404}
    code, body, _ = api.call("GET", "/apis/apps/v1/namespaces/ns1/deployments/nope")
    assert body["message"] == 'deployments.apps "nope" not found'
    assert body["details"] == {"name": "nope", "group": "apps", "kind": "deployments"}


def test_create_conflict_invalid_dryrun(api: Client) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}, "data": {"a": "b"}}
    code, body, _ = api.call("POST", "/api/v1/namespaces/ns1/configmaps?dryRun=All", cm)
    assert code == 201 and body["metadata"]["name"] == "c1"
    code, body, _ = api.call("GET", "/api/v1/namespaces/ns1/configmaps/c1")
    assert code == 404
    code, body, _ = api.call("POST", "/api/v1/namespaces/ns1/configmaps", cm)
    assert code == 201 and body["metadata"]["namespace"] == "ns1"
    code, body, _ = api.call("POST", "/api/v1/namespaces/ns1/configmaps", cm)
    assert code == 409 and body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "c1" already exists'
    code, body, _ = api.call("POST", "/api/v1/namespaces/ns1/configmaps",
                             {"kind": "ConfigMap", "metadata": {}})
    assert code == 422 and body["reason"] == "Invalid"
    stale = dict(cm, metadata={"name": "c1", "resourceVersion": "1"})
    code, body, _ = api.call("PUT", "/api/v1/namespaces/ns1/configmaps/c1", stale)
    assert code == 409 and body["reason"] == "Conflict"
    code, body, _ = api.call("DELETE", "/api/v1/namespaces/ns1/configmaps/c1")
    assert code == 200 and body["status"] == "Success"
    code, body, _ = api.call("PUT", "/api/v1/namespaces/ns1/pods", cm)
    assert code == 405 and body["reason"] == "MethodNotAllowed"


def test_patch_types_and_415(api: Client, sim: Simulator) -> None:
    base = "/apis/apps/v1/namespaces/ns1/deployments/web"
    code, d0, _ = api.call("GET", base)
    # merge patch on metadata: no generation bump
    code, d1, _ = api.call("PATCH", base, {"metadata": {"labels": {"x": "y"}}},
                           "application/merge-patch+json")
    assert code == 200 and d1["metadata"]["labels"]["x"] == "y"
    assert d1["metadata"]["generation"] == d0["metadata"]["generation"]
    # json patch dry-run: returned but not stored
    code, d2, _ = api.call("PATCH", base + "?dryRun=All",
                           [{"op": "replace", "path": "/spec/replicas", "value": 5}],
                           "application/json-patch+json")
    assert code == 200 and d2["spec"]["replicas"] == 5
    code, d3, _ = api.call("GET", base)
    assert d3["spec"]["replicas"] == 3
    # json patch with a failing test op
    code, body, _ = api.call("PATCH", base, [{"op": "test", "path": "/spec/replicas",
                                              "value": 9}], "application/json-patch+json")
    assert code == 422
    # strategic merge on a custom resource -> 415
    lws = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/team/leaderworkersets/grp"
    code, body, _ = api.call("PATCH", lws, {"metadata": {"labels": {"a": "b"}}},
                             "application/strategic-merge-patch+json")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"
    assert "application/merge-patch+json" in body["message"]
    code, body, _ = api.call("PATCH", lws, {"metadata": {"labels": {"a": "b"}}},
                             "application/merge-patch+json")
    assert code == 200 and body["metadata"]["labels"] == {"a": "b"}
    code, body, _ = api.call("PATCH", base, {"spec": {}}, "application/apply-patch+yaml")
    assert code == 415


def test_patch_resource_version_precondition_and_failed_test(api: Client) -> None:
    """A patch that writes ``metadata.resourceVersion`` is conditional on it: a stale one is a
    409 ``Conflict`` Status (json, merge and strategic alike) and nothing changes; the current
    one applies. A failed json-patch ``test`` is the 422 the API server's json-patch step gives.
    (A ConfigMap of its own: no controller acts on it, and the shared cluster is left as it was.)"""
    base = "/api/v1/namespaces/ns1/configmaps/rv"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rv"}, "data": {"n": "0"}}
    code, d0, _ = api.call("POST", "/api/v1/namespaces/ns1/configmaps", cm)
    assert code == 201
    rv = d0["metadata"]["resourceVersion"]
    code, d1, _ = api.call("PATCH", base, {"metadata": {"labels": {"rv": "1"}}}, "application/merge-patch+json")
    assert code == 200 and d1["metadata"]["resourceVersion"] != rv
    stale = [{"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
             {"op": "replace", "path": "/data/n", "value": "7"}]
    for body, ctype in ((stale, "application/json-patch+json"),
                        ({"metadata": {"resourceVersion": rv}, "data": {"n": "7"}}, "application/merge-patch+json"),
                        ({"metadata": {"resourceVersion": rv}, "data": {"n": "7"}},
                         "application/strategic-merge-patch+json")):
        code, err, _ = api.call("PATCH", base, body, ctype)
        assert code == 409 and err["kind"] == "Status" and err["reason"] == "Conflict", (ctype, err)
        assert err["message"] == ('Operation cannot be fulfilled on configmaps "rv": the object has been '
                                  "modified; please apply your changes to the latest version and try again")
    code, d2, _ = api.call("GET", base)
    assert d2["data"] == {"n": "0"} and d2["metadata"]["resourceVersion"] == d1["metadata"]["resourceVersion"]
    fresh = [{"op": "replace", "path": "/metadata/resourceVersion", "value": d2["metadata"]["resourceVersion"]},
             {"op": "replace", "path": "/data/n", "value": "4"}]
    code, d3, _ = api.call("PATCH", base, fresh, "application/json-patch+json")
    assert code == 200 and d3["data"] == {"n": "4"}
    assert int(d3["metadata"]["resourceVersion"]) > int(d2["metadata"]["resourceVersion"])
    code, err, _ = api.call("PATCH", base, [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}],
                            "application/json-patch+json")
    assert code == 422 and err["reason"] == "Invalid"
    assert err["details"]["causes"][0]["message"].startswith("testing value /metadata/resourceVersion failed")
    code, _, _ = api.call("DELETE", base)
    assert code == 200


def test_strategic_patch_rolls_deployment(api: Client, sim: Simulator) -> None:
    base = "/apis/apps/v1/namespaces/ns1/deployments/web"
    old = {p["metadata"]["name"] for p in _pods(api, "ns1", "app=web")}
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "env": [{"name": "VLLM_SERVER_DEV_MODE", "value": "0"},
                                 {"name": "NEW", "value": "n"}]}]}}}}
    code, d, _ = api.call("PATCH", base, patch, "application/strategic-merge-patch+json")
    assert code == 200, d
    env = {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["VLLM_SERVER_DEV_MODE"] == "0" and env["NEW"] == "n" and env["A"] == "1"
    assert d["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.26.0"
    assert d["metadata"]["generation"] == 2
    assert sim.cluster.wait_started(5)
    new = {p["metadata"]["name"] for p in _pods(api, "ns1", "app=web")}
    assert len(new) == 3 and not (new & old)
    code, d, _ = api.call("GET", base)
    assert d["status"]["observedGeneration"] == 2 and d["status"]["updatedReplicas"] == 3
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    deleted = [r for r in sim.cluster.records() if r.name in old]
    assert deleted and all(r.deleted and not r.ready for r in deleted)


def test_delete_pod_is_replaced_and_state(api: Client, sim: Simulator) -> None:
    victim = _pods(api, "ns1", "app=web")[0]["metadata"]["name"]
    code, body, _ = api.call("DELETE", f"/api/v1/namespaces/ns1/pods/{victim}")
    assert code == 200 and body["metadata"]["deletionTimestamp"]
    names = {p["metadata"]["name"] for p in _pods(api, "ns1", "app=web")}
    assert len(names) == 3 and victim not in names
    sim.cluster.wait_started(5)
    code, st, _ = api.call("GET", "/sim/v1/state")
    assert code == 200
    entry = [p for p in st["pods"] if p["name"] == victim]
    assert entry and entry[0]["deleted"] is True and entry[0]["owner"] == {
        "kind": "Deployment", "name": "web"}
    live = [p for p in st["pods"] if p["owner"] == {"kind": "Deployment", "name": "web"} and
            not p["deleted"]]
    assert len(live) == 3 and all(p["ready"] for p in live)
    assert st["api_requests"]["delete pods"] >= 1
    assert st["api_requests"]["list pods"] >= 1
    # LWS pods keep their names when replaced
    code, _, _ = api.call("DELETE", "/api/v1/namespaces/team/pods/grp-1-1")
    code, p, _ = api.call("GET", "/api/v1/namespaces/team/pods/grp-1-1")
    assert code == 200
    # the first generation starts warm, replacements cold (a fresh vLLM has empty caches)
    grp = [r for r in sim.cluster.records() if r.name == "grp-1-1"]
    assert len(grp) == 2 and "cold" not in grp[0].overrides and grp[1].overrides["cold"] is True
    web = [r for r in sim.cluster.records() if r.owner == ("Deployment", "web")]
    assert all(("cold" in r.overrides) == (r.ordinal >= 3) for r in web)


def test_scale_subresource(api: Client) -> None:
    base = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/team/leaderworkersets/grp"
    code, sc, _ = api.call("GET", base + "/scale")
    assert code == 200 and sc["kind"] == "Scale" and sc["spec"]["replicas"] == 2
    code, sc, _ = api.call("PATCH", base + "/scale", {"spec": {"replicas": 1}},
                           "application/merge-patch+json")
    assert sc["spec"]["replicas"] == 1
    assert {p["metadata"]["name"] for p in _pods(api, "team")} == {"grp-0", "grp-0-1", "grp-0-2"}


# ----------------------------------------------------------------------------- proxy


def test_proxy_forwarding_and_errors(api: Client, sim: Simulator) -> None:
    recs = [r for r in sim.cluster.records() if r.owner == ("Deployment", "web") and
            not r.deleted]
    ok = next(r for r in recs if r.network is None)
    base = f"/api/v1/namespaces/ns1/pods/{ok.name}"
    code, body, headers = api.call("POST", f"{base}:8000/proxy/reset_prefix_cache?a=1&b=true",
                                   b"xyz")
    assert code == 200 and body == {"method": "POST", "path": "/reset_prefix_cache",
                                    "query": "a=1&b=true", "scheme": "http", "body": "xyz"}
    assert headers["x-pod"] == ok.name
    for form in (f"{ok.name}", f"http:{ok.name}:8000", f"{ok.name}:http"):
        code, body, _ = api.call("GET", f"/api/v1/namespaces/ns1/pods/{form}/proxy/v")
        assert code == 200 and body["path"] == "/v", form
    code, body, _ = api.call("GET", f"/api/v1/namespaces/ns1/pods/https:{ok.name}:8000/proxy/")
    assert body["scheme"] == "https" and body["path"] == "/"
    code, body, _ = api.call("GET", f"{base}:8000/proxy/a%2Fb")
    assert body["path"] == "/a/b"
    code, body, _ = api.call("GET", f"{base}:8000/proxy/missing")
    assert code == 404 and body == {"detail": "Not Found"}
    code, body, _ = api.call("POST", f"{base}:8200/proxy/reset_prefix_cache", b"")
    assert code == 503 and body["reason"] == "ServiceUnavailable"
    assert body["message"] == (f"error trying to reach service: dial tcp {ok.pod_ip}:8200: "
                               "connect: connection refused")
    code, body, _ = api.call("GET", "/api/v1/namespaces/ns1/pods/nope:8000/proxy/x")
    assert code == 404 and body["message"] == 'pods "nope" not found'
    bad = sim.cluster.record_for("ns1", "lonely")
    assert bad is not None and bad.network == "unreachable"
    t0 = time.monotonic()
    code, body, _ = api.call("GET", f"/api/v1/namespaces/ns1/pods/{bad.name}:8000/proxy/x")
    assert code == 503 and body["message"].endswith(f"dial tcp {bad.pod_ip}:8000: i/o timeout")
    assert time.monotonic() - t0 >= 0.05
    code, st, _ = api.call("GET", "/sim/v1/state")
    assert st["api_requests"]["create pods/proxy"] >= 2
    assert st["api_requests"]["get pods/proxy"] >= 4


def test_proxy_crashed_and_pending(api: Client, sim: Simulator) -> None:
    # the crash-looping LWS leader: Running but nothing listens
    code, body, _ = api.call("GET", "/api/v1/namespaces/team/pods/grp-0:8000/proxy/x")
    assert code == 503 and body["message"].endswith("connect: connection refused")
    # a pod that is not Running yet
    sim.cluster.config.ready_delay = 30
    try:
        code, p, _ = api.call("POST", "/api/v1/namespaces/ns1/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slow"},
            "spec": {"containers": [{"name": "c", "image": "x", "ports": [
                {"containerPort": 8000}]}]}})
        assert code == 201 and p["status"]["phase"] == "Pending"
        code, body, _ = api.call("GET", "/api/v1/namespaces/ns1/pods/slow:8000/proxy/x")
        assert code == 503 and body["reason"] == "ServiceUnavailable"
    finally:
        sim.cluster.config.ready_delay = 0.05


def test_scenario_overrides_reach_pods(sim: Simulator) -> None:
    recs = [r for r in sim.cluster.records() if r.owner == ("Deployment", "web")]
    first = [r for r in recs if r.ordinal == 1]
    assert first[0].overrides == {"busy": 2, "vllm_version": "0.25.0"}
    assert first[0].network == "unreachable"
    assert all(r.overrides.get("vllm_version") == "0.25.0" for r in recs)


def test_table_output(api: Client) -> None:
    acc = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    code, t, _ = api.call("GET", "/api/v1/namespaces/team/pods", accept=acc)
    assert t["kind"] == "Table"
    assert [c["name"] for c in t["columnDefinitions"]][:5] == ["Name", "Ready", "Status",
                                                               "Restarts", "Age"]
    row = next(r for r in t["rows"] if r["cells"][0] == "grp-0")
    assert row["cells"][1:4] == ["0/1", "CrashLoopBackOff", 5]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    code, t, _ = api.call("GET", "/apis/apps/v1/namespaces/ns1/deployments/web", accept=acc)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Ready", "Up-to-date",
                                                           "Available", "Age"]
    assert t["rows"][0]["cells"][:4] == ["web", "3/3", 3, 3]


def test_concurrent_requests(api: Client, sim: Simulator) -> None:
    rec = next(r for r in sim.cluster.records() if r.owner == ("Deployment", "web") and
               r.network is None and not r.deleted)

    def one(i: int) -> int:
        if i % 2:
            return api.call("GET", "/api/v1/pods")[0]
        return api.call("GET", f"/api/v1/namespaces/ns1/pods/{rec.name}:8000/proxy/x")[0]

    with ThreadPoolExecutor(max_workers=40) as ex:
        codes = list(ex.map(one, range(120)))
    assert codes == [200] * 120


# ----------------------------------------------------------------------------- real kubectl


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_get_pods(sim: Simulator, tmp_path: Path) -> None:
    kc = tmp_path / "kc.yaml"
    sim.server.write_kubeconfig(kc)
    kubectl = shutil.which("kubectl") or "kubectl"
    r = subprocess.run([kubectl, "--kubeconfig", str(kc), "get", "pods", "-n", "team"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert any(line.split()[0] == "grp-0" and "CrashLoopBackOff" in line for line in lines)
    r = subprocess.run([kubectl, "--kubeconfig", str(kc), "get", "deploy", "web", "-o",
                        "jsonpath={.status.readyReplicas}"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and r.stdout == "3", r.stderr
    r = subprocess.run([kubectl, "--kubeconfig", str(kc), "patch", "lws", "grp", "-n", "team",
                        "-p", '{"spec":{"replicas":1}}'], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "application/strategic-merge-patch+json is not supported" in \
        r.stderr


# ----------------------------------------------------------------------------- official client


def test_kubernetes_client(sim: Simulator, tmp_path: Path) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    kc = tmp_path / "kc.yaml"
    sim.server.write_kubeconfig(kc)
    api_client = kubernetes.config.new_client_from_config(config_file=str(kc))
    core = kubernetes.client.CoreV1Api(api_client)
    pods = core.list_namespaced_pod("team", label_selector="leaderworkerset.sigs.k8s.io/"
                                    "worker-index=0")
    assert sorted(p.metadata.name for p in pods.items) == ["grp-0"]
    with pytest.raises(kubernetes.client.ApiException) as ei:
        core.read_namespaced_pod("nope", "ns1")
    assert ei.value.status == 404
    assert json.loads(ei.value.body)["reason"] == "NotFound"
    apps = kubernetes.client.AppsV1Api(api_client)
    d = apps.read_namespaced_deployment("web", "ns1")
    assert d.status.ready_replicas == 3
    name = next(p.metadata.name for p in core.list_namespaced_pod("ns1", label_selector="app=web")
                .items if getattr(sim.cluster.record_for("ns1", p.metadata.name), "network",
                                  "x") is None)
    r = core.api_client.call_api(
        "/api/v1/namespaces/{namespace}/pods/{name}/proxy/{path}", "POST",
        path_params={"namespace": "ns1", "name": f"{name}:8000", "path": "reset_prefix_cache"},
        query_params=[("reset_external", "true")],
        header_params={"Content-Type": "application/json", "Accept": "*/*"},
        body={}, auth_settings=["BearerToken"], _preload_content=False)
    assert r.status == 200
    assert json.loads(r.data)["query"] == "reset_external=true"
    api_client.close()


def test_watch_streams_changes(sim: Simulator, tmp_path: Path) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    kc = tmp_path / "kc.yaml"
    sim.server.write_kubeconfig(kc)
    api_client = kubernetes.config.new_client_from_config(config_file=str(kc))
    core = kubernetes.client.CoreV1Api(api_client)
    w = kubernetes.watch.Watch()
    seen: list[tuple[str, str]] = []

    def poke() -> None:
        time.sleep(0.3)
        core.create_namespaced_config_map("ns1", {"metadata": {"name": "watched",
                                                               "labels": {"w": "1"}}})
        core.create_namespaced_config_map("ns1", {"metadata": {"name": "ignored"}})
        core.delete_namespaced_config_map("watched", "ns1")

    t = threading.Thread(target=poke)
    t.start()
    for ev in w.stream(core.list_namespaced_config_map, "ns1", label_selector="w=1",
                       timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.name))
        if ev["type"] == "DELETED":
            w.stop()
    t.join()
    assert seen == [("ADDED", "watched"), ("DELETED", "watched")]
    assert sim.server.api_requests().get("watch configmaps", 0) >= 1
    api_client.close()
