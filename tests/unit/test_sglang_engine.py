"""SGLang behind the engine seam (kubectl_kvreset/engines/sglang): which containers run its server,
on which port, with which keys, data-parallel size and tiers, and what its ``/flush_cache`` answers
mean (bodies and statuses of sglang 0.5.23, ``python/sglang/srt/entrypoints/http_server.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from kubectl_kvreset.engines import engine_for, engine_named
from kubectl_kvreset.engines.base import ResetOutcome, ServerCommandError
from kubectl_kvreset.engines.sglang.cmdline import SglangConfig, sglang_entrypoint
from kubectl_kvreset.engines.sglang.engine import SglangEngine
from kubectl_kvreset.otherpods import describe_other_containers
from kubectl_kvreset.pods import describe_pod_containers
from kubectl_kvreset.tiers import TierKind

ENGINE = engine_named("sglang")
FLUSHED = (b"Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
           b"requests, the operation will not be performed.)\n")


def _cfg(command: list[str], env: list[dict[str, Any]] | None = None, args: list[str] | None = None) -> SglangConfig:
    container: dict[str, Any] = {"name": "modelserver", "image": "lmsysorg/sglang:v0.5.23", "command": command}
    if args is not None:
        container["args"] = args
    if env is not None:
        container["env"] = env
    literal = {e["name"]: e["value"] for e in env or [] if "value" in e}
    found = engine_for(container, literal)
    assert found is not None and found[0].name == "sglang"
    assert isinstance(found[1], SglangConfig)
    return found[1]


def test_registry_has_sglang() -> None:
    assert isinstance(ENGINE, SglangEngine)
    assert ENGINE.dev_mode_env is None and ENGINE.reset_route == "/flush_cache"
    assert ENGINE.version_route == "/server_info"


@pytest.mark.parametrize("words,expected", [
    (["python3", "-m", "sglang.launch_server", "--port", "1"], ("sglang.launch_server", 3)),
    (["/usr/bin/python3", "-u", "-m", "sglang.launch_server"], ("sglang.launch_server", 4)),
    (["sglang", "serve", "--model-path", "m"], ("sglang serve", 2)),
    (["sglang", "version"], None),
    (["python3", "-m", "sglang_router.launch_router"], None),
    (["python3", "-m", "vllm.entrypoints.openai.api_server"], None),
    (["echo", "python3", "-m", "sglang.launch_server"], None),
])
def test_entrypoints(words: list[str], expected: tuple[str, int] | None) -> None:
    assert sglang_entrypoint(words) == expected


def test_llm_d_modelserver_form() -> None:
    """llm-d's SGLang guides: container ``modelserver``, ``python3 -m sglang.launch_server
    --model-path ... --port 8000``, label ``llm-d.ai/engine-type: sglang``."""
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"llm-d.ai/engine-type": "sglang"}},
           "spec": {"containers": [{"name": "modelserver", "image": "lmsysorg/sglang:v0.5.23",
                                    "command": ["python3", "-m", "sglang.launch_server"],
                                    "args": ["--model-path", "Qwen/Qwen3-0.6B", "--port", "8000", "--host", "0.0.0.0",
                                             "--served-model-name", "qwen", "--enable-metrics"]}]}}
    (described,) = describe_pod_containers(pod)
    assert described.engine.name == "sglang" and described.container == "modelserver"
    assert [p.port for p in described.ports] == [8000] and described.serve.model == "Qwen/Qwen3-0.6B"
    assert described.serve.served_model_name == "qwen"
    assert described.dev_mode.describe() == "not needed"
    assert [t.kind for t in described.layout.tiers] == [TierKind.GPU]
    assert describe_other_containers(pod, vllm_containers=[described.container]) == []


def test_default_port_host_and_bash_script() -> None:
    cfg = _cfg(["sglang", "serve", "--model-path", "m"])
    assert cfg.api_ports == (30000,) and cfg.host == "127.0.0.1" and cfg.scheme == "http" and cfg.dp_size == 1
    cfg = _cfg(["/bin/sh", "-c"], [{"name": "PORT", "value": "8000"}],
               ["exec python3 -m sglang.launch_server --model-path org/model --host 0.0.0.0 --port $(PORT)"])
    assert cfg.api_ports == (8000,) and cfg.host == "0.0.0.0"
    cfg = _cfg(["bash", "-c", "P=31000\npython3 -m sglang.launch_server --model=m --port=$P --dp 4 --ssl-certfile c"])
    assert cfg.api_ports == (31000,) and cfg.dp_size == 4 and cfg.scheme == "https" and cfg.model == "m"


def test_dp_size_spellings() -> None:
    for flag in ("--dp-size", "--dp", "--data-parallel-size", "--dp_size"):
        assert _cfg(["sglang", "serve", flag, "2"]).dp_size == 2
    with pytest.raises(ServerCommandError, match="--port"):
        engine_for({"name": "c", "image": "x", "command": ["sglang", "serve", "--port", "eight"]}, {})


def test_keys_literal_env_and_secret() -> None:
    cfg = _cfg(["sglang", "serve", "--api-key", "sk-user"])
    assert cfg.reset_key is not None and cfg.reset_key.flag == "--api-key"
    assert ENGINE.reset_headers(cfg, {}) == (("Authorization", "Bearer sk-user"),)
    assert "sk-user" not in " ".join(cfg.argv) and "sk-user" not in repr(cfg)
    cfg = _cfg(["sglang", "serve", "--api-key", "sk-user", "--admin-api-key", "$(ADMIN)"],
               [{"name": "ADMIN", "valueFrom": {"secretKeyRef": {"name": "sg-keys", "key": "admin"}}}])
    assert cfg.reset_key is not None and cfg.reset_key.flag == "--admin-api-key"
    assert ENGINE.secret_keys(cfg) == (("--admin-api-key", "sg-keys", "admin"),)
    assert ENGINE.reset_headers(cfg, {}) == ()
    assert ENGINE.reset_headers(cfg, {"--admin-api-key": "sk-admin"}) == (("Authorization", "Bearer sk-admin"),)
    cfg = _cfg(["sglang", "serve", "--admin-api-key", "$(ADMIN)"], [{"name": "ADMIN", "value": "sk-lit"}])
    assert ENGINE.reset_headers(cfg, {}) == (("Authorization", "Bearer sk-lit"),) and ENGINE.secret_keys(cfg) == ()
    assert "sk-lit" not in repr(cfg.admin_key) and "sk-lit" not in " ".join(cfg.argv)
    assert _cfg(["sglang", "serve"]).reset_key is None


def test_hicache_tiers() -> None:
    cfg = _cfg(["sglang", "serve", "--enable-hierarchical-cache", "--hicache-storage-backend", "file"])
    layout = ENGINE.kv_layout(cfg, {})
    assert [t.kind for t in layout.tiers] == [TierKind.GPU, TierKind.CPU, TierKind.SHARED]
    resets = ENGINE.tier_resets(layout, None)
    assert resets is not None and [r.emptied for r in resets] == [True, True, False]
    assert "the store step deletes this server's files" in resets[2].reason
    cfg = _cfg(["sglang", "serve", "--enable-hierarchical-cache", "--hicache-storage-backend", "mooncake"])
    resets = ENGINE.tier_resets(ENGINE.kv_layout(cfg, {}), None)
    assert resets is not None and [r.emptied for r in resets] == [True, True, False]
    assert "/hicache/storage-backend/clear" in resets[2].reason and "every model" in resets[2].reason
    cfg = _cfg(["sglang", "serve", "--enable-hierarchical-cache"])
    assert [t.kind for t in ENGINE.kv_layout(cfg, {}).tiers] == [TierKind.GPU, TierKind.CPU]
    # a storage backend without HiCache is not used
    cfg = _cfg(["sglang", "serve", "--hicache-storage-backend", "file"])
    assert [t.kind for t in ENGINE.kv_layout(cfg, {}).tiers] == [TierKind.GPU]


def test_version_and_query() -> None:
    assert ENGINE.read_version(b'{"version": "0.5.23", "dp_size": 1}') == "0.5.23"
    assert ENGINE.read_version(b"not json") is None and ENGINE.read_version(b"[]") is None
    assert str(ENGINE.release("0.5.23.post1")) == "0.5.23" and ENGINE.release("dev") is None
    assert ENGINE.busy_query(30.0) == [("timeout", "30")] and ENGINE.busy_query(2.5) == [("timeout", "2.5")]
    assert ENGINE.reset_query(None) == [] and ENGINE.extra_reset_routes(None) == ()


@pytest.mark.parametrize("status,body,outcome,retryable", [
    (200, FLUSHED, ResetOutcome.CLEARED, False),
    (400, b"Flush cache failed.\n", ResetOutcome.BUSY, True),
    (400, b"Timed out waiting for idle state.", ResetOutcome.BUSY, True),
    (400, b"Another flush_cache is already in progress.", ResetOutcome.BUSY, True),
    (400, b'{"object":"error","message":"timeout: bad","code":400}', ResetOutcome.BAD_REQUEST, False),
    (422, b'{"detail":[{"loc":["query","timeout"]}]}', ResetOutcome.BAD_REQUEST, False),
    (401, b'{"error":"Unauthorized"}', ResetOutcome.BAD_REQUEST, False),
    (404, b'{"detail":"Not Found"}', ResetOutcome.UNEXPECTED, False),
    (500, b"boom", ResetOutcome.SERVER_ERROR, True),
])
def test_answers(status: int, body: bytes, outcome: ResetOutcome, retryable: bool) -> None:
    got = ENGINE.read_reset_answer(status, body)
    assert (got.outcome, got.retryable) == (outcome, retryable)


def test_401_names_the_missing_key() -> None:
    unauthorized = b'{"error":"Unauthorized"}'
    cfg = _cfg(["sglang", "serve", "--admin-api-key", "$(ADMIN)"],
               [{"name": "ADMIN", "valueFrom": {"secretKeyRef": {"name": "sg-keys", "key": "admin"}}}])
    got = ENGINE.read_reset_answer_for(cfg, 401, unauthorized)
    assert "--admin-api-key from Secret sg-keys key admin" in got.detail
    got = ENGINE.read_reset_answer_for(_cfg(["sglang", "serve"]), 401, unauthorized)
    assert "--admin-api-key or --api-key" in got.detail
    got = ENGINE.read_reset_answer_for(_cfg(["sglang", "serve", "--api-key", "sk-x"]), 401, unauthorized)
    assert "--api-key of the pod spec" in got.detail and "sk-x" not in got.detail


def test_dp_200_is_unconfirmed() -> None:
    got = ENGINE.read_reset_answer_for(_cfg(["sglang", "serve", "--dp-size", "2"]), 200, FLUSHED)
    assert got.outcome is ResetOutcome.UNCONFIRMED and "#39562" in got.detail and "first rank" in got.detail
    assert ENGINE.unconfirmed_text(got) == got.detail
    got = ENGINE.read_reset_answer_for(_cfg(["sglang", "serve", "--dp-size", "1"]), 200, FLUSHED)
    assert got.outcome is ResetOutcome.CLEARED


def test_label_only_pod_stays_an_other_pod() -> None:
    """A pod labelled SGLang whose command names no engine is still listed ``left`` by otherpods."""
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"llm-d.ai/engine-type": "sglang"}},
           "spec": {"containers": [{"name": "modelserver", "image": "custom:1", "command": ["/start.sh"]}]}}
    assert describe_pod_containers(pod) == []
    (other,) = describe_other_containers(pod)
    assert other.engine == "sglang" and other.port == 30000


def test_vllm_answers_unchanged_by_the_hooks() -> None:
    vllm = engine_named("vllm")
    assert vllm.tier_resets(ENGINE.kv_layout(_cfg(["sglang", "serve"]), {}), None) is None
    assert vllm.busy_query(30.0) == [] and vllm.secret_keys(_cfg(["sglang", "serve"])) == ()
    assert vllm.answer_contradicts("0.23.0", ResetOutcome.CLEARED)
    assert not ENGINE.answer_contradicts("0.5.23", ResetOutcome.CLEARED)


def test_request_counts_for_wait_idle() -> None:
    text = ('# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{dp_rank="0"} 0.0\n'
            'sglang:num_running_reqs{dp_rank="1"} 2.0\n# TYPE sglang:num_queue_reqs gauge\n'
            'sglang:num_queue_reqs{dp_rank="0"} 0.0\nsglang:num_queue_reqs{dp_rank="1"} 1.0\n')
    assert ENGINE.request_counts(text) == {"0": (0, 0), "1": (2, 1)}
    assert ENGINE.request_counts("# TYPE other gauge\nother 1.0\n") is None
    vllm_text = 'vllm:num_requests_running{engine="0"} 1.0\nvllm:num_requests_waiting{engine="0"} 0.0\n'
    assert engine_named("vllm").request_counts(vllm_text) == {"0": (1, 0)}
    assert ENGINE.request_counts(vllm_text) is None  # another engine's metrics never read as idle
    assert not ENGINE.counts_engines_by_metrics("0.5.23") and not ENGINE.routes_from_openapi


def test_step_code() -> None:
    from kubectl_kvreset.report import step_codes

    assert step_codes(["POST /flush_cache?timeout=30", "POST /reset_prefix_cache?reset_external=true"]) == [
        "flush", "prefix"]


METRICS_0523 = """# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",engine_type="unified",model_name="tiny"} 25.0
sglang:cached_tokens_total{cache_source="host",engine_type="unified",model_name="tiny"} 3.0
sglang:cached_tokens_total{cache_source="storage",engine_type="unified",model_name="tiny"} 0.0
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{engine_type="unified",model_name="tiny"} 90.0
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="tiny",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.25
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{engine_type="unified",model_name="tiny",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.4
"""


def test_metrics_count_hits_of_every_source_and_show_no_stale_gauge() -> None:
    (m,) = ENGINE.read_metrics(METRICS_0523)
    assert (m.engine, m.model, m.prefix_hits, m.prefix_queries) == ("", "tiny", 28.0, 90.0)
    assert m.usage is None and m.usage_metric is None
    assert m.note is not None and "sglang:cache_hit_rate" in m.note and "sglang:token_usage" in m.note
    assert ENGINE.read_metrics("# nothing of SGLang\nother_metric 1\n") == []
    with pytest.raises(Exception, match="Prometheus"):
        ENGINE.read_metrics("sglang:cached_tokens_total{cache_source= 1\n")
