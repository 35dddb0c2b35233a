"""The ``kubernetes`` client, imported lazily and only in the parts this adapter uses (the
kubeconfig and in-cluster loaders, the exec credential provider and ``Configuration``): see
:func:`client_parts`. The package's ``__init__`` modules would import every API and model
(``kubernetes.client.models`` alone is about 770 modules, 0.3 s).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from ..lazyimport import PROBED, hollow_package

_LOG = logging.getLogger("kubectl_kvreset")

#: Modules of the ``kubernetes`` package this adapter needs; everything else is left unimported.
_HOLLOW = ("kubernetes", "kubernetes.client")
_PARTS_LOCK = threading.Lock()


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
    """A module ``name`` holding ``attrs``, registered only while the client's modules are
    imported; any other attribute it is asked for comes from the real module, or, when the real
    module does not define it, from its submodule of that name (``oauthlib.oauth2``), both
    imported then (PEP 562 ``__getattr__``)."""
    import importlib
    import sys
    import types

    module = types.ModuleType(name)
    module.__dict__.update(attrs)

    def real(attr: str) -> Any:
        if attr in PROBED:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            if getattr(sys.modules[key], "__kvreset_stand_in__", False):
                del sys.modules[key]
        found = importlib.import_module(name)
        try:
            return getattr(found, attr)
        except AttributeError:
            return importlib.import_module(f"{name}.{attr}")

    module.__getattr__ = real  # type: ignore[method-assign]
    module.__dict__["__kvreset_stand_in__"] = True
    return module


def _cpu_count() -> int:
    """``multiprocessing.cpu_count`` without importing ``multiprocessing`` (its rule: the
    count ``os.cpu_count`` gives, ``NotImplementedError`` when unknown)."""
    import os

    count = os.cpu_count()
    if count is None:
        raise NotImplementedError("cannot determine number of cpus")
    return count


def _stand_ins() -> dict[str, Any]:
    """The modules ``Configuration`` and ``kube_config`` import at their top but use only on
    paths this adapter rarely takes, each a stand-in (:func:`_stand_in_module`) that imports the
    real one when an attribute is first asked for: ``requests_oauthlib`` (the OIDC refresh;
    it imports ``requests``), ``oauthlib.oauth2`` (an OIDC error class, 58 modules), ``urllib3``
    (``make_headers`` for basic auth; with its HTTP/2 and metadata modules about 30 modules: this
    adapter's own transport is ``http.client``) and ``multiprocessing`` (``cpu_count`` for a
    pool size this adapter does not use). A module already imported is left as it is."""
    import sys

    wanted: dict[str, dict[str, Any]] = {
        "requests_oauthlib": {"OAuth2Session": _LazyOAuth2Session},
        "oauthlib": {},
        "oauthlib.oauth2": {},
        "urllib3": {},
        "multiprocessing": {"cpu_count": _cpu_count},
    }
    return {name: _stand_in_module(name, attrs) for name, attrs in wanted.items()
            if name not in sys.modules and name.partition(".")[0] not in sys.modules}


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
            top = hollow_package("kubernetes", root)
            sys.modules["kubernetes"] = top
            added.append("kubernetes")
            sub = hollow_package("kubernetes.client", [str(Path(root[0]) / "client")])
            sys.modules["kubernetes.client"] = sub
            added.append("kubernetes.client")
            top.client = sub
            stand_ins = _stand_ins()
            sys.modules.update(stand_ins)
            try:
                configuration = importlib.import_module("kubernetes.client.configuration")
                sub.Configuration = configuration.Configuration
                sub.ApiClient = _LazyApiClient
                kube_config = importlib.import_module("kubernetes.config.kube_config")
            finally:
                for name, stand_in in stand_ins.items():
                    if sys.modules.get(name) is stand_in:
                        del sys.modules[name]  # a later import gets the real module
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
