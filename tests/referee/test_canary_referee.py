"""The referee for the salted canary ``clear --verify`` sends: a real vLLM 0.32.0 (the CPU build,
``--enable-prompt-tokens-details``) and the fake vLLM given the real server's block size (128)
are sent the same canary requests (``tests/referee/probes.py::run_canary_probes``) and must
answer with the same cached tokens, the same 400s and the same counter rises.
``KVRESET_REFEREE_RECORD=DIR`` writes the real answers there (``tests/referee/data`` holds the
committed ones, compared by ``test_fake_matches_recorded_canary`` without starting vLLM)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.peers.tinymodel import write_tiny_model
from tests.sim.fakevllm import FakeVLLM

from .fakeserve import FakeServer
from .probes import Probes, compare, run_canary_probes
from .realvllm import RealVLLM, require_vllm

DATA = Path(__file__).with_name("data") / "real-0.32.0-canary.json"


def _fake_probes() -> Probes:
    fake = FakeVLLM(port=8000, version="0.32.0", dev_mode=True, model="tiny-model", served_model_name="tiny",
                    overrides={"warm_blocks": 0, "block_size": 128, "prompt_tokens_details": True})
    with FakeServer(fake) as srv:
        return run_canary_probes(srv.base)


@pytest.mark.referee
@pytest.mark.peers
def test_fake_answers_the_canary_as_the_real_server(tmp_path: Path) -> None:
    real_exe = require_vllm()
    model = write_tiny_model(tmp_path / "tiny-model")
    srv = RealVLLM(real_exe, model, tmp_path / "vllm.log", extra_args=("--enable-prompt-tokens-details",)).start()
    try:
        srv.wait_ready()
        real = run_canary_probes(srv.base)
    finally:
        srv.stop()
    out = os.environ.get("KVRESET_REFEREE_RECORD")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / DATA.name).write_text(json.dumps(real, indent=1, sort_keys=True) + "\n")
    assert real["canary repeat"]["cached_tokens"] == 256, real
    diffs = compare(real, _fake_probes())
    assert not diffs, "the fake vLLM differs from the real one:\n" + "\n".join(diffs)


@pytest.mark.referee
def test_fake_matches_recorded_canary() -> None:
    if not DATA.exists():
        pytest.fail(f"{DATA.name} is missing: record it with KVRESET_REFEREE_RECORD (test above)")
    real = json.loads(DATA.read_text())
    diffs = compare(real, _fake_probes())
    assert not diffs, "\n".join(diffs)
