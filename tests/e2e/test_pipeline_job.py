"""deploy/kvreset-job.yaml, run as a pipeline runs it: the Job's pod fetches the release archive,
runs the built zipapp in-cluster with its service account's token, bound to the shipped Role and
nothing more, and its log holds the JSON rows. Without the RoleBinding the Job fails and its log
holds one line naming the missing permission.

The archive is the one ``make krew`` packs (krew/build.py), served from 127.0.0.1 in place of the
release URL; everything else in the manifest is applied as written (NAMESPACE replaced).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml

from tests.simctl import DEMO_MANIFEST, ROOT, SimCluster, zipapp_path

NS = "llm-d-demo"
JOB_FILE = ROOT / "deploy" / "kvreset-job.yaml"
ROLE_FILE = ROOT / "rbac" / "kubectl-kvreset-role.yaml"
PATHS = {
    "ServiceAccount": f"/api/v1/namespaces/{NS}/serviceaccounts",
    "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles",
    "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings",
    "Job": f"/apis/batch/v1/namespaces/{NS}/jobs",
}


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``(url, sha256)`` of the release archive of this build, served over HTTP on 127.0.0.1."""
    d = tmp_path_factory.mktemp("release")
    archive = d / "kubectl-kvreset.tar.gz"
    subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "archive", "--zipapp", str(zipapp_path()),
                    "--license", str(ROOT / "LICENSE"), "--completion", str(ROOT / "krew" / "kubectl_complete-kvreset"),
                    "--output", str(archive)], check=True, capture_output=True)
    import hashlib

    sha = hashlib.sha256(archive.read_bytes()).hexdigest()

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(d)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/{archive.name}", sha
    httpd.shutdown()
    httpd.server_close()


def manifest(url: str, sha: str) -> list[dict[str, Any]]:
    """The Job manifest for NS, its init container pointed at ``url``."""
    docs = [d for d in yaml.safe_load_all(JOB_FILE.read_text().replace("NAMESPACE", NS)) if d]
    job = next(d for d in docs if d["kind"] == "Job")
    for e in job["spec"]["template"]["spec"]["initContainers"][0]["env"]:
        e["value"] = {"KVRESET_URL": url, "KVRESET_SHA256": sha}[e["name"]]
    return docs


def finished(cluster: SimCluster, name: str, timeout: float = 120.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while True:
        job = cluster.api(f"{PATHS['Job']}/{name}")
        types = {c["type"] for c in (job.get("status") or {}).get("conditions") or [] if c["status"] == "True"}
        if types & {"Complete", "Failed"}:
            return job  # type: ignore[no-any-return]
        if time.monotonic() > end:
            raise AssertionError(f"job {name} did not finish: {job.get('status')}")
        time.sleep(0.3)


def kubectl_logs(cluster: SimCluster, *args: str) -> str:
    done = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "logs", "-n", NS, *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def apply(cluster: SimCluster, docs: list[dict[str, Any]], skip: str = "") -> None:
    for d in docs:
        if d["kind"] != skip:
            cluster.api(PATHS[d["kind"]], "POST", d)


def test_the_manifest_binds_the_shipped_role() -> None:
    docs = [d for d in yaml.safe_load_all(JOB_FILE.read_text()) if d]
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "Job"]
    shipped = next(d for d in yaml.safe_load_all(ROLE_FILE.read_text()) if d and d["kind"] == "Role")
    assert docs[1] == shipped
    sa, binding, job = docs[0], docs[2], docs[3]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": shipped["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "NAMESPACE"}]
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod["containers"][0]["args"] == ["clear", "-n", "NAMESPACE", "--all", "--yes", "-o", "json"]


def test_job_clears_every_pod_with_the_shipped_role(sim, release: tuple[str, str]) -> None:
    cluster = sim([DEMO_MANIFEST], namespace=NS, dev_mode="on")
    vllm = sorted(p["name"] for p in cluster.live_pods())
    apply(cluster, manifest(*release))
    job = finished(cluster, "kvreset-clear")
    log = kubectl_logs(cluster, "job/kvreset-clear", "-c", "clear")
    assert job["status"].get("succeeded") == 1, (job["status"], log)
    # kubectl logs shows stdout and stderr merged: the one note on stderr ("acting on context
    # ...") comes before the JSON document, which starts at the line "["
    lines = log.splitlines()
    assert lines[0].startswith('acting on context "(in-cluster)"'), log
    rows = json.loads("\n".join(lines[lines.index("["):]))
    assert sorted({r["pod"] for r in rows}) == vllm, log
    assert {r["kind"] for r in rows} == {"CacheReset"}
    assert {r["result"] for r in rows} == {"emptied"}, log
    # the resets reached every port, as the service account (the Job's pod is not a vLLM pod)
    for p in cluster.live_pods():
        if p["name"] in vllm:
            assert all(port["reset_calls"] == 1 for port in p["ports"].values() if port["role"] == "vllm"), p["ports"]
    assert "fetched http://127.0.0.1:" in kubectl_logs(cluster, "job/kvreset-clear", "-c", "fetch")
    requests = cluster.state()["api_requests"]
    assert requests.get("create pods/proxy", 0) >= len(vllm)


def test_job_without_the_binding_names_the_missing_permission(sim, release: tuple[str, str]) -> None:
    cluster = sim([DEMO_MANIFEST], namespace=NS, dev_mode="on")
    apply(cluster, manifest(*release), skip="RoleBinding")
    job = finished(cluster, "kvreset-clear")
    assert job["status"].get("failed") == 1
    log = kubectl_logs(cluster, "job/kvreset-clear", "-c", "clear")
    lines = [line for line in log.splitlines() if line.strip()]
    assert len(lines) == 1, log
    assert lines[0].startswith('error: pods is forbidden: User "system:serviceaccount:llm-d-demo:kubectl-kvreset" '
                               'cannot list resource "pods"'), log
    assert "not permitted: list on pods in namespace llm-d-demo" in lines[0], log
    pods = cluster.api(f"/api/v1/namespaces/{NS}/pods?labelSelector=job-name%3Dkvreset-clear")["items"]
    assert [p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] for p in pods] == [1]
    for p in cluster.live_pods():
        assert not any(port.get("reset_calls") for port in (p.get("ports") or {}).values())
