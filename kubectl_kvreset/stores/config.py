"""From a vLLM pod's configuration to the shared stores it uses. Pure: no I/O.

Where each setting comes from (LMCache 0.5.6 and Mooncake sources, named per point below):

* In-process LMCache (``LMCacheConnectorV1``): its settings are the YAML file
  ``LMCACHE_CONFIG_FILE`` names, overridden by ``LMCACHE_<UPPER KEY>`` env
  (``lmcache/integration/vllm/utils.py::lmcache_get_or_create_config``: ``from_file`` then
  ``update_config_from_env``), overridden by ``lmcache.<key>`` in ``kv_connector_extra_config``.
  ``controller_url`` is the deprecated alias of ``controller_pull_url``
  (``lmcache/v1/config.py`` 0.5.6).
* The model name in LMCache's keys is ``vllm_config.model_config.model`` (the ``vllm serve``
  positional or ``--model``), never ``--served-model-name``: LMCache 0.5.6
  ``lmcache/integration/vllm/utils.py`` builds ``LMCacheMetadata(model_name=model_cfg.model)``
  and ``lmcache_mp_connector.py::get_dcp_decorated_model_name`` starts from
  ``vllm_config.model_config.model``. Keys are ``<model>@<world_size>@<worker_id>@<hash>@<dtype>``
  (``lmcache/utils.py::CacheEngineKey.to_string``), so a per-model clear matches ``<model>@*``.
* A connector that names a store of its own (``LMCacheMPConnector``: ``lmcache.mp.host``/``port``;
  ``MooncakeStoreConnector``: ``MOONCAKE_CONFIG_PATH``'s ``master_server_address``): the kind
  whose ``connectors`` lists it reads it (:meth:`~.kinds.base.Kind.connector_use`).
* LMCache ``remote_url`` ``mooncakestore://``: the master is ``extra_config``'s
  ``mooncake_master_server_addr`` (Mooncake 0.3.13 ignores ``master_server_address`` there),
  else the URL's host and port.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import yaml

from .address import Address, glob_escape, split_address
from .kinds.lmcache import NONE_VALUES, LMCacheMP
from .kinds.mooncake import Mooncake
from .kinds.names import StoreKind
from .podenv import FileSource, SourceLookup, Unread, file_source, resolve_env, wanted_files
from .records import StoreUse
from .registry import KINDS, kind_for_connector, kind_for_scheme, scheme_port

__all__ = [
    "Address",
    "FileSource",
    "SourceLookup",
    "StoreKind",
    "StoreUse",
    "Unread",
    "file_source",
    "glob_escape",
    "lmcache_settings",
    "parse_address",
    "resolve_env",
    "stores_of",
    "wanted_files",
]

LMCACHE_CONNECTORS = frozenset({"LMCacheConnectorV1", "LMCacheConnectorV1Dynamic", "LMCacheConnector"})
LMCACHE_MP_CONNECTOR = LMCacheMP.connectors[0]
MOONCAKE_STORE_CONNECTOR = Mooncake.connectors[0]
MULTI_CONNECTOR = "MultiConnector"


def parse_address(text: str, *, default_port: int | None = None) -> Address:
    """Parse ``host``, ``host:port``, ``[v6]:port`` or a URL (``redis://u:p@h:6379/0``,
    ``tcp://h``, ``unix:///run/redis.sock``): :func:`~.address.split_address` with the port
    defaulting to ``default_port``, else to the scheme's kind's (Redis 6379, Mooncake 50051).

    Raises:
        ValueError: an empty address or a port that is not a number.
    """
    return split_address(text, default_port=default_port, scheme_port=scheme_port)


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------

_ALIASES = {"controller_url": "controller_pull_url", "lmcache_worker_port": "lmcache_worker_ports"}


def _scalar(value: str) -> Any:
    """An env value as LMCache reads it: JSON (numbers, lists, objects) where it parses."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def lmcache_settings(extra: Mapping[str, Any], env: Mapping[str, str],
                     file_cfg: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """LMCache's in-process settings: the file, then ``LMCACHE_*`` env, then ``lmcache.*`` in
    ``kv_connector_extra_config`` (each later source wins; aliases mapped to 0.5.6 names).

    Returns:
        ``(settings, sources)``: key -> value, and key -> where it was read
        (``LMCACHE_CONFIG_FILE``, ``env LMCACHE_X``, ``kv_connector_extra_config lmcache.x``).
    """
    settings: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def put(key: str, value: Any, source: str) -> None:
        key = _ALIASES.get(key, key)
        settings[key] = value
        sources[key] = source

    for key, value in (file_cfg or {}).items():
        put(str(key), value, "LMCACHE_CONFIG_FILE")
    for var, value in env.items():
        if var.startswith("LMCACHE_") and var != "LMCACHE_CONFIG_FILE":
            put(var[len("LMCACHE_"):].lower(), _scalar(value), f"env {var}")
    for key, value in extra.items():
        if key.startswith("lmcache.") and not key.startswith("lmcache.mp."):
            put(key[len("lmcache."):], value, f"kv_connector_extra_config {key}")
    return settings, sources


def _extra_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, Mapping) else {}


def _connectors(cfg: Mapping[str, Any] | None, depth: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
    """(connector name, extra config) of a kv-transfer-config, MultiConnector children too."""
    if not cfg or depth > 8:
        return
    name = cfg.get("kv_connector")
    if not isinstance(name, str):
        return
    extra = _extra_dict(cfg.get("kv_connector_extra_config"))
    if name == MULTI_CONNECTOR:
        for child in extra.get("connectors") or []:
            if isinstance(child, Mapping):
                yield from _connectors(child, depth + 1)
        return
    yield name, extra


def _flag_int(argv: Sequence[str], names: Sequence[str]) -> int | None:
    for i, arg in enumerate(argv):
        for name in names:
            value = None
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
            if value is not None and value.isdigit():
                return int(value)
    return None


def _address(text: Any, source: str, notes: list[str], *, default_port: int | None = None) -> Address | None:
    try:
        return parse_address(str(text), default_port=default_port)
    except ValueError as exc:
        notes.append(f"{source}: {exc}")
        return None


def _lmcache_uses(extra: Mapping[str, Any], env: Mapping[str, str], file_cfg: Mapping[str, Any] | None,
                  model: str | None, argv: Sequence[str]) -> list[StoreUse]:
    settings, sources = lmcache_settings(extra, env, file_cfg)
    uses: list[StoreUse] = []
    options = _extra_dict(settings.get("extra_config"))
    remote = settings.get("remote_url")
    if remote not in NONE_VALUES:
        notes: list[str] = []
        url = str(remote)
        scheme = urlsplit(url).scheme.lower() if "://" in url else ""
        kind = kind_for_scheme(scheme)
        addr = _address(kind.address_text(url, options), sources["remote_url"], notes)
        if kind.scope == "model" and not model:
            notes.append("the model name is unknown: a per-model clear is impossible")
        uses.append(StoreUse(kind.name, addr, kind.scope, model=model, source=sources["remote_url"],
                             extra=options, notes=tuple(notes)))
    world = (_flag_int(argv, ("--tensor-parallel-size", "-tp")) or 1) * \
        (_flag_int(argv, ("--pipeline-parallel-size", "-pp")) or 1)
    for kind in KINDS:  # the LMCache controller, the worker API: switched on by a setting
        use = kind.settings_use(settings, sources, model=model, world=world, read=_address)
        if use is not None:
            uses.append(use)
    return uses


def stores_of(kv_transfer_config: Mapping[str, Any] | None, env: Mapping[str, str],
              files: Mapping[str, Any], *, model: str | None, argv: Sequence[str] = ()) -> list[StoreUse]:
    """Every store one vLLM server uses.

    Args:
        kv_transfer_config: the decoded ``--kv-transfer-config`` (MultiConnector children too).
        env: the container environment (:func:`resolve_env`).
        files: path -> file text for the paths :func:`wanted_files` named, or an
            :class:`Unread` saying why it could not be read (an absent path counts as unread).
        model: ``model_config.model`` (the ``vllm serve`` positional or ``--model``).
        argv: the server's argv (``--tensor-parallel-size``, ``--pipeline-parallel-size``).

    Returns:
        :class:`StoreUse` records in configuration order; problems are in their ``notes``.
        Never raises on odd configurations.
    """
    uses: list[StoreUse] = []
    for name, extra in _connectors(kv_transfer_config):
        if name in LMCACHE_CONNECTORS:
            file_cfg: Mapping[str, Any] | None = None
            path = env.get("LMCACHE_CONFIG_FILE")
            unread: str | None = None
            if path:
                content = files.get(path)
                if isinstance(content, str):
                    try:
                        loaded = yaml.safe_load(content)
                        file_cfg = loaded if isinstance(loaded, Mapping) else {}
                    except yaml.YAMLError as exc:
                        unread = f"LMCACHE_CONFIG_FILE {path}: not YAML ({exc})"
                else:
                    why = content.reason if isinstance(content, Unread) else "not read"
                    unread = f"LMCACHE_CONFIG_FILE {path}: {why}"
            found = _lmcache_uses(extra, env, file_cfg, model, argv)
            if unread:
                found = [*found, StoreUse(StoreKind.OTHER, None, "store", source="LMCACHE_CONFIG_FILE",
                                          notes=(unread + "; stores named there are unknown",))]
            uses.extend(found)
        else:
            kind = kind_for_connector(name)
            if kind is not None:
                uses.append(kind.connector_use(extra, env, files, _address))
    return uses
