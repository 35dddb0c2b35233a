"""``clear --wait-idle``: the reset waits for the running requests, and none of them fails."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.manifests import build
from tests.simctl import SimCluster

NS = "llm"


def start(sim: Callable[..., SimCluster], tmp_path: Path, **overrides: object) -> SimCluster:
    doc = build.deployment("m", [{"name": "vllm", "image": "vllm/vllm-openai:v0.32.0",
                                  "command": ["vllm", "serve", "m", "--port", "8000"]}])
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc))
    return sim([path], namespace=NS, dev_mode="on", scenario={"pods": [overrides]})


def stream(cluster: SimCluster, pod: str, tokens: int, out: list[tuple[int, bool]]) -> None:
    """One streamed completion through the pod proxy, read to its end: (status, ended with [DONE])."""
    ctx = ssl.create_default_context(cafile=str(cluster.ca))
    body = {"model": "m", "prompt": list(range(40)), "max_tokens": tokens, "stream": True}
    req = urllib.request.Request(f"{cluster.server}/api/v1/namespaces/{NS}/pods/{pod}:8000/proxy/v1/completions",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {cluster.admin_token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=120) as r:
        out.append((r.status, r.read().endswith(b"data: [DONE]\n\n")))


def test_the_reset_waits_for_running_requests_and_none_fails(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, token_delay_ms=100)
    (pod,) = [p["name"] for p in cluster.live_pods()]
    answers: list[tuple[int, bool]] = []
    threads = [threading.Thread(target=stream, args=(cluster, pod, 200, answers)) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # the requests run (200 tokens, 100 ms apart: about 20 s)
    done = cluster.run("clear", "-n", NS, "--all", "--wait-idle", "120s", "--verify", "-o", "json")
    for t in threads:
        t.join()
    assert answers == [(200, True)] * 3  # every request ran to its end
    assert done.returncode == 0, (done.stdout, done.stderr)
    (row,) = json.loads(done.stdout)
    # the reset came after they finished: its first answer was success, not success:false
    assert row["result"] == "emptied" and row["busy_answers"] == 0, row
    assert row["verify"] == "cold"
    assert "waiting for 1 busy engine(s) to be idle: " in done.stderr and "running" in done.stderr, done.stderr


def test_engines_still_busy_at_the_deadline_answer_busy(sim, tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, token_delay_ms=100)
    (pod,) = [p["name"] for p in cluster.live_pods()]
    answers: list[tuple[int, bool]] = []
    t = threading.Thread(target=stream, args=(cluster, pod, 200, answers))
    t.start()
    time.sleep(0.5)
    done = cluster.run("clear", "-n", NS, "--all", "--wait-idle", "1s", "--busy-timeout", "1s", "-o", "json")
    t.join()
    assert answers == [(200, True)]
    assert done.returncode == 1, (done.stdout, done.stderr)
    (row,) = json.loads(done.stdout)
    assert row["result"] == "busy", row
    assert "--wait-idle 1s ended with 1 engine(s) still busy" in done.stderr, done.stderr


def test_a_forced_reset_waiting_for_remote_kv_is_busy_and_retried(sim, tmp_path: Path) -> None:
    # vLLM's 500 "... running requests waiting for remote KV transfer ...": busy, never a failure
    cluster = start(sim, tmp_path, busy=1000, busy_forced=True)
    done = cluster.run("clear", "-n", NS, "--all", "--preempt-running", "--busy-timeout", "1s", "-o", "json")
    assert done.returncode == 1, (done.stdout, done.stderr)
    (row,) = json.loads(done.stdout)
    assert row["result"] == "busy" and row["busy_answers"] > 1, row
