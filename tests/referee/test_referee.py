"""The referee: a real vLLM 0.32.0 (the CPU build, random weights, a tiny model written here)
and the simulator's fake vLLM at 0.32.0 are sent the same probes and must answer alike
(probes and comparison rules in ``tests/referee/probes.py``).

Servers: one real vLLM with ``VLLM_SERVER_DEV_MODE=1``, one without it, one started with
``VLLM_SERVER_DEV_MODE=true`` (it must die before binding). Each is started once per test
session (class fixtures), probed, and stopped before the next starts (each takes 30-45 s and
3 GiB). A difference is fixed in the fake vLLM (``tests/sim/fakevllm.py`` and
``tests/sim/vllm032.py``), never here. Set ``KVRESET_REFEREE_RECORD=DIR`` to write the real
answer sets there (``tests/referee/data`` holds the committed ones, compared with the fake by
``test_recorded.py`` without starting vLLM).

What the CPU build cannot show, and what the fake follows instead:

- the CPU offload tier (``--kv-offloading-size``, ``OffloadingConnector``,
  ``SimpleCPUOffloadConnector``: "CPU Offloading is currently only supported on CUDA-alike and
  XPU GPUs"): what ``reset_external=true`` clears per connector and release follows
  vLLM's ``reset_cache`` hooks (``vllm/v1/kv_offload/cpu/manager.py``,
  ``tiering/manager.py``, ``simple_cpu_offload_connector.py::reset_cache``);
- multi-port data-parallel serving (dense models refuse external DP; a tiny MoE's first
  completion is a 500 from the CPU communicator): one fake per API port, as
  ``--data-parallel-multi-port-external-lb`` runs one API server per port; how one server's
  answer aggregates its engines follows the 0.32.0 source,
  ``vllm/v1/engine/core_client.py::AsyncMPClient.reset_prefix_cache_async``
  (``all()`` over ``call_utility_all_async``, every engine);
- connectors with a ``reset_cache`` hook that touches a store (``MooncakeStoreConnector``:
  ``remove_all(force=True)`` via ``mooncake/store/scheduler.py::reset_store``): the 0.32.0
  source;
- the 500 of a forced reset that still fails and the ``EngineDeadError`` 503/500:
  ``vllm/entrypoints/serve/dev/cache/api_router.py`` (not reproducible on demand on an idle CPU
  server);
- GPU-only values (block size 16, ``cache_config_info`` label values, ``device_config``): label
  names and JSON types are compared, values are not.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.peers.tinymodel import write_tiny_model
from tests.sim.fakevllm import FakeVLLM, dev_mode_state
from tests.sim.pods import PodContext, PodRuntime
from tests.sim.vllm032 import DEV_ROUTES

from .fakeserve import FakeServer
from .probes import Probes, compare, run_dev_probes, run_nodev_probes
from .realvllm import RealVLLM, require_vllm

pytestmark = [pytest.mark.referee, pytest.mark.peers]

ENV_KEYS = ["VLLM_SERVER_DEV_MODE", "VLLM_TARGET_DEVICE", "VLLM_CPU_KVCACHE_SPACE",
            "VLLM_CPU_OMP_THREADS_BIND", "VLLM_NO_USAGE_STATS"]
"""The variables both servers are started with; their presence and JSON type in
``/server_info``'s ``vllm_env`` are compared."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_vllm()
    return write_tiny_model(tmp_path_factory.mktemp("tiny-model"))


def _record(name: str, probes: Probes) -> None:
    out = os.environ.get("KVRESET_REFEREE_RECORD")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / name).write_text(json.dumps(probes, indent=1, sort_keys=True) + "\n")


def _real(model_dir: Path, log: Path, dev_mode: str | None, run: Any) -> Probes:
    srv = RealVLLM(require_vllm(), model_dir, log, dev_mode=dev_mode).start()
    try:
        srv.wait_ready()
        result: Probes = run(srv.base)
        return result
    finally:
        srv.stop()


def _fake(model_dir: Path, dev: bool) -> FakeVLLM:
    env = RealVLLM(Path("vllm"), model_dir, Path("log"), dev_mode="1" if dev else None).env()
    return FakeVLLM(port=8000, version="0.32.0", dev_mode=dev, model=str(model_dir), served_model_name="tiny",
                    overrides={"warm_blocks": 0}, env={k: env[k] for k in ENV_KEYS if k in env})


def _only(p: Probes, *prefixes: str) -> Probes:
    return {k: v for k, v in p.items() if k.startswith(prefixes)}


def _assert_same(real: Probes, fake: Probes) -> None:
    assert real, "no probe answered"
    diffs = compare(real, fake)
    assert not diffs, "the fake vLLM differs from the real one:\n" + "\n".join(diffs)


@pytest.fixture(scope="module")
def dev_answers(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Probes, Probes]:
    """(real, fake) answers with dev mode on; the real server is stopped before this returns."""
    log = tmp_path_factory.mktemp("vllm-dev") / "vllm.log"
    real = _real(model_dir, log, "1", lambda base: run_dev_probes(base, ENV_KEYS))
    _record("real-0.32.0-dev.json", real)
    with FakeServer(_fake(model_dir, True)) as srv:
        fake = run_dev_probes(srv.base, ENV_KEYS)
    return real, fake


@pytest.fixture(scope="module")
def nodev_answers(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Probes, Probes]:
    """(real, fake) answers without dev mode; the real server is stopped before this returns."""
    log = tmp_path_factory.mktemp("vllm-nodev") / "vllm.log"
    real = _real(model_dir, log, None, lambda base: run_nodev_probes(base, DEV_ROUTES))
    _record("real-0.32.0-nodev.json", real)
    with FakeServer(_fake(model_dir, False)) as srv:
        fake = run_nodev_probes(srv.base, DEV_ROUTES)
    return real, fake


class TestDevMode:
    """``VLLM_SERVER_DEV_MODE=1``: every reset route, the running-request resets, server_info,
    openapi, metrics and the prefix-cache counters."""

    @pytest.fixture
    def answers(self, dev_answers: tuple[Probes, Probes]) -> tuple[Probes, Probes]:
        return dev_answers

    def test_version_and_health(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        assert real["GET /version"]["json"] == {"version": ["=", "0.32.0"]}
        _assert_same(_only(real, "GET /version", "GET /health"), _only(fake, "GET /version", "GET /health"))

    def test_reset_prefix_cache_parameters(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        sel = ("POST /reset_prefix_cache?",)
        assert len(_only(real, *sel)) == 11
        _assert_same(_only(real, *sel), _only(fake, *sel))

    def test_mm_and_encoder_resets(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        sel = ("POST /reset_mm_cache?", "POST /reset_encoder_cache?")
        assert len(_only(real, *sel)) == 22
        _assert_same(_only(real, *sel), _only(fake, *sel))

    def test_get_on_post_routes(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        sel = ("GET /reset_",)
        assert len(_only(real, *sel)) == 3
        _assert_same(_only(real, *sel), _only(fake, *sel))

    def test_reset_while_running(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        sel = ("reset while running",)
        assert real["reset while running"]["reset"]["json"] == {"success": ["=", False]}
        assert real["reset while running, reset_running_requests=true"]["preempted"] is True
        _assert_same(_only(real, *sel), _only(fake, *sel))

    def test_server_info(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        sel = ("GET /server_info",)
        assert len(_only(real, *sel)) == 4
        _assert_same(_only(real, *sel), _only(fake, *sel))

    def test_openapi(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        _assert_same(_only(real, "GET /openapi.json"), _only(fake, "GET /openapi.json"))

    def test_metrics_families(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        assert "vllm:prefix_cache_hits" in real["GET /metrics"]["families"]
        _assert_same(_only(real, "GET /metrics"), _only(fake, "GET /metrics"))

    def test_prefix_cache_counters(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        assert real["prefix-cache counters"][1]["hits rose"] is True
        _assert_same(_only(real, "prefix-cache counters"), _only(fake, "prefix-cache counters"))

    def test_every_probe_compared(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        assert set(real) == set(fake)
        _assert_same(real, fake)


class TestNoDevMode:
    """Without ``VLLM_SERVER_DEV_MODE``: every dev route (with its method and with GET) is a
    404, and ``/openapi.json`` lists the 22 other paths."""

    @pytest.fixture
    def answers(self, nodev_answers: tuple[Probes, Probes]) -> tuple[Probes, Probes]:
        return nodev_answers

    def test_dev_routes_are_404(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        routes = {k: v for k, v in real.items() if k.split(" ", 1)[0] in ("GET", "POST") and "openapi" not in k
                  and "/version" not in k and "/health" not in k}
        assert routes and all(v["status"] == 404 for v in routes.values())
        _assert_same(routes, {k: fake.get(k) for k in routes})

    def test_openapi_without_dev_mode(self, answers: tuple[Probes, Probes]) -> None:
        real, fake = answers
        assert len(real["GET /openapi.json"]["paths"]) == 22
        _assert_same(_only(real, "GET /openapi.json"), _only(fake, "GET /openapi.json"))

    def test_every_probe_compared(self, answers: tuple[Probes, Probes]) -> None:
        _assert_same(*answers)


def _port_answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_dev_mode_true_crashes_at_start(model_dir: Path, tmp_path: Path) -> None:
    """``VLLM_SERVER_DEV_MODE=true``: the real server exits non-zero before binding its port
    (``vllm/envs.py`` parses ``bool(int(...))``); the simulator's pod with that env crash-loops
    and its port answers nothing."""
    srv = RealVLLM(require_vllm(), model_dir, tmp_path / "vllm.log", dev_mode="true").start()
    bound = False
    try:
        code = None
        for _ in range(240):
            bound = bound or _port_answers(srv.port)
            code = srv.wait_exit(0.5)
            if code is not None:
                break
    finally:
        srv.stop()
    real = {"exited non-zero": code not in (None, 0), "port answered": bound,
            "ValueError in log": "invalid literal for int()" in srv.tail(200)}

    spec = {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.32.0",
                            "args": [str(model_dir), "--port", "8000"],
                            "env": [{"name": "VLLM_SERVER_DEV_MODE", "value": "true"}]}]}
    ctx = PodContext(namespace="default", name="pod-a", uid="uid-1", pod_ip="127.0.0.1", spec=spec,
                     env_by_container={"vllm": {"VLLM_SERVER_DEV_MODE": "true"}}, volume_dirs={},
                     shm_dir=tmp_path / "shm", work_dir=tmp_path / "work", sandbox=False)
    rt = PodRuntime(ctx)
    rt.start()
    answer = rt.request(8000, "GET", "/health", "", {}, b"")
    fake = {"exited non-zero": rt.crashed, "port answered": answer is not None,
            "ValueError in log": dev_mode_state("true") == "invalid"}
    assert real == {"exited non-zero": True, "port answered": False, "ValueError in log": True}, srv.tail()
    assert fake == real
