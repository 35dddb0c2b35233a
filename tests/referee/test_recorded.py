"""The referee without a running vLLM: the fake vLLM at 0.32.0 against the answer sets the real
0.32.0 CPU build gave (``tests/referee/data``, written by ``test_referee.py`` under
``KVRESET_REFEREE_RECORD``), and proof that the comparison catches a difference injected into
the fake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.sim import fakevllm
from tests.sim.fakevllm import FakeVLLM, Response
from tests.sim.vllm032 import DEV_ROUTES

from .fakeserve import FakeServer
from .probes import Probes, compare, run_dev_probes, run_nodev_probes
from .test_referee import ENV_KEYS

pytestmark = pytest.mark.referee  # no real server: it runs in the parallel phase too

DATA = Path(__file__).with_name("data")


def _recorded(name: str) -> Probes:
    doc: Probes = json.loads((DATA / name).read_text())
    return doc


def _fake(dev: bool) -> FakeVLLM:
    env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_NO_USAGE_STATS": "1"}
    if not dev:
        env.pop("VLLM_SERVER_DEV_MODE")
    return FakeVLLM(port=8000, version="0.32.0", dev_mode=dev, model="tiny-model", served_model_name="tiny",
                    overrides={"warm_blocks": 0, "token_delay_ms": 2}, env=env)


def _dev_probes(f: FakeVLLM) -> Probes:
    with FakeServer(f) as srv:
        return run_dev_probes(srv.base, ENV_KEYS)


@pytest.fixture(scope="module")
def honest() -> Probes:
    """The unaltered fake's dev-mode answers."""
    return _dev_probes(_fake(True))


def test_fake_matches_recorded_dev_mode(honest: Probes) -> None:
    diffs = compare(_recorded("real-0.32.0-dev.json"), honest)
    assert not diffs, "\n".join(diffs)


def test_fake_matches_recorded_without_dev_mode() -> None:
    with FakeServer(_fake(False)) as srv:
        fake = run_nodev_probes(srv.base, DEV_ROUTES)
    diffs = compare(_recorded("real-0.32.0-nodev.json"), fake)
    assert not diffs, "\n".join(diffs)


def _fastapi_422(self: FakeVLLM, *a: Any) -> Response:
    # what was inferred before the real server was asked: FastAPI's default envelope
    body = {"detail": [{"type": "bool_parsing", "loc": ["query", "reset_external"], "msg": "x", "input": "bogus"}]}
    return 422, [("content-type", "application/json")], json.dumps(body).encode()


def _inject_422(f: FakeVLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    original = f._reset_prefix_cache

    def reset(query: str, body: bytes, transport: str) -> Response:
        if "bogus" in query:
            return _fastapi_422(f)
        return original(query, body, transport)

    monkeypatch.setattr(f, "_reset_prefix_cache", reset)


def _inject_text_with_connector(f: FakeVLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    # server_info's text form carrying kv_transfer_config as an object
    original = f._server_info

    def info(query: str) -> Response:
        status, headers, body = original(query)
        doc = json.loads(body)
        if isinstance(doc.get("vllm_config"), str):
            doc["vllm_config"] = {"text": doc["vllm_config"], "kv_transfer_config": None}
        return status, headers, json.dumps(doc).encode()

    monkeypatch.setattr(f, "_server_info", info)


def _inject_no_running_model(f: FakeVLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    # a stream that never counts as running: the reset after its first chunk succeeds
    def chunks(self: fakevllm.StreamBody) -> Any:
        yield bytes(self)

    monkeypatch.setattr(fakevllm.StreamBody, "chunks", chunks)


def _inject_label(f: FakeVLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    # one family without its engine label
    fams = [(n, k, [x for x in labels if x != "engine"] if n == "vllm:num_preemptions" else labels)
            for n, k, labels in fakevllm.vllm032.METRIC_FAMILIES]
    monkeypatch.setattr(fakevllm.vllm032, "METRIC_FAMILIES", fams)


@pytest.mark.parametrize(("inject", "probe"), [
    (_inject_422, "POST /reset_prefix_cache?reset_external=bogus"),
    (_inject_text_with_connector, "GET /server_info"),
    (_inject_no_running_model, "reset while running"),
    (_inject_label, "GET /metrics"),
], ids=["422-envelope", "server-info-text", "no-running-request", "metric-label"])
def test_referee_catches_an_injected_difference(inject: Any, probe: str, honest: Probes,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The same comparison that passes above fails, naming the probe, once the fake is altered;
    both against the recorded real answers and against the unaltered fake."""
    altered_fake = _fake(True)
    inject(altered_fake, monkeypatch)
    altered = _dev_probes(altered_fake)
    for reference in (_recorded("real-0.32.0-dev.json"), honest):
        diffs = compare(reference, altered)
        assert diffs, "the injected difference went unnoticed"
        assert any(d.startswith(probe) for d in diffs), diffs
