"""Jobs: their pods run their commands for real, with the service account token mounted, and
RBAC judges that token as ``system:serviceaccount:<ns>:<name>``."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sim.__main__ import Simulator, bwrap_works
from tests.sim.rbac import RBACAuthorizer, service_account_user
from tests.sim.store import Store

# The container asks the API server for the pods of its namespace with its own token, the way
# an in-cluster client does (env, token file, CA file), and prints what it got.
PROBE = r"""
import json, os, ssl, urllib.request, urllib.error
d = "/var/run/secrets/kubernetes.io/serviceaccount"
ns = open(d + "/namespace").read()
url = "https://%s:%s/api/v1/namespaces/%s/pods" % (
    os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"], ns)
req = urllib.request.Request(url, headers={"Authorization": "Bearer " + open(d + "/token").read()})
ctx = ssl.create_default_context(cafile=d + "/ca.crt")
try:
    with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
        print("pods", ns, len(json.load(r)["items"]))
except urllib.error.HTTPError as e:
    print("denied", e.code, json.load(e)["message"])
    raise SystemExit(3)
"""

MANIFEST = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: jobs}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: read-pods, namespace: jobs}
rules: [{apiGroups: [""], resources: [pods], verbs: [list]}]
"""

BINDING = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": "runner-read-pods", "namespace": "jobs"},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-pods"},
           "subjects": [{"kind": "ServiceAccount", "name": "runner"}]}


def _job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "serviceAccountName": "runner", "restartPolicy": "Never",
                "initContainers": [{"name": "hello", "image": "busybox",
                                    "command": ["sh", "-c", "echo init ran"]}],
                "containers": [{"name": "probe", "image": "python:3.12-slim",
                                "command": ["python3", "-c", PROBE]}]}}}}


@pytest.fixture(scope="module")
def jsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    if not bwrap_works():
        pytest.skip("bubblewrap cannot run: batch pods never run their commands")
    d = tmp_path_factory.mktemp("jsim")
    (d / "m.yaml").write_text(MANIFEST)
    s = Simulator([str(d / "m.yaml")], namespace="jobs", state_dir=d / "state", ready_delay=0.0,
                  sandbox=True)
    s.start()
    yield s
    s.stop()


def _api(sim: Simulator, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(sim.server.url + path, data=data, method=method, headers={
        "Authorization": f"Bearer {sim.server.admin_token}", "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cadata=sim.server.ca_pem().decode())
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            raw, code = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, code = e.read(), e.code
    try:
        return code, json.loads(raw)
    except ValueError:
        return code, raw.decode()


def _finished(sim: Simulator, name: str, timeout: float = 60.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        _, job = _api(sim, "GET", f"/apis/batch/v1/namespaces/jobs/jobs/{name}")
        conds = {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}
        if "Complete" in conds or "Failed" in conds:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {name} did not finish: {job.get('status')}")


def _pod_of(sim: Simulator, name: str) -> dict[str, Any]:
    _, pods = _api(sim, "GET", f"/api/v1/namespaces/jobs/pods?labelSelector=job-name%3D{name}")
    assert len(pods["items"]) == 1, pods["items"]
    return pods["items"][0]


def test_service_account_subjects() -> None:
    store = Store()
    rb = store.types.lookup("rbac.authorization.k8s.io", "v1", "rolebindings")
    role = store.types.lookup("rbac.authorization.k8s.io", "v1", "roles")
    assert rb and role
    store.create(role, {"metadata": {"name": "r"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}, "a")
    store.create(rb, {"metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "r"},
                      "subjects": [{"kind": "ServiceAccount", "name": "sa"}]}, "a")
    store.create(rb, {"metadata": {"name": "g"}, "roleRef": {"kind": "Role", "name": "r"},
                      "subjects": [{"kind": "Group", "name": "system:serviceaccounts:b"}]}, "a")
    auth = RBACAuthorizer(store)
    assert auth(service_account_user("a", "sa"), "list", "pods", "", "a", "")
    assert not auth(service_account_user("c", "sa"), "list", "pods", "", "a", "")
    assert auth(service_account_user("b", "any"), "list", "pods", "", "a", "")   # the group
    assert not auth("sa", "list", "pods", "", "a", "")


def test_job_pod_runs_with_its_token_and_role(jsim: Simulator) -> None:
    assert _api(jsim, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/jobs/rolebindings",
                BINDING)[0] == 201
    assert _api(jsim, "POST", "/apis/batch/v1/namespaces/jobs/jobs", _job("ok"))[0] == 201
    job = _finished(jsim, "ok")
    assert job["status"]["succeeded"] == 1, job["status"]
    pod = _pod_of(jsim, "ok")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "ok"
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/var/run/secrets/kubernetes.io/serviceaccount"]
    name = pod["metadata"]["name"]
    code, log = _api(jsim, "GET", f"/api/v1/namespaces/jobs/pods/{name}/log")
    assert code == 200 and log.strip() == "pods jobs 1", log
    assert _api(jsim, "GET", f"/api/v1/namespaces/jobs/pods/{name}/log?container=hello")[1] == "init ran\n"
    assert _api(jsim, "DELETE", "/apis/rbac.authorization.k8s.io/v1/namespaces/jobs/rolebindings/"
                "runner-read-pods")[0] == 200


def test_job_without_binding_fails_with_the_forbidden_message(jsim: Simulator) -> None:
    _api(jsim, "DELETE", "/apis/rbac.authorization.k8s.io/v1/namespaces/jobs/rolebindings/runner-read-pods")
    assert _api(jsim, "POST", "/apis/batch/v1/namespaces/jobs/jobs", _job("denied"))[0] == 201
    job = _finished(jsim, "denied")
    assert job["status"]["failed"] == 1
    assert [c["reason"] for c in job["status"]["conditions"] if c["type"] == "Failed"] == ["BackoffLimitExceeded"]
    pod = _pod_of(jsim, "denied")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    log = _api(jsim, "GET", f"/api/v1/namespaces/jobs/pods/{pod['metadata']['name']}/log")[1]
    assert log.strip() == ('denied 403 pods is forbidden: User "system:serviceaccount:jobs:runner" '
                           'cannot list resource "pods" in API group "" in the namespace "jobs"'), log


def test_an_unknown_service_account_gives_no_token(jsim: Simulator) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nosa"},
           "spec": {"serviceAccountName": "ghost", "containers": [{"name": "c", "image": "busybox"}]}}
    code, created = _api(jsim, "POST", "/api/v1/namespaces/jobs/pods", pod)
    assert code == 201
    assert "volumeMounts" not in created["spec"]["containers"][0] and "volumes" not in created["spec"]


def test_log_of_a_pod_with_two_containers_needs_a_name(jsim: Simulator) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "two"},
           "spec": {"containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}]}}
    assert _api(jsim, "POST", "/api/v1/namespaces/jobs/pods", pod)[0] == 201
    code, status = _api(jsim, "GET", "/api/v1/namespaces/jobs/pods/two/log")
    assert code == 400 and "a container name must be specified for pod two" in status["message"]
