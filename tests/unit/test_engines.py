"""The data-parallel engine count behind one API port: the ``engine`` labels of ``/metrics``
(parsed with prometheus_client), the decision between them and the serve flags, and the row
text of a reset answer that speaks for engine 0 only."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_kvreset.job.outcome import engine_zero_only
from kubectl_kvreset.job.probes import needs_engine_labels
from kubectl_kvreset.pods import ApiPort
from kubectl_kvreset.vllm_api import EngineCount, MetricsParseError, engine_count, engine_labels, engine_list

SAMPLE = Path(__file__).resolve().parents[2] / ".." / "shared" / "research" / "vllm-metrics-sample.txt"


def scrape(*engines: str, extra: str = "") -> str:
    """A 0.32.0-shaped scrape: gauges and counters labelled per engine, one family without it."""
    lines = ["# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
             "# TYPE vllm:kv_cache_usage_perc gauge"]
    lines += [f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="m"}} 0.1' for e in engines]
    lines += ["# HELP vllm:prefix_cache_hits_total Prefix cache hits.", "# TYPE vllm:prefix_cache_hits_total counter"]
    lines += [f'vllm:prefix_cache_hits_total{{engine="{e}",model_name="m"}} 16.0' for e in engines]
    lines += ["# HELP vllm:admission_rejections_total Rejections.", "# TYPE vllm:admission_rejections_total counter",
              'vllm:admission_rejections_total{model_name="m",reason="queue"} 0.0',
              "# HELP python_gc_objects_collected_total Objects.", "# TYPE python_gc_objects_collected_total counter",
              'python_gc_objects_collected_total{engine="gc",generation="0"} 1.0']
    return "\n".join(lines) + "\n" + extra


def test_engine_labels_are_the_vllm_families_engine_values_in_numeric_order() -> None:
    assert engine_labels(scrape("0", "1", "10", "2")) == ("0", "1", "2", "10")
    assert engine_labels(scrape("2", "3")) == ("2", "3")
    # a family of another library that happens to carry the label is not vLLM's
    assert "gc" not in engine_labels(scrape("0"))
    # vLLM before 0.8 had no engine label; a scrape of something else has no vllm: family
    assert engine_labels('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 0\n') == ()
    assert engine_labels("") == ()


def test_engine_labels_of_the_recorded_scrape() -> None:
    if not SAMPLE.exists():
        pytest.skip(f"{SAMPLE} not present (the shared research fixtures)")
    assert engine_labels(SAMPLE.read_text()) == ("0",)


def test_engine_labels_refuse_what_is_not_prometheus_text() -> None:
    with pytest.raises(MetricsParseError):
        engine_labels("vllm:kv_cache_usage_perc{engine=\"0\" 0.1\n")


def test_the_labels_win_and_a_disagreement_is_noted() -> None:
    got = engine_count(1, ("0", "1", "2", "3"), port=8000)
    assert got == EngineCount(4, ("0", "1", "2", "3"), "metrics", got.note)
    assert got.note == ("data-parallel engines behind port 8000: the serve flags give 1, the engine labels of "
                        "GET /metrics show 4 (engines 0-3); the /metrics count is used")
    fewer = engine_count(4, ("3",), port=8000)  # the flags said 4, this server manages one rank
    assert fewer.count == 1 and fewer.source == "metrics" and "show 1 (engine 3)" in (fewer.note or "")
    agree = engine_count(2, ("2", "3"), port=8000)
    assert agree == EngineCount(2, ("2", "3"), "metrics", None)


def test_without_labels_the_flags_decide() -> None:
    assert engine_count(4, None) == EngineCount(4, (), "flags", None)
    assert engine_count(3, ()) == EngineCount(3, (), "flags", None)  # a scrape without the label
    unread = engine_count(2, None, unread="GET /metrics answered 500", port=8000)
    assert unread.count == 2 and unread.source == "flags"
    assert unread.note is not None and "GET /metrics not read (GET /metrics answered 500)" in unread.note
    assert engine_count(0, None).count == 1


def test_engine_list_joins_runs() -> None:
    assert engine_list(("1",)) == "engine 1"
    assert engine_list(("1", "2", "3")) == "engines 1-3"
    assert engine_list(("1", "3", "5", "6")) == "engines 1, 3, 5-6"


def test_which_versions_need_the_count() -> None:
    # vllm_api.RESET_ALL_ENGINES_SINCE: 0.32.0 ANDs every engine's answer
    assert needs_engine_labels("0.26.0") and needs_engine_labels("0.31.1") and needs_engine_labels(None)
    assert needs_engine_labels("dev")  # an unknown build counts as engine 0 only
    assert not needs_engine_labels("0.32.0") and not needs_engine_labels("0.33.0")


def test_the_row_names_the_engines_and_the_source() -> None:
    port = ApiPort(8000, "http")
    by_labels = engine_zero_only("0.26.0", 2, port, ("2", "3"))
    assert by_labels is not None
    assert by_labels.startswith("vLLM 0.26.0 answers the reset for engine 2 only: engine 3 of the 2 data-parallel "
                                "engines behind port 8000 (the engine labels of GET /metrics) are not confirmed")
    by_flags = engine_zero_only("0.26.0", 4, port)
    assert by_flags is not None and "engine 0 only: engines 1-3 of the 4" in by_flags and "(the serve flags)" in by_flags
    assert engine_zero_only("0.32.0", 4, port, ("0", "1", "2", "3")) is None
    assert engine_zero_only("0.26.0", 1, port, ("0",)) is None
