"""Data parallelism inside one real vLLM server (marker ``peers``): vLLM's CPU build 0.32.0 with
``--data-parallel-size 2`` (internal load balancing: two engines behind one API port), as a pod.

vLLM 0.32's reset answer is the AND over the engines (``vllm/v1/engine/core_client.py``), and
each engine resets on its own: with engine 1 running long requests, ``POST
/reset_prefix_cache`` answers ``{"success": false}`` after engine 0 has reset. The plugin's row
must then say which engine is emptied and which is still warm, and ``--preempt-running`` empties
both. Every claim is checked on the server's own per-engine counters
(``vllm:prefix_cache_hits_total{engine=...}``), each prompt pinned to its engine with the
``X-data-parallel-rank`` header.

About 7 GB: run this module alone, never beside another real vLLM.
"""

from __future__ import annotations

import json
import re
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from tests.peers.realpods import counters, direct, pod, pod_ip, server_logs, start_cluster, stop_cluster
from tests.simctl import SimCluster

pytestmark = pytest.mark.peers

NS = "dpr"
READY_TIMEOUT = 900.0
HITS, RUNNING = "vllm:prefix_cache_hits_total", "vllm:num_requests_running"
PREEMPTED = "vllm:num_preemptions_total"
LONG_REQUESTS = 12
#: Tries of the busy case (each about 15 s) before it counts as never seen.
BUSY_ATTEMPTS = 4

MANIFEST = textwrap.dedent(f"""\
    apiVersion: v1
    kind: Namespace
    metadata: {{name: {NS}}}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: dp, namespace: {NS}}}
    spec:
      replicas: 1
      selector: {{matchLabels: {{app: dp}}}}
      template:
        metadata: {{labels: {{app: dp}}}}
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.32.0
            command: [vllm, serve, org/model-dp]
            args: [--served-model-name, model-dp, --port, "8000", --enable-prefix-caching, --data-parallel-size, "2"]
            env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}]
            ports: [{{name: http, containerPort: 8000}}]
    """)

_ROUND = [int(time.time()) % 400]


def _prompt(rank: int) -> list[int]:
    """300 token ids (two whole 128-token blocks), new for each rank and round: the first one
    differs, so no block of another prompt matches."""
    return [4 + (rank + 2 * _ROUND[0]) % 1000] + [4 + (300 * rank + i) % 1000 for i in range(299)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    m = tmp_path_factory.mktemp("dp") / "m.yaml"
    m.write_text(MANIFEST)
    started = time.monotonic()
    sim, shm = start_cluster(m, NS, ["vllm"], peer_names=["vllm"], ready_timeout=READY_TIMEOUT)
    try:
        print(f"real vLLM with two data-parallel engines ready in {time.monotonic() - started:.0f} s")
        yield sim
    finally:
        stop_cluster(sim, shm)


def _url(sim: SimCluster, path: str) -> str:
    return f"http://{pod_ip(sim, NS, 'dp')}:8000{path}"


def _engines(sim: SimCluster) -> dict[tuple[str, str], float]:
    code, body = direct(_url(sim, "/metrics"))
    assert code == 200, body[:300]
    return counters(body.decode(), (HITS, RUNNING, PREEMPTED), by="engine")


def _complete(sim: SimCluster, rank: int, prompt: list[int], max_tokens: int = 1) -> None:
    code, body = direct(_url(sim, "/v1/completions"), "POST",
                        {"model": "model-dp", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True},
                        headers={"X-data-parallel-rank": str(rank)}, timeout=300)
    assert code == 200, body[:300]


def _hits(sim: SimCluster, rank: int, prompt: list[int]) -> float:
    """The prefix-cache hits ``prompt`` earns on engine ``rank``."""
    before = _engines(sim).get((HITS, str(rank)), 0.0)
    _complete(sim, rank, prompt)
    return _engines(sim).get((HITS, str(rank)), 0.0) - before


def _warm(sim: SimCluster) -> tuple[list[int], list[int]]:
    """A new prompt cached on each engine (its repeat hits there); the two prompts."""
    _ROUND[0] += 1
    prompts = _prompt(0), _prompt(1)
    for rank, prompt in enumerate(prompts):
        assert _hits(sim, rank, prompt) == 0
        assert _hits(sim, rank, prompt) >= 256, f"engine {rank} did not cache its prompt"
    return prompts


class _LongRequests:
    """Long completions on engine 1, ``LONG_REQUESTS`` at a time, sent again as each ends, while the
    ``with`` block runs (entered once ``/metrics`` shows them running); on exit no new one starts
    and each is awaited. Each thread asks for a different length (300 to 465 tokens, with the
    40-token prompt under the pods' 512-token model length), so the requests do not all end at
    once: engine 1 never has a moment with nothing running, in which a retried reset would
    succeed."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(LONG_REQUESTS)]
        self.errors: list[BaseException] = []
        self.sent = 0

    def _loop(self, i: int) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                _complete(self.sim, 1, [4 + (700 + 7 * i + 3 * n + j) % 1000 for j in range(40)],
                          max_tokens=300 + 15 * i)
            except BaseException as exc:  # noqa: BLE001 - reported on exit
                self.errors.append(exc)
                return
            n += 1
            self.sent += 1

    def __enter__(self) -> _LongRequests:
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + 120
        while _engines(self.sim).get((RUNNING, "1"), 0.0) < LONG_REQUESTS // 2:
            assert time.monotonic() < deadline, "the long requests never ran on engine 1\n" + server_logs(self.sim)
            assert not self.errors, self.errors
            time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(300)
        assert not self.errors, self.errors


def test_a_busy_engine_answers_false_after_the_idle_one_reset_and_the_row_says_which(cluster: SimCluster) -> None:
    # The real engine 1 is busy only while one of the long requests holds blocks; on a loaded
    # machine the client threads can all be between two requests at the instant of a reset, and
    # then the real reset succeeds (vllm/v1/core/block_pool.py::reset_prefix_cache fails only
    # while blocks are in use). Each attempt must be honest either way; one of them must catch
    # engine 1 busy.
    for attempt in range(1, BUSY_ATTEMPTS + 1):
        p0, p1 = _warm(cluster)
        with _LongRequests(cluster):
            code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/dp", "--yes", "--busy-timeout", "1s")
        [row] = rows
        print(f"attempt {attempt}: clear with engine 1 busy: exit {code}, {row['result']}: {row['message']}")
        if row["result"] == "emptied":
            # the server said every engine reset: both engines really miss their prompts
            assert code == 0 and row["gpu"] == "emptied", (rows, err)
            assert _hits(cluster, 0, p0) == 0
            assert _hits(cluster, 1, p1) == 0, "engine 1 reported emptied but still hits its prompt"
            continue
        assert code == 1 and row["result"] == "busy" and row["gpu"] == "not emptied", (rows, err)
        name = pod(cluster, NS, "dp")["name"]
        assert "engine 0 emptied" in row["message"] and "engine 1 still warm" in row["message"], row
        assert re.search(r"engine 1 still warm \(\d+ requests? running\)", row["message"]), row
        [left] = row["left"]
        assert "engine 1 still warm" in left["reason"] and "--preempt-running" in left["remedy"], (left, name)
        # the real engines agree: engine 0 misses its prompt, engine 1 still hits its own
        assert _hits(cluster, 0, p0) == 0
        assert _hits(cluster, 1, p1) >= 256
        return
    pytest.fail(f"engine 1 was idle at the reset in all {BUSY_ATTEMPTS} attempts: the busy case was never seen")


def test_preempt_running_empties_both_engines(cluster: SimCluster) -> None:
    # Every attempt must empty both engines; as in the busy test above, the client threads can
    # all be between two requests at the instant of the reset, and then nothing is preempted
    # (seen once in a full peers run): one of the attempts must show the preemption.
    for attempt in range(1, BUSY_ATTEMPTS + 1):
        p0, p1 = _warm(cluster)
        preempted = _engines(cluster).get((PREEMPTED, "1"), 0.0)
        with _LongRequests(cluster):
            code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/dp", "--yes", "--preempt-running")
        [row] = rows
        print(f"attempt {attempt}: clear --preempt-running with engine 1 busy: exit {code}, {row['result']}: "
              f"{row['message']}")
        assert code == 0 and (row["gpu"], row["result"]) == ("emptied", "emptied"), (rows, err)
        assert _hits(cluster, 0, p0) == 0
        assert _hits(cluster, 1, p1) == 0
        if _engines(cluster).get((PREEMPTED, "1"), 0.0) > preempted:  # the running requests were preempted
            return
    pytest.fail(f"no request was preempted in {BUSY_ATTEMPTS} attempts: the busy case was never seen")


def test_an_idle_server_answers_true_and_both_engines_miss(cluster: SimCluster) -> None:
    p0, p1 = _warm(cluster)
    code, rows, err = cluster.run_json("clear", "-n", NS, "deployment/dp", "--yes")
    assert code == 0 and [(r["gpu"], r["result"]) for r in rows] == [("emptied", "emptied")], (rows, err)
    assert _hits(cluster, 0, p0) == 0
    assert _hits(cluster, 1, p1) == 0
    code, body = direct(_url(cluster, "/reset_prefix_cache"), "POST")
    assert (code, json.loads(body)) == (200, {"success": True})
