"""The inference engines whose servers this tool empties: one package (or module) per engine,
each with one :class:`~kubectl_kvreset.engines.base.Engine` subclass, registered in
:data:`ENGINES` (one line each). An engine knows its server's command line and configuration
files, its API's reset calls and what their answers mean, its live configuration.
:mod:`kubectl_kvreset.engines.vllm` is vLLM's. Engines never import each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import ConfigReader, Engine, ServeConfig, ServerCommandError
from .vllm.engine import VllmEngine

__all__ = ["DEFAULT_ENGINE", "ENGINES", "Engine", "engine_for", "engine_named"]

#: Every engine, in the order a container is offered to them (the first that claims it wins).
ENGINES: tuple[Engine, ...] = (
    VllmEngine(),
)

#: The engine of a pod model built without one (callers and tests that predate the registry).
DEFAULT_ENGINE = "vllm"


def engine_named(name: str) -> Engine:
    """The registered engine called ``name``.

    Raises:
        KeyError: no engine of that name is registered.
    """
    for engine in ENGINES:
        if engine.name == name:
            return engine
    raise KeyError(f"no engine named {name!r} (known: {', '.join(e.name for e in ENGINES)})")


def engine_for(container: Mapping[str, Any], env: Mapping[str, str],
               config_reader: ConfigReader | None = None) -> tuple[Engine, ServeConfig] | None:
    """The first engine of :data:`ENGINES` whose server runs in ``container``, with the config
    it read (:meth:`~kubectl_kvreset.engines.base.Engine.server_config`), or None when none does.

    Raises:
        ServerCommandError: no engine claimed the container and one of them could not read its
            command line (the first such error).
    """
    error: ServerCommandError | None = None
    for engine in ENGINES:
        try:
            cfg = engine.server_config(container, env, config_reader)
        except ServerCommandError as exc:
            error = error or exc
            continue
        if cfg is not None:
            return engine, cfg
    if error is not None:
        raise error
    return None
