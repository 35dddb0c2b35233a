"""The data-parallel engine count behind one API port: the ``engine`` labels of ``/metrics``
(parsed with prometheus_client), the decision between them and the serve flags, and the row
text of a reset answer that speaks for engine 0 only."""

from __future__ import annotations

import json

import pytest

from kubectl_kvreset.engines.vllm.api import (
    EngineCount,
    MetricsParseError,
    engine_count,
    engine_labels,
    engine_list,
)
from kubectl_kvreset.job.outcome import engine_zero_only
from kubectl_kvreset.job.probes import needs_engine_labels
from kubectl_kvreset.pods import ApiPort
from tests.unit.data import METRICS_SAMPLE as SAMPLE


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
    assert by_flags is not None and "engine 0 only: engines 1-3 of the 4" in by_flags and \
        "(the serve flags)" in by_flags
    assert engine_zero_only("0.32.0", 4, port, ("0", "1", "2", "3")) is None
    assert engine_zero_only("0.26.0", 1, port, ("0",)) is None


class _Caller:
    """A stand-in for :class:`~kubectl_kvreset.podapi.PodCaller`: answers by path, records paths.
    ``metrics``: the ``/metrics`` answers in turn (the last one repeats)."""

    def __init__(self, version: str, *metrics: tuple[int, str]) -> None:
        self.version = version
        self.metrics = list(metrics)
        self.paths: list[str] = []
        self.sleeps: list[float] = []

    def call(self, ref: object, port: int, method: str, path: str, query: object = (), *, scheme: str = "http",
             timeout_s: float, max_bytes: int = 0) -> object:
        from kubectl_kvreset.kube import HttpAnswer

        self.paths.append(path)
        if path == "/version":
            return HttpAnswer(200, {}, json.dumps({"version": self.version}).encode())
        if path == "/metrics":
            status, text = self.metrics.pop(0) if len(self.metrics) > 1 else self.metrics[0]
            return HttpAnswer(status, {}, text.encode())
        return HttpAnswer(404, {}, b'{"detail":"Not Found"}')

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def stop(self) -> bool:
        return False


def _pod(args: list[str], dev: str = "1") -> object:
    from kubectl_kvreset.pods import describe_pod_containers

    raw = {"metadata": {"name": "p-0", "namespace": "ns", "uid": "u1", "labels": {"pod-template-hash": "h"}},
           "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.26.0",
                                    "command": ["vllm", "serve", "m", *args],
                                    "env": [{"name": "VLLM_SERVER_DEV_MODE", "value": dev}]}]},
           "status": {"phase": "Running"}}
    (pod,) = describe_pod_containers(raw)
    return pod


@pytest.mark.parametrize(("version", "dev", "read"), [("0.26.0", "1", True), ("0.31.0", "1", True),
                                                       ("0.32.0", "1", False), ("0.26.0", "0", False)])
def test_metrics_is_read_only_where_the_count_decides_the_row(version: str, dev: str, read: bool) -> None:
    from kubectl_kvreset.job.planning import dev_mode_on
    from kubectl_kvreset.job.probes import apply_probe, probe_pods

    pod = _pod([], dev)
    caller = _Caller(version, (200, scrape("0", "1", "2", "3")))
    (probe,) = probe_pods(caller, [pod], 4, None, dev_mode_on)
    assert ("/metrics" in caller.paths) is read and caller.paths.count("/metrics") <= 1
    applied = apply_probe(pod, probe)
    assert applied.serve.engines_per_port == (4 if read else 1)
    assert any("the /metrics count is used" in n for n in applied.notes) is read


def test_an_unreadable_metrics_keeps_the_flags_count_with_a_note() -> None:
    from kubectl_kvreset.job.planning import dev_mode_on
    from kubectl_kvreset.job.probes import apply_probe, probe_pods

    pod = _pod(["--data-parallel-size", "2"])
    caller = _Caller("0.26.0", (500, "Internal Server Error"))
    (probe,) = probe_pods(caller, [pod], 4, None, dev_mode_on)
    # read as the metrics command reads it: three calls, 0.5 s then 1 s apart
    assert caller.paths.count("/metrics") == 3 and caller.sleeps == [0.5, 1.0]
    assert probe.engines is None and probe.engines_failure == "GET /metrics answered 500 (3 tries)"
    applied = apply_probe(pod, probe)
    assert applied.serve.engines_per_port == 2 and applied.serve.engines_unknown is None
    assert any("GET /metrics not read (GET /metrics answered 500 (3 tries))" in n for n in applied.notes), applied.notes
    one = _pod([])  # one engine by the flags: still said, engines set elsewhere are not known
    (probe,) = probe_pods(_Caller("0.26.0", (500, "")), [one], 4, None, dev_mode_on)
    notes = apply_probe(one, probe).notes
    assert any("the serve flags' count (1) is used, and engines set outside the flags are not known" in n
               for n in notes), notes


def test_a_metrics_that_fails_once_still_counts_the_engines() -> None:
    from kubectl_kvreset.job.planning import dev_mode_on
    from kubectl_kvreset.job.probes import apply_probe, probe_pods

    pod = _pod([])
    caller = _Caller("0.26.0", (500, "Internal Server Error"), (200, scrape("0", "1", "2", "3")))
    (probe,) = probe_pods(caller, [pod], 4, None, dev_mode_on)
    assert caller.paths.count("/metrics") == 2 and probe.engines == ("0", "1", "2", "3")
    assert apply_probe(pod, probe).serve.engines_per_port == 4


def test_a_count_neither_source_gives_is_unknown() -> None:
    why = "--data-parallel-size $(DP): DP: not permitted to read Secret/dp"
    got = engine_count(1, None, unread="GET /metrics answered 500 (3 tries)", port=8000, flags_unknown=why)
    assert got.count == 1 and got.source == "flags"
    assert got.unknown == f"{why}; GET /metrics not read (GET /metrics answered 500 (3 tries))"
    assert got.note == f"data-parallel engines behind port 8000 not known: {got.unknown}"
    # a scrape without the label does not give it either
    assert engine_count(1, (), flags_unknown=why).unknown == f"{why}; GET /metrics shows no engine label"
    # the labels settle it
    counted = engine_count(1, ("0", "1"), port=8000, flags_unknown=why)
    assert counted.unknown is None and counted.count == 2 and counted.source == "metrics"
    assert counted.note is not None and "the serve flags do not establish the count" in counted.note


def test_a_count_from_a_secret_is_never_written() -> None:
    unread = engine_count(7, None, unread="GET /metrics answered 500", port=8000, flags_secret=True)
    assert unread.count == 7 and unread.unknown is None
    assert unread.note is not None and "7" not in unread.note and "from a Secret, not shown" in unread.note
    labelled = engine_count(7, ("0", "1"), port=8000, flags_secret=True)
    assert labelled.note is not None and "7" not in labelled.note and "(not shown)" in labelled.note
    port = ApiPort(8000, "http")
    row = engine_zero_only("0.26.0", 7, port, secret=True)
    assert row is not None and "7" not in row and "read from a Secret, not shown" in row
    # counted by the labels, the count is the server's own answer, not the Secret's
    assert "engines 1-6 of the 7" in (engine_zero_only("0.26.0", 7, port, tuple(str(i) for i in range(7)),
                                                       secret=True) or "")


def test_an_unknown_count_is_never_confirmed_by_engine_zero() -> None:
    port = ApiPort(8000, "http")
    row = engine_zero_only("0.26.0", 1, port, unknown="--data-parallel-size $(DP): not read")
    assert row is not None and row.startswith(
        "vLLM 0.26.0 answers the reset for engine 0 only, and the number of data-parallel engines behind port "
        "8000 is not known (--data-parallel-size $(DP): not read)")
    assert engine_zero_only(None, 1, port, unknown="x") is not None  # an unknown build: engine 0 only
    # 0.32.0 ANDs every engine's answer: the count does not matter
    assert engine_zero_only("0.32.0", 1, port, unknown="x") is None


def test_apply_probe_keeps_an_unknown_count_when_metrics_fails() -> None:
    from kubectl_kvreset.job.planning import dev_mode_on
    from kubectl_kvreset.job.probes import apply_probe, probe_pods

    pod = _pod(["--data-parallel-size", "$(DP)"])
    assert pod.serve.engines_unknown is not None and "$(DP)" in pod.serve.engines_unknown
    (probe,) = probe_pods(_Caller("0.26.0", (500, "")), [pod], 4, None, dev_mode_on)
    applied = apply_probe(pod, probe)
    assert applied.serve.engines_unknown is not None and "GET /metrics not read" in applied.serve.engines_unknown
    (probe,) = probe_pods(_Caller("0.26.0", (200, scrape("0", "1"))), [pod], 4, None, dev_mode_on)
    applied = apply_probe(pod, probe)
    assert applied.serve.engines_unknown is None and applied.serve.engines_per_port == 2
