"""Real kubectl against the simulator's pods that do not run: ``kubectl get pods`` shows the
Unschedulable pod Pending with the scheduler's message, the held one ContainerCreating, the
crash-looping one CrashLoopBackOff with its restarts; a paused Deployment does not roll a
changed template until ``kubectl rollout resume``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from tests.e2e.test_pod_states import NS, deployment, write

from .checks import Ground


def test_get_pods_shows_every_state(ground_factory: Callable[..., Ground], tmp_path: Path) -> None:
    paused = deployment("paused")
    paused["spec"]["paused"] = True
    ground = ground_factory([write(tmp_path, [
        deployment("fits", gpus=2), deployment("too-big", gpus=4), deployment("creating"),
        deployment("crashing"), paused])], namespace=NS, scenario={
        "gpus_per_node": 3,
        "pods": [{"match": {"owner": "deployment/creating"}, "container_creating": True},
                 {"match": {"owner": "deployment/crashing"}, "dev_mode": "invalid"}]})
    k = ground.kubectl
    table = k.ok("get", "pods", "--no-headers")
    status = {line.split()[0].rsplit("-", 2)[0]: line.split() for line in table.splitlines() if line.strip()}
    assert status["fits"][1:3] == ["1/1", "Running"], table
    assert status["too-big"][1:4] == ["0/1", "Pending", "0"], table
    assert status["creating"][1:3] == ["0/1", "ContainerCreating"], table
    assert status["crashing"][1:4] == ["0/1", "CrashLoopBackOff", "5"], table
    pods = json.loads(k.ok("get", "pods", "-l", "app=too-big", "-o", "json"))["items"]
    cond = next(c for c in pods[0]["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"].startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    reason = k.ok("get", "pod", pods[0]["metadata"]["name"], "-o",
                  'jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}')
    assert reason == "Unschedulable"
    crash = json.loads(k.ok("get", "pods", "-l", "app=crashing", "-o", "json"))["items"][0]["status"]
    cs = crash["containerStatuses"][0]
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff" and cs["lastState"]["terminated"]["exitCode"] == 1
    node = json.loads(k.ok("get", "node", "sim-node-0", "-o", "json"))
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "3"

    # paused: a template change does not roll until resumed
    before = k.ok("get", "pods", "-l", "app=paused", "-o", "name").split()
    k.ok("set", "env", "deployment/paused", "ROLL=1")
    time.sleep(1.0)
    assert k.ok("get", "pods", "-l", "app=paused", "-o", "name").split() == before
    k.ok("rollout", "resume", "deployment/paused")
    k.ok("rollout", "status", "deployment/paused", "--timeout=30s")
    after = k.ok("get", "pods", "-l", "app=paused", "-o", "name").split()
    assert after and set(after).isdisjoint(before)
