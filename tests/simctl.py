"""Start and drive the simulated cluster from tests, the demo and benchmarks.

``SimCluster`` runs ``python -m tests.sim serve`` as a subprocess, waits for its ``ready``
line, reads ``/sim/v1/state`` with the admin token from the kubeconfig it wrote, and runs the
built CLI against it as a user would (a subprocess with ``KUBECONFIG`` set).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEMO_MANIFEST = ROOT / "tests" / "manifests" / "demo-pd.yaml"


def zipapp_path() -> Path:
    """The built CLI: ``$KVRESET_BIN`` or ``dist/kubectl-kvreset`` (built by ``make build``)."""
    return Path(os.environ.get("KVRESET_BIN", ROOT / "dist" / "kubectl-kvreset"))


def sandbox_available() -> bool:
    """True when bubblewrap can create the namespaces the simulator's sandbox needs."""
    if not shutil.which("bwrap"):
        return False
    try:
        return subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-all", "true"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class SimCluster:
    """A running simulator. Use as a context manager; ``stop()`` ends it.

    ``real_servers`` (``vllm``, ``redis``, ``lmcache``, ``mooncake``, ``all``) makes the pods
    that run those servers run them for real (tests/sim/realservers.py; installed by
    ``make peers``); ``nodes`` sets the simulated node count (DaemonSets run a pod on each)."""

    def __init__(self, manifests: Sequence[Path | str], *, namespace: str = "default",
                 vllm_version: str | None = None, dev_mode: str | None = None,
                 scenario: dict[str, Any] | None = None, ready_delay: float | None = None,
                 extra_args: Sequence[str] = (), real_servers: Sequence[str] = (),
                 nodes: int | None = None) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="kvreset-sim-"))
        self.kubeconfig = self.tmp / "kubeconfig"
        self.namespace = namespace
        cmd = [sys.executable, "-m", "tests.sim", "serve", "--namespace", namespace,
               "--kubeconfig", str(self.kubeconfig), "--state-dir", str(self.tmp / "state")]
        for m in manifests:
            cmd += ["--manifest", str(m)]
        if vllm_version:
            cmd += ["--vllm-version", vllm_version]
        if dev_mode:
            cmd += ["--dev-mode", dev_mode]
        if scenario is not None:
            path = self.tmp / "scenario.yaml"
            path.write_text(yaml.safe_dump(scenario))
            cmd += ["--scenario", str(path)]
        if ready_delay is not None:
            cmd += ["--ready-delay", str(ready_delay)]
        if real_servers:
            cmd += ["--real-servers", ",".join(real_servers)]
        if nodes is not None:
            cmd += ["--nodes", str(nodes)]
        cmd += list(extra_args)
        self.log = open(self.tmp / "sim.log", "w+")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     stdin=subprocess.DEVNULL)
        self._wait_ready()
        cfg = yaml.safe_load(self.kubeconfig.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        self.server = cluster["server"]
        self.ca = self.tmp / "ca.crt"
        self.ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        self.admin_token = next(u["user"]["token"] for u in cfg["users"] if u["name"] == "admin")

    def _wait_ready(self, timeout: float = 60.0) -> None:
        assert self.proc.stdout is not None
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if not box or box[0].strip() != "ready":
            self.log.flush()
            log = (self.tmp / "sim.log").read_text()[-3000:]
            self.stop()
            raise RuntimeError(f"simulator did not start: {box!r}\n{log}")

    def api(self, path: str, method: str = "GET", body: Any = None, token: str | None = None,
            content_type: str = "application/json") -> Any:
        """Call the simulator's API with the admin token; returns decoded JSON. A PATCH
        names its kind with ``content_type`` (``application/merge-patch+json``)."""
        ctx = ssl.create_default_context(cafile=str(self.ca))
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token or self.admin_token}",
                                              "Content-Type": content_type})
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def state(self) -> dict[str, Any]:
        """``GET /sim/v1/state``."""
        return self.api("/sim/v1/state")  # type: ignore[no-any-return]

    def live_pods(self) -> list[dict[str, Any]]:
        """Pods of the state that are not deleted."""
        return [p for p in self.state()["pods"] if not p.get("deleted")]

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until every live pod that is not crash-looping, unschedulable or held in
        ContainerCreating (a scenario's) is ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pods = self.live_pods()
            if pods and all(p.get("ready") or p.get("crashed") or p.get("held") for p in pods):
                return
            time.sleep(0.1)
        raise TimeoutError("pods did not become ready")

    def env(self) -> dict[str, str]:
        """Environment for running the CLI against this cluster."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        return env

    def run(self, *args: str, timeout: float = 120.0, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the built CLI with ``args`` against this cluster; stdin is not a terminal."""
        done = subprocess.run([str(zipapp_path()), *args], env=self.env(), capture_output=True, text=True,
                              timeout=timeout, input=input if input is not None else "")
        from tests.invariants import record

        record(args, done.returncode, done.stdout, done.stderr)
        return done

    def run_json(self, *args: str, timeout: float = 120.0) -> tuple[int, list[dict[str, Any]], str]:
        """Run the CLI with ``-o json``: ``(exit code, rows, stderr)``."""
        done = self.run(*args, "-o", "json", timeout=timeout)
        rows = json.loads(done.stdout) if done.stdout.strip() else []
        return done.returncode, rows, done.stderr

    def stop(self) -> None:
        """Stop the simulator (its real servers stop with it: up to a few seconds each, workers
        before stores) and remove its files."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> SimCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
