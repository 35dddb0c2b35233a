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
* ``LMCacheMPConnector``: ``lmcache.mp.host`` (``tcp://HOST``) and ``lmcache.mp.port`` (ZMQ).
* ``MooncakeStoreConnector``: the JSON file ``MOONCAKE_CONFIG_PATH`` names, key
  ``master_server_address`` or ``mooncake_master_server_addr`` (both spellings are in use:
  llm-d's ConfigMap uses the first, Mooncake's own setup reads the second).
* LMCache ``remote_url`` ``mooncakestore://``: the master is ``extra_config``'s
  ``mooncake_master_server_addr`` (Mooncake 0.3.13 ignores ``master_server_address`` there),
  else the URL's host and port.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

from ..pods import expand_k8s_refs

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

#: ``lookup(kind, name)`` -> the decoded data of ConfigMap/Secret ``name`` in the pod's
#: namespace; raises ``PermissionError`` (not allowed) or ``KeyError`` (absent).
SourceLookup = Callable[[str, str], Mapping[str, str]]

LMCACHE_CONNECTORS = frozenset({"LMCacheConnectorV1", "LMCacheConnectorV1Dynamic", "LMCacheConnector"})
LMCACHE_MP_CONNECTOR = "LMCacheMPConnector"
MOONCAKE_STORE_CONNECTOR = "MooncakeStoreConnector"
MULTI_CONNECTOR = "MultiConnector"
_NONE_VALUES = (None, "", "None", "none", "null")


class StoreKind(str, Enum):
    """What a store is, hence how it is cleared (the table of README "clear-store")."""

    LMCACHE_CONTROLLER = "lmcache-controller"
    LMCACHE_WORKER = "lmcache-worker"
    LMCACHE_MP = "lmcache-mp"
    REDIS = "redis"
    VALKEY = "valkey"
    MOONCAKE = "mooncake-master"
    LMCACHE_SERVER = "lmcache-server"
    INFINISTORE = "infinistore"
    OTHER = "other"


#: ``remote_url`` scheme -> kind (LMCache ``lmcache/v1/storage_backend/connector/__init__.py``).
_REMOTE_KINDS: dict[str, StoreKind] = {
    "redis": StoreKind.REDIS, "rediss": StoreKind.REDIS, "unix": StoreKind.REDIS,
    "redis-sentinel": StoreKind.REDIS, "redis-cluster": StoreKind.REDIS, "resp": StoreKind.REDIS,
    "valkey": StoreKind.VALKEY, "lm": StoreKind.LMCACHE_SERVER,
    "mooncakestore": StoreKind.MOONCAKE, "infinistore": StoreKind.INFINISTORE,
}
_DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "resp": 6379, "valkey": 6379,
                  "redis-cluster": 6379, "redis-sentinel": 26379, "mooncakestore": 50051}


@dataclass(frozen=True)
class Address:
    """Where a store listens, as the configuration names it.

    Attributes:
        host: host name or IP (brackets removed); ``""`` for a Unix socket.
        port: TCP port, None when neither the configuration nor the scheme gives one.
        scheme: URL scheme (``redis``, ``rediss``, ``tcp``...), ``""`` for ``host:port``.
        db: Redis database number from the URL path, else None.
        username, password: credentials from the URL (``redis://user:pw@host``), else None.
        tls: the scheme asks for TLS (``rediss``, ``valkeys``).
        path: a Unix socket path (``unix://``), else None.
    """

    host: str
    port: int | None
    scheme: str = ""
    db: int | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    path: str | None = None

    def display(self) -> str:
        """The address without credentials, e.g. ``redis://kv-redis.lmc:6379/0``."""
        if self.path is not None:
            return f"unix://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = host + (f":{self.port}" if self.port is not None else "")
        if self.scheme:
            text = f"{self.scheme}://{text}" + (f"/{self.db}" if self.db is not None else "")
        return text


def parse_address(text: str, *, default_port: int | None = None) -> Address:
    """Parse ``host``, ``host:port``, ``[v6]:port`` or a URL (``redis://u:p@h:6379/0``,
    ``tcp://h``, ``unix:///run/redis.sock``).

    The port defaults to ``default_port``, else to the scheme's (Redis 6379, Mooncake 50051).

    Raises:
        ValueError: an empty address or a port that is not a number.
    """
    raw = text.strip()
    if not raw:
        raise ValueError("empty address")
    if "://" not in raw:
        raw = "//" + raw
    parts = urlsplit(raw)
    scheme = parts.scheme.lower()
    if scheme == "unix":
        return Address(host="", port=None, scheme="unix", path=parts.path or parts.netloc)
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"address {text!r}: the port is not a number") from exc
    if port is None:
        port = default_port if default_port is not None else _DEFAULT_PORTS.get(scheme)
    db: int | None = None
    path = parts.path.strip("/")
    if scheme in ("redis", "rediss", "valkey", "valkeys") and path.isdigit():
        db = int(path)
    host = parts.hostname or ""
    if not host:
        raise ValueError(f"address {text!r} names no host")
    return Address(host=host, port=port, scheme=scheme, db=db,
                   username=unquote(parts.username) if parts.username else None,
                   password=unquote(parts.password) if parts.password is not None else None,
                   tls=scheme in ("rediss", "valkeys"))


@dataclass(frozen=True)
class StoreUse:
    """One store one vLLM pod uses, as its configuration says.

    Attributes:
        kind: see :class:`StoreKind`.
        address: where it listens (None when the configuration names none; see ``notes``).
            For the LMCache controller it is the ZMQ pull address: the HTTP admin port comes
            from the controller's own pod (``--port``, default 9000). For the worker internal
            API it is ``localhost``: the vLLM pod itself.
        scope: what a clear of it removes: ``"model"`` (Redis/Valkey keys of ``model``),
            ``"instance"`` (the LMCache instance ``instance_id`` at the controller),
            ``"worker"`` (the pod's own workers), ``"store"`` (everything in it).
        model: the model name in LMCache's keys (``model_config.model``), None when unknown.
        instance_id: ``lmcache_instance_id`` for the controller.
        ports: the worker internal API ports (``internal_api_server_port_start`` + 1 + rank).
        source: where the setting was read, e.g. ``env LMCACHE_REMOTE_URL``.
        extra: store options (``valkey_username``, ``valkey_password``, ``valkey_mode``...).
        notes: what could not be known.
    """

    kind: StoreKind
    address: Address | None
    scope: str
    model: str | None = None
    instance_id: str | None = None
    ports: tuple[int, ...] = ()
    source: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    notes: tuple[str, ...] = ()


def glob_escape(text: str) -> str:
    """Escape Redis glob specials (``* ? [ ] \\``) so ``SCAN MATCH`` matches ``text``
    literally (Redis ``util.c::stringmatchlen``: a backslash quotes the next character)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


# ---------------------------------------------------------------------------------------------
# The container environment and files from ConfigMap/Secret volumes
# ---------------------------------------------------------------------------------------------


def _lookup(lookup: SourceLookup | None, kind: str, name: str) -> tuple[Mapping[str, str] | None, str | None]:
    if lookup is None:
        return None, f"{kind}/{name} not read"
    try:
        return lookup(kind, name), None
    except PermissionError as exc:
        return None, f"not permitted to read {kind}/{name}" + (f" ({exc})" if str(exc) else "")
    except KeyError:
        return None, f"{kind}/{name} does not exist"


def resolve_env(pod: Mapping[str, Any], container: Mapping[str, Any],
                lookup: SourceLookup | None) -> tuple[dict[str, str], list[str]]:
    """The container's environment as the kubelet builds it: ``envFrom`` sources in order
    (with their ``prefix``), then ``env`` entries in order (a later one wins; ``$(VAR)``
    expanded against what came before; ``valueFrom`` ``configMapKeyRef``/``secretKeyRef`` read
    through ``lookup``, ``fieldRef`` from the pod object). As in
    ``pkg/kubelet/kubelet_pods.go::makeEnvironmentVariables``, an ``optional`` reference whose
    ConfigMap/Secret or key is absent keeps what came before; a ``valueFrom`` that cannot be
    read here (not permitted, a resource field) removes the earlier value, which the server
    does not see.

    Returns:
        ``(env, notes)``: the variables that could be resolved, and one note per variable or
        source that could not (naming the object and why).
    """
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    fields = {
        "metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""), "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""), "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
    }
    env: dict[str, str] = {}
    notes: list[str] = []
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix", "") or "")
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            if key in source:
                name = str((source[key] or {}).get("name", ""))
                data, why = _lookup(lookup, kind, name)
                if data is None:
                    if not (source[key] or {}).get("optional"):
                        notes.append(f"envFrom: {why}")
                    continue
                for var, value in data.items():
                    env[prefix + var] = str(value)
    for entry in container.get("env") or []:
        name = entry.get("name")
        if not name:
            continue
        if "valueFrom" not in entry:
            env[name] = expand_k8s_refs(str(entry.get("value") or ""), env)
            continue
        vf = entry.get("valueFrom") or {}
        earlier = env.pop(name, None)
        if "fieldRef" in vf:
            path = str((vf["fieldRef"] or {}).get("fieldPath", ""))
            m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
            if path in fields:
                env[name] = str(fields[path])
            elif m:
                env[name] = str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
            continue
        for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            if key in vf:
                ref = vf[key] or {}
                data, why = _lookup(lookup, kind, str(ref.get("name", "")))
                if data is None:
                    if ref.get("optional") and why is not None and why.endswith("does not exist"):
                        if earlier is not None:
                            env[name] = earlier
                        continue
                    notes.append(f"{name}: {why}")
                elif ref.get("key") in data:
                    env[name] = str(data[ref["key"]])
                elif ref.get("optional"):
                    if earlier is not None:
                        env[name] = earlier
                else:
                    notes.append(f"{name}: key {ref.get('key')!r} absent from {kind}/{ref.get('name')}")
    return env, notes


@dataclass(frozen=True)
class Unread:
    """A configuration file that could not be read, and why (``reason``)."""

    reason: str


@dataclass(frozen=True)
class FileSource:
    """Where a file in the container comes from: key ``key`` of ConfigMap/Secret ``name``."""

    kind: str
    name: str
    key: str


def _volume_items(vol: Mapping[str, Any]) -> Iterator[tuple[str, str, Sequence[Mapping[str, Any]]]]:
    """(kind, name, items) of a configMap/secret volume or of each projected source."""
    if "configMap" in vol:
        cm = vol["configMap"] or {}
        yield "ConfigMap", str(cm.get("name", "")), cm.get("items") or []
    elif "secret" in vol:
        sec = vol["secret"] or {}
        yield "Secret", str(sec.get("secretName", "")), sec.get("items") or []
    elif "projected" in vol:
        for src in (vol["projected"] or {}).get("sources") or []:
            if "configMap" in src:
                cm = src["configMap"] or {}
                yield "ConfigMap", str(cm.get("name", "")), cm.get("items") or []
            elif "secret" in src:
                sec = src["secret"] or {}
                yield "Secret", str(sec.get("name", "")), sec.get("items") or []


def file_source(pod: Mapping[str, Any], container: Mapping[str, Any], path: str) -> FileSource | str:
    """Which ConfigMap or Secret key a file of the container is (kubelet volume semantics:
    a ``subPath`` mount is that one key, a directory mount holds every key or the ``items``
    paths; a later mount of a deeper path wins).

    Returns:
        a :class:`FileSource`, or a string saying why the file cannot be read through the API
        (no volume holds it; it is on a PVC, emptyDir or hostPath; no item has that path).
    """
    spec = pod.get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    best: tuple[int, Mapping[str, Any]] | None = None
    for mount in container.get("volumeMounts") or []:
        mpath = str(mount.get("mountPath", "")).rstrip("/") or "/"
        if path == mpath or path.startswith(mpath.rstrip("/") + "/"):
            if best is None or len(mpath) >= best[0]:
                best = (len(mpath), mount)
    if best is None:
        return f"{path}: no volume of the pod holds it (a file of the image cannot be read)"
    mount = best[1]
    mpath = str(mount.get("mountPath", "")).rstrip("/")
    vol = volumes.get(mount.get("name"))
    if vol is None:
        return f"{path}: volume {mount.get('name')!r} is not in the pod"
    rel = path[len(mpath):].lstrip("/")
    sub = str(mount.get("subPath") or "")
    if sub:
        rel = sub + ("/" + rel if rel else "")
    kinds = [k for k in vol if k != "name"]
    for kind, name, items in _volume_items(vol):
        if items:
            for item in items:
                if item.get("path") == rel:
                    return FileSource(kind, name, str(item.get("key")))
            continue
        if rel and "/" not in rel:
            return FileSource(kind, name, rel)
    if not any(k in ("configMap", "secret", "projected") for k in kinds):
        return (f"{path}: on a {kinds[0] if kinds else 'unknown'} volume {mount.get('name')!r}, "
                "which the API cannot read")
    return f"{path}: no key of volume {mount.get('name')!r} is that file"


def wanted_files(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The configuration files to read: ``[(variable, path)]`` for ``LMCACHE_CONFIG_FILE`` and
    ``MOONCAKE_CONFIG_PATH`` when set."""
    return [(var, env[var]) for var in ("LMCACHE_CONFIG_FILE", "MOONCAKE_CONFIG_PATH") if env.get(var)]


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


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


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


def _backends(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The in-process LMCache backends besides the CPU one (``local_disk``, ``remote_url``), for
    the controller and worker clears to say what they cannot reach."""
    return {key: settings[key] for key in ("local_disk", "remote_url") if settings.get(key) not in _NONE_VALUES}


def _lmcache_uses(extra: Mapping[str, Any], env: Mapping[str, str], file_cfg: Mapping[str, Any] | None,
                  model: str | None, argv: Sequence[str]) -> list[StoreUse]:
    settings, sources = lmcache_settings(extra, env, file_cfg)
    uses: list[StoreUse] = []
    options = _extra_dict(settings.get("extra_config"))
    remote = settings.get("remote_url")
    if remote not in _NONE_VALUES:
        notes: list[str] = []
        url = str(remote)
        scheme = urlsplit(url).scheme.lower() if "://" in url else ""
        kind = _REMOTE_KINDS.get(scheme, StoreKind.OTHER)
        text: Any = url
        if kind is StoreKind.MOONCAKE:
            text = options.get("mooncake_master_server_addr") or url.split("://", 1)[1]
        elif scheme == "redis-sentinel" and "," in url.split("://", 1)[1].split("/", 1)[0]:
            # LMCache's multi-sentinel form h1:p1,h2:p2: the first sentinel names the set
            rest = url.split("://", 1)[1]
            text = f"{scheme}://{rest.split(',', 1)[0]}"
        addr = _address(text, sources["remote_url"], notes)
        scope = "model" if kind in (StoreKind.REDIS, StoreKind.VALKEY) else "store"
        if scope == "model" and not model:
            notes.append("the model name is unknown: a per-model clear is impossible")
        uses.append(StoreUse(kind, addr, scope, model=model, source=sources["remote_url"],
                             extra=options, notes=tuple(notes)))
    if _truthy(settings.get("enable_controller", False)):
        notes = []
        pull = settings.get("controller_pull_url")
        addr = None
        if pull in _NONE_VALUES:
            notes.append("enable_controller is set but controller_pull_url is not")
        else:
            addr = _address(pull, sources["controller_pull_url"], notes)
        instance = settings.get("lmcache_instance_id")
        if instance in _NONE_VALUES:
            instance = None
            notes.append("lmcache_instance_id is not set (required by LMCache 0.5.6)")
        uses.append(StoreUse(StoreKind.LMCACHE_CONTROLLER, addr, "instance", model=model,
                             instance_id=str(instance) if instance else None,
                             source=sources.get("enable_controller", ""), extra=_backends(settings),
                             notes=tuple(notes)))
    if _truthy(settings.get("internal_api_server_enabled", False)):
        start = settings.get("internal_api_server_port_start", 6999)
        try:
            start = int(start)
        except (TypeError, ValueError):
            start = 6999
        world = (_flag_int(argv, ("--tensor-parallel-size", "-tp")) or 1) * \
            (_flag_int(argv, ("--pipeline-parallel-size", "-pp")) or 1)
        include = settings.get("internal_api_server_include_index_list")
        offsets = [1 + rank for rank in range(world)
                   if not isinstance(include, list) or 1 + rank in include]
        uses.append(StoreUse(StoreKind.LMCACHE_WORKER, Address("localhost", None), "worker",
                             model=model, ports=tuple(start + o for o in offsets),
                             source=sources.get("internal_api_server_enabled", ""), extra=_backends(settings)))
    return uses


def _mp_use(extra: Mapping[str, Any]) -> StoreUse:
    """``LMCacheMPConnector``: the MP server at ``lmcache.mp.host``/``lmcache.mp.port``."""
    notes: list[str] = []
    host = str(extra.get("lmcache.mp.host") or "localhost")
    if "lmcache.mp.host" not in extra:
        notes.append("lmcache.mp.host not set: the connector's default (localhost) is assumed")
    port = extra.get("lmcache.mp.port", 5555)
    try:
        port = int(port)
    except (TypeError, ValueError):
        notes.append(f"lmcache.mp.port {port!r} is not a number")
        port = None
    addr = _address(host, "lmcache.mp.host", notes, default_port=port)
    return StoreUse(StoreKind.LMCACHE_MP, addr, "store", source="kv_connector_extra_config lmcache.mp.host",
                    notes=tuple(notes))


def mooncake_master_address(cfg: Mapping[str, Any]) -> str | None:
    """The master address of a Mooncake config (``MOONCAKE_CONFIG_PATH`` JSON or a connector's
    extra config): ``master_server_address`` or ``mooncake_master_server_addr``."""
    for key in ("master_server_address", "mooncake_master_server_addr"):
        if isinstance(cfg.get(key), str) and cfg[key]:
            return str(cfg[key])
    return None


def _mooncake_use(extra: Mapping[str, Any], env: Mapping[str, str], files: Mapping[str, Any]) -> StoreUse:
    notes: list[str] = []
    text = mooncake_master_address(extra)
    source = "kv_connector_extra_config"
    path = env.get("MOONCAKE_CONFIG_PATH")
    if text is None and path:
        content = files.get(path)
        if isinstance(content, str):
            try:
                cfg = json.loads(content)
            except ValueError as exc:
                notes.append(f"MOONCAKE_CONFIG_PATH {path}: not JSON ({exc})")
                cfg = {}
            text = mooncake_master_address(cfg) if isinstance(cfg, Mapping) else None
            source = f"MOONCAKE_CONFIG_PATH {path}"
            if text is None and not notes:
                notes.append(f"MOONCAKE_CONFIG_PATH {path}: no master_server_address in it")
        else:
            why = content.reason if isinstance(content, Unread) else "not read"
            notes.append(f"MOONCAKE_CONFIG_PATH {path}: {why}")
    if text is None and env.get("MOONCAKE_MASTER"):
        text, source = env["MOONCAKE_MASTER"], "env MOONCAKE_MASTER"
    if text is None and not path:
        notes.append("no Mooncake master address in the configuration")
    addr = _address(text, source, notes, default_port=50051) if text else None
    return StoreUse(StoreKind.MOONCAKE, addr, "store", source=source, notes=tuple(notes))


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
        elif name == LMCACHE_MP_CONNECTOR:
            uses.append(_mp_use(extra))
        elif name == MOONCAKE_STORE_CONNECTOR:
            uses.append(_mooncake_use(extra, env, files))
    return uses
