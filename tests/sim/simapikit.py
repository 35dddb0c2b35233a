"""What the tests of the simulator's API server share (tests/sim/test_server.py and its neighbours):
a stand-in pod runtime, the manifest and scenario they load, a small HTTPS client."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.beside import llm_d_fixture
from tests.sim.__main__ import Simulator
from tests.sim.clusterbase import PodBackend

REPO = Path(__file__).resolve().parents[2]


ALPHA = "[bcdfghjklmnpqrstvwxz2456789]"


def fixture(prefix: str) -> Path:
    """The llm-d fixture starting with ``prefix``; skips when the fixtures (kept beside the
    repository, ``tests/beside.py``) are absent."""
    return llm_d_fixture(prefix)


class StandInContext:
    """Test-only PodContext stand-in: keeps every field it is given."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


class StandInRuntime:
    """Test-only pod runtime: port 8000 answers an echo, other ports have nothing listening;
    ``crash`` in overrides makes it crash-loop."""

    instances: list[StandInRuntime] = []

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.calls: list[tuple[int, str, str, str, bytes]] = []
        self.stopped = False
        StandInRuntime.instances.append(self)

    def start(self) -> None:
        pass

    @property
    def crashed(self) -> bool:
        return bool(self.ctx.overrides.get("crash"))

    def request(self, port: int, method: str, path: str, query: str, headers: dict[str, str],
                body: bytes, *, scheme: str = "http", transport: str = "proxy"
                ) -> tuple[int, list[tuple[str, str]], bytes] | None:
        self.calls.append((port, method, path, query, body))
        if port != 8000 or self.crashed:
            return None
        if path == "/missing":
            return 404, [("content-type", "application/json")], b'{"detail":"Not Found"}'
        out = json.dumps({"method": method, "path": path, "query": query, "scheme": scheme,
                          "body": body.decode()}).encode()
        return 200, [("content-type", "application/json"), ("x-pod", self.ctx.name)], out

    def state(self) -> dict[str, Any]:
        return {"env": self.ctx.env_by_container, "ports": {"8000": {"calls": len(self.calls)}},
                "fs_tier_files": [], "shm_files": [], "overrides": self.ctx.overrides}

    def stop(self) -> None:
        self.stopped = True


STANDIN = PodBackend(StandInContext, StandInRuntime)


MANIFEST = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web, tier: front}}
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.26.0
        command: [vllm, serve, m]
        ports: [{containerPort: 8000, name: http}]
        env:
        - {name: A, value: "1"}
        - {name: B, value: "x-$(A)-$$(A)"}
        - name: POD
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        - name: APP
          valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}
        - name: TOK
          valueFrom: {secretKeyRef: {name: sec, key: token}}
        - name: MISSING
          valueFrom: {secretKeyRef: {name: nosuch, key: token}}
        - name: CM
          valueFrom: {configMapKeyRef: {name: cfg, key: k}}
        envFrom:
        - configMapRef: {name: cfg}
          prefix: CFG_
        volumeMounts:
        - {name: data, mountPath: /data}
        - {name: shm, mountPath: /dev/shm}
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: shared-claim}
      - name: shm
        emptyDir: {medium: Memory}
      - name: scratch
        emptyDir: {}
      - name: cfgvol
        configMap: {name: cfg}
---
apiVersion: v1
kind: Secret
metadata: {name: sec}
data: {token: c2VjcmV0}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {k: v, other: o}
---
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: grp, namespace: team}
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 3
    workerTemplate:
      metadata: {labels: {role: decode}}
      spec:
        containers:
        - name: vllm
          image: ghcr.io/llm-d/llm-d-cuda:v0.9.0
          command: [/bin/bash, -c, "exec vllm serve m"]
          ports: [{containerPort: 8000}]
---
apiVersion: v1
kind: Pod
metadata: {name: bare, labels: {app: bare}}
spec:
  containers:
  - {name: c, image: busybox, ports: [{containerPort: 9000, name: metrics}]}
---
apiVersion: v1
kind: Pod
metadata: {name: lonely}
spec:
  containers:
  - {name: c, image: busybox, ports: [{containerPort: 8000}]}
---
apiVersion: example.com/v1alpha1
kind: Gadget
metadata: {name: g1}
spec: {size: 1}
"""


SCENARIO = {
    "replicas": {"deployment/web": 3},
    "pods": [
        {"match": {"owner": "deployment/web", "ordinal": 1}, "busy": 2, "network": "unreachable"},
        {"match": {"owner": "leaderworkerset/grp", "ordinal": 0}, "crash": True},
        {"vllm_version": "0.25.0"},
        {"match": {"name": "lonely"}, "network": "unreachable"},
    ],
    "users": [{"name": "alice"}],
    "rbac": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "pod-reader", "namespace": "ns1"},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "alice-reads", "namespace": "ns1"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "pod-reader"},
         "subjects": [{"kind": "User", "name": "alice"}]},
    ],
}


class Client:
    """Tiny urllib client for the simulator."""

    def __init__(self, sim: Simulator, token: str | None = None) -> None:
        self.base = sim.server.url
        self.token = sim.server.admin_token if token is None else token
        self.ctx = ssl.create_default_context(cadata=sim.server.ca_pem().decode())

    def call(self, method: str, path: str, body: Any = None, ctype: str = "application/json",
             accept: str = "application/json") -> tuple[int, Any, dict[str, str]]:
        data = None if body is None else (body if isinstance(body, bytes)
                                          else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", accept)
        if data is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
                raw, code, headers = r.read(), r.status, dict(r.headers)
        except urllib.error.HTTPError as e:
            raw, code, headers = e.read(), e.code, dict(e.headers)
        try:
            return code, json.loads(raw), headers
        except ValueError:
            return code, raw, headers
