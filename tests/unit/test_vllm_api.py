"""Reading vLLM's answers: reset bodies per version, /version, /metrics."""

from __future__ import annotations

import pytest
from packaging.version import Version

from kubectl_kvreset.engines.vllm.api import (
    MetricsParseError,
    ResetOutcome,
    extra_reset_routes,
    parse_metrics,
    parse_version,
    read_reset_answer,
    reset_query,
    version_from_body,
)
from tests.unit.data import METRICS_SAMPLE as SAMPLE


@pytest.mark.parametrize("status,body,outcome,retry", [
    (200, b'{"success":true}', ResetOutcome.CLEARED, False),
    (200, b'{"success":false}', ResetOutcome.BUSY, True),
    (200, b"", ResetOutcome.UNCONFIRMED, False),
    (404, b'{"detail":"Not Found"}', ResetOutcome.DEV_MODE_OFF, False),
    (500, b'{"error":{"message":"Call to reset_prefix_cache method failed","type":"InternalServerError",'
          b'"param":null,"code":500}}',
     ResetOutcome.SERVER_ERROR, True),
    (500, b"Internal Server Error", ResetOutcome.SERVER_ERROR, True),
    (400, b'{"error":{"message":"1 validation error","type":"Bad Request","param":"query.reset_external","code":400}}',
     ResetOutcome.BAD_REQUEST, False),
    (200, b"<html>", ResetOutcome.UNEXPECTED, False),
])
def test_read_reset_answer(status: int, body: bytes, outcome: ResetOutcome, retry: bool) -> None:
    got = read_reset_answer(status, body)
    assert (got.outcome, got.retryable) == (outcome, retry)


def test_server_error_detail_carries_vllm_message() -> None:
    got = read_reset_answer(500, b'{"error":{"message":"Failed to reset KV cache","code":500}}')
    assert "Failed to reset KV cache" in got.detail


def test_versions() -> None:
    assert parse_version("0.26.0") == Version("0.26.0")
    assert parse_version("v0.23.1.dev42+gabc1234") == Version("0.23.1.dev42+gabc1234")
    assert parse_version("dev") is None and parse_version("") is None
    assert version_from_body(b'{"version":"0.33.0"}') == "0.33.0"
    assert version_from_body(b"not json") is None


def test_extra_routes_follow_the_version() -> None:
    assert extra_reset_routes(Version("0.11.0")) == ()
    assert extra_reset_routes(Version("0.11.1")) == ("/reset_mm_cache",)
    assert extra_reset_routes(Version("0.16.0")) == ("/reset_mm_cache", "/reset_encoder_cache")
    assert extra_reset_routes(None) == ()


def test_reset_query() -> None:
    assert reset_query(Version("0.26.0")) == [("reset_external", "true")]
    assert reset_query(None, reset_running_requests=True) == [
        ("reset_external", "true"), ("reset_running_requests", "true")]


def test_metrics_sample_parses_with_new_names() -> None:
    engines = parse_metrics(SAMPLE.read_text())
    assert [e.engine for e in engines] == ["0"]
    e = engines[0]
    assert e.usage_metric == "vllm:kv_cache_usage_perc"
    assert e.usage is not None and 0 <= e.usage <= 1
    assert e.prefix_queries is not None and e.prefix_hits is not None
    assert e.model == "meta-llama/Llama-3.1-8B-Instruct"


OLD = """# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.5
# HELP vllm:gpu_prefix_cache_hits_total hits
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 10.0
"""


def test_old_usage_name_is_used_when_only_it_is_exported() -> None:
    engines = parse_metrics(OLD)
    assert [(e.engine, e.usage, e.usage_metric) for e in engines] == [
        ("0", 0.25, "vllm:gpu_cache_usage_perc"), ("1", 0.5, "vllm:gpu_cache_usage_perc")]
    assert engines[0].prefix_hits == 10.0 and engines[0].external_hits is None


def test_garbage_metrics_raise() -> None:
    with pytest.raises(MetricsParseError):
        parse_metrics("vllm:x{engine=0 1 2 3\n")
