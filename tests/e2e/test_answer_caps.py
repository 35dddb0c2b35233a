"""A hostile ``/metrics`` (about 100 MB of valid text, a 1 MB served model name per sample)
against the built CLI: ``metrics`` gives a row naming the pod, port, route and cap and exits 1,
``clear`` on a data-parallel 0.26 pod (which needs ``/metrics`` to count its engines) says
``unconfirmed``; in both the CLI's peak memory stays bounded, because reading stops at the cap.

The bound is measured as the max RSS of the CLI process alone: a tiny wrapper process runs it
and reports ``getrusage(RUSAGE_CHILDREN)`` (the simulator, a child of the test process, would
otherwise count too)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.manifests import build
from tests.simctl import SimCluster, zipapp_path

NS = "llm"
#: what the CLI may take at most while a 100 MB answer is served (it takes about 40 MB; without
#: the cap it took more than 500 MB)
MAX_RSS_MB = 200
_WRAP = ("import resource,subprocess,sys\n"
         "r=subprocess.run(sys.argv[1:],stdin=subprocess.DEVNULL)\n"
         "print('maxrss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
         "sys.exit(r.returncode)\n")


def run_measured(cluster: SimCluster, *args: str) -> tuple[int, str, str, float]:
    """Run the CLI; ``(exit code, stdout, stderr, max RSS in MB)``."""
    done = subprocess.run([sys.executable, "-c", _WRAP, str(zipapp_path()), *args], env=cluster.env(),
                          capture_output=True, text=True, timeout=300)
    line = next(x for x in done.stderr.splitlines() if x.startswith("maxrss_kb "))
    return done.returncode, done.stdout, done.stderr, int(line.split()[1]) / 1024


def start(sim: Callable[..., SimCluster], tmp_path: Path, argv: list[str]) -> SimCluster:
    dep = build.deployment("big", [{"name": "vllm", "image": "vllm/vllm-openai:v0.26.0", "command": argv}])
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(dep))
    return sim([path], namespace=NS, dev_mode="on", scenario={"pods": [{"metrics_bloat_mb": 100}]})


def test_hostile_metrics_is_refused_at_the_cap_with_bounded_memory(sim: Callable[..., SimCluster],
                                                                   tmp_path: Path) -> None:
    cluster = start(sim, tmp_path, ["vllm", "serve", "org/m", "--port", "8000"])
    (pod,) = cluster.live_pods()
    code, out, err, rss = run_measured(cluster, "metrics", "-n", NS, "-o", "json")
    assert code == 1, (out, err)
    (row,) = yaml.safe_load(out)
    assert row["port"] == 8000 and row["usage"] is None and row["model"] is None
    assert f"GET /metrics on {NS}/{pod['name']}:8000" in row["error"], row
    assert "larger than the 8 MiB cap" in row["error"] and "reading stopped" in row["error"]
    assert rss < MAX_RSS_MB, f"metrics took {rss:.0f} MB"
    # the table says it too, and nothing of the 1 MB model name reaches the output
    code, out, err, rss = run_measured(cluster, "metrics", "-n", NS)
    assert code == 1 and "8 MiB cap" in out and "mmmmmmmmmm" not in out + err
    assert rss < MAX_RSS_MB


@pytest.mark.parametrize("transport", ["exec", "port-forward"])
def test_hostile_metrics_over_exec_and_port_forward(sim: Callable[..., SimCluster], tmp_path: Path,
                                                    transport: str) -> None:
    cluster = start(sim, tmp_path, ["vllm", "serve", "org/m", "--port", "8000"])
    code, out, err, rss = run_measured(cluster, "metrics", "-n", NS, "--transport", transport, "-o", "json")
    (row,) = yaml.safe_load(out)
    assert code == 1 and "8 MiB cap" in row["error"] and f"(over {transport})" in row["error"], (row, err)
    assert rss < MAX_RSS_MB, f"metrics over {transport} took {rss:.0f} MB"


def test_clear_that_needs_metrics_says_unconfirmed_with_bounded_memory(sim: Callable[..., SimCluster],
                                                                      tmp_path: Path) -> None:
    # vLLM 0.26 answers a reset for engine 0 only: with two data-parallel engines behind the port,
    # clear reads /metrics for the engine labels
    cluster = start(sim, tmp_path, ["vllm", "serve", "org/m", "--port", "8000", "--data-parallel-size", "2"])
    code, out, err, rss = run_measured(cluster, "clear", "-n", NS, "--all", "-o", "json")
    (row,) = yaml.safe_load(out)
    assert code == 3 and row["result"] == "unconfirmed", (out, err)
    assert "GET /metrics not read" in row["message"] and "8 MiB cap" in row["message"], row
    assert rss < MAX_RSS_MB, f"clear took {rss:.0f} MB"
