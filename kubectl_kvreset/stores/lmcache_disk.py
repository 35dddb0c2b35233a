"""LMCache's local disk tier, read from a vLLM pod's LMCache settings. Pure: no I/O.

LMCache 0.5.6, in-process (``LMCacheConnectorV1``):

* the backend exists only when ``local_disk`` is set and ``max_local_disk_size`` (GiB) is
  above 0 (``lmcache/v1/storage_backend/__init__.py``, ``CreateStorageBackends``);
* ``local_disk`` is one directory or several, comma-separated, each optionally ``file://``
  (``lmcache/v1/config_base.py::_parse_local_disk``); every directory is created, and a worker
  writes to the one its device picks (``lmcache/v1/storage_backend/path_sharder.py``), so each
  of them may hold files;
* each chunk is one file ``<dir>/<key with "/" replaced by "->.pt``
  (``lmcache/v1/storage_backend/local_disk_backend.py::LocalDiskBackend._key_to_path``), the key
  being ``<model>@<world_size>@<worker_id>@<chunk hash>@<dtype>[@tags]``
  (``lmcache/utils.py::CacheEngineKey.to_string``): a model's files start with
  ``<model with "/" -> "-">@`` and end with ``.pt``;
* ``LocalDiskBackend`` has no ``clear()`` (LMCache 0.5.6
  ``lmcache/v1/storage_backend/storage_manager.py::StorageManager.clear`` skips it), so emptying it means
  deleting those files; its in-memory index of them drops an entry when a read finds the file
  gone (``LocalDiskBackend.read_file``: ``FileNotFoundError`` -> ``self.dict.pop(key)``).

The settings are LMCache's own precedence (:func:`~.config.lmcache_settings`: the
``LMCACHE_CONFIG_FILE`` YAML, then ``LMCACHE_*`` env, then ``lmcache.*`` in
``kv_connector_extra_config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from .config import LMCACHE_CONNECTORS, _connectors, lmcache_settings

__all__ = ["DISK_SUFFIX", "LocalDisk", "file_prefix", "local_disk_of"]

#: What every file of LMCache's local disk ends with.
DISK_SUFFIX = ".pt"


@dataclass(frozen=True)
class LocalDisk:
    """An in-process LMCache's local disk tier.

    Attributes:
        paths: the directories (``file://`` removed, in configuration order), as the vLLM
            container sees them.
        setting: ``local_disk`` as configured.
        max_gb: ``max_local_disk_size`` (GiB); the tier exists only above 0.
        source: where ``local_disk`` was read (``env LMCACHE_LOCAL_DISK``...).
    """

    paths: tuple[str, ...]
    setting: str
    max_gb: float
    source: str

    @property
    def enabled(self) -> bool:
        """True when LMCache creates the backend (``max_local_disk_size`` > 0)."""
        return bool(self.paths) and self.max_gb > 0


def _paths(value: str) -> tuple[str, ...]:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    return tuple(dict.fromkeys(p[len("file://"):] if p.startswith("file://") else p for p in parts))


def local_disk_of(kv_transfer_config: Mapping[str, Any] | None, env: Mapping[str, str],
                  files: Mapping[str, Any]) -> LocalDisk | None:
    """The local disk tier of the pod's first in-process LMCache connector (MultiConnector
    children too), or None when none sets ``local_disk``. ``env`` and ``files`` are what
    :func:`~.find.pod_config` read; an unreadable ``LMCACHE_CONFIG_FILE`` counts as empty (the
    store step reports that file as unread on its own). Never raises."""
    for name, extra in _connectors(kv_transfer_config):
        if name not in LMCACHE_CONNECTORS:
            continue
        file_cfg: Mapping[str, Any] | None = None
        text = files.get(env.get("LMCACHE_CONFIG_FILE", "")) if env.get("LMCACHE_CONFIG_FILE") else None
        if isinstance(text, str):
            try:
                loaded = yaml.safe_load(text)
            except yaml.YAMLError:
                loaded = None
            file_cfg = loaded if isinstance(loaded, Mapping) else None
        settings, sources = lmcache_settings(extra, env, file_cfg)
        value = settings.get("local_disk")
        if value in (None, "", "None", "none", "null"):
            continue
        try:
            size = float(settings.get("max_local_disk_size", 0.0) or 0.0)
        except (TypeError, ValueError):
            size = 0.0
        return LocalDisk(_paths(str(value)), str(value), size, sources.get("local_disk", ""))
    return None


def file_prefix(model: str) -> str:
    """The start of every local-disk file name of ``model``: ``/`` replaced by ``-``, then
    ``@`` (``org/m`` -> ``org-m@``)."""
    return model.replace("/", "-") + "@"
