"""From a vLLM kv-transfer-config to the KV cache tiers a server fills.

Pure: no I/O. Facts from the vLLM, LMCache and llm-d sources named below:

* GPU prefix cache: always there.
* CPU tier: ``OffloadingConnector`` with ``CPUOffloadingSpec`` (the default spec) or
  ``TieringOffloadingSpec`` (``vllm/v1/kv_offload/``); ``SimpleCPUOffloadConnector``;
  ``--kv-offloading-size`` (``native`` -> OffloadingConnector CPU spec, or
  SimpleCPUOffloadConnector when ``VLLM_USE_SIMPLE_KV_OFFLOAD=1``; ``lmcache`` ->
  ``LMCacheConnectorV1``, ``vllm/config/vllm.py::_post_init_kv_transfer_config``); LMCache's
  in-process local CPU backend.
* FS tier: Tiering ``secondary_tiers[]`` of type ``fs`` (vLLM >= 0.23) or ``fs_python`` (0.22)
  with ``root_dir``; llm-d's legacy ``SharedStorageOffloadingSpec`` ``shared_storage_path``;
  LMCache ``local_disk``.
* Shared stores outside the pods: ``MooncakeStoreConnector`` (Mooncake master), LMCache
  ``remote_url`` (Redis, Valkey, LMCache server, Mooncake, InfiniStore, ...), the LMCache MP
  server of ``LMCacheMPConnector``.
* ``MultiConnector``: its ``connectors`` children, recursively.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from ...tiers import KVLayout, Tier, TierKind
from .servecmd import ServeConfig, unevaluated_in

__all__ = [
    "LMCACHE_CONNECTORS",
    "layout_from_config",
    "layout_from_serve",
    "mark_unevaluated",
]

OFFLOADING_CONNECTOR = "OffloadingConnector"
SIMPLE_CPU_CONNECTOR = "SimpleCPUOffloadConnector"
MULTI_CONNECTOR = "MultiConnector"
MOONCAKE_STORE_CONNECTOR = "MooncakeStoreConnector"
LMCACHE_MP_CONNECTOR = "LMCacheMPConnector"
#: The :attr:`Tier.spec` of an ``LMCacheMPConnector`` tier whose class is vLLM's own copy
#: (``LMCACHE_USE_UPSTREAM_MP`` set, no ``kv_connector_module_path`` naming LMCache's module):
#: vLLM 0.32.0's ``vllm/distributed/kv_transfer/kv_connector/v1/lmcache_mp_connector.py::
#: _resolve_lmcache_mp_connector`` returns ``LMCacheMPConnectorUpstream`` then, which has no
#: ``reset_cache``. Otherwise (spec None) the name resolves to LMCache's own class where lmcache is
#: importable (``lmcache/integration/vllm/lmcache_mp_connector.py``).
LMCACHE_MP_UPSTREAM = "LMCacheMPConnectorUpstream"
#: The module of LMCache's own MP connector class, as ``kv_connector_module_path`` names it.
LMCACHE_MP_MODULE = "lmcache.integration.vllm.lmcache_mp_connector"
CPU_SPEC = "CPUOffloadingSpec"
TIERING_SPEC = "TieringOffloadingSpec"
SHARED_STORAGE_SPEC = "SharedStorageOffloadingSpec"

#: LMCache connectors that run LMCache inside the vLLM process (LMCache
#: ``lmcache/integration/vllm/lmcache_connector_v1.py``).
LMCACHE_CONNECTORS: frozenset[str] = frozenset({
    "LMCacheConnectorV1", "LMCacheConnectorV1Dynamic", "LMCacheConnector",
})

#: Tiering secondary tier types that are a file system under ``root_dir``
#: (``vllm/v1/kv_offload/tiering/fs/manager.py``).
FS_TIER_TYPES: frozenset[str] = frozenset({"fs", "fs_python"})

#: LMCache ``remote_url`` scheme -> store name (``lmcache/v1/storage_backend/connector/__init__.py``).
_REMOTE_STORES: dict[str, str] = {
    "redis": "redis", "rediss": "redis", "unix": "redis", "redis-sentinel": "redis",
    "redis-cluster": "redis", "resp": "redis", "valkey": "valkey", "lm": "lmcache-server",
    "mooncakestore": "mooncake-master", "infinistore": "infinistore", "fs": "lmcache-fs",
    "s3": "s3",
}


_GPU = Tier(kind=TierKind.GPU, connector=None, spec=None)


def _truthy(value: Any) -> bool:
    """LMCache-style boolean from config or env (``true``/``1``/``yes``)."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _lmcache_setting(extra: Mapping[str, Any], env: Mapping[str, str], key: str) -> Any:
    """An LMCache setting from ``kv_connector_extra_config`` (``lmcache.<key>``) or ``LMCACHE_<KEY>``.

    The extra config wins (it is the per-deployment override;
    ``lmcache/integration/vllm/utils.py::lmcache_get_or_create_config``).
    """
    for candidate in (f"lmcache.{key}", key):
        if candidate in extra:
            return extra[candidate]
    return env.get("LMCACHE_" + key.upper())


def _lmcache_tiers(name: str, extra: Mapping[str, Any], env: Mapping[str, str],
                   notes: list[str]) -> list[Tier]:
    """Tiers of an in-process LMCache connector: local CPU, local disk, remote store."""
    tiers: list[Tier] = []
    local_cpu = _lmcache_setting(extra, env, "local_cpu")
    if local_cpu is None or _truthy(local_cpu):
        tiers.append(Tier(kind=TierKind.CPU, connector=name, spec=None))
    disk = _lmcache_setting(extra, env, "local_disk")
    if disk not in (None, "", "None", "none", "null"):
        path = str(disk)
        if path.startswith("file://"):
            path = path[len("file://"):]
        tiers.append(Tier(kind=TierKind.FS, connector=name, spec=None, root_dir=path,
                          tier_type="lmcache_local_disk"))
    remote = _lmcache_setting(extra, env, "remote_url")
    if remote not in (None, "", "None", "none", "null"):
        url = str(remote)
        scheme = urlsplit(url).scheme.lower() if "://" in url else ""
        store = _REMOTE_STORES.get(scheme, scheme or "unknown")
        tiers.append(Tier(kind=TierKind.SHARED, connector=name, spec=None, store=store,
                          endpoint=url))
    if env.get("LMCACHE_CONFIG_FILE"):
        notes.append(f"{name}: LMCache settings in {env['LMCACHE_CONFIG_FILE']} (a file in the "
                     "pod) were not read; its disk or remote tiers may be missing here")
    return tiers


def _mooncake_endpoint(extra: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """The Mooncake master address when the config or env names it."""
    for key in ("master_server_address", "mooncake_master", "master_address"):
        if isinstance(extra.get(key), str):
            return str(extra[key])
    return env.get("MOONCAKE_MASTER") or None


def _offloading_tiers(name: str, extra: Mapping[str, Any], notes: list[str]) -> list[Tier]:
    """Tiers of an ``OffloadingConnector`` by its ``spec_name`` (default CPUOffloadingSpec)."""
    spec = str(extra.get("spec_name") or CPU_SPEC)
    if spec == SHARED_STORAGE_SPEC:
        path = extra.get("shared_storage_path")
        return [Tier(kind=TierKind.FS, connector=name, spec=spec,
                     root_dir=str(path) if path else None, tier_type="shared_storage")]
    tiers = [Tier(kind=TierKind.CPU, connector=name, spec=spec)]
    if spec == TIERING_SPEC:
        secondaries = extra.get("secondary_tiers") or []
        if not isinstance(secondaries, list):
            notes.append(f"{name}: secondary_tiers is not a list; ignored")
            secondaries = []
        for sec in secondaries:
            if not isinstance(sec, Mapping):
                continue
            sec_type = str(sec.get("type", ""))
            if sec_type in FS_TIER_TYPES:
                root = sec.get("root_dir")
                tiers.append(Tier(kind=TierKind.FS, connector=name, spec=spec,
                                  root_dir=str(root) if root else None, tier_type=sec_type))
            else:
                tiers.append(Tier(kind=TierKind.SHARED, connector=name, spec=spec,
                                  tier_type=sec_type, store=f"tiering-{sec_type or 'unknown'}"))
    elif spec != CPU_SPEC:
        notes.append(f"{name}: unknown offloading spec {spec!r}, treated as a CPU tier")
    return tiers


def _walk(cfg: Mapping[str, Any], env: Mapping[str, str], connectors: list[str],
          tiers: list[Tier], notes: list[str], depth: int = 0) -> None:
    """Add the connectors and tiers of one kv-transfer-config (recursing into MultiConnector)."""
    name = cfg.get("kv_connector")
    if not isinstance(name, str) or not name:
        return
    connectors.append(name)
    extra_raw = cfg.get("kv_connector_extra_config") or {}
    if isinstance(extra_raw, str):
        try:
            extra_raw = json.loads(extra_raw)
        except ValueError:
            extra_raw = {}
    extra: Mapping[str, Any] = extra_raw if isinstance(extra_raw, Mapping) else {}
    if name == MULTI_CONNECTOR:
        children = extra.get("connectors") or []
        if depth > 8 or not isinstance(children, list):
            return
        for child in children:
            if isinstance(child, Mapping):
                _walk(child, env, connectors, tiers, notes, depth + 1)
    elif name == OFFLOADING_CONNECTOR:
        tiers.extend(_offloading_tiers(name, extra, notes))
    elif name == SIMPLE_CPU_CONNECTOR:
        tiers.append(Tier(kind=TierKind.CPU, connector=name, spec=None))
    elif name in LMCACHE_CONNECTORS:
        tiers.extend(_lmcache_tiers(name, extra, env, notes))
    elif name == LMCACHE_MP_CONNECTOR:
        host = extra.get("lmcache.mp.host")
        port = extra.get("lmcache.mp.port")
        endpoint = f"{host}:{port}" if host and port else (str(host) if host else None)
        tiers.append(Tier(kind=TierKind.SHARED, connector=name, spec=_mp_class(cfg, env),
                          store="lmcache-mp", endpoint=endpoint))
    elif name == MOONCAKE_STORE_CONNECTOR:
        tiers.append(Tier(kind=TierKind.SHARED, connector=name, spec=None,
                          store="mooncake-master", endpoint=_mooncake_endpoint(extra, env)))
        if env.get("MOONCAKE_CONFIG_PATH") and not _mooncake_endpoint(extra, env):
            notes.append(f"{name}: Mooncake master named in {env['MOONCAKE_CONFIG_PATH']} "
                         "(a file in the pod), not read")


def _mp_class(cfg: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """:data:`LMCACHE_MP_UPSTREAM` when vLLM loads its own ``LMCacheMPConnector`` copy, else None
    (LMCache's class, or a class this plugin does not know).

    ``kv_connector_module_path`` wins over the registry (``vllm/distributed/kv_transfer/
    kv_connector/factory.py::KVConnectorFactory.get_connector_class``, 0.32.0): naming
    LMCache's module loads LMCache's class whatever the env says. Without it (or naming vLLM's own
    module), vLLM 0.32.0's resolver returns its own copy when ``LMCACHE_USE_UPSTREAM_MP`` is set to
    any non-empty value (``os.environ.get``; ``"0"`` counts as set).
    """
    module = cfg.get("kv_connector_module_path")
    if isinstance(module, str) and module and not module.startswith("vllm."):
        return None
    return LMCACHE_MP_UPSTREAM if env.get("LMCACHE_USE_UPSTREAM_MP") else None


def _apply_offloading_flags(ktc: Mapping[str, Any] | None, size_gib: float,
                            backend: str | None, env: Mapping[str, str],
                            notes: list[str]) -> dict[str, Any]:
    """What ``--kv-offloading-size``/``--kv-offloading-backend`` make of the kv-transfer-config.

    As ``vllm/config/vllm.py::_post_init_kv_transfer_config`` does: ``native`` sets the connector
    to OffloadingConnector with ``cpu_bytes_to_use = GiB * 2**30`` (SimpleCPUOffloadConnector
    when ``VLLM_USE_SIMPLE_KV_OFFLOAD=1``), ``lmcache`` to LMCacheConnectorV1 with a local CPU
    backend; ``kv_role`` becomes ``kv_both``.
    """
    result: dict[str, Any] = dict(ktc or {})
    old = result.get("kv_connector")
    backend = (backend or "native").lower()
    raw_extra = result.get("kv_connector_extra_config")
    if raw_extra is not None and not isinstance(raw_extra, Mapping):
        notes.append("kv_connector_extra_config is not a JSON object: ignored")
        raw_extra = None
    extra = dict(raw_extra or {})
    if backend == "lmcache":
        new = "LMCacheConnectorV1"
        extra = {"lmcache.local_cpu": True, "lmcache.max_local_cpu_size": size_gib}
    else:
        if backend != "native":
            notes.append(f"--kv-offloading-backend {backend!r} unknown; read as native")
        if env.get("VLLM_USE_SIMPLE_KV_OFFLOAD", "").strip() == "1":
            new = SIMPLE_CPU_CONNECTOR
        else:
            new = OFFLOADING_CONNECTOR
        extra["cpu_bytes_to_use"] = int(size_gib * 2**30)
    if old and old != new:
        notes.append(f"--kv-offloading-size replaces kv_connector {old} by {new}")
    result["kv_connector"] = new
    result["kv_connector_extra_config"] = extra
    result["kv_role"] = "kv_both"
    return result


def layout_from_config(
    kv_transfer_config: Mapping[str, Any] | None,
    *,
    kv_offloading_size_gib: float | None = None,
    kv_offloading_backend: str | None = None,
    env: Mapping[str, str] | None = None,
) -> KVLayout:
    """The tiers of a vLLM server from its decoded kv-transfer-config and offloading flags.

    Args:
        kv_transfer_config: decoded ``--kv-transfer-config`` or None.
        kv_offloading_size_gib: ``--kv-offloading-size`` (GiB) or None.
        kv_offloading_backend: ``--kv-offloading-backend`` (``native`` default).
        env: the server's environment (``VLLM_USE_SIMPLE_KV_OFFLOAD``, ``LMCACHE_*``,
            ``MOONCAKE_*``).

    Returns:
        A :class:`KVLayout` whose first tier is the GPU prefix cache. Never raises on odd
        configs: unknown parts are skipped or noted.
    """
    env = env or {}
    notes: list[str] = []
    cfg: Mapping[str, Any] | None = kv_transfer_config
    if kv_offloading_size_gib is not None:
        cfg = _apply_offloading_flags(cfg, kv_offloading_size_gib, kv_offloading_backend,
                                      env, notes)
    connectors: list[str] = []
    tiers: list[Tier] = [_GPU]
    kv_role: str | None = None
    if cfg:
        role = cfg.get("kv_role")
        kv_role = role if isinstance(role, str) else None
        _walk(cfg, env, connectors, tiers, notes)
    return KVLayout(connectors=tuple(connectors), tiers=_dedupe(tiers), kv_role=kv_role,
                    notes=tuple(notes))


def _dedupe(tiers: Sequence[Tier]) -> tuple[Tier, ...]:
    """Drop exact duplicates (e.g. the same FS root listed twice), keeping order."""
    return tuple(dict.fromkeys(tiers))


def layout_from_serve(cfg: ServeConfig, env: Mapping[str, str] | None = None) -> KVLayout:
    """:func:`layout_from_config` for a parsed command line.

    ``env`` is the container env; what the command's script exported (``cfg.env``) wins. An FS
    tier whose root holds a construct the reader left as written (``cfg.unevaluated``) gets
    :attr:`Tier.unevaluated`; an ``LMCACHE_CONFIG_FILE`` holding one is noted.
    """
    merged: dict[str, str] = dict(env or {})
    merged.update(cfg.env)
    layout = layout_from_config(
        cfg.kv_transfer_config,
        kv_offloading_size_gib=cfg.kv_offloading_size_gib,
        kv_offloading_backend=cfg.kv_offloading_backend,
        env=merged,
    )
    layout = mark_unevaluated(layout, cfg.unevaluated, merged)
    if cfg.config_error is not None:
        extra_note = (f"--config {cfg.config_file} not read: a kv-transfer-config set there "
                      "is unknown")
        return KVLayout(connectors=layout.connectors, tiers=layout.tiers,
                        kv_role=layout.kv_role, notes=(*layout.notes, extra_note))
    return layout


def mark_unevaluated(layout: KVLayout, unevaluated: Sequence[tuple[str, str]],
                     env: Mapping[str, str] | None = None) -> KVLayout:
    """``layout`` with :attr:`Tier.unevaluated` set on each FS tier whose root holds a construct
    the command line's reader left as written (``unevaluated``: ``ServeConfig.unevaluated``),
    and a note when ``LMCACHE_CONFIG_FILE`` in ``env`` holds one. Used for the spec's layout and
    for the running server's (whose LMCache settings may still come from the spec's env)."""
    if not unevaluated:
        return layout
    tiers: list[Tier] = []
    notes = list(layout.notes)
    for tier in layout.tiers:
        why = unevaluated_in(tier.root_dir, unevaluated) if tier.kind is TierKind.FS else []
        tiers.append(replace(tier, unevaluated="; ".join(why)) if why else tier)
    config_file = (env or {}).get("LMCACHE_CONFIG_FILE")
    config_file_why = unevaluated_in(config_file, unevaluated)
    if config_file_why and any(c in LMCACHE_CONNECTORS for c in layout.connectors):
        notes.append(f"LMCACHE_CONFIG_FILE {config_file} cannot be evaluated here: " + "; ".join(config_file_why))
    return KVLayout(connectors=layout.connectors, tiers=tuple(tiers), kv_role=layout.kv_role, notes=tuple(notes))
