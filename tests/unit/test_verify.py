"""Unit tests for the canary's pure parts (kubectl_kvreset.engines.vllm.canary) and the verdicts of
kubectl_kvreset.job.verify."""

from __future__ import annotations

import json

import pytest

from kubectl_kvreset.engines.vllm.canary import (
    cache_counters,
    cached_tokens,
    canary_body,
    canary_tokens,
    valid_salt,
)
from kubectl_kvreset.job.verify import EngineProof, Reading, source_text, verdict, warm_tiers

METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="0"} 1.0
vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="1"} 1.0
# HELP vllm:prefix_cache_hits_total hits
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 256.0
vllm:prefix_cache_hits_total{engine="1",model_name="tiny"} 0.0
# HELP vllm:prompt_tokens_cached_by_source_total by source
# TYPE vllm:prompt_tokens_cached_by_source_total counter
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="device"} 256.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="disk"} 128.0
# HELP vllm:num_requests_running running
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="1",model_name="tiny"} 3.0
# HELP vllm:admission_rejections_total rejections
# TYPE vllm:admission_rejections_total counter
vllm:admission_rejections_total{model_name="tiny",reason="x"} 0.0
"""


def test_cache_counters_per_engine() -> None:
    got = cache_counters(METRICS)
    assert list(got) == ["0", "1"]
    assert got["0"].block_size == 128 and got["0"].model == "tiny" and got["0"].hits == 256.0
    assert got["0"].by_source == {"device": 256.0, "disk": 128.0}
    assert got["1"].running == 3.0 and got["1"].hits == 0.0 and got["1"].waiting is None


@pytest.mark.parametrize("block", [16, 128])
def test_canary_is_two_blocks_and_one_token_in_range(block: int) -> None:
    tokens = canary_tokens("kvreset-ab-1", block)
    assert len(tokens) == 2 * block + 1 and all(100 <= t < 1000 for t in tokens)
    assert canary_tokens("kvreset-ab-1", block) == tokens != canary_tokens("kvreset-ab-2", block)
    body = json.loads(canary_body("m", tokens, "kvreset-ab-1"))
    assert body == {"model": "m", "prompt": tokens, "max_tokens": 1, "temperature": 0, "cache_salt": "kvreset-ab-1"}


@pytest.mark.parametrize(("salt", "ok"), [("kvreset:1", True), ("kvreset-1", True), ("kvreset/1", False),
                                          ("a@b", False), ("a\\b", False), ("a\x00", False), ("", False),
                                          ("x" * 128, True), ("x" * 129, False)])
def test_salts_vllm_refuses(salt: str, ok: bool) -> None:
    assert valid_salt(salt) is ok


def test_cached_tokens_null_without_details() -> None:
    with_details = {"usage": {"prompt_tokens": 380, "prompt_tokens_details": {"cached_tokens": 256}}}
    assert cached_tokens(json.dumps(with_details).encode()) == (256, 380)
    assert cached_tokens(b'{"usage":{"prompt_tokens":380,"prompt_tokens_details":null}}') == (None, 380)
    assert cached_tokens(b"not json") == (None, None)


def proof(*readings: Reading, unverifiable: str | None = None) -> EngineProof:
    return EngineProof("ns", "p", "vllm", 8000, "0", block_size=16, probes=list(readings), unverifiable=unverifiable)


def test_the_last_probe_decides() -> None:
    warm = Reading("api-reset", "p", 32, {"disk": 32})
    cold = Reading("clear-fs", "p", 0)
    assert verdict(proof(warm, cold)) == ("cold", "cold")
    assert verdict(proof(cold, warm)) == ("warm", "warm: 32 cached tokens from disk")
    assert warm_tiers(proof(cold, warm)) == ["fs"]


def test_never_cold_without_a_proof() -> None:
    assert verdict(proof()) == ("not verifiable", "not verifiable: no probe ran")
    assert verdict(proof(unverifiable="prefix caching off"))[0] == "not verifiable"
    unread = Reading("api-reset", "p", None, error="GET /metrics: 500")
    assert verdict(proof(unread)) == ("not verifiable", "not verifiable: the probe after api-reset could not be read "
                                                        "(GET /metrics: 500)")


def test_sources_and_connector_tiers() -> None:
    assert source_text({"host": 16, "disk": 16}) == "host (16) and disk (16)"
    ext = proof(Reading("store", "p", 32, {"external": 32}))
    assert warm_tiers(ext) == ["shared"] and warm_tiers(ext, ["cpu"]) == ["cpu"]


def test_remote_kv_500_is_busy() -> None:
    from kubectl_kvreset.engines.vllm.api import ResetOutcome, read_reset_answer

    body = json.dumps({"error": {"message": "Call to reset_prefix_cache method failed: Failed to reset KV cache even "
                                            "when all the running requests are preempted and moved to the waiting "
                                            "queue. This is likely due to the presence of running requests waiting "
                                            "for remote KV transfer, which is not supported yet.",
                                 "type": "InternalServerError", "code": 500}}).encode()
    got = read_reset_answer(500, body)
    assert got.outcome is ResetOutcome.BUSY and got.retryable
    assert read_reset_answer(500, b'{"error":{"message":"engine dead"}}').outcome is ResetOutcome.SERVER_ERROR


def test_the_certificate_schema_is_a_valid_schema_and_ships_in_the_package() -> None:
    import jsonschema

    from kubectl_kvreset.job.certificate import schema

    doc = schema()
    jsonschema.Draft202012Validator.check_schema(doc)
    assert doc["properties"]["kind"] == {"const": "KvResetCertificate"}


def test_a_warm_row_never_says_emptied_for_the_warm_tier() -> None:
    from kubectl_kvreset.job.outcome import PortOutcome
    from kubectl_kvreset.job.verifyrows import _verified
    from kubectl_kvreset.report import ExitCode

    po = PortOutcome(namespace="ns", pod="p", container="vllm", port=8000, role=None, owner="deployment/d",
                     version="0.32.0", tiers={"gpu": ("emptied",), "fs": ("emptied",)}, result="emptied",
                     messages=(), steps=("api-reset", "clear-fs"), calls=1, busy_answers=0, left=(),
                     code=ExitCode.OK)
    warm = proof(Reading("clear-fs", "p", 32, {"disk": 32}))
    got, code = _verified(po, [warm])
    assert code is ExitCode.FAILED and got.result == "warm"
    assert got.tiers == {"gpu": ("emptied",), "fs": ("warm",)}
    assert [(lt.tier, "clear-fs" in (lt.remedy or "")) for lt in got.left] == [("fs", True)]
    cold, code = _verified(po, [proof(Reading("clear-fs", "p", 0))])
    assert code is ExitCode.OK and cold.result == "emptied"
    unproved, code = _verified(po, [proof(unverifiable="prefix caching off")])
    assert code is ExitCode.UNCONFIRMED and unproved.result == "emptied"


def busy_port(engines_emptied: tuple[str, ...] = ()) -> object:
    from kubectl_kvreset.job.outcome import PortOutcome
    from kubectl_kvreset.report import ExitCode

    return PortOutcome(namespace="ns", pod="p", container="vllm", port=8000, role=None, owner="deployment/d",
                       version="0.32.0", tiers={"gpu": ("not emptied",)}, result="busy", messages=(),
                       steps=("api-reset",), calls=3, busy_answers=3, left=(), code=ExitCode.FAILED,
                       reset_busy=True, engines_emptied=engines_emptied)


def test_an_engine_whose_reset_was_busy_is_never_cold() -> None:
    from kubectl_kvreset.job.verifyrows import BUSY_TEXT, mark_busy

    # two data-parallel engines, engine 0 shown emptied around the last reset, engine 1 busy
    e0 = EngineProof("ns", "p", "vllm", 8000, "0", block_size=16, probes=[Reading("api-reset", "p", 0)])
    e1 = EngineProof("ns", "p", "vllm", 8000, "1", block_size=16, probes=[Reading("api-reset", "p", 0)])
    mark_busy(busy_port(("0",)), [e0, e1])  # type: ignore[arg-type]
    assert verdict(e0) == ("cold", "cold")
    # a miss on a busy engine (its canary evicted, say) proves nothing: busy, never cold
    assert verdict(e1) == ("busy", f"busy: {BUSY_TEXT}")
    # a hit stays warm: the measurement is the stronger statement
    hit = EngineProof("ns", "p", "vllm", 8000, "1", block_size=16,
                      probes=[Reading("api-reset", "p", 32, {"device": 32})])
    mark_busy(busy_port(("0",)), [hit])  # type: ignore[arg-type]
    assert verdict(hit)[0] == "warm"
    # one engine, no split: busy too
    one = proof(Reading("api-reset", "p", 0))
    mark_busy(busy_port(), [one])  # type: ignore[arg-type]
    assert verdict(one)[0] == "busy"


def test_a_busy_but_cold_row_earns_exit_1_and_keeps_its_result() -> None:
    from kubectl_kvreset.job.verifyrows import _verified, mark_busy
    from kubectl_kvreset.report import ExitCode

    po = busy_port()
    one = proof(Reading("api-reset", "p", 0))
    mark_busy(po, [one])  # type: ignore[arg-type]
    got, code = _verified(po, [one])  # type: ignore[arg-type]
    assert got.result == "busy" and code is ExitCode.FAILED


def test_the_dry_run_lists_the_verify_steps_per_port() -> None:
    from types import SimpleNamespace

    from kubectl_kvreset.job.verify import planned_steps, probe_points, verify_codes

    ports = (SimpleNamespace(port=8000), SimpleNamespace(port=8001))
    p = SimpleNamespace(not_running=None, pod=SimpleNamespace(ports=ports), query=(("reset_external", "true"),),
                        has=lambda step: step == "api-reset")
    assert probe_points(p, "none", store=True) == ("api-reset", "store")  # type: ignore[arg-type]
    assert probe_points(p, "restart", store=False) == ("api-reset", "rollout")  # type: ignore[arg-type]
    got = planned_steps(p, "none", store=True)  # type: ignore[arg-type]
    assert [g["port"] for g in got] == [8000, 8001]
    steps = got[0]["steps"]
    assert steps[0].startswith("seed: ") and "(api-reset, store)" in steps[0]
    assert steps[1].startswith("control: ")
    assert steps[2:4] == ["probe after api-reset", "probe after store"]
    assert steps[4].startswith("final reset: POST /reset_prefix_cache?reset_external=true")
    assert verify_codes(got) == ("8000: seed,control,probe:api-reset,probe:store,final-reset; "
                                 "8001: seed,control,probe:api-reset,probe:store,final-reset")
    assert planned_steps(SimpleNamespace(not_running="x"), "none", store=False) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("doc", ["README.md", "docs/clear.md"])
def test_the_published_certificate_examples_validate_against_the_schema(doc: str) -> None:
    import re
    from pathlib import Path

    import jsonschema

    from kubectl_kvreset.job.certificate import schema

    text = (Path(__file__).resolve().parents[2] / doc).read_text(encoding="utf-8")
    examples = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S) if '"KvResetCertificate"' in b]
    assert examples, f"{doc} shows no certificate"
    for example in examples:
        jsonschema.validate(example, schema(), format_checker=jsonschema.FormatChecker())
        readings = [r for t in example["targets"] for e in t["proof"]["engines"] for r in [e["control"], *e["probes"]]]
        assert all("found" in r for r in readings), readings
