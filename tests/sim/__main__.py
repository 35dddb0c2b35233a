"""Command line of the simulated cluster.

``python -m tests.sim serve --manifest FILE [--manifest FILE ...] [--namespace NS]
[--vllm-version V] [--dev-mode on|off|invalid] [--scenario FILE] --kubeconfig OUT
[--state-dir DIR] [--ready-delay SECONDS] [--no-sandbox] [--nodes N]
[--real-servers LIST]``

Prints ``ready`` on stdout once serving (after every pod has started and, for a ready delay of
at most 5 s, become Running), then serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

from .apierrors import ApiError
from .clusterbase import ClusterConfig, PodBackend, default_backend
from .controllers import Cluster
from .rbac import RBACAuthorizer
from .realpeers import parse_real_servers
from .scenario import Scenario, ScenarioError, load_scenario
from .server import SimServer
from .store import Store


def load_manifest_docs(paths: list[str]) -> list[dict[str, Any]]:
    """Every object of the YAML documents in ``paths`` (comments and empty documents skipped;
    a ``kind: List`` expands to its items). Raises ``ValueError`` naming the file on a document
    that is not a mapping with ``kind``."""
    out: list[dict[str, Any]] = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc is None:
                    continue
                if not isinstance(doc, dict) or "kind" not in doc:
                    raise ValueError(f"{p}: a document is not a Kubernetes object")
                if doc["kind"].endswith("List") and isinstance(doc.get("items"), list):
                    out.extend(i for i in doc["items"] if isinstance(i, dict))
                else:
                    out.append(doc)
    return out


def bwrap_works() -> bool:
    """Probe once whether bubblewrap can run here (``bwrap --ro-bind / / true``)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    try:
        r = subprocess.run([exe, "--ro-bind", "/", "/", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


class Simulator:
    """A running simulator: store, cluster (controllers + pods) and API server, built from
    manifests. ``start()`` loads and serves; ``stop()`` shuts everything down and removes a
    temporary state dir."""

    def __init__(self, manifests: list[str], *, namespace: str = "default",
                 vllm_version: str | None = None, dev_mode: str | None = None,
                 scenario: Scenario | None = None, state_dir: str | Path | None = None,
                 ready_delay: float = 0.3, sandbox: bool = False,
                 backend: PodBackend | None = None, use_default_backend: bool = True,
                 nodes: int = 1, real_servers: frozenset[str] | set[str] = frozenset()) -> None:
        self._tmp = state_dir is None
        self.state_dir = Path(state_dir) if state_dir else Path(
            tempfile.mkdtemp(prefix="kvreset-sim-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.scenario = scenario or Scenario()
        self.store = Store()
        if backend is None and use_default_backend:
            backend = default_backend()
        self.cluster = Cluster(self.store, ClusterConfig(
            namespace=namespace, state_dir=self.state_dir, ready_delay=ready_delay,
            dev_mode=dev_mode, default_version=vllm_version, sandbox=sandbox, nodes=nodes,
            real_servers=frozenset(real_servers)),
            self.scenario, backend)
        self.server = SimServer(self.cluster, users=self.scenario.users, namespace=namespace,
                                faults=self.scenario.fault_state,
                                token_ttl=dict(self.scenario.token_ttl))
        self.server.authorizer = RBACAuthorizer(self.store)
        self.server.drop_fields = dict(self.scenario.drop_fields)
        self.manifests = manifests

    def start(self, wait: float = 60.0) -> None:
        """Load the manifests, start serving, and wait (bounded by ``wait`` seconds) for pods
        to start; with a ready delay of at most 5 s, also for them to be Running."""
        self.cluster.load_objects(load_manifest_docs(self.manifests) +
                                  [dict(o) for o in self.scenario.rbac])
        self.server.start()
        if self.cluster.config.ready_delay <= 5:
            self.cluster.wait_started(wait)

    def stop(self) -> None:
        """Stop serving, stop pod runtimes, remove a temporary state dir."""
        self.server.stop()
        self.cluster.stop()
        if self._tmp:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.sim",
                                description="Simulated Kubernetes cluster serving fake vLLM pods.")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="load manifests and serve the API until SIGTERM/SIGINT")
    s.add_argument("--manifest", action="append", required=True, metavar="FILE")
    s.add_argument("--namespace", default="default")
    s.add_argument("--vllm-version", default=None)
    s.add_argument("--dev-mode", choices=["on", "off", "invalid"], default=None)
    s.add_argument("--scenario", default=None, metavar="FILE")
    s.add_argument("--kubeconfig", required=True, metavar="OUT")
    s.add_argument("--state-dir", default=None, metavar="DIR")
    s.add_argument("--ready-delay", type=float, default=0.3, metavar="SECONDS")
    s.add_argument("--no-sandbox", action="store_true")
    s.add_argument("--nodes", type=int, default=1, metavar="N",
                   help="simulated nodes (a DaemonSet runs a pod on each)")
    s.add_argument("--real-servers", default="", metavar="LIST",
                   help="comma-separated peers whose servers pods run for real: vllm, redis, "
                        "lmcache, mooncake, sglang, or all (every installed one)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 after a clean shutdown, 2 on bad input)."""
    args = _parser().parse_args(argv)
    try:
        scenario = load_scenario(args.scenario)
    except (OSError, ScenarioError, yaml.YAMLError) as e:
        print(f"sim: bad scenario: {e}", file=sys.stderr)
        return 2
    try:
        real = parse_real_servers(args.real_servers)
    except ValueError as e:
        print(f"sim: {e}", file=sys.stderr)
        return 2
    if args.nodes < 1 or args.nodes > 200:
        print("sim: --nodes must be between 1 and 200", file=sys.stderr)
        return 2
    sandbox = False
    if not args.no_sandbox:
        sandbox = bwrap_works()
        if not sandbox:
            print("sim: bubblewrap unavailable; container commands will not be run",
                  file=sys.stderr)
    sim = Simulator(args.manifest, namespace=args.namespace, vllm_version=args.vllm_version,
                    dev_mode=args.dev_mode, scenario=scenario, state_dir=args.state_dir,
                    ready_delay=args.ready_delay, sandbox=sandbox, nodes=args.nodes,
                    real_servers=real)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        try:
            sim.start()
        except (OSError, ValueError, ApiError, yaml.YAMLError) as e:
            print(f"sim: cannot load manifests: {e}", file=sys.stderr)
            return 2
        sim.server.write_kubeconfig(args.kubeconfig)
        print("ready", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        sim.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
