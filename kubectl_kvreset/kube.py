"""The one adapter over the official ``kubernetes`` client.

Nothing else in the package imports ``kubernetes``; this module imports it lazily, inside
:meth:`Kube.connect`, so ``kubectl kvreset --help`` stays fast.

The client is used for what it does well (reading kubeconfig users: tokens, client
certificates, exec credential plugins, in-cluster service accounts) and its urllib3 pool for
transport. Answers come back as plain JSON-decoded dicts with the API's own camelCase keys and
errors as :class:`KubeApiError` built from the API server's ``Status`` object, so callers see
what ``kubectl`` would show.

Kubeconfig resolution follows kubectl, not the Python client
(``k8s.io/client-go/tools/clientcmd/loader.go``): with ``KUBECONFIG=a:b`` the first file that
sets a value wins (``current-context`` included), relative certificate paths are resolved
against the file that names them, and ``--context``, ``--cluster``, ``--user``, ``--server``,
``--token``, ``--certificate-authority``, ``--insecure-skip-tls-verify`` and ``--as`` override
the chosen context as kubectl's flags do.

Start-up: only the parts of ``kubernetes`` that are used are imported (the kubeconfig and
in-cluster loaders, the exec credential provider and ``Configuration``): see
:func:`client_parts`. The package's ``__init__`` modules would import every API and model
(``kubernetes.client.models`` alone is about 770 modules, 0.3 s). Transport is this module's
own: one ``ssl.SSLContext`` and one urllib3 pool of keep-alive connections, at most
``pool_size`` of them (:class:`Transport`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import yaml

_LOG = logging.getLogger("kubectl_kvreset")

#: kubectl's default ``--request-timeout`` is 0 (unbounded); this tool bounds every request.
DEFAULT_REQUEST_TIMEOUT_S = 30.0
#: How many times one API request is sent again after a 429 or a server error.
MAX_RETRIES = 5
#: How many times an idempotent request is sent again after a lost or refused connection.
CONNECTION_RETRIES = 2

_PATH_KEYS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


class KubeError(Exception):
    """Base of every error this adapter raises; ``str()`` is a message fit for a user."""


class KubeConfigError(KubeError):
    """The kubeconfig or a kubectl flag is unusable (no file, no context, bad duration).

    The CLI maps it to exit code 2 (usage or configuration error before any work).
    """


class KubeConnectionError(KubeError):
    """The API server could not be reached or did not answer within the request timeout."""


class KubeCredentialError(KubeConfigError):
    """The kubeconfig user's exec credential plugin or auth provider failed before any request.

    ``str()`` is one message naming the user, the context, the command and its
    ``installHint`` (client-go ``plugin/pkg/client/auth/exec/exec.go`` prints the hint when the
    command is not found). The CLI maps it to exit code 2, as any configuration error.
    """


@dataclass(frozen=True)
class KubeApiError(KubeError):
    """A non-2xx answer of the API server, read from its ``Status`` body where it sent one.

    Attributes: ``status`` (HTTP code), ``reason`` (``Status.reason`` such as ``NotFound`` or
    ``Forbidden``, else the HTTP reason), ``message`` (``Status.message``), ``body`` (raw bytes).
    """

    status: int
    reason: str
    message: str
    body: bytes = b""

    def __str__(self) -> str:
        return f"{self.message} ({self.status} {self.reason})" if self.message else f"{self.status} {self.reason}"


@dataclass(frozen=True)
class KubeFlags:
    """kubectl's global flags as the user gave them (``kubectl options``).

    ``request_timeout`` is a kubectl duration string (``"30s"``, ``"1m"``, ``"0"`` = no bound)
    or None for this tool's default of 30 s. ``impersonate`` is ``--as``,
    ``impersonate_groups`` is ``--as-group`` (repeatable).
    """

    kubeconfig: str | None = None
    context: str | None = None
    cluster: str | None = None
    user: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    server: str | None = None
    token: str | None = None
    certificate_authority: str | None = None
    insecure_skip_tls_verify: bool = False
    request_timeout: str | None = None
    impersonate: str | None = None
    impersonate_groups: tuple[str, ...] = ()
    verbosity: int = 0


@dataclass(frozen=True)
class HttpAnswer:
    """An HTTP answer: ``status`` code, lower-cased ``headers``, raw ``body`` bytes.

    ``from_apiserver`` is True when the answer is the API server's own ``Status`` (a proxy
    error such as 503 ``connect: connection refused``) rather than the pod's answer passed
    through the pod proxy; see :func:`is_apiserver_status`.
    """

    status: int
    headers: Mapping[str, str]
    body: bytes
    from_apiserver: bool = False

    def text(self) -> str:
        """The body decoded as UTF-8 (invalid bytes replaced)."""
        return self.body.decode("utf-8", "replace")


#: Modules of the ``kubernetes`` package this adapter needs; everything else is left unimported.
_HOLLOW = ("kubernetes", "kubernetes.client")
_PARTS_LOCK = threading.Lock()
#: attributes the import system and introspection look up on any module: never worth running
#: a package's ``__init__`` for
_PROBED = frozenset({"__loader__", "__wrapped__", "__cached__", "__file__", "__path__", "__spec__",
                     "__mro_entries__", "__class_getitem__", "__origin__", "__signature__"})


class _ClientParts:
    """What this adapter takes from the ``kubernetes`` client: ``Configuration`` (a class),
    the ``kube_config`` and ``incluster_config`` modules and ``ConfigException``."""

    def __init__(self, configuration: Any, kube_config: Any, incluster: Any, exception: type[Exception],
                 selective: bool) -> None:
        self.Configuration = configuration
        self.kube_config = kube_config
        self.incluster = incluster
        self.ConfigException = exception
        #: True when only the used modules were imported; False after the fallback
        self.selective = selective


_PARTS: _ClientParts | None = None


def _hollow_package(name: str, locations: list[str]) -> Any:
    """A package module for ``name`` whose ``__init__`` is not run: submodules import from
    ``locations`` as usual. Any attribute the package would define is found by running the real
    ``__init__`` then (PEP 562 ``__getattr__``), so code that needs the whole package still works."""
    import importlib.machinery
    import types

    module = types.ModuleType(name)
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = list(locations)
    module.__spec__ = spec
    module.__path__ = list(locations)
    module.__package__ = name
    module.__file__ = None
    state = {"loaded": False}

    def load_rest(attr: str) -> Any:
        if attr in _PROBED or state["loaded"]:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        state["loaded"] = True
        init = Path(locations[0]) / "__init__.py"
        code = compile(init.read_bytes(), str(init), "exec")
        module.__file__ = str(init)
        exec(code, module.__dict__)  # noqa: S102 - the package's own __init__, run on demand
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    module.__getattr__ = load_rest  # type: ignore[method-assign]
    return module


class _LazyApiClient:
    """Stands for ``kubernetes.client.ApiClient``, which ``kube_config`` imports by name but
    this adapter never calls (its ``api_client`` module imports every model). Calling it imports
    and returns the real one."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.api_client import ApiClient

        return ApiClient(*args, **kwargs)


class _LazyOAuth2Session:
    """Stands for ``requests_oauthlib.OAuth2Session``, which ``kube_config`` imports by name for
    the OIDC token refresh only (``requests_oauthlib`` imports ``requests``: about 30 ms of every
    start). Calling it imports and returns the real one."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from requests_oauthlib import OAuth2Session  # type: ignore[import-untyped]

        return OAuth2Session(*args, **kwargs)


def _stand_in_module(name: str, attrs: dict[str, Any]) -> Any:
    """A module ``name`` holding ``attrs``, registered only while ``kube_config`` is imported;
    any other attribute it is asked for comes from the real module (PEP 562 ``__getattr__``)."""
    import importlib
    import sys
    import types

    module = types.ModuleType(name)
    module.__dict__.update(attrs)

    def real(attr: str) -> Any:
        if attr in _PROBED:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        if sys.modules.get(name) is module:
            del sys.modules[name]
        return getattr(importlib.import_module(name), attr)

    module.__getattr__ = real  # type: ignore[method-assign]
    return module


def client_parts() -> _ClientParts:
    """Import the parts of the ``kubernetes`` client this adapter uses, once per process.

    ``kubernetes/__init__.py`` and ``kubernetes/client/__init__.py`` import every API and model
    module; the credential loaders need only ``kubernetes.client.configuration``. Both packages
    are therefore registered as packages whose ``__init__`` runs only when an attribute it
    defines is asked for, then ``kubernetes.config`` (loaders, exec provider) is imported
    normally. ``kube_config``'s ``from kubernetes.client import ApiClient, Configuration`` is
    served without ``kubernetes.client.api_client``, and its ``from requests_oauthlib import
    OAuth2Session`` (the OIDC refresh) without importing ``requests``: each stand-in imports the
    real class when called.

    It survives a client upgrade: a name the new version wants from a package is found by
    running that package's real ``__init__`` (slower, still correct), and any import error on
    this path falls back to a plain ``import kubernetes``. ``tests/unit/test_kube_imports.py``
    checks that the pinned version takes the selective path and never imports
    ``kubernetes.client.models``; ``make bench`` prints what the import costs.
    """
    global _PARTS
    with _PARTS_LOCK:
        if _PARTS is None:
            _PARTS = _import_parts()
        return _PARTS


def _import_parts() -> _ClientParts:
    import importlib
    import importlib.util
    import sys

    if "kubernetes" not in sys.modules:
        added: list[str] = []
        try:
            spec = importlib.util.find_spec("kubernetes")
            if spec is None or not spec.submodule_search_locations:
                raise ImportError("kubernetes is not installed")
            root = list(spec.submodule_search_locations)
            top = _hollow_package("kubernetes", root)
            sys.modules["kubernetes"] = top
            added.append("kubernetes")
            sub = _hollow_package("kubernetes.client", [str(Path(root[0]) / "client")])
            sys.modules["kubernetes.client"] = sub
            added.append("kubernetes.client")
            top.client = sub
            configuration = importlib.import_module("kubernetes.client.configuration")
            sub.Configuration = configuration.Configuration
            sub.ApiClient = _LazyApiClient
            stand_in = None
            if "requests_oauthlib" not in sys.modules:
                stand_in = _stand_in_module("requests_oauthlib", {"OAuth2Session": _LazyOAuth2Session})
                sys.modules["requests_oauthlib"] = stand_in
            try:
                kube_config = importlib.import_module("kubernetes.config.kube_config")
            finally:
                if stand_in is not None and sys.modules.get("requests_oauthlib") is stand_in:
                    del sys.modules["requests_oauthlib"]  # a later import gets the real module
            incluster = importlib.import_module("kubernetes.config.incluster_config")
            exc_mod = importlib.import_module("kubernetes.config.config_exception")
            return _ClientParts(configuration.Configuration, kube_config, incluster,
                                exc_mod.ConfigException, selective=True)
        except Exception:  # a client version laid out otherwise: import it the plain way
            for name in list(sys.modules):
                if name == "kubernetes" or name.startswith("kubernetes."):
                    del sys.modules[name]
    importlib.import_module("kubernetes")  # the whole package (slow path)
    full_config = importlib.import_module("kubernetes.client.configuration")
    full_kube = importlib.import_module("kubernetes.config.kube_config")
    full_incluster = importlib.import_module("kubernetes.config.incluster_config")
    full_exc = importlib.import_module("kubernetes.config.config_exception")
    return _ClientParts(full_config.Configuration, full_kube, full_incluster, full_exc.ConfigException,
                        selective=False)


class _LibraryLog(logging.Handler):
    """Collects the client library's log records (``kube_config`` reports a failed exec plugin
    with ``logging.error`` on the root logger, which would print ``ERROR:root:...``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:  # a malformed record: keep nothing of it
            pass


_ROOT_LOG_LOCK = threading.Lock()


class _quiet_library:
    """Context manager: while credential code of the client runs, the root logger's records
    go to a :class:`_LibraryLog` (``.log``; ``log`` reuses one, emptied first: building a
    logging handler takes logging's global lock) instead of the terminal. One thread at a time."""

    def __init__(self, log: _LibraryLog | None = None) -> None:
        self.log = log

    def __enter__(self) -> _LibraryLog:
        _ROOT_LOG_LOCK.acquire()
        self.root = logging.getLogger()
        self.saved = list(self.root.handlers)
        if self.log is None:
            self.log = _LibraryLog()
        else:
            self.log.messages = []
        self.root.handlers = [self.log]
        return self.log

    def __exit__(self, *exc: Any) -> None:
        self.root.handlers = self.saved
        _ROOT_LOG_LOCK.release()


def credential_error(user_name: str, user: Mapping[str, Any], context: str, detail: str) -> str:
    """The one message for a credential source that failed: names the kubeconfig user, the
    context, the exec command (with its arguments) or auth provider, the failure, and the
    exec plugin's ``installHint`` when it has one (client-go prints it when the command is
    missing: ``plugin/pkg/client/auth/exec/exec.go``)."""
    import shlex

    where = f'user "{user_name or "(none)"}" of context "{context or "(none)"}"'
    exec_cfg = user.get("exec") if isinstance(user.get("exec"), dict) else None
    if exec_cfg is not None:
        argv = [str(exec_cfg.get("command") or "")] + [str(a) for a in exec_cfg.get("args") or []]
        text = f"the exec credential plugin of {where} failed: command {shlex.join(argv)!r}: {detail}"
        hint = str(exec_cfg.get("installHint") or "").strip()
        if hint:
            text += "; " + " ".join(hint.split())
        return text
    provider = user.get("auth-provider") if isinstance(user.get("auth-provider"), dict) else {}
    name = str((provider or {}).get("name") or "?")
    return f"the auth provider {name!r} of {where} failed: {detail}"


def _detail(messages: Sequence[str], exc: BaseException | None = None) -> str:
    texts = [m.strip() for m in messages if m and m.strip()]
    if exc is not None:
        texts.append(str(exc).strip() or type(exc).__name__)
    return "; ".join(dict.fromkeys(texts)) or "no credentials came back"


class _KeepAlive:
    """At most ``size`` keep-alive HTTP/1.1 connections to one API server (the standard
    library's ``http.client``, sharing one ``ssl.SSLContext``), for the plain requests of a run.

    urllib3's pool does the same with about 0.25 ms more CPU per request (URL parsing, header
    containers, response wrappers, measured by ``make bench``): with three reset routes per pod
    that was most of the plugin's CPU per pod. Same rules as that pool with ``block=True`` and
    ``retries=False``: a caller waits when all ``size`` connections are busy (so a run makes at
    most ``size`` TLS handshakes), an idle connection the server has closed is dropped before
    reuse, nothing is re-sent here, redirects are returned as they are.

    Raises from :meth:`request`: ``TimeoutError`` (the bound was hit), ``OSError`` (refused,
    reset, TLS failure) and ``http.client.HTTPException`` (a malformed or cut answer).
    """

    def __init__(self, host: str, port: int, ssl_context: Any, size: int, prefix: str = "") -> None:
        self.host = host
        self.port = port
        #: the server URL's own path (a cluster behind a path-routing proxy), put before each target
        self.prefix = prefix.rstrip("/")
        self.ssl_context = ssl_context
        self.size = max(1, size)
        self._idle: list[Any] = []
        self._open = 0
        self._cond = threading.Condition()

    def _take(self) -> Any:
        # an idle connection (the most recent first), or None: the caller may open one
        import select

        with self._cond:
            while True:
                while self._idle:
                    conn = self._idle.pop()
                    sock = conn.sock
                    try:
                        dropped = sock is None or bool(select.select([sock], [], [], 0)[0])
                    except (OSError, ValueError):
                        dropped = True
                    if not dropped:
                        return conn
                    conn.close()  # closed by the server while idle (or sent what nobody asked for)
                    self._open -= 1
                if self._open < self.size:
                    self._open += 1
                    return None
                self._cond.wait()

    def _give(self, conn: Any, keep: bool) -> None:
        with self._cond:
            if keep:
                self._idle.append(conn)
            else:
                if conn is not None:
                    conn.close()
                self._open -= 1
            self._cond.notify()

    def request(self, method: str, target: str, body: bytes | None, headers: Mapping[str, str],
                bound: float | None) -> tuple[int, dict[str, str], bytes]:
        """Send one request (``target``: path and query) and read the whole answer:
        ``(status, headers with lower-case names, body)``. ``bound`` (seconds, None: only the
        30 s connect bound) limits the connect and each read."""
        import http.client

        conn = self._take()
        keep = False
        try:
            if conn is None:
                if self.ssl_context is not None:
                    conn = http.client.HTTPSConnection(self.host, self.port, timeout=min(bound or 30.0, 30.0),
                                                       context=self.ssl_context)
                else:
                    conn = http.client.HTTPConnection(self.host, self.port, timeout=min(bound or 30.0, 30.0))
                conn.connect()
            conn.sock.settimeout(bound or None)
            conn.request(method, self.prefix + target, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            keep = not resp.will_close
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            self._give(conn, keep)

    def close(self) -> None:
        """Close the idle connections."""
        with self._cond:
            while self._idle:
                self._idle.pop().close()
                self._open -= 1


class Transport:
    """The HTTP side of a connection: one ``ssl.SSLContext`` (CA, client certificate, verify
    mode: built once, as loading a CA bundle per connection costs about 0.5 ms of CPU) and one
    urllib3 pool of at most ``pool_size`` keep-alive connections to the API server. The pool
    blocks a caller when all its connections are busy rather than opening more, so a run makes
    at most ``pool_size`` TLS handshakes for plain requests (each WebSocket stream, exec or
    port-forward, opens its own connection with the same context).

    ``configuration`` is the client's ``Configuration`` as its loaders filled it (``host``,
    ``ssl_ca_cert``, ``cert_file``, ``key_file``, ``verify_ssl``, ``tls_server_name``,
    ``proxy``, ``no_proxy``, ``api_key``, ``refresh_api_key_hook``).
    """

    def __init__(self, configuration: Any, pool_size: int) -> None:
        import ssl

        import urllib3

        self.configuration = configuration
        self.pool_size = max(1, int(pool_size))
        self.tls_material = (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file,
                             bool(configuration.verify_ssl))
        self.ssl_context: ssl.SSLContext | None = None
        kwargs: dict[str, Any] = {"num_pools": 2, "maxsize": self.pool_size, "block": True, "retries": False}
        if str(configuration.host).startswith("https"):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            if configuration.verify_ssl:
                if configuration.ssl_ca_cert:
                    ctx.load_verify_locations(cafile=configuration.ssl_ca_cert)
                else:
                    ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
                kwargs["cert_reqs"] = "CERT_REQUIRED"
            else:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                kwargs["cert_reqs"] = "CERT_NONE"
                # the user asked for it (--insecure-skip-tls-verify, as kubectl, which says
                # nothing per request): no urllib3 warning on every new connection
                import warnings

                warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
            if configuration.cert_file:
                ctx.load_cert_chain(configuration.cert_file, configuration.key_file or None)
            ctx.set_alpn_protocols(["http/1.1"])
            self.ssl_context = ctx
            kwargs["ssl_context"] = ctx
            if getattr(configuration, "tls_server_name", None):
                kwargs["server_hostname"] = configuration.tls_server_name
        proxy = getattr(configuration, "proxy", None)
        if proxy and not _bypass_proxy(str(configuration.host), getattr(configuration, "no_proxy", None) or ""):
            self.pool: Any = urllib3.ProxyManager(proxy_url=proxy, proxy_headers=getattr(configuration, "proxy_headers", None),
                                                  **kwargs)
        else:
            self.pool = urllib3.PoolManager(**kwargs)
        #: the plain requests' keep-alive connections (:class:`_KeepAlive`); None behind a proxy
        #: or with ``tls-server-name``, where the urllib3 pool above serves them
        self.keep_alive: _KeepAlive | None = None
        if not isinstance(self.pool, urllib3.ProxyManager) and not getattr(configuration, "tls_server_name", None):
            from urllib.parse import urlsplit

            url = urlsplit(str(configuration.host))
            if url.hostname and url.scheme in ("http", "https"):
                self.keep_alive = _KeepAlive(url.hostname, url.port or (443 if url.scheme == "https" else 80),
                                             self.ssl_context if url.scheme == "https" else None, self.pool_size,
                                             url.path)
        self._timeouts: dict[float | None, Any] = {}
        self._auth_lock = threading.Lock()
        self._auth_log = _LibraryLog()

    def timeout(self, bound: float | None) -> Any:
        """The ``urllib3.Timeout`` for a request bound (seconds; None or 0: only the 30 s
        connect bound), built once per value."""
        found = self._timeouts.get(bound)
        if found is None:
            import urllib3

            found = urllib3.Timeout(total=bound) if bound else urllib3.Timeout(connect=30.0)
            self._timeouts[bound] = found
        return found

    def authorization(self) -> tuple[str | None, list[str]]:
        """The ``Authorization`` header value (None without a token), refreshed by the client's
        hook when the token has expired (an exec plugin runs again), and the library's log
        messages of that refresh (a failed plugin logs instead of raising)."""
        with self._auth_lock, _quiet_library(self._auth_log) as log:
            value = self.configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        return (str(value) if value else None), log.messages

    def ws_sslopt(self) -> dict[str, Any]:
        """websocket-client ``sslopt`` reusing :attr:`ssl_context`."""
        opts: dict[str, Any] = {"context": self.ssl_context}
        if getattr(self.configuration, "tls_server_name", None):
            opts["server_hostname"] = self.configuration.tls_server_name
        return opts


def _bypass_proxy(host: str, no_proxy: str) -> bool:
    from urllib.parse import urlsplit

    hostname = urlsplit(host).hostname or ""
    for entry in (e.strip() for e in no_proxy.split(",")):
        if entry == "*" or (entry and (hostname == entry.lstrip(".") or hostname.endswith("." + entry.lstrip(".")))):
            return True
    return False


def parse_duration(text: str | None, default: float = DEFAULT_REQUEST_TIMEOUT_S) -> float | None:
    """Parse a kubectl duration (``--request-timeout``, ``--timeout``) into seconds.

    Accepts Go durations (``"1m30s"``, ``"500ms"``, ``"2h"``) and a bare number of seconds, as
    kubectl does. ``"0"`` means no bound and returns None; None returns ``default``.

    Raises:
        KubeConfigError: the text is not a duration (the message names the flag's value).
    """
    if text is None:
        return default
    t = text.strip()
    try:
        seconds = float(t)
    except ValueError:
        import durationpy  # small, pure Python, a dependency of the kubernetes client

        try:
            seconds = durationpy.from_str(t).total_seconds()
        except Exception as exc:  # durationpy raises its own error types
            raise KubeConfigError(
                f"invalid duration {text!r}: use a number of seconds or a unit such as 30s, 2m, 1h"
            ) from exc
    if seconds < 0:
        raise KubeConfigError(f"invalid duration {text!r}: must not be negative")
    return None if seconds == 0 else seconds


def kubeconfig_paths(flag: str | None, environ: Mapping[str, str] | None = None) -> list[Path]:
    """The kubeconfig files kubectl would read, in precedence order.

    ``--kubeconfig`` alone if given; else every entry of ``KUBECONFIG`` (``os.pathsep``
    separated, empty entries and duplicates dropped); else ``~/.kube/config``.
    Files that do not exist are kept out, as kubectl ignores them (except ``--kubeconfig``,
    which must exist: see :func:`merge_kubeconfigs`).
    """
    env = os.environ if environ is None else environ
    if flag:
        return [Path(flag).expanduser()]
    raw = env.get("KUBECONFIG", "")
    if raw:
        seen: list[Path] = []
        for part in raw.split(os.pathsep):
            if part and Path(part).expanduser() not in seen:
                seen.append(Path(part).expanduser())
        return [p for p in seen if p.exists()]
    default = Path(env.get("HOME", str(Path.home()))) / ".kube" / "config"
    return [default] if default.exists() else []


def _absolutise(entry: dict[str, Any], keys: Iterable[str], base: Path) -> None:
    for key in keys:
        value = entry.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value):
            entry[key] = str((base / value).resolve())


def merge_kubeconfigs(paths: Sequence[Path]) -> dict[str, Any]:
    """Merge kubeconfig files with kubectl's rule: the first file that sets a value wins.

    Named clusters, users and contexts are taken from the first file defining each name;
    ``current-context`` from the first file that sets one. Relative ``certificate-authority``,
    ``client-certificate``, ``client-key`` and ``tokenFile`` paths are resolved against the
    directory of the file naming them (client-go ``ResolveLocalPaths``).

    Returns a kubeconfig dict (``clusters``, ``users``, ``contexts`` lists, ``current-context``).

    Raises:
        KubeConfigError: a file cannot be read or is not a kubeconfig mapping.
    """
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": [], "current-context": ""}
    names: dict[str, set[str]] = {"clusters": set(), "users": set(), "contexts": set()}
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise KubeConfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise KubeConfigError(f"kubeconfig {path} is not valid YAML: {exc}") from exc
        if not isinstance(doc, dict):
            raise KubeConfigError(f"kubeconfig {path} is not a mapping")
        if not merged["current-context"] and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
        for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for item in doc.get(section) or []:
                if not isinstance(item, dict) or not item.get("name") or item["name"] in names[section]:
                    continue
                names[section].add(item["name"])
                body = dict(item.get(inner) or {})
                _absolutise(body, _PATH_KEYS.get(section, ()), path.parent)
                merged[section].append({"name": item["name"], inner: body})
    return merged


def _find(cfg: Mapping[str, Any], section: str, name: str) -> dict[str, Any] | None:
    for item in cfg.get(section) or []:
        if item.get("name") == name:
            return dict(item)
    return None


def apply_overrides(cfg: dict[str, Any], flags: KubeFlags) -> tuple[dict[str, Any], str, str]:
    """Apply kubectl's override flags to a merged kubeconfig.

    Returns ``(config, context_name, namespace)``: a config whose ``current-context`` is a
    synthetic context combining the chosen cluster and user with the flag overrides, the name
    of the context the user chose, and the namespace (``-n``, else the context's, else
    ``default``).

    Raises:
        KubeConfigError: no context is selected, or a named context, cluster or user is absent.
    """
    ctx_name = flags.context or cfg.get("current-context") or ""
    ctx: dict[str, Any] = {}
    if ctx_name:
        found = _find(cfg, "contexts", ctx_name)
        if found is None:
            raise KubeConfigError(f'context "{ctx_name}" does not exist in the kubeconfig (see kubectl config get-contexts)')
        ctx = dict(found.get("context") or {})
    elif not flags.server:
        raise KubeConfigError(
            "no current context: set one with 'kubectl config use-context NAME' or pass --context"
        )
    cluster_name = flags.cluster or ctx.get("cluster", "")
    user_name = flags.user or ctx.get("user", "")
    cluster = dict((_find(cfg, "clusters", cluster_name) or {}).get("cluster") or {}) if cluster_name else {}
    if cluster_name and not cluster and not flags.server:
        raise KubeConfigError(f'cluster "{cluster_name}" does not exist in the kubeconfig')
    found_user = _find(cfg, "users", user_name) if user_name else None
    if flags.user and found_user is None:
        raise KubeConfigError(f'auth info "{flags.user}" does not exist in the kubeconfig (see kubectl config view)')
    user = dict((found_user or {}).get("user") or {})
    if flags.server:
        cluster["server"] = flags.server
    if flags.certificate_authority:
        cluster["certificate-authority"] = str(Path(flags.certificate_authority).expanduser().resolve())
        cluster.pop("certificate-authority-data", None)
    if flags.insecure_skip_tls_verify:
        cluster["insecure-skip-tls-verify"] = True
        cluster.pop("certificate-authority", None)
        cluster.pop("certificate-authority-data", None)
    if flags.token:
        for key in ("token", "tokenFile", "exec", "auth-provider", "username", "password"):
            user.pop(key, None)
        user["token"] = flags.token
    if not cluster.get("server"):
        raise KubeConfigError(
            f'cluster "{cluster_name or "(none)"}" has no server address: pass --server or fix the kubeconfig'
        )
    namespace = flags.namespace or ctx.get("namespace") or "default"
    out = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kvreset", "cluster": cluster}],
        "users": [{"name": "kvreset", "user": user}],
        "contexts": [{"name": "kvreset", "context": {"cluster": "kvreset", "user": "kvreset", "namespace": namespace}}],
        "current-context": "kvreset",
    }
    return out, ctx_name, namespace


def retry_after_seconds(value: str | None, attempt: int) -> float:
    """Seconds to wait before re-sending after a 429: the ``Retry-After`` header (seconds, as
    the API server's priority and fairness sends it) capped at 10 s, else exponential backoff
    from 0.5 s. An HTTP-date value counts as 1 s."""
    if value:
        try:
            return max(0.0, min(float(value.strip()), 10.0))
        except ValueError:
            return 1.0
    return float(min(0.5 * 2.0 ** (attempt - 1), 8.0))


def is_apiserver_status(answer_body: bytes, headers: Mapping[str, str]) -> bool:
    """True when a body is a Kubernetes ``Status`` object (the API server's own error).

    A vLLM answer passed through the pod proxy keeps vLLM's status and body; a proxy failure
    (pod unreachable, port closed) is a JSON ``{"kind":"Status","apiVersion":"v1",...}``.
    This tells the two apart by the body, not by the status code.
    """
    if "json" not in headers.get("content-type", "") and not answer_body.startswith(b"{"):
        return False
    try:
        doc = json.loads(answer_body)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and doc.get("kind") == "Status" and doc.get("apiVersion") == "v1"


def status_message(body: bytes) -> tuple[str, str]:
    """``(reason, message)`` of a ``Status`` body, or ``("", text)`` for anything else."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "", body.decode("utf-8", "replace").strip()[:300]
    if isinstance(doc, dict):
        return str(doc.get("reason") or ""), str(doc.get("message") or "")
    return "", str(doc)[:300]


@dataclass
class Kube:
    """A connection to one cluster as the user's kubeconfig and flags describe it.

    Create with :meth:`connect`. Thread-safe: the urllib3 pool is shared, sized by
    ``pool_size``. Every request is bounded by ``timeout_s`` (None: unbounded, ``--request-timeout=0``).
    """

    host: str
    namespace: str
    context: str
    timeout_s: float | None
    _transport: Any
    _headers: dict[str, str] = field(default_factory=dict)
    _impersonate_groups: tuple[str, ...] = ()
    _reload: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    requests_made: int = 0
    retries_made: int = 0
    #: the kubeconfig user's name and entry (for credential messages)
    user_name: str = ""
    _user: Mapping[str, Any] = field(default_factory=dict)
    #: the last credential refresh's failure, said again if the API server then answers 401
    _refresh_failure: str | None = None
    #: the kubeconfig cluster's name (``--cluster`` or the context's), ``(in-cluster)`` inside a pod
    cluster: str = ""

    @classmethod
    def connect(cls, flags: KubeFlags, *, pool_size: int = 16) -> Kube:
        """Resolve the kubeconfig (or the in-cluster config) and build a client whose pool
        holds at most ``pool_size`` keep-alive connections (``--max-concurrency``).

        Credentials are obtained here, before any request: an exec credential plugin runs now.

        Raises:
            KubeCredentialError: the user's exec plugin or auth provider failed (one message
                naming the user, the context, the command and its ``installHint``).
            KubeConfigError: no usable kubeconfig, an unknown context, a bad flag value.
        """
        timeout = parse_duration(flags.request_timeout)
        parts = client_parts()

        paths = kubeconfig_paths(flags.kubeconfig)
        if flags.kubeconfig and not paths[0].exists():
            raise KubeConfigError(f"kubeconfig {flags.kubeconfig} does not exist")
        in_cluster = not paths and bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not flags.server
        if not in_cluster and not paths and not flags.server:
            raise KubeConfigError("no kubeconfig found: set KUBECONFIG, pass --kubeconfig, or create ~/.kube/config")
        who: dict[str, Any] = {"name": "", "user": {}, "cluster": "(in-cluster)" if in_cluster else ""}

        def load() -> tuple[Any, str, str]:
            # builds a fresh configuration: called again after a 401 to get new credentials
            configuration = parts.Configuration()
            if in_cluster:
                try:
                    with _quiet_library():
                        parts.incluster.load_incluster_config(client_configuration=configuration)
                except parts.ConfigException as exc:
                    raise KubeConfigError(f"in-cluster configuration failed: {exc}") from exc
                ns_file = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                namespace = flags.namespace or (ns_file.read_text().strip() if ns_file.exists() else "default")
                ctx_name = "(in-cluster)"
                if flags.token:
                    configuration.api_key = {"authorization": "Bearer " + flags.token}
                return configuration, namespace, ctx_name
            merged = merge_kubeconfigs(paths)
            cfg, ctx_name, namespace = apply_overrides(merged, flags)
            user = cfg["users"][0]["user"]
            ctx_entry = _find(merged, "contexts", ctx_name) if ctx_name else None
            who["name"] = flags.user or str(((ctx_entry or {}).get("context") or {}).get("user") or "")
            who["cluster"] = flags.cluster or str(((ctx_entry or {}).get("context") or {}).get("cluster") or "")
            who["user"] = user
            sourced = isinstance(user.get("exec"), dict) or isinstance(user.get("auth-provider"), dict)
            with _quiet_library() as log:
                try:
                    parts.kube_config.load_kube_config_from_dict(
                        cfg, context="kvreset", client_configuration=configuration, persist_config=False
                    )
                except Exception as exc:
                    if sourced and not isinstance(exc, KubeError):
                        raise KubeCredentialError(
                            credential_error(who["name"], user, ctx_name, _detail(log.messages, exc))) from exc
                    if isinstance(exc, (parts.ConfigException, ValueError, OSError)):
                        raise KubeConfigError(f"kubeconfig context {ctx_name!r} is unusable: {exc}") from exc
                    raise
            has_token = bool(configuration.api_key)
            if sourced and (log.messages or not (has_token or configuration.cert_file)):
                detail = _detail(log.messages) if log.messages else (
                    "this client cannot use that auth provider" if not user.get("exec") else "no credentials came back")
                raise KubeCredentialError(credential_error(who["name"], user, ctx_name, detail))
            return configuration, namespace, ctx_name

        transport_box: list[Transport] = []

        def reload() -> Any:
            try:
                configuration = load()[0]
            except KubeConfigError as exc:
                raise KubeConnectionError(
                    f"the API server refused the credentials (401) and rebuilding them failed: {exc}") from exc
            old = transport_box[0]
            if (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file,
                    bool(configuration.verify_ssl)) == old.tls_material:
                old.configuration = configuration  # same TLS material: keep the pool and its connections
                return old
            fresh = Transport(configuration, old.pool_size)
            transport_box[0] = fresh
            return fresh

        configuration, namespace, ctx_name = load()
        try:
            transport = Transport(configuration, pool_size)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise KubeConfigError(f"kubeconfig context {ctx_name!r}: cannot use its TLS files: {exc}") from exc
        transport_box.append(transport)
        headers: dict[str, str] = {"User-Agent": "kubectl-kvreset"}
        if flags.impersonate:
            headers["Impersonate-User"] = flags.impersonate
        kube = cls(
            host=configuration.host.rstrip("/"),
            namespace=namespace,
            context=ctx_name,
            timeout_s=timeout,
            _transport=transport,
            _headers=headers,
            _impersonate_groups=flags.impersonate_groups,
            _reload=reload,
            user_name=who["name"],
            _user=who["user"],
            cluster=who["cluster"] or ("(from --server)" if flags.server else ""),
        )
        return kube

    def where(self, all_namespaces: bool = False) -> str:
        """``context "c", cluster "k" (https://host), namespace "ns"`` (``all namespaces`` with
        ``-A``), for the confirmation prompt and the ``-v`` line."""
        ns = "all namespaces" if all_namespaces else f'namespace "{self.namespace}"'
        return f'context "{self.context}", cluster "{self.cluster}" ({self.host}), {ns}'

    @property
    def pool_size(self) -> int:
        """How many keep-alive connections the pool holds at most."""
        return int(getattr(self._transport, "pool_size", 0))

    def _auth_headers(self) -> dict[str, str]:
        """``Authorization`` for the next request (refreshing an expired exec token first).
        A failed refresh is remembered and said if the API server then refuses the old token."""
        value, messages = self._transport.authorization()
        if messages:
            self._refresh_failure = credential_error(self.user_name, self._user, self.context, _detail(messages))
        return {"Authorization": value} if value else {}

    def with_timeout(self, timeout_s: float | None) -> Kube:
        """A view of this connection whose requests use another bound (same pool)."""
        return replace(self, timeout_s=timeout_s)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        content_type: str | None = None,
        accept: str = "application/json",
        timeout_s: float | None | bool = False,
        retry_server_errors: bool | None = None,
    ) -> HttpAnswer:
        """Send a request to the API server and return its answer whatever the status.

        ``path`` is the URL path (already percent-encoded where needed); ``timeout_s`` False
        means the connection's bound (each attempt is bounded).

        Retries, bounded (client-go's rules for the same cases):

        - 429 ``TooManyRequests`` from the API server: the request was not processed, so any
          method is sent again after ``Retry-After`` seconds (capped at 10 s), up to
          :data:`MAX_RETRIES` times;
        - 401: the credentials are rebuilt from the kubeconfig once (an exec credential plugin
          or token file then gives a fresh token) and the request sent again;
        - the API server's own 500/502/503/504 and lost connections: only when
          ``retry_server_errors`` (default: GET and HEAD, which are idempotent), with
          exponential backoff. A PATCH or POST is never re-sent blindly: the caller re-reads.

        Raises:
            KubeConnectionError: connection refused, TLS failure, or the bound was hit (after
                the retries that apply).
        """
        import time

        retry_errors = method in ("GET", "HEAD") if retry_server_errors is None else retry_server_errors
        refreshed = False
        attempt = 0
        while True:
            try:
                answer = self._send(method, path, query=query, body=body, content_type=content_type,
                                    accept=accept, timeout_s=timeout_s)
            except KubeConnectionError:
                if not retry_errors or attempt >= CONNECTION_RETRIES:
                    raise
                attempt += 1
                self._count_retry()
                time.sleep(min(0.25 * 2**attempt, 4.0))
                continue
            if answer.status == 401 and not refreshed and self._reload is not None:
                refreshed = True
                self._transport = self._reload()
                self._count_retry()
                continue
            if answer.status == 401 and self._refresh_failure:
                raise KubeConnectionError(self._refresh_failure)
            if answer.status == 429 and answer.from_apiserver and attempt < MAX_RETRIES:
                attempt += 1
                self._count_retry()
                time.sleep(retry_after_seconds(answer.headers.get("retry-after"), attempt))
                continue
            if (retry_errors and answer.from_apiserver and answer.status in (500, 502, 503, 504)
                    and attempt < MAX_RETRIES):
                attempt += 1
                self._count_retry()
                time.sleep(min(0.25 * 2**attempt, 4.0))
                continue
            return answer

    def _count_retry(self) -> None:
        with self._lock:
            self.retries_made += 1

    def _send(self, method: str, path: str, *, query: Sequence[tuple[str, str]], body: bytes | None,
              content_type: str | None, accept: str, timeout_s: float | None | bool) -> HttpAnswer:
        """One attempt of :meth:`request`."""
        headers = dict(self._headers)
        headers["Accept"] = accept
        if content_type:
            headers["Content-Type"] = content_type
        headers.update(self._auth_headers())
        target = path + "?" + urlencode(list(query)) if query else path
        url = self.host + target
        bound = self.timeout_s if timeout_s is False else timeout_s
        transport = self._transport
        keep_alive = getattr(transport, "keep_alive", None)
        if self._impersonate_groups:
            # urllib3 headers are a mapping: several Impersonate-Group values join with commas
            headers["Impersonate-Group"] = ",".join(self._impersonate_groups)
        with self._lock:
            self.requests_made += 1
        started = time.monotonic()
        if _LOG.isEnabledFor(logging.DEBUG):
            shown = ", ".join(f"{k}: {'<redacted>' if k.lower() in ('authorization', 'cookie') else v}"
                              for k, v in headers.items())
            _LOG.debug("request headers: %s", shown)  # as kubectl -v=8 prints them, not a Python repr
        if keep_alive is not None:
            status, hdrs, data = self._send_keep_alive(keep_alive, method, path, target, body, headers, bound)
        else:
            status, hdrs, data = self._send_urllib3(method, path, url, body, headers, bound)
        _LOG.info("%s %s %s in %.0f ms", method, url, status, (time.monotonic() - started) * 1000)
        return HttpAnswer(status, hdrs, data, from_apiserver=status >= 400 and is_apiserver_status(data, hdrs))

    def _send_keep_alive(self, keep_alive: _KeepAlive, method: str, path: str, target: str, body: bytes | None,
                         headers: dict[str, str], bound: float | None) -> tuple[int, dict[str, str], bytes]:
        import http.client

        try:
            return keep_alive.request(method, target, body, headers, bound)
        except TimeoutError as exc:  # socket.timeout is TimeoutError
            limit = f"{bound:g} s (--request-timeout)" if bound else "30 s (connect)"
            raise KubeConnectionError(f"{method} {path}: no answer from {self.host} within {limit}") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise KubeConnectionError(f"cannot reach the API server at {self.host}: {_short(exc) or type(exc).__name__}") from exc

    def _send_urllib3(self, method: str, path: str, url: str, body: bytes | None, headers: dict[str, str],
                      bound: float | None) -> tuple[int, dict[str, str], bytes]:
        import urllib3

        transport = self._transport
        timeout = transport.timeout(bound) if isinstance(transport, Transport) else \
            (urllib3.Timeout(total=bound) if bound else urllib3.Timeout(connect=30.0))
        try:
            r = transport.pool.request(method, url, body=body, headers=headers, timeout=timeout, retries=False,
                                       preload_content=True)
        except urllib3.exceptions.NewConnectionError as exc:
            # a subclass of ConnectTimeoutError in urllib3 2.x: a refused connection is not a timeout
            raise KubeConnectionError(f"cannot reach the API server at {self.host}: {_short(exc)}") from exc
        except urllib3.exceptions.TimeoutError as exc:
            limit = f"{bound:g} s (--request-timeout)" if bound else "30 s (connect)"
            raise KubeConnectionError(f"{method} {path}: no answer from {self.host} within {limit}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise KubeConnectionError(f"cannot reach the API server at {self.host}: {_short(exc)}") from exc
        return r.status, {k.lower(): v for k, v in r.headers.items()}, r.data or b""

    def get_json(self, path: str, *, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        """GET an API path and decode its JSON.

        Raises:
            KubeApiError: a non-2xx answer (with the ``Status`` reason and message).
            KubeConnectionError: see :meth:`request`.
        """
        answer = self.request("GET", path, query=query)
        return self._decode(answer, "GET", path)

    def send_json(self, method: str, path: str, body: Any, *, content_type: str = "application/json",
                  query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        """Send a JSON body (POST, PUT, PATCH with its patch content type) and decode the answer.

        Raises:
            KubeApiError, KubeConnectionError: as :meth:`get_json`.
        """
        answer = self.request(method, path, query=query, body=json.dumps(body).encode(), content_type=content_type)
        return self._decode(answer, method, path)

    @staticmethod
    def _decode(answer: HttpAnswer, method: str, path: str) -> dict[str, Any]:
        if answer.status >= 300:
            reason, message = status_message(answer.body)
            raise KubeApiError(answer.status, reason or _http_reason(answer.status), message or f"{method} {path}", answer.body)
        try:
            doc = json.loads(answer.body)
        except ValueError as exc:
            raise KubeApiError(answer.status, "BadResponse", f"{method} {path}: answer is not JSON", answer.body) from exc
        if not isinstance(doc, dict):
            raise KubeApiError(answer.status, "BadResponse", f"{method} {path}: answer is not an object", answer.body)
        return doc

    def list_items(self, group_version: str, plural: str, namespace: str | None,
                   *, label_selector: str | None = None, field_selector: str | None = None) -> list[dict[str, Any]]:
        """List objects of one resource: ``group_version`` ``"v1"`` or ``"apps/v1"``; ``namespace``
        None lists across all namespaces. Returns the ``items`` (each with ``kind`` filled in).

        Raises:
            KubeApiError, KubeConnectionError: as :meth:`get_json`.
        """
        path = resource_path(group_version, plural, namespace)
        query: list[tuple[str, str]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        doc = self.get_json(path, query=query)
        kind = str(doc.get("kind", "")).removesuffix("List")
        items: list[dict[str, Any]] = doc.get("items") or []
        for item in items:
            item.setdefault("kind", kind)
        return items

    def get_object(self, group_version: str, plural: str, namespace: str | None, name: str) -> dict[str, Any]:
        """GET one object by name.

        Raises:
            KubeApiError: 404 ``NotFound`` when absent, 403 ``Forbidden``; KubeConnectionError.
        """
        return self.get_json(resource_path(group_version, plural, namespace) + "/" + quote(name, safe=""))

    def pod_proxy(self, namespace: str, pod: str, port: int, method: str, path: str,
                  query: Sequence[tuple[str, str]] = (), *, scheme: str = "http",
                  body: bytes | None = None, content_type: str | None = None,
                  timeout_s: float | None | bool = False) -> HttpAnswer:
        """Send an HTTP request to ``pod:port`` through the API server's pod proxy.

        ``path`` starts with ``/`` (e.g. ``/reset_prefix_cache``); ``query`` is sent as the
        proxied request's query string; ``body`` with ``content_type`` (the API server passes
        the header on: a FastAPI server needs ``application/json`` to read a JSON body). URL form ``/api/v1/namespaces/NS/pods/[https:]POD:PORT/proxy/PATH``
        (kubernetes PR #14876). The answer is the pod's own unless ``from_apiserver``.
        RBAC: ``create`` on ``pods/proxy`` for POST, ``get`` for GET, ``delete`` for DELETE.

        Raises:
            KubeConnectionError: the API server itself could not be reached in time.
        """
        target = f"{scheme}:{pod}:{port}" if scheme == "https" else f"{pod}:{port}"
        url = (
            f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(target, safe=':')}/proxy"
            + quote(path, safe="/")
        )
        return self.request(method, url, query=query, body=body, accept="*/*", timeout_s=timeout_s,
                            retry_server_errors=False, content_type=content_type)

    def exec_command(self, namespace: str, pod: str, container: str, argv: Sequence[str],
                     *, timeout_s: float = 60.0) -> ExecResult:
        """Run ``argv`` (a list: never a shell string) in ``container`` of ``pod`` through
        ``pods/exec`` over WebSocket and wait for its exit status up to ``timeout_s``.

        RBAC: ``get`` and ``create`` on ``pods/exec`` (a v1.32 server authorises the WebSocket
        upgrade as ``get``; 1.35 requires ``create``, kubernetes PR #134577).

        Raises:
            KubeApiError: the upgrade was refused (403 Forbidden, 404 pod, 400 container).
            KubeConnectionError: the API server could not be reached.
        """
        return _exec(self, namespace, pod, container, argv, timeout_s)

    def service_proxy(self, namespace: str, service: str, port: int | str, method: str, path: str,
                      query: Sequence[tuple[str, str]] = (), *, body: bytes | None = None,
                      content_type: str | None = None, timeout_s: float | None | bool = False) -> HttpAnswer:
        """Send an HTTP request to a Service port through the API server's service proxy
        (``/api/v1/namespaces/NS/services/NAME:PORT/proxy/PATH``; the API server picks one ready
        endpoint). RBAC: ``create`` on ``services/proxy`` for POST, ``get`` for GET.

        Raises:
            KubeConnectionError: the API server itself could not be reached in time.
        """
        url = (f"/api/v1/namespaces/{quote(namespace, safe='')}/services/"
               f"{quote(f'{service}:{port}', safe=':')}/proxy" + quote(path, safe="/"))
        return self.request(method, url, query=query, body=body, accept="*/*", timeout_s=timeout_s,
                            retry_server_errors=False, content_type=content_type)

    def port_forward_socket(self, namespace: str, pod: str, port: int, *, timeout_s: float = 30.0) -> socket.socket:
        """A connected stream socket whose bytes go to ``pod:port`` over ``pods/portforward``
        (WebSocket ``v4.channel.k8s.io``, as :meth:`port_forward_http`): one end of a
        ``socket.socketpair()``, the other end pumped to and from the stream by two daemon
        threads. Any client library that takes a socket (a RESP client, TLS wrapping) works on
        it; closing it ends the stream. ``timeout_s`` bounds the upgrade only.

        RBAC: ``get`` and ``create`` on ``pods/portforward``.

        Raises:
            KubeApiError: the upgrade was refused. KubeConnectionError: the API server could not
            be reached, or the pod refused the port (the error channel's text).
        """
        return _port_forward_socket(self, namespace, pod, port, timeout_s)

    def port_forward_http(self, namespace: str, pod: str, port: int, method: str, path: str,
                          query: Sequence[tuple[str, str]] = (), *, timeout_s: float = 30.0) -> HttpAnswer:
        """Send one HTTP request to ``pod:port`` over ``pods/portforward`` (WebSocket,
        ``v4.channel.k8s.io``: data channel 0, error channel 1, each starting with the port as
        two little-endian bytes) and return the pod's answer.

        RBAC: ``get`` and ``create`` on ``pods/portforward``.

        Raises:
            KubeApiError: the upgrade was refused. KubeConnectionError: no answer, or nothing
            listens on the port.
        """
        target = path + ("?" + urlencode(list(query)) if query else "")
        request = (f"{method} {target} HTTP/1.1\r\nHost: localhost:{port}\r\nUser-Agent: kubectl-kvreset\r\n"
                   "Accept: */*\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").encode()
        raw = _port_forward_http(self, namespace, pod, port, request, timeout_s)
        return parse_http_response(raw)


def resource_path(group_version: str, plural: str, namespace: str | None) -> str:
    """The REST path of a resource collection, e.g. ``/apis/apps/v1/namespaces/ns/deployments``."""
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    if namespace:
        return f"{base}/namespaces/{quote(namespace, safe='')}/{plural}"
    return f"{base}/{plural}"


def _short(exc: BaseException) -> str:
    text = str(exc)
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "no such host"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "TLS certificate verification failed (check certificate-authority or --insecure-skip-tls-verify)"
    return text.split(": ", 1)[-1][:200]


def _http_reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase.replace(" ", "")
    except ValueError:
        return "Error"


@dataclass(frozen=True)
class ExecResult:
    """The end of a command run with ``pods/exec``.

    ``exit_code`` is the command's exit status (None when there is none: the stream was cut or
    the bound was hit, or the runtime could not start the command); ``stdout``/``stderr`` are
    the bytes received; ``message`` is the error channel's text when it is not an exit code
    (e.g. ``executable file not found``); ``timed_out`` is True when the bound ended the wait,
    which is reported, never read as success.
    """

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    message: str | None = None
    timed_out: bool = False


def read_exec_status(raw: bytes) -> tuple[int | None, str | None]:
    """Read the error channel (3) of an exec stream: a ``Status`` object.

    ``Success`` -> ``(0, None)``; a cause with reason ``ExitCode`` -> ``(code, message)``; any
    other failure -> ``(None, message)``; empty -> ``(None, "no exit status")``. This replaces
    the Python client's ``returncode``, which raises on several of these shapes
    (kubernetes-client/python #1840, #2156).
    """
    if not raw.strip():
        return None, "no exit status (the stream ended early)"
    try:
        doc = json.loads(raw)
    except ValueError:
        return None, raw.decode("utf-8", "replace")[:300]
    if not isinstance(doc, dict):
        return None, str(doc)[:300]
    if doc.get("status") == "Success":
        return 0, None
    for cause in (doc.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message")), str(doc.get("message") or "")
            except (TypeError, ValueError):
                break
    return None, str(doc.get("message") or "command failed")


class _Channels:
    """A WebSocket carrying Kubernetes channel frames (``v4``/``v5.channel.k8s.io``): the first
    byte of each binary frame names the channel (k8s.io/apimachinery ``wsstream``)."""

    def __init__(self, kube: Kube, path: str, query: Sequence[tuple[str, str]], timeout_s: float | None,
                 protocols: Sequence[str]) -> None:
        """Open the stream. The upgrade follows :meth:`Kube.request`'s rules for what was not
        processed: a 429 is retried after ``Retry-After`` (up to :data:`MAX_RETRIES` times), a
        401 rebuilds the credentials once.

        Raises:
            KubeApiError: the upgrade was refused (403, 404, 400, or 429/401 after the retries).
            KubeConnectionError: the API server could not be reached.
        """
        import time

        import websocket

        url = "wss" + kube.host[len("https"):] if kube.host.startswith("https") else "ws" + kube.host[len("http"):]
        url += path + ("?" + urlencode(list(query)) if query else "")
        attempt = 0
        refreshed = False
        while True:
            header = [f"{k}: {v}" for k, v in kube._auth_headers().items()]
            header += [f"{k}: {v}" for k, v in kube._headers.items() if k.startswith("Impersonate")]
            if kube._impersonate_groups:
                header += [f"Impersonate-Group: {g}" for g in kube._impersonate_groups]
            with kube._lock:
                kube.requests_made += 1
            self.ws = websocket.WebSocket(sslopt=kube._transport.ws_sslopt(), skip_utf8_validation=True)
            self.ws.settimeout(timeout_s)
            try:
                self.ws.connect(url, header=header, subprotocols=list(protocols))  # type: ignore[no-untyped-call]
            except websocket.WebSocketBadStatusException as exc:
                body = exc.resp_body or b""
                if exc.status_code == 429 and attempt < MAX_RETRIES:
                    attempt += 1
                    kube._count_retry()
                    headers_in = {k.lower(): v for k, v in (exc.resp_headers or {}).items()}
                    time.sleep(retry_after_seconds(headers_in.get("retry-after"), attempt))
                    continue
                if exc.status_code == 401 and not refreshed and kube._reload is not None:
                    refreshed = True
                    kube._transport = kube._reload()
                    kube._count_retry()
                    continue
                reason, message = status_message(body)
                raise KubeApiError(exc.status_code, reason or _http_reason(exc.status_code), message or str(exc), body) from exc
            except (websocket.WebSocketException, OSError) as exc:
                raise KubeConnectionError(f"cannot open a stream to {path}: {exc}") from exc
            break
        self.protocol = getattr(self.ws, "subprotocol", None) or ""

    def frames(self, deadline: float | None) -> Any:
        """Yield ``(channel, payload)`` until the server closes. Raises TimeoutError at ``deadline``."""
        import time

        import websocket

        while True:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.ws.settimeout(left)
            try:
                opcode, data = self.ws.recv_data(control_frame=False)
            except websocket.WebSocketTimeoutException as exc:
                raise TimeoutError from exc
            except (websocket.WebSocketConnectionClosedException, OSError):
                return
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                return
            if not data:
                continue
            if isinstance(data, str):
                data = data.encode()
            yield data[0], data[1:]

    def send(self, channel: int, payload: bytes) -> None:
        """Send ``payload`` on ``channel``."""
        self.ws.send_binary(bytes([channel]) + payload)

    def close(self) -> None:
        """Close the stream (never raises)."""
        try:
            self.ws.close(timeout=1)
        except Exception:  # closing a broken socket: nothing left to do
            pass


def _exec(kube: Kube, namespace: str, pod: str, container: str, argv: Sequence[str], timeout_s: float) -> ExecResult:
    import time

    query = [("command", a) for a in argv] + [("container", container), ("stdout", "true"), ("stderr", "true")]
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"
    chans = _Channels(kube, path, query, timeout_s, ["v5.channel.k8s.io", "v4.channel.k8s.io"])
    out, err, status = bytearray(), bytearray(), bytearray()
    deadline = time.monotonic() + timeout_s
    timed_out = False
    try:
        for channel, payload in chans.frames(deadline):
            if channel == 1:
                out += payload
            elif channel == 2:
                err += payload
            elif channel == 3:
                status += payload
    except TimeoutError:
        timed_out = True
    finally:
        chans.close()
    if timed_out:
        return ExecResult(None, bytes(out), bytes(err), f"no exit status within {timeout_s:g} s", True)
    code, message = read_exec_status(bytes(status))
    return ExecResult(code, bytes(out), bytes(err), message)


def _port_forward_http(kube: Kube, namespace: str, pod: str, port: int, request: bytes, timeout_s: float) -> bytes:
    import time

    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/portforward"
    chans = _Channels(kube, path, [("ports", str(port))], timeout_s, ["v4.channel.k8s.io"])
    data, error = bytearray(), bytearray()
    seen_header = {0: False, 1: False}
    deadline = time.monotonic() + timeout_s
    try:
        chans.send(0, request)
        for channel, payload in chans.frames(deadline):
            if channel in seen_header and not seen_header[channel]:
                # the first frame on each channel carries the port number (2 bytes, little endian)
                seen_header[channel] = True
                payload = payload[2:]
            if channel == 0:
                data += payload
                if _http_complete(bytes(data)):
                    break
            elif channel == 1:
                error += payload
    except TimeoutError as exc:
        raise KubeConnectionError(f"port-forward to {pod}:{port}: no answer within {timeout_s:g} s") from exc
    finally:
        chans.close()
    if error and not data:
        raise KubeConnectionError(f"port-forward to {pod}:{port}: {error.decode('utf-8', 'replace').strip()}")
    return bytes(data)


def _port_forward_socket(kube: Kube, namespace: str, pod: str, port: int, timeout_s: float) -> socket.socket:
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/portforward"
    chans = _Channels(kube, path, [("ports", str(port))], timeout_s, ["v4.channel.k8s.io"])
    ours, theirs = socket.socketpair()
    seen_header = {0: False, 1: False}

    def inbound() -> None:
        error = bytearray()
        try:
            for channel, payload in chans.frames(None):
                if channel in seen_header and not seen_header[channel]:
                    seen_header[channel] = True
                    payload = payload[2:]
                if channel == 0 and payload:
                    theirs.sendall(payload)
                elif channel == 1:
                    error += payload
        except (OSError, TimeoutError):
            pass
        finally:
            chans.close()
            try:
                theirs.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            theirs.close()

    def outbound() -> None:
        try:
            while True:
                data = theirs.recv(65536)
                if not data:
                    break
                chans.send(0, data)
        except Exception:  # the stream or the pair closed: the other pump ends too
            pass
        finally:
            chans.close()

    threading.Thread(target=inbound, name=f"pf-in-{pod}:{port}", daemon=True).start()
    threading.Thread(target=outbound, name=f"pf-out-{pod}:{port}", daemon=True).start()
    return ours


def _http_complete(raw: bytes) -> bool:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return len(body) >= int(value.strip())
            except ValueError:
                return False
    return False


def parse_http_response(raw: bytes) -> HttpAnswer:
    """Parse a raw HTTP/1.1 response (status line, headers, body; ``Content-Length`` or
    close-delimited) with the standard library's ``http.client`` parser.

    Raises:
        KubeConnectionError: the bytes are not an HTTP response.
    """
    import http.client
    import io

    class _Sock:
        def __init__(self, data: bytes) -> None:
            self._f = io.BytesIO(data)

        def makefile(self, *args: Any, **kwargs: Any) -> io.BytesIO:
            return self._f

    resp = http.client.HTTPResponse(_Sock(raw))  # type: ignore[arg-type]
    try:
        resp.begin()
        body = resp.read()
    except (http.client.HTTPException, ValueError) as exc:
        raise KubeConnectionError(f"the pod answered something that is not HTTP: {raw[:80]!r}") from exc
    headers = {k.lower(): v for k, v in resp.getheaders()}
    return HttpAnswer(resp.status, headers, body)
