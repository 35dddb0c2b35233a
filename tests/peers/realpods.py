"""What the peers tests that run real vLLM pods share: a simulated cluster started once per
module from a manifest (``--real-servers``), requests through the API server (pod proxy) or
straight to a pod's address, and the real server's own Prometheus counters.

:func:`start_cluster` checks the peers, bubblewrap and the built CLI first (skipping, or failing
under ``KVRESET_REQUIRE_PEERS=1`` / ``KVRESET_REQUIRE_SANDBOX=1``), and fails with the tail of
every real server's log when the pods do not become ready. :func:`stop_cluster` stops it and
checks that its real servers left nothing: no process of their sandboxes, no new entry in the
machine's /dev/shm (vLLM's ``psm_*`` segments, LMCache's ``lmcache_kv_*``). Their sockets and
temporary files live in each sandbox's own /tmp, which goes with it.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import tests.peers as peers
from tests.simctl import SimCluster, sandbox_available, zipapp_path

__all__ = ["call", "counters", "direct", "pod", "pod_ip", "proxy", "server_logs", "start_cluster", "stop_cluster"]

SHM = Path("/dev/shm")


def server_logs(sim: SimCluster, tail: int = 2000) -> str:
    """The last ``tail`` characters of each real server's log, one block per server with its
    pod's readiness and notes (for a failure message)."""
    out = []
    for p in sim.live_pods():
        for s in p.get("real_servers") or []:
            try:
                text = Path(s["log"]).read_text()[-tail:]
            except OSError:
                text = ""
            out.append(f"{p['name']} ready={p['ready']} {s['kind']} notes={p.get('notes')}: {text}")
    return "\n".join(out)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _shm() -> set[str]:
    try:
        return {p.name for p in SHM.iterdir()}
    except OSError:
        return set()


def stop_cluster(sim: SimCluster, shm_before: set[str]) -> None:
    """Stop ``sim`` and fail if a process of its real servers' sandboxes outlived it or the
    machine's /dev/shm holds an entry that ``shm_before`` (taken before the cluster started) did
    not."""
    pids = [int(s["pid"]) for p in sim.live_pods() for s in p.get("real_servers") or [] if s.get("pid")]
    sim.stop()
    alive = [pid for pid in pids if _alive(pid)]
    new = sorted(_shm() - shm_before)
    assert not alive and not new, f"the real servers left processes {alive} and /dev/shm entries {new}"


def start_cluster(manifest: Path, namespace: str, real_servers: Sequence[str], *,
                  peer_names: Sequence[str], ready_timeout: float,
                  scenario: dict[str, Any] | None = None) -> tuple[SimCluster, set[str]]:
    """A simulated cluster of ``manifest`` whose pods run ``real_servers`` for real, once every
    pod is ready (at most ``ready_timeout`` seconds), and the machine's /dev/shm entries before
    it started (for :func:`stop_cluster`). ``peer_names``: the peers it needs
    (:func:`tests.peers.require`)."""
    peers.require(*peer_names)
    if not sandbox_available():
        msg = "bubblewrap cannot run here (apt-get install bubblewrap)"
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail(msg + " [KVRESET_REQUIRE_SANDBOX=1]")
        pytest.skip(msg)
    if not zipapp_path().exists():
        pytest.fail(f"{zipapp_path()} is missing: run 'make build' (make test does it)")
    shm = _shm()
    sim = SimCluster([manifest], namespace=namespace, real_servers=list(real_servers), scenario=scenario)
    try:
        sim.wait_ready(ready_timeout)
    except TimeoutError:
        logs = server_logs(sim)
        sim.stop()
        pytest.fail(f"the real pods did not become ready in {ready_timeout:.0f} s:\n" + logs)
    return sim, shm


def call(sim: SimCluster, path: str, method: str = "GET", body: Any = None,
         headers: Mapping[str, str] | None = None, timeout: float = 120.0) -> tuple[int, bytes]:
    """``method path`` on the simulated API server as admin (JSON ``body``): ``(status, body)``."""
    ctx = ssl.create_default_context(cafile=str(sim.ca))
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(sim.server + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {sim.admin_token}",
                                          "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def direct(url: str, method: str = "GET", body: Any = None, headers: Mapping[str, str] | None = None,
           timeout: float = 120.0) -> tuple[int, bytes]:
    """``method url`` straight to a pod's address (a loopback address): ``(status, body)``;
    status 0 with the error text when the connection fails."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return 0, str(e).encode()


def pod(sim: SimCluster, namespace: str, owner: str) -> dict[str, Any]:
    """The live pod of ``owner`` (a Deployment's name) in ``namespace``."""
    return next(p for p in sim.live_pods() if p["namespace"] == namespace and p["name"].startswith(owner + "-"))


def pod_ip(sim: SimCluster, namespace: str, owner: str) -> str:
    """The pod address of ``owner``'s pod."""
    return str(pod(sim, namespace, owner)["pod_ip"])


def proxy(sim: SimCluster, namespace: str, owner: str, port: int, path: str) -> str:
    """The API server's pod-proxy path to ``port`` and ``path`` of ``owner``'s pod."""
    return f"/api/v1/namespaces/{namespace}/pods/{pod(sim, namespace, owner)['name']}:{port}/proxy{path}"


def counters(text: str, names: Iterable[str], by: str | None = None) -> dict[tuple[str, str], float]:
    """Prometheus ``text`` -> ``{(sample name, value of label by or ""): value}`` for the samples
    named in ``names``, summed over their other labels."""
    wanted = set(names)
    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in wanted:
                key = (s.name, str(s.labels.get(by, "")) if by else "")
                out[key] = out.get(key, 0.0) + s.value
    return out
