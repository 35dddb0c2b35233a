"""Importing one module of a library without its package's ``__init__``, which may import far
more than that module needs: the ``kubernetes`` client's (every API and model) and
``prometheus_client``'s (its HTTP exposition servers, registries and collectors, about 20 modules,
where this tool reads metrics text with :mod:`prometheus_client.parser` only).

A *hollow package* (:func:`hollow_package`) is registered in ``sys.modules`` in the package's
place: submodules import from the package's directory as usual, and the first attribute asked
of the package itself runs its real ``__init__`` then (PEP 562 ``__getattr__``), so code that
wants the whole package still gets it.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["PROBED", "hollow_package", "prometheus_parser", "submodule"]

#: attributes the import system and introspection look up on any module: never worth running
#: a package's ``__init__`` for
PROBED = frozenset({"__loader__", "__wrapped__", "__cached__", "__file__", "__path__", "__spec__",
                    "__mro_entries__", "__class_getitem__", "__origin__", "__signature__"})


def hollow_package(name: str, locations: list[str]) -> Any:
    """A package module for ``name`` whose ``__init__`` is not run: submodules import from
    ``locations`` (the package's directories) as usual. Any attribute the package would define
    is found by running the real ``__init__`` then (PEP 562 ``__getattr__``), so code that needs
    the whole package still works. The caller registers it in ``sys.modules``."""
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
        if attr in PROBED or state["loaded"]:
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


def submodule(package: str, name: str) -> ModuleType:
    """``package.name`` imported; when ``package`` is not imported yet, without running its
    ``__init__`` (a :func:`hollow_package` stands in for it). A package laid out otherwise (not
    found, not a directory package, the submodule failing to import that way) is imported the
    plain way.

    Raises:
        ImportError: the module is not installed at all.
    """
    import importlib
    import importlib.util
    import sys

    full = f"{package}.{name}"
    if full in sys.modules or package in sys.modules:
        return importlib.import_module(full)
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return importlib.import_module(full)
    hollow = hollow_package(package, list(spec.submodule_search_locations))
    sys.modules[package] = hollow
    try:
        return importlib.import_module(full)
    except Exception:
        for key in [k for k in sys.modules if k == package or k.startswith(package + ".")]:
            del sys.modules[key]
        return importlib.import_module(full)


def prometheus_parser() -> Any:
    """:mod:`prometheus_client.parser` (``text_string_to_metric_families``), imported without
    the package's ``__init__``: the parser needs only ``metrics_core``, ``samples`` and
    ``validation`` (prometheus_client ``parser.py``)."""
    return submodule("prometheus_client", "parser")
