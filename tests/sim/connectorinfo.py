"""The KV connectors of a vLLM server as its serve args configure them (tests/sim/serveargs.py):
``--kv-transfer-config`` (MultiConnector children flattened) or ``--kv-offloading-size``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ConnectorInfo:
    """One KV connector (MultiConnector children are flattened into several).

    ``name``: ``kv_connector`` (e.g. ``OffloadingConnector``); ``spec_name``: the Offloading spec
    (``CPUOffloadingSpec`` default, ``TieringOffloadingSpec``, or an out-of-tree name) or None for
    other connectors; ``cpu_tier``: the connector keeps a CPU offload tier; ``fs_roots``:
    container paths of FS tiers (Tiering ``secondary_tiers[type in fs, fs_python].root_dir`` or
    the legacy llm-d ``shared_storage_path``); ``in_multi``: a MultiConnector child.
    Source: ``vllm/v1/kv_offload/factory.py``, ``vllm/v1/kv_offload/tiering/``.
    """

    name: str
    spec_name: str | None = None
    cpu_tier: bool = False
    fs_roots: tuple[str, ...] = ()
    in_multi: bool = False


def _connector_infos(cfg: dict[str, Any], in_multi: bool = False) -> list[ConnectorInfo]:
    name = str(cfg.get("kv_connector") or "")
    extra = cfg.get("kv_connector_extra_config") or {}
    if not isinstance(extra, dict):
        extra = {}
    if name == "MultiConnector":
        out: list[ConnectorInfo] = []
        for child in extra.get("connectors") or []:
            if isinstance(child, dict):
                out.extend(_connector_infos(child, in_multi=True))
        return out
    if not name:
        return []
    if name == "OffloadingConnector":
        spec = str(extra.get("spec_name") or "CPUOffloadingSpec")
        roots: list[str] = []
        cpu = spec in ("CPUOffloadingSpec", "TieringOffloadingSpec")
        if spec == "TieringOffloadingSpec":
            for tier in extra.get("secondary_tiers") or []:
                if isinstance(tier, dict) and tier.get("type") in ("fs", "fs_python") and tier.get("root_dir"):
                    roots.append(str(tier["root_dir"]))
        if extra.get("shared_storage_path"):
            roots.append(str(extra["shared_storage_path"]))
        return [ConnectorInfo(name, spec, cpu, tuple(roots), in_multi)]
    if name == "SimpleCPUOffloadConnector":
        return [ConnectorInfo(name, None, True, (), in_multi)]
    return [ConnectorInfo(name, None, False, (), in_multi)]


def read_connectors(
    kv_transfer_config: dict[str, Any] | None,
    kv_offloading_size: float | None = None,
    kv_offloading_backend: str | None = None,
    env: dict[str, str] | None = None,
    version: str | None = None,
) -> list[ConnectorInfo]:
    """The connectors a server runs, MultiConnector children flattened.

    Without ``--kv-transfer-config``, ``--kv-offloading-size`` with backend ``native`` (default)
    gives ``OffloadingConnector`` + CPU spec, or ``SimpleCPUOffloadConnector`` on vLLM >= 0.33
    with ``VLLM_USE_SIMPLE_KV_OFFLOAD=1``; backend ``lmcache`` gives ``LMCacheConnectorV1``
    (``vllm/config/vllm.py::_post_init_kv_transfer_config``).
    """
    if kv_transfer_config:
        return _connector_infos(kv_transfer_config)
    if kv_offloading_size is None:
        return []
    backend = (kv_offloading_backend or "native").lower()
    if backend == "lmcache":
        return [ConnectorInfo("LMCacheConnectorV1")]
    simple = (env or {}).get("VLLM_USE_SIMPLE_KV_OFFLOAD", "") == "1"
    if simple and version is not None:
        from packaging.version import InvalidVersion, Version

        try:
            if Version(version) >= Version("0.33.0"):
                return [ConnectorInfo("SimpleCPUOffloadConnector", None, True)]
        except InvalidVersion:
            pass
    return [ConnectorInfo("OffloadingConnector", "CPUOffloadingSpec", True)]
