"""The sub-commands of ``kubectl kvreset``: name -> (module under :mod:`kubectl_kvreset.cli`,
short help). The short help is here so that listing or completing commands imports none of them."""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "detect": ("detect", "List the vLLM server pods: owner, role, container, API ports, version, dev mode, tiers."),
    "clear": ("clear", "Empty the KV cache tiers of the targeted vLLM pods and say what was left."),
    "clear-fs": ("clear_fs", "Empty the FS offload tier of the targeted vLLM pods, once per backing volume."),
    "clear-store": ("clear_store", "Empty the shared stores (Redis/Valkey, Mooncake) the targeted vLLM pods use."),
    "devmode": ("devmode", "Show, enable or disable vLLM's dev mode (VLLM_SERVER_DEV_MODE) per owner."),
    "restart": ("restart", "Restart the owners of the targeted vLLM pods (prefill first) and wait for the rollout."),
    "metrics": ("metrics", "Show KV-cache usage and prefix-cache hit counters per pod, port and engine."),
    "options": ("globalflags", "List the global flags (kubeconfig, context, namespace, ...) every command accepts."),
}
