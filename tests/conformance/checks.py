"""Conformance checks: real ``kubectl`` against the simulated cluster, compared with what a real
cluster gives for the same manifests and with what ``kubectl-kvreset`` reads.

Every check is a plain function that raises ``AssertionError`` (its message holds kubectl's
output) when kubectl does not get what a real API server would give, or when kubectl and the
plugin disagree about the same objects. The positive tests run them against a faithful
simulator; the negative tests run the same functions against a simulator started with the
scenario fault ``drop_fields`` and expect them to fail.

The commands are those of the documented manual procedure (README "Performance") and of
``seed-procedure.sh`` (kept beside the repository, ``tests/beside.py``): ``get -o custom-columns``,
``get -o jsonpath`` with label and field selectors, ``patch --type=json``, ``rollout restart``, ``rollout status``,
``exec -- printenv`` and ``exec -- curl -X POST localhost:PORT/reset_prefix_cache?...``. How
kubectl reads a Deployment's rollout (``status.observedGeneration``, ``updatedReplicas``,
``availableReplicas``) is kubectl's ``k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.beside import SEED_PROCEDURE
from tests.simctl import SimCluster

# kubectl's reset call of the manual procedure (vLLM's dev route,
# vllm/entrypoints/serve/dev/cache/api_router.py)
RESET_QUERY = "reset_running_requests=true&reset_external=true"
# Deployment pod names: <deployment>-<10-char template hash>-<5 chars> (kube-controller-manager's
# ReplicaSet naming; the alphabet is k8s.io/apimachinery/pkg/util/rand's)
POD_NAME = r"-[bcdfghjklmnpqrstvwxz2456789]{1,10}-[bcdfghjklmnpqrstvwxz2456789]{5}"


def kubectl_path() -> str | None:
    """The ``kubectl`` on PATH, or None."""
    return shutil.which("kubectl")


@dataclass
class Kubectl:
    """Real kubectl bound to one simulated cluster: ``kubeconfig`` (the simulator's),
    ``namespace`` (passed as ``-n``) and a private discovery ``cache_dir``."""

    exe: str
    kubeconfig: Path
    namespace: str
    cache_dir: Path

    def env(self) -> dict[str, str]:
        """Environment for kubectl and the seed procedure: ``KUBECONFIG`` set, in-cluster
        config hidden."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["KUBECACHEDIR"] = str(self.cache_dir)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        return env

    def run(self, *args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
        """``kubectl -n NS ARGS...``; never raises on a non-zero exit (checks assert on it).
        Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        return subprocess.run([self.exe, "-n", self.namespace, *args], env=self.env(),
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def ok(self, *args: str, timeout: float = 90.0) -> str:
        """Run and return stdout; ``AssertionError`` with kubectl's output when it fails."""
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, (f"kubectl {' '.join(args)} exited {done.returncode}\n"
                                      f"stdout: {done.stdout}\nstderr: {done.stderr}")
        return done.stdout


@dataclass
class Ground:
    """One simulated cluster seen by both clients: the cluster, kubectl bound to it, the
    manifests it was loaded from (parsed: what a real cluster would hold) and the namespace."""

    cluster: SimCluster
    kubectl: Kubectl
    manifests: list[Path]
    namespace: str

    def workloads(self) -> dict[str, dict[str, Any]]:
        """Deployments and LeaderWorkerSets of the manifests, keyed ``kind/name`` (kind
        lower-case, as kubectl and the plugin write owners)."""
        out: dict[str, dict[str, Any]] = {}
        for path in self.manifests:
            for doc in yaml.safe_load_all(path.read_text()):
                if isinstance(doc, dict) and doc.get("kind") in ("Deployment", "LeaderWorkerSet"):
                    out[f"{doc['kind'].lower()}/{doc['metadata']['name']}"] = doc
        return out

    def detect(self, *extra: str) -> list[dict[str, Any]]:
        """The plugin's ``detect -o json`` rows for the namespace (exit 0 asserted)."""
        code, rows, err = self.cluster.run_json("detect", "-n", self.namespace, *extra)
        assert code == 0, f"kubectl-kvreset detect exited {code}: {err}"
        return rows

    def pod_state(self, pod: str) -> dict[str, Any]:
        """The simulator's record of live pod ``pod`` (``/sim/v1/state``)."""
        for p in self.cluster.live_pods():
            if p["name"] == pod and p["namespace"] == self.namespace:
                return p
        raise AssertionError(f"pod {pod} is not live in the simulator")


def _names(jsonpath_out: str) -> list[str]:
    return jsonpath_out.split()


def running_pods(g: Ground, selector: str) -> list[str]:
    """Names kubectl lists for ``get pods -l SELECTOR --field-selector=status.phase=Running
    -o jsonpath={.items[*].metadata.name}`` (the seed procedure's own listing)."""
    return _names(g.kubectl.ok("get", "pods", "-l", selector,
                               "--field-selector=status.phase=Running",
                               "-o", "jsonpath={.items[*].metadata.name}"))


# ----------------------------------------------------------------------------- read checks


def check_deployments_custom_columns(g: Ground, selector: str) -> None:
    """``get deployments -l SELECTOR -o custom-columns=...``: one row per Deployment of the
    manifests with its replicas, all ready, its role label; and the plugin's ``detect`` finds
    exactly that many pods per Deployment."""
    out = g.kubectl.ok("get", "deployments", "-l", selector, "-o",
                       "custom-columns=NAME:.metadata.name,REPLICAS:.spec.replicas,"
                       "READY:.status.readyReplicas,ROLE:.metadata.labels.llm-d\\.ai/role")
    lines = [ln.split() for ln in out.strip().splitlines()]
    assert lines and lines[0] == ["NAME", "REPLICAS", "READY", "ROLE"], out
    got = {row[0]: tuple(row[1:]) for row in lines[1:]}
    want = {d["metadata"]["name"]: (str(d["spec"]["replicas"]), str(d["spec"]["replicas"]),
                                    d["metadata"]["labels"].get("llm-d.ai/role", "<none>"))
            for key, d in g.workloads().items() if key.startswith("deployment/")}
    assert got == want, out
    per_owner: dict[str, int] = {}
    for row in g.detect():
        per_owner[row["owner"]] = per_owner.get(row["owner"], 0) + 1
    assert per_owner == {f"deployment/{n}": int(v[0]) for n, v in want.items()}, per_owner


def check_running_pods_jsonpath(g: Ground, selector: str, owner: str) -> list[str]:
    """``get pods -l SELECTOR --field-selector=status.phase=Running -o jsonpath=...`` lists the
    owner's pods (named as its ReplicaSet names them, as many as its replicas), the same pods
    the plugin's ``detect`` reports for that owner and the simulator runs. Returns them."""
    names = running_pods(g, selector)
    dep = g.workloads()[owner]
    assert len(names) == dep["spec"]["replicas"], names
    base = owner.split("/", 1)[1]
    assert all(re.fullmatch(re.escape(base) + POD_NAME, n) for n in names), names
    plugin = {r["pod"] for r in g.detect() if r["owner"] == owner}
    assert set(names) == plugin, (names, plugin)
    live = {p["name"] for p in g.cluster.live_pods() if p["namespace"] == g.namespace
            and (p.get("owner") or {}).get("name") == base and p.get("running")}
    assert set(names) == live, (names, live)
    return names


def check_selector_jsonpath(g: Ground, owner: str) -> None:
    """``get deployment NAME -o jsonpath='{.spec.selector.matchLabels}'`` prints the manifest's
    matchLabels as JSON, and the pods kubectl lists with that selector are the ones the plugin
    attributes to the Deployment."""
    name = owner.split("/", 1)[1]
    out = g.kubectl.ok("get", "deployment", name, "-o", "jsonpath={.spec.selector.matchLabels}")
    # kubectl prints nothing for a missing key (--allow-missing-template-keys defaults to true)
    assert out.strip(), f"kubectl printed no .spec.selector.matchLabels for deployment {name}"
    labels = json.loads(out)
    assert labels == g.workloads()[owner]["spec"]["selector"]["matchLabels"], out
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    listed = _names(g.kubectl.ok("get", "pods", "-l", selector,
                                 "-o", "jsonpath={.items[*].metadata.name}"))
    assert set(listed) == {r["pod"] for r in g.detect() if r["owner"] == owner}, listed


def check_exec_printenv(g: Ground, pod: str, container: str) -> dict[str, str]:
    """``exec POD -c C -- printenv``: the container's resolved env as the kubelet gives it
    (HOSTNAME = pod name, ``fieldRef status.podIP`` = the IP ``get pod`` shows), agreeing with
    the simulator's record and with the dev-mode value the plugin read. Returns the env."""
    out = g.kubectl.ok("exec", pod, "-c", container, "--", "printenv")
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert env.get("HOSTNAME") == pod, env
    state = g.pod_state(pod)
    assert state["vllm_container"] == container, state["vllm_container"]
    for k, v in state["env"].items():
        assert env.get(k) == v, (k, v, env.get(k))
    ip = g.kubectl.ok("get", "pod", pod, "-o", "jsonpath={.status.podIP}")
    if "VLLM_NIXL_SIDE_CHANNEL_HOST" in env:
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == ip, (env, ip)
    row = next(r for r in g.detect() if r["pod"] == pod)
    assert row["container"] == container
    assert env.get("VLLM_SERVER_DEV_MODE") == row["dev_mode_value"], (env, row)
    return env


def check_exec_curl_reset(g: Ground, pod: str, port: int, vllm_port: int) -> None:
    """``exec POD -- curl -X POST localhost:PORT/reset_prefix_cache?...`` answers 200 (an empty
    body before vLLM 0.26) and the simulator records one reset over exec
    on ``vllm_port`` with kubectl's query: ``PORT`` is one the plugin reports for the pod
    (``ports``, or ``front_ports`` for the llm-d routing sidecar, which passes the route on)."""
    row = next(r for r in g.detect() if r["pod"] == pod)
    assert vllm_port in row["ports"], row
    assert port == vllm_port or port in row.get("front_ports", []), row
    before = g.pod_state(pod)["ports"][str(vllm_port)]["reset_calls"]
    out = g.kubectl.ok("exec", pod, "-c", row["container"], "--", "curl", "-s", "-w",
                       "\n%{http_code}", "-X", "POST",
                       f"http://localhost:{port}/reset_prefix_cache?{RESET_QUERY}")
    body, _, code = out.rpartition("\n")
    assert code == "200", out
    if tuple(int(x) for x in row["version"].split(".")[:2]) < (0, 26):
        assert body == "", out
    after = g.pod_state(pod)["ports"][str(vllm_port)]
    assert after["reset_calls"] == before + 1, after
    assert after["last_reset_query"] == RESET_QUERY and after["last_transport"] == "exec", after


def check_seed_procedure(g: Ground, selector: str, port: int, vllm_port: int) -> list[str]:
    """``seed-procedure.sh NS SELECTOR PORT`` exits 0 with ``<pod> OK`` for every running pod
    kubectl lists, which are the pods the plugin detects for the selector, and each got one
    reset over exec on ``vllm_port``. Returns the pods."""
    assert SEED_PROCEDURE.is_file(), f"{SEED_PROCEDURE} is absent"
    pods = running_pods(g, selector)
    plugin = {r["pod"] for r in g.detect("-l", selector)}
    assert set(pods) == plugin, (pods, plugin)
    before = {p: g.pod_state(p)["ports"][str(vllm_port)]["reset_calls"] for p in pods}
    done = subprocess.run(["bash", str(SEED_PROCEDURE), g.namespace, selector, str(port)],
                          env=g.kubectl.env(), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert sorted(done.stdout.split("\n")[:-1]) == sorted(f"{p} OK" for p in pods), done.stdout
    for p in pods:
        st = g.pod_state(p)["ports"][str(vllm_port)]
        assert st["reset_calls"] == before[p] + 1 and st["last_transport"] == "exec", (p, st)
        assert st["last_reset_query"] == RESET_QUERY, (p, st)
    return pods


# ----------------------------------------------------------------------------- write checks


def check_patch_env_rollout(g: Ground, owner: str, timeout: str = "60s") -> None:
    """``patch deployment --type=json`` appends an env entry to the first container;
    ``rollout status --timeout`` then reports the rollout done; the replacement pods (new names,
    as many as the replicas) carry the entry in ``exec printenv`` and are the pods the plugin
    detects; the old ones are gone."""
    name = owner.split("/", 1)[1]
    old = {r["pod"] for r in g.detect() if r["owner"] == owner}
    patch = [{"op": "add", "path": "/spec/template/spec/containers/0/env/-",
              "value": {"name": "KVRESET_CONFORMANCE", "value": "patched"}}]
    out = g.kubectl.ok("patch", "deployment", name, "--type=json", "-p", json.dumps(patch))
    assert out.strip() == f"deployment.apps/{name} patched", out
    check_rollout_status(g, owner, timeout)
    env = json.loads(g.kubectl.ok("get", "deployment", name, "-o",
                                  "jsonpath={.spec.template.spec.containers[0].env}"))
    assert env[-1] == {"name": "KVRESET_CONFORMANCE", "value": "patched"}, env
    new = {r["pod"] for r in g.detect() if r["owner"] == owner}
    assert new and not (new & old), (old, new)
    assert len(new) == g.workloads()[owner]["spec"]["replicas"], new
    container = g.workloads()[owner]["spec"]["template"]["spec"]["containers"][0]["name"]
    pod = sorted(new)[0]
    printed = g.kubectl.ok("exec", pod, "-c", container, "--", "printenv", "KVRESET_CONFORMANCE")
    assert printed.strip() == "patched", printed


def check_rollout_status(g: Ground, owner: str, timeout: str = "60s") -> None:
    """``rollout status deployment/NAME --timeout=T`` exits 0 saying the rollout is done."""
    name = owner.split("/", 1)[1]
    out = g.kubectl.ok("rollout", "status", f"deployment/{name}", f"--timeout={timeout}")
    assert f'deployment "{name}" successfully rolled out' in out, out


def check_rollout_restart(g: Ground, owner: str, timeout: str = "60s") -> None:
    """``rollout restart`` stamps ``kubectl.kubernetes.io/restartedAt`` on the template, the
    rollout completes, and the replacement pods (new names, detected by the plugin) start with
    empty caches, as a freshly started vLLM does."""
    name = owner.split("/", 1)[1]
    old = {r["pod"] for r in g.detect() if r["owner"] == owner}
    out = g.kubectl.ok("rollout", "restart", f"deployment/{name}")
    assert out.strip() == f"deployment.apps/{name} restarted", out
    stamp = g.kubectl.ok("get", "deployment", name, "-o", "jsonpath={.spec.template.metadata."
                         "annotations.kubectl\\.kubernetes\\.io/restartedAt}")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)", stamp), stamp
    check_rollout_status(g, owner, timeout)
    rows = [r for r in g.detect() if r["owner"] == owner]
    new = {r["pod"] for r in rows}
    assert new and not (new & old), (old, new)
    for r in rows:
        for port in r["ports"]:
            assert g.pod_state(r["pod"])["ports"][str(port)]["prefix_cache_blocks"] == 0, r["pod"]
