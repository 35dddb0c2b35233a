"""RBAC authorisation of the simulated API server (Roles, ClusterRoles and their bindings)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sim.__main__ import Simulator
from tests.sim.rbac import RBACAuthorizer, rule_allows
from tests.sim.scenario import ScenarioError, parse_scenario
from tests.sim.store import Store

RBAC = "rbac.authorization.k8s.io/v1"

MANIFEST = """
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: ns1}
spec: {containers: [{name: c, image: busybox, ports: [{containerPort: 8000}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: p2, namespace: ns2}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kvreset}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list]
- apiGroups: [""]
  resources: [pods/proxy]
  verbs: [create]
- apiGroups: [""]
  resources: [pods/exec]
  verbs: [get, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-kvreset, namespace: ns1}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kvreset}
subjects: [{kind: User, name: bob}]
"""

SCENARIO = {
    "users": [{"name": "alice"}, {"name": "bob"}, {"name": "carol"}],
    "rbac": [
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "everything"},
         "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
        {"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": "carol-all"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "everything"},
         "subjects": [{"kind": "User", "name": "carol"}]},
    ],
}


@pytest.fixture(scope="module")
def rsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    d = tmp_path_factory.mktemp("rsim")
    (d / "m.yaml").write_text(MANIFEST)
    s = Simulator([str(d / "m.yaml")], namespace="ns1", scenario=parse_scenario(SCENARIO),
                  state_dir=d / "state", ready_delay=0.0, use_default_backend=False)
    s.start()
    yield s
    s.stop()


def _call(sim: Simulator, user: str, method: str, path: str, body: Any = None,
          headers: dict[str, str] | None = None) -> tuple[int, Any]:
    token = sim.server.user_tokens[user]
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(sim.server.url + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json",
                                          **(headers or {})})
    ctx = ssl.create_default_context(cadata=sim.server.ca_pem().decode())
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            raw, code = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, code = e.read(), e.code
    try:
        return code, json.loads(raw)
    except ValueError:
        return code, raw


# ----------------------------------------------------------------------------- units


def test_rule_allows() -> None:
    rule = {"apiGroups": [""], "resources": ["pods", "pods/proxy"], "verbs": ["get", "create"]}
    assert rule_allows(rule, "get", "pods", "", "x")
    assert rule_allows(rule, "create", "pods/proxy", "", "x")
    assert not rule_allows(rule, "list", "pods", "", "")
    assert not rule_allows(rule, "get", "pods/exec", "", "x")
    assert not rule_allows(rule, "get", "pods", "apps", "x")
    assert rule_allows({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                       "patch", "deployments/scale", "apps", "d")
    assert rule_allows({"apiGroups": [""], "resources": ["pods/*"], "verbs": ["get"]},
                       "get", "pods/exec", "", "p")
    assert not rule_allows({"apiGroups": [""], "resources": ["pods/*"], "verbs": ["get"]},
                           "get", "pods", "", "p")
    assert rule_allows({"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["update"]},
                       "update", "deployments/scale", "apps", "d")
    named = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"],
             "resourceNames": ["p1"]}
    assert rule_allows(named, "get", "pods", "", "p1")
    assert not rule_allows(named, "get", "pods", "", "p2")
    assert not rule_allows(named, "list", "pods", "", "")


def test_authorizer_bindings() -> None:
    store = Store()
    t = store.types
    cr, crb = t.lookup("rbac.authorization.k8s.io", "v1", "clusterroles"), \
        t.lookup("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
    role, rb = t.lookup("rbac.authorization.k8s.io", "v1", "roles"), \
        t.lookup("rbac.authorization.k8s.io", "v1", "rolebindings")
    assert cr and crb and role and rb
    store.create(role, {"metadata": {"name": "r"}, "rules": [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["patch"]}]}, "a")
    store.create(rb, {"metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "r"},
                      "subjects": [{"kind": "User", "name": "u"}]}, "a")
    store.create(cr, {"metadata": {"name": "viewer"}, "rules": [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]})
    store.create(crb, {"metadata": {"name": "all-view"},
                       "roleRef": {"kind": "ClusterRole", "name": "viewer"},
                       "subjects": [{"kind": "Group", "name": "system:authenticated"}]})
    authz = RBACAuthorizer(store)
    assert authz("u", "patch", "deployments", "apps", "a", "d")
    assert not authz("u", "patch", "deployments", "apps", "b", "d")   # Role is per namespace
    assert not authz("v", "patch", "deployments", "apps", "a", "d")   # another user
    assert authz("v", "list", "namespaces", "", None, "")             # system:authenticated
    # a RoleBinding naming a Role of another namespace grants nothing
    store.create(rb, {"metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "r"},
                      "subjects": [{"kind": "User", "name": "w"}]}, "c")
    assert not authz("w", "patch", "deployments", "apps", "c", "d")


def test_scenario_rbac_key() -> None:
    sc = parse_scenario({"rbac": [{"apiVersion": RBAC, "kind": "Role",
                                   "metadata": {"name": "r"}}]})
    assert sc.rbac[0]["kind"] == "Role"
    with pytest.raises(ScenarioError):
        parse_scenario({"rbac": [{"kind": "Role"}]})
    with pytest.raises(ScenarioError):
        parse_scenario({"rbac": {"kind": "Role"}})


# ----------------------------------------------------------------------------- server


def test_forbidden_messages(rsim: Simulator) -> None:
    code, body = _call(rsim, "alice", "GET", "/api/v1/namespaces/ns1/pods")
    assert code == 403 and body["reason"] == "Forbidden"
    assert body["message"] == ('pods is forbidden: User "alice" cannot list resource "pods" in '
                               'API group "" in the namespace "ns1"')
    assert body["details"] == {"kind": "pods"}
    code, body = _call(rsim, "alice", "POST",
                       "/api/v1/namespaces/ns1/pods/p1/proxy/reset_prefix_cache", {})
    assert code == 403
    assert body["message"] == ('pods "p1" is forbidden: User "alice" cannot create resource '
                               '"pods/proxy" in API group "" in the namespace "ns1"')
    assert body["details"] == {"name": "p1", "kind": "pods"}
    code, body = _call(rsim, "alice", "GET", "/apis/apps/v1/deployments")
    assert code == 403 and body["message"] == (
        'deployments.apps is forbidden: User "alice" cannot list resource "deployments" in API '
        'group "apps" at the cluster scope')


def test_exec_and_portforward_upgrade_verbs(rsim: Simulator) -> None:
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
               "Sec-WebSocket-Protocol": "v4.channel.k8s.io"}
    code, body = _call(rsim, "alice", "GET", "/api/v1/namespaces/ns1/pods/p1/exec?command=true",
                       headers=upgrade)
    assert code == 403 and body["message"] == (
        'pods "p1" is forbidden: User "alice" cannot get resource "pods/exec" in API group "" '
        'in the namespace "ns1"')
    code, body = _call(rsim, "bob", "GET", "/api/v1/namespaces/ns1/pods/p1/portforward"
                       "?ports=8000", headers=upgrade)
    assert code == 403 and body["message"] == (
        'pods "p1" is forbidden: User "bob" cannot get resource "pods/portforward" in API '
        'group "" in the namespace "ns1"')
    # bob may exec in ns1: past RBAC, the pod has no runtime -> not a 403
    code, body = _call(rsim, "bob", "GET", "/api/v1/namespaces/ns1/pods/p1/exec?command=true")
    assert code == 400
    counts = rsim.server.api_requests()
    assert counts["get pods/exec"] >= 2 and counts["get pods/portforward"] >= 1


def test_rolebinding_to_clusterrole_is_namespaced(rsim: Simulator) -> None:
    code, body = _call(rsim, "bob", "GET", "/api/v1/namespaces/ns1/pods")
    assert code == 200 and [p["metadata"]["name"] for p in body["items"]] == ["p1"]
    code, body = _call(rsim, "bob", "GET", "/api/v1/namespaces/ns2/pods")
    assert code == 403
    code, body = _call(rsim, "bob", "GET", "/api/v1/pods")  # all namespaces: cluster scope
    assert code == 403
    # pods/proxy create allowed -> the request gets through to the (absent) runtime
    code, body = _call(rsim, "bob", "POST", "/api/v1/namespaces/ns1/pods/p1:8000/proxy/x", {})
    assert code == 503
    code, body = _call(rsim, "bob", "DELETE", "/api/v1/namespaces/ns1/pods/p1")
    assert code == 403 and "cannot delete resource" in body["message"]


def test_cluster_admin_and_rbac_created_through_api(rsim: Simulator) -> None:
    code, _ = _call(rsim, "carol", "GET", "/api/v1/pods")
    assert code == 200
    code, _ = _call(rsim, "alice", "GET", "/api/v1/namespaces/ns2/pods/p2")
    assert code == 403
    # carol (everything) grants alice read access in ns2 through the API
    code, _ = _call(rsim, "carol", "POST",
                    "/apis/rbac.authorization.k8s.io/v1/namespaces/ns2/roles",
                    {"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "read"},
                     "rules": [{"apiGroups": [""], "resources": ["pods"],
                                "verbs": ["get"], "resourceNames": ["p2"]}]})
    assert code == 201
    code, _ = _call(rsim, "carol", "POST",
                    "/apis/rbac.authorization.k8s.io/v1/namespaces/ns2/rolebindings",
                    {"apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "alice"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": "read"},
                     "subjects": [{"kind": "User", "name": "alice"}]})
    assert code == 201
    code, body = _call(rsim, "alice", "GET", "/api/v1/namespaces/ns2/pods/p2")
    assert code == 200 and body["metadata"]["name"] == "p2"
    code, _ = _call(rsim, "alice", "GET", "/api/v1/namespaces/ns2/pods")
    assert code == 403  # resourceNames never grant a list


def test_admin_bypasses_rbac(rsim: Simulator) -> None:
    code, _ = _call(rsim, "admin", "GET", "/api/v1/pods")
    assert code == 200


def test_users_file_scenario(tmp_path: Path) -> None:
    """The scenario file form (YAML) carries the same keys."""
    import yaml

    from tests.sim.scenario import load_scenario
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(SCENARIO))
    sc = load_scenario(p)
    assert sc.users == ["alice", "bob", "carol"] and len(sc.rbac) == 2
