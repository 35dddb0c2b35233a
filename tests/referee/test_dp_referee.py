"""The referee for data parallel inside one server: a real vLLM 0.32.0 (the CPU build) started
with ``--data-parallel-size 2`` (internal load balancing: two engines and, by vLLM's default,
two API server processes behind one port) and the simulator's fake vLLM for the same flags are
scraped and reset alike.

What is compared: ``GET /metrics`` before any request, per ``vllm:`` family (type, label names,
``engine`` values, whether it has samples, whether it has ``_created`` samples), the engine
labels this tool reads from it (:func:`kubectl_kvreset.engines.vllm.api.engine_labels`), and the reset
answer, the AND of both engines' (``vllm/v1/engine/core_client.py::AsyncMPClient.
reset_prefix_cache_async``). The recorded summary in
``tests/referee/data/real-0.32.0-dp2-metrics.json`` is what ``test_fakevllm.py`` checks the fake
against without vLLM; ``KVRESET_REFEREE_RECORD=DIR`` writes it again. The server needs about
5 GiB and 4-5 minutes on two busy cores. ``VLLM_HOST_IP=127.0.0.1`` keeps vLLM's data-parallel
message queues on loopback.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from kubectl_kvreset.engines.vllm.api import engine_labels
from tests.peers.tinymodel import write_tiny_model
from tests.sim.fakevllm import FakeVLLM
from tests.sim.serveargs import parse_vllm_argv

from .fakeserve import FakeServer
from .realvllm import RealVLLM, VllmExited, require_vllm

pytestmark = [pytest.mark.referee, pytest.mark.peers]

DP_FLAGS = ("--data-parallel-size", "2")
RECORDED = Path(__file__).parent / "data" / "real-0.32.0-dp2-metrics.json"


def summary(body: str) -> dict[str, dict[str, object]]:
    """Per ``vllm:`` family of a scrape: type, label names (``le`` left out), ``engine`` values,
    whether it has samples and whether any is a ``_created`` one (prometheus_client's parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[str, object]] = {}
    for fam in text_string_to_metric_families(body):
        if fam.name.startswith("vllm:"):
            out[fam.name] = {"type": fam.type,
                             "labels": sorted({k for s in fam.samples for k in s.labels if k != "le"}),
                             "engines": sorted({s.labels["engine"] for s in fam.samples if "engine" in s.labels}),
                             "samples": bool(fam.samples),
                             "created": any(s.name.endswith("_created") for s in fam.samples)}
    return out


def scrape_and_reset(base: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        body = r.read().decode()
    req = urllib.request.Request(base + "/reset_prefix_cache", method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        return body, r.read()


def start_dp_server(exe: Path, model: Path, logs: Path, attempts: int = 2) -> RealVLLM:
    """A ready ``--data-parallel-size 2`` server. An engine that dies while starting (seen once
    on two busy cores: a worker of ``EngineCore_DP0`` failed in ``WorkerProc.wait_for_ready``,
    ``vllm/v1/executor/multiproc_executor.py``) is one start lost, not a difference from the
    fake: the server is started again, up to ``attempts`` times, with a new log and new ports
    (vLLM picks its data-parallel ports when it starts). Raises
    :class:`~tests.referee.realvllm.VllmExited` with every attempt's exception lines."""
    failures: list[str] = []
    for attempt in range(1, attempts + 1):
        srv = RealVLLM(exe, model, logs / f"vllm-{attempt}.log", extra_args=DP_FLAGS,
                       extra_env=(("VLLM_HOST_IP", "127.0.0.1"),)).start()
        try:
            srv.wait_ready(timeout=600)
            return srv
        except VllmExited as exc:
            failures.append(f"attempt {attempt}: {exc}")
            srv.stop()
        except BaseException:
            srv.stop()
            raise
    raise VllmExited("\n\n".join(failures))


def test_two_engines_behind_one_port_match_the_fake(tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "tiny-model")
    srv = start_dp_server(require_vllm(), model, tmp_path)
    try:
        real_body, real_reset = scrape_and_reset(srv.base)
        log = srv.tail(400)
    finally:
        srv.stop()
    real = summary(real_body)
    out = os.environ.get("KVRESET_REFEREE_RECORD")
    if out:
        recorded = json.loads(RECORDED.read_text())
        recorded["families"] = real
        (Path(out) / RECORDED.name).write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    assert "api_server_count to data_parallel_size (2)" in log  # vLLM's default: multiprocess metrics

    args = parse_vllm_argv(["vllm", "serve", str(model), "--port", "8000", *DP_FLAGS])
    assert args is not None and (args.engines, args.api_servers) == (2, 2)
    fake = FakeVLLM(port=8000, version="0.32.0", dev_mode=True, model=str(model), served_model_name="tiny",
                    overrides={"warm_blocks": 0}, engines=args.engines, first_engine=args.first_engine,
                    api_servers=args.api_servers)
    with FakeServer(fake) as fsrv:
        fake_body, fake_reset = scrape_and_reset(fsrv.base)
    assert engine_labels(real_body) == engine_labels(fake_body) == ("0", "1")
    assert json.loads(real_reset) == json.loads(fake_reset) == {"success": True}
    fake_summary = summary(fake_body)
    diffs = [f"{name}: real {want} fake {fake_summary.get(name)}" for name, want in real.items()
             if {**(fake_summary.get(name) or {}), **({"labels": want["labels"]} if not want["samples"] else {})}
             != want]
    diffs += [f"{name}: only the fake has it" for name in set(fake_summary) - set(real)]
    assert not diffs, "the fake vLLM differs from the real one under DP:\n" + "\n".join(sorted(diffs))
    assert json.loads(RECORDED.read_text())["families"] == real, "the recorded summary is stale"
