"""vLLM as an :class:`~kubectl_kvreset.engines.base.Engine`: each answer delegates to the
vLLM modules of this package (:mod:`.servecmd`, :mod:`.kvconfig`, :mod:`.api`, :mod:`.liveconfig`).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.version import Version

from ...tiers import KVLayout
from ..base import ConfigReader, Engine, EngineMetrics, LiveConfig, ResetAnswer, ResetOutcome, ServeConfig
from . import api, canary, liveconfig
from .kvconfig import LMCACHE_CONNECTORS, layout_from_serve
from .servecmd import parse_container

__all__ = ["DEV_MODE_ENV", "VllmEngine", "lmcache_env_unread"]

#: The variable that mounts vLLM's dev routes (the reset routes among them) when it is a
#: non-zero integer (``vllm/envs.py``).
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


class VllmEngine(Engine):
    """vLLM's API server (``vllm serve``, ``python3 -m vllm.entrypoints.openai.api_server``):
    ``POST /reset_prefix_cache`` (with ``reset_external``), ``/reset_mm_cache`` and
    ``/reset_encoder_cache`` by version, served only in dev mode; ``GET /version``;
    ``GET /server_info?config_format=json`` for the live connector."""

    name = "vllm"
    version_route = "/version"
    reset_route = "/reset_prefix_cache"
    live_config_route = ("/server_info", (("config_format", "json"),))
    dev_mode_env = DEV_MODE_ENV
    preempts_running = True
    routes_from_openapi = True
    step_codes = (("POST /reset_prefix_cache", "prefix"), ("POST /reset_mm_cache", "mm"),
                  ("POST /reset_encoder_cache", "encoder"))

    def server_config(self, container: Mapping[str, Any], env: Mapping[str, str],
                      config_reader: ConfigReader | None = None) -> ServeConfig | None:
        """:func:`.servecmd.parse_container` (raises :class:`.servecmd.ServeCommandError`)."""
        return parse_container(container, env, config_reader=config_reader)

    def kv_layout(self, config: ServeConfig, env: Mapping[str, str]) -> KVLayout:
        """:func:`.kvconfig.layout_from_serve`."""
        return layout_from_serve(config, env)

    def spec_notes(self, container: Mapping[str, Any], layout: KVLayout) -> list[str]:
        """With an LMCache connector: :func:`lmcache_env_unread`."""
        if any(c in LMCACHE_CONNECTORS for c in layout.connectors):
            return lmcache_env_unread(container)
        return []

    def read_version(self, body: bytes) -> str | None:
        """:func:`.api.version_from_body`."""
        return api.version_from_body(body)

    def release(self, version: str | None) -> Version | None:
        """:func:`.liveconfig.release_version`."""
        return liveconfig.release_version(version)

    def reset_query(self, release: Version | None, *, reset_external: bool = True,
                    reset_running_requests: bool = False) -> list[tuple[str, str]]:
        """:func:`.api.reset_query`."""
        return api.reset_query(release, reset_external=reset_external, reset_running_requests=reset_running_requests)

    def extra_reset_routes(self, release: Version | None) -> tuple[str, ...]:
        """:func:`.api.extra_reset_routes`."""
        return api.extra_reset_routes(release)

    def read_reset_answer(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> ResetAnswer:
        """:func:`.api.read_reset_answer`."""
        return api.read_reset_answer(status, body, headers)

    def busy_reason(self, elapsed_s: float, answers: int) -> str:
        """vLLM's ``success:false`` answers: blocks held by running requests or transfers."""
        return (f"vLLM kept answering success:false for {elapsed_s:.1f}s ({answers} answers; "
                "blocks held by running requests or transfers)")

    def unconfirmed_text(self, answer: ResetAnswer) -> str:
        """vLLM's empty 200 (before 0.26)."""
        return "vLLM < 0.26 answers an empty 200: the reset ran but its result is not known"

    def answer_contradicts(self, version: str | None, outcome: ResetOutcome | None) -> bool:
        """A ``{"success": ...}`` body from a release before 0.26, or an empty 200 from 0.26 on
        (vllm PR #46893): the pod runs another build than its template reported."""
        release = liveconfig.release_version(version)
        if outcome in (ResetOutcome.CLEARED, ResetOutcome.BUSY):
            return release is not None and release < api.JSON_RESET_BODY_SINCE
        if outcome is ResetOutcome.UNCONFIRMED:
            return release is not None and release >= api.JSON_RESET_BODY_SINCE
        return False

    def read_metrics(self, text: str) -> list[EngineMetrics]:
        """:func:`.api.parse_metrics` (one per ``engine`` label)."""
        return api.parse_metrics(text)

    def request_counts(self, metrics: str) -> dict[str, tuple[int, int]] | None:
        """``vllm:num_requests_running`` / ``vllm:num_requests_waiting`` per ``engine`` label
        (:func:`.canary.cache_counters`; raises its ``MetricsParseError``)."""
        return {label: (int(c.running or 0), int(c.waiting or 0))
                for label, c in canary.cache_counters(metrics).items()}

    def counts_engines_by_metrics(self, version: str | None) -> bool:
        """Not :func:`.api.reset_answers_for_every_engine` on that version."""
        return not api.reset_answers_for_every_engine(api.parse_version(version))

    def read_live_config(self, body: bytes) -> LiveConfig:
        """:func:`.liveconfig.read_server_info`."""
        return liveconfig.read_server_info(body)


def lmcache_env_unread(container: Mapping[str, Any]) -> list[str]:
    """Notes for ``LMCACHE_*`` settings the pod spec does not hold literally: an ``env`` entry
    with ``valueFrom`` a ConfigMap or Secret key, and ``envFrom`` sources (which may set any
    ``LMCACHE_*``). The tier list here reads literal values only, so a remote store or disk
    configured that way is missing from it; ``clear-store`` reads those sources (and needs
    ``get`` on them)."""
    out: list[str] = []
    last = {str(e.get("name") or ""): e for e in container.get("env") or []}  # the last entry of a name wins
    for name, entry in last.items():
        source = (entry.get("valueFrom") or {}) if name.startswith("LMCACHE_") else {}
        for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
            ref = source.get(key)
            if isinstance(ref, Mapping):
                out.append(f"{name} comes from {kind} {ref.get('name')} key {ref.get('key')}, not read here: "
                           "a store or disk it names is not in the tiers (clear-store reads it)")
    for src in container.get("envFrom") or []:
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = src.get(key)
            if isinstance(ref, Mapping):
                out.append(f"envFrom {kind} {ref.get('name')} may set LMCACHE_* settings, not read here: a store or "
                           "disk it names is not in the tiers (clear-store reads it)")
    return out
