"""Which data-parallel engines behind one API port reset when vLLM 0.32's answer (the AND over
them) is ``success: false``: the request gauges and counters of the ``/metrics`` scrapes around
the last reset call, parsed with prometheus_client."""

from __future__ import annotations

import pytest

from kubectl_kvreset.engines.vllm.api import EngineSplit, MetricsParseError, split_engines


def activity(engines: dict[str, tuple[float, float, float]], *, counters: bool = True) -> str:
    """A 0.32.0-shaped scrape of the request families: ``engine -> (running, waiting, finished)``."""
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="{e}",model_name="m"}} {v[0]}' for e, v in engines.items()]
    lines += ["# TYPE vllm:num_requests_waiting gauge"]
    lines += [f'vllm:num_requests_waiting{{engine="{e}",model_name="m"}} {v[1]}' for e, v in engines.items()]
    if counters:
        lines += ["# TYPE vllm:request_success_total counter"]
        lines += [f'vllm:request_success_total{{engine="{e}",finished_reason="{r}",model_name="m"}} '
                  f'{v[2] if r == "stop" else 1.0}' for e, v in engines.items() for r in ("stop", "length")]
        for fam in ("prompt_tokens", "generation_tokens"):
            lines += [f"# TYPE vllm:{fam}_total counter"]
            lines += [f'vllm:{fam}_total{{engine="{e}",model_name="m"}} {100 * v[2]}' for e, v in engines.items()]
    return "\n".join(lines) + "\n"


def test_an_engine_idle_around_the_last_call_reset_and_one_running_requests_is_warm() -> None:
    before = activity({"0": (0, 0, 3), "1": (12, 0, 0)})
    after = activity({"0": (0, 0, 3), "1": (12, 0, 0)})
    got = split_engines(before, after)
    assert got == EngineSplit(("0",), (("1", 12),), ())
    assert got.describe() == ("engine 0 emptied (no request on it around the last reset, GET /metrics); "
                              "engine 1 still warm (12 requests running)")


def test_an_engine_is_never_emptied_without_proof_it_held_no_block() -> None:
    # a request came and went on engine 0 between the scrapes: it may have held blocks at the call
    moved = split_engines(activity({"0": (0, 0, 3), "1": (2, 0, 0)}), activity({"0": (0, 0, 4), "1": (2, 0, 0)}))
    assert moved.emptied == () and moved.unknown == ("0",)
    # a waiting request, or a gauge that ends at 0 only in the second scrape
    waiting = split_engines(activity({"0": (0, 1, 3)}), activity({"0": (0, 0, 3)}))
    assert waiting.emptied == () and waiting.unknown == ("0",)
    ended = split_engines(activity({"0": (1, 0, 3)}), activity({"0": (0, 0, 4)}))
    assert ended.warm == (("0", 1),) and ended.emptied == ()
    # without the counters, or where a KV connector may hold the blocks of finished requests
    bare = split_engines(activity({"0": (0, 0, 3)}, counters=False), activity({"0": (0, 0, 3)}, counters=False))
    assert bare.unknown == ("0",)
    held = split_engines(activity({"0": (0, 0, 3)}), activity({"0": (0, 0, 3)}), blocks_outlive_requests=True)
    assert held.unknown == ("0",) and held.describe() == "engine 0 not established"
    # an engine seen in one scrape only
    assert split_engines(activity({"0": (0, 0, 3), "1": (0, 0, 1)}), activity({"0": (0, 0, 3)})).unknown == ("1",)
    with pytest.raises(MetricsParseError):
        split_engines("vllm:num_requests_running{engine=\"0\" 1\n", "")
