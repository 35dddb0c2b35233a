"""The inference engines whose servers this tool empties: one package (or module) per engine,
each with one :class:`~kubectl_kvreset.engines.base.Engine` subclass, registered in
:data:`ENGINES` (one line each). An engine knows its server's command line and configuration
files, its API's reset calls and what their answers mean, its live configuration.
:mod:`kubectl_kvreset.engines.vllm` is vLLM's, :mod:`kubectl_kvreset.engines.sglang` SGLang's.
Engines never import each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import ConfigReader, Engine, ServeConfig, ServerCommandError
from .sglang.engine import SglangEngine
from .vllm.engine import VllmEngine

__all__ = ["DEFAULT_ENGINE", "ENGINES", "Engine", "engine_for", "engine_named"]

#: Every engine, in the order a container is offered to them (the first that claims it wins).
ENGINES: tuple[Engine, ...] = (
    VllmEngine(),
    SglangEngine(),
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
    """The engine of :data:`ENGINES` whose server runs in ``container``, with the config it read
    (:meth:`~kubectl_kvreset.engines.base.Engine.server_config`), or None when none does. Every
    engine is asked: a container is one engine's or none's.

    Raises:
        ServerCommandError: one engine claimed the container but could not read its command line
            (that engine's error, even where another engine also claims it), or two or more
            engines claim it (a script that starts servers of several engines): the container is
            then refused, never read as only one of them.
    """
    claims: list[tuple[Engine, ServeConfig]] = []
    errors: list[tuple[Engine, ServerCommandError]] = []
    for engine in ENGINES:
        try:
            cfg = engine.server_config(container, env, config_reader)
        except ServerCommandError as exc:
            errors.append((engine, exc))
            continue
        if cfg is not None:
            claims.append((engine, cfg))
    names = [e.name for e, _ in claims] + [e.name for e, _ in errors]
    if len(names) > 1:
        raise ServerCommandError(
            f"the command starts servers of more than one engine ({', '.join(sorted(names))}); each is emptied "
            "only from a container of its own: run them in separate containers")
    if errors:
        raise errors[0][1]
    return claims[0] if claims else None
