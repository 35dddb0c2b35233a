"""The KV cache tiers an inference server fills: the model the plan, the job and the rows share.

Pure: no I/O. An engine reads its server's configuration into a :class:`KVLayout` (vLLM's
kv-transfer-config: :mod:`kubectl_kvreset.engines.vllm.kvconfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["KVLayout", "Tier", "TierKind"]


class TierKind(str, Enum):
    """Where a KV tier lives: GPU memory, CPU memory of the pod, a file system, a shared store."""

    GPU = "gpu"
    CPU = "cpu"
    FS = "fs"
    SHARED = "shared"


@dataclass(frozen=True)
class Tier:
    """One KV cache tier of an inference server.

    Attributes:
        kind: see :class:`TierKind`.
        connector: the KV connector that manages it (None for the GPU prefix cache).
        spec: the OffloadingConnector spec name (e.g. ``TieringOffloadingSpec``); for an
            ``LMCacheMPConnector``, :data:`kubectl_kvreset.engines.vllm.kvconfig.LMCACHE_MP_UPSTREAM`
            when vLLM loads its own copy; else None.
        root_dir: FS tier: the directory whose contents are the tier (``root_dir`` /
            ``shared_storage_path`` / LMCache ``local_disk``).
        tier_type: FS tier type: ``"fs"``, ``"fs_python"``, legacy ``"shared_storage"`` or
            ``"lmcache_local_disk"``; for a SHARED Tiering tier its ``type``.
        store: SHARED: ``"lmcache-mp"`` (an MP server), ``"lmcache-server"`` (``lm://``), ``"redis"``,
            ``"valkey"``, ``"mooncake-master"``, ``"infinistore"``, ``"s3"``, ``"lmcache-fs"``,
            ``"tiering-<type>"``...
        endpoint: SHARED: the address when the config names it (URL or host:port).
        unevaluated: FS tier: why ``root_dir`` is not the directory the server uses (it holds a
            construct the command line's reader could not evaluate, e.g. ``$(hostname)`` in a
            ``bash -c`` script or an unset variable), else None. Such a root is never emptied.
        from_file: the file the tier was read from (LMCache's ``LMCACHE_CONFIG_FILE``, read from
            its ConfigMap or Secret), None for a tier the command line or env names.
    """

    kind: TierKind
    connector: str | None
    spec: str | None
    root_dir: str | None = None
    tier_type: str | None = None
    store: str | None = None
    endpoint: str | None = None
    unevaluated: str | None = None
    from_file: str | None = None


@dataclass(frozen=True)
class KVLayout:
    """Every KV tier one inference server uses.

    Attributes:
        connectors: connector names, flattened in order (MultiConnector itself first, then its
            children, recursively).
        tiers: the tiers; always starts with the GPU tier.
        kv_role: top-level ``kv_role`` (``kv_both``/``kv_producer``/``kv_consumer``) or None.
        notes: what could not be known (e.g. LMCache configured by a file in the pod).
    """

    connectors: tuple[str, ...]
    tiers: tuple[Tier, ...]
    kv_role: str | None
    notes: tuple[str, ...] = ()

