"""One pod made real by a scenario rule (``real_server: true``) without ``--real-servers``:
Redis, the cheapest peer (marker ``peers``)."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest

import tests.peers as peers
from tests.simctl import SimCluster, sandbox_available

pytestmark = pytest.mark.peers

MANIFEST = textwrap.dedent("""\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: cache, namespace: one}
    spec:
      replicas: 2
      selector: {matchLabels: {app: cache}}
      template:
        metadata: {labels: {app: cache}}
        spec:
          containers:
          - name: redis
            image: redis:7.0.15
            args: [--port, "6380"]
    """)


def test_scenario_rule_makes_one_pod_real(tmp_path: Path) -> None:
    peers.require("redis")
    if not sandbox_available():
        pytest.skip("bubblewrap cannot run here (apt-get install bubblewrap)")
    m = tmp_path / "m.yaml"
    m.write_text(MANIFEST)
    scenario = {"pods": [{"match": {"owner": "deployment/cache", "ordinal": 0},
                          "real_server": True}]}
    with SimCluster([m], namespace="one", scenario=scenario) as sim:
        sim.wait_ready(60)
        pods = sorted(sim.live_pods(), key=lambda p: p["ordinal"])
        real, fake = pods
        assert [s["kind"] for s in real["real_servers"]] == ["redis"]
        assert "real_servers" not in fake
        # a redis image without command runs redis-server with the container's args, on the
        # pod's own address
        with socket.create_connection((real["pod_ip"], 6380), timeout=5) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            assert s.recv(16) == b"+PONG\r\n"
        with pytest.raises(OSError):
            socket.create_connection((fake["pod_ip"], 6380), timeout=2)
