"""A vLLM invocation's words -> :class:`~kubectl_kvreset.engines.vllm.serveconfig.ServeConfig`.

Each fact has its own reader: the ``--config FILE`` spliced in where vLLM puts its flags, the
model (or vLLM's default model), the API ports, the engines behind each port, the KV transfer
config and the CPU offloading size. Pure; the ``--config`` file is read through a
:data:`~kubectl_kvreset.engines.vllm.serveconfig.ConfigReader`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .configfile import ConfigFileError, config_args
from .flags import (
    MULTI_VALUE_FLAGS,
    ParsedFlags,
    decode_json_flag,
    int_flag,
    last_value,
    merge_dotted,
    walk_flags,
)
from .serveconfig import (
    ConfigReader,
    ServeCommandError,
    ServeConfig,
    engines_behind_port,
    engines_unknown_reason,
)

__all__ = ["DEFAULT_MODEL", "DEFAULT_MODEL_RELEASE", "build_config"]

#: The model ``vllm serve`` loads when none is named (``vllm/config/model.py::ModelConfig.model``
#: in vLLM 0.32.0), and the release it is known for.
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
DEFAULT_MODEL_RELEASE = (0, 32)


# --------------------------------------------------------------------------------------------
# --config FILE
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ConfigFile:
    """The ``--config FILE`` of an invocation: ``path`` as written (None without a value or without
    the flag), ``source`` the reader named when the file was read, ``error`` why it was not."""

    path: str | None = None
    source: str | None = None
    error: str | None = None


def _splice_config(argv: list[str], entrypoint: str, first_arg: int, reader: ConfigReader,
                   notes: list[str], version: tuple[int, ...] | None) -> tuple[list[str], str]:
    """argv with ``--config FILE`` replaced by the file's flags, where vLLM puts them, and the
    source read; ``version`` (the image's vLLM release, or None) picks the nested-mapping form
    (vLLM 0.32.0 ``vllm/utils/argparse_utils.py``,
    ``FlexibleArgumentParser._pull_args_from_config``: after ``serve MODEL``, or first for the
    api_server module, so later command-line flags win).

    Raises:
        ServeCommandError: ``--config`` twice or without a value (vLLM refuses both).
        ConfigFileError: the file could not be read or is not a YAML mapping.
    """
    args = argv[first_arg:]
    if args.count("--config") > 1:
        raise ServeCommandError("--config: more than one config file given (vLLM refuses this)")
    index = args.index("--config")
    if index == len(args) - 1:
        raise ServeCommandError("--config: no file named")
    path = args[index + 1]
    text, where = reader(path)
    extra, more_notes = config_args(text, path, version=version)
    notes.extend(more_notes)
    rest = args[:index] + args[index + 2:]
    if entrypoint == "vllm serve" and rest and not rest[0].startswith("-"):
        spliced = [rest[0], *extra, *rest[1:]]
    else:
        spliced = [*extra, *rest]
    return argv[:first_arg] + spliced, where

def _read_config(argv: list[str], entrypoint: str, first_arg: int, notes: list[str],
                 reader: ConfigReader | None, version: tuple[int, ...] | None) -> tuple[list[str], _ConfigFile]:
    """``argv`` with its ``--config FILE`` spliced in (:func:`_splice_config`) when ``reader``
    reads the file, and what became of the file; ``argv`` unchanged without ``--config`` (as a
    word of its own: vLLM does not expand ``--config=FILE``), without a reader or when the file
    could not be read (the reason is then in ``error``).

    Raises:
        ServeCommandError: see :func:`_splice_config`.
    """
    if "--config" not in argv[first_arg:]:
        return argv, _ConfigFile()
    at = argv.index("--config", first_arg)
    path = argv[at + 1] if at + 1 < len(argv) else None
    if reader is None:
        return argv, _ConfigFile(path, error="the file lives in the pod and was not read")
    try:
        spliced, source = _splice_config(argv, entrypoint, first_arg, reader, notes, version)
    except ConfigFileError as exc:
        return argv, _ConfigFile(path, error=str(exc))
    return spliced, _ConfigFile(path, source=source)


def _config_file(parsed: ParsedFlags, config: _ConfigFile, port: int | None, notes: list[str]) -> str | None:
    """The ``--config`` file named (``--config FILE`` or ``--config=FILE``), with a note on what
    became of it: read from its source, not read (the port and tiers set there are then not known)
    or ``--config=FILE``, which vLLM does not expand."""
    config_file = last_value(parsed, "config")
    if config.path is not None:
        config_file = config.path
    if config.source is not None:
        notes.append(f"--config {config_file}: flags read from {config.source}")
    elif config.error is not None:
        notes.append(f"--config {config_file}: {config.error}; the port and tiers set there are "
                     "not known" + ("" if port is None else f" (port {port} is from the command line)"))
    elif config_file is not None and parsed.config_eq_form:
        notes.append(f"--config={config_file} is accepted but not expanded by vLLM (only "
                     "'--config FILE' is, vllm/utils/argparse_utils.py): its flags do not apply")
    return config_file


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


def _model(parsed: ParsedFlags, entrypoint: str, notes: list[str], config_error: str | None,
           version: tuple[int, ...] | None) -> tuple[str | None, str | None]:
    """``(model, why it is unknown)``: the positional model of ``vllm serve`` (which wins) or
    ``--model``; when none is named, vLLM's default model (:func:`_default_model`)."""
    model = last_value(parsed, "model")
    if entrypoint == "vllm serve" and parsed.positionals:
        model = parsed.positionals[0]
    if model is not None:
        return model, None
    return _default_model(parsed, notes, config_error, version)


def _default_model(parsed: ParsedFlags, notes: list[str], config_error: str | None,
                   version: tuple[int, ...] | None) -> tuple[str | None, str | None]:
    """``(model, why it is unknown)`` when the command line names no model: vLLM serves its
    default model, :data:`DEFAULT_MODEL` when the image names :data:`DEFAULT_MODEL_RELEASE`
    (noted). Otherwise no model; when a multi-value flag took the values (argparse gives it
    every value after it, so a model written there is the flag's), the model is unknown rather
    than absent. An unread ``--config`` file may name the model: no model then."""
    # values are not shown: --api-key's are secrets
    swallowed = [f"{len(v.split(chr(0)))} value(s) to the {name} flag" for name in sorted(MULTI_VALUE_FLAGS)
                 for v in parsed.flags.get(name, []) if v]
    why = ("no model is named" + (f" (argparse gives every value after a multi-value flag to that flag: "
                                  f"{'; '.join(swallowed)})" if swallowed else ""))
    if config_error is not None:
        return None, None  # the unread file may name it: no model, as without a swallowing flag
    if version is not None and tuple(version[:2]) == DEFAULT_MODEL_RELEASE:
        notes.append(f"{why}: vLLM {'.'.join(map(str, version))} serves its default model {DEFAULT_MODEL} "
                     "(vllm/config/model.py::ModelConfig.model)")
        return DEFAULT_MODEL, None
    if swallowed:
        return None, (f"{why}: vLLM serves its default model, which depends on the release "
                      f"({DEFAULT_MODEL} in vLLM 0.32, vllm/config/model.py::ModelConfig.model) and "
                      "the image does not name a release this plugin knows")
    return None, None


# --------------------------------------------------------------------------------------------
# Ports and engines
# --------------------------------------------------------------------------------------------


def _api_ports(parsed: ParsedFlags, notes: list[str],
               config_error: str | None) -> tuple[int | None, int | None, tuple[int, ...]]:
    """``(port, data-parallel-size-local, API ports)``: ``--port`` (8000 when absent, unless an
    unread ``--config`` file may set it; None when it holds a construct not evaluated) and, with
    ``--data-parallel-multi-port-external-lb``, one port per local DP rank (:func:`_multi_ports`).

    Raises:
        ServeCommandError: a port that is no integer or no TCP port, a local DP size that is no
            integer or out of range.
    """
    port, port_ok = int_flag(parsed, "port", notes)
    if port is None and port_ok and config_error is None:
        port = 8000
    dpl, dpl_ok = int_flag(parsed, "data-parallel-size-local", notes)
    if port is not None and not 0 < port < 65536:
        raise ServeCommandError(f"--port: {port} is not a TCP port")
    if dpl is not None and not 0 < dpl <= 4096:
        raise ServeCommandError(f"--data-parallel-size-local: {dpl} out of range")
    if "data-parallel-multi-port-external-lb" in parsed.flags and port is not None:
        return port, dpl, _multi_ports(parsed, port, dpl, dpl_ok, notes)
    return port, dpl, ((port,) if port is not None else ())


def _multi_ports(parsed: ParsedFlags, port: int, dpl: int | None, dpl_ok: bool, notes: list[str]) -> tuple[int, ...]:
    """The ports of ``--data-parallel-multi-port-external-lb``: ``port .. port+N-1``, N the local
    DP size (``dpl``; without it ``--data-parallel-size``, or 1, noted as assumed). Only ``port``
    when N holds a construct not evaluated (``dpl_ok`` false), noted."""
    count = dpl
    if count is None and dpl_ok:
        dps, _ = int_flag(parsed, "data-parallel-size", notes)
        count = dps if dps is not None else 1
        notes.append("--data-parallel-multi-port-external-lb without "
                     f"--data-parallel-size-local: assumed {count} local API server(s)")
    if count is None:
        notes.append("number of local DP API servers unknown; only the first port listed")
        return (port,)
    return tuple(p for p in range(port, port + max(min(count, 4096), 1)) if p < 65536)


def _engines(parsed: ParsedFlags, dpl: int | None) -> tuple[int, tuple[str, ...]]:
    """``(engines behind each API port, the data-parallel flags that decide it)``
    (:func:`~kubectl_kvreset.engines.vllm.serveconfig.engines_behind_port`; see
    :attr:`~kubectl_kvreset.engines.vllm.serveconfig.ServeConfig.engines_flags`)."""
    try:
        dp_size, _ = int_flag(parsed, "data-parallel-size", [])
    except ServeCommandError:
        dp_size = None  # vLLM itself refuses it; the engine count stays unknown (1)
    external_lb = ("data-parallel-multi-port-external-lb" in parsed.flags
                   or "data-parallel-external-lb" in parsed.flags)
    engines = engines_behind_port(
        dp_size if dp_size is None or 0 < dp_size <= 4096 else None, dpl,
        external_lb=external_lb, hybrid_lb="data-parallel-hybrid-lb" in parsed.flags)
    engines_flags = () if external_lb else tuple(
        f"--{name} {raw}" for name in ("data-parallel-size", "data-parallel-size-local")
        if (raw := last_value(parsed, name)) is not None)
    return engines, engines_flags


# --------------------------------------------------------------------------------------------
# KV cache flags
# --------------------------------------------------------------------------------------------


def _kv_transfer_config(parsed: ParsedFlags, notes: list[str]) -> dict[str, Any] | None:
    """The decoded ``--kv-transfer-config``: its dotted keys when given (vLLM then drops the
    JSON form, noted), else its JSON, else None.

    Raises:
        ServeCommandError: invalid JSON or a malformed dotted key.
    """
    full = last_value(parsed, "kv-transfer-config")
    dotted = [(k, v) for k, v in parsed.dotted if k.startswith("kv-transfer-config.")]
    if dotted:
        ktc = merge_dotted(dotted, "kv-transfer-config")
        if full is not None:
            notes.append("--kv-transfer-config given both as JSON and as dotted keys: "
                         "vLLM keeps the dotted keys only")
        return ktc
    if full is not None:
        return decode_json_flag("kv-transfer-config", full)
    return None


def _kv_offloading(parsed: ParsedFlags, notes: list[str]) -> tuple[float | None, str | None]:
    """``(--kv-offloading-size in GiB, --kv-offloading-backend)``; the backend is ``"native"``
    when only the size is given. A size holding a construct not evaluated is None, noted.

    Raises:
        ServeCommandError: a size that is not a number.
    """
    size_raw = last_value(parsed, "kv-offloading-size")
    size: float | None = None
    if size_raw is not None:
        try:
            size = float(size_raw)
        except ValueError:
            if "$" not in size_raw:
                raise ServeCommandError(f"--kv-offloading-size: not a number: {size_raw!r}") from None
            notes.append(f"--kv-offloading-size {size_raw!r} could not be resolved")
    backend = last_value(parsed, "kv-offloading-backend")
    if backend is None and size is not None:
        backend = "native"
    return size, backend


# --------------------------------------------------------------------------------------------
# The whole invocation
# --------------------------------------------------------------------------------------------


def build_config(argv: list[str], entrypoint: str, first_arg: int, env: Mapping[str, str],
                 unresolved: list[str], notes: list[str],
                 config_reader: ConfigReader | None = None,
                 config_version: tuple[int, ...] | None = None,
                 unevaluated: Sequence[tuple[str, str]] = ()) -> ServeConfig:
    """Turn a vLLM invocation into a :class:`~kubectl_kvreset.engines.vllm.serveconfig.ServeConfig`.

    Args:
        argv: the invocation's words, from ``vllm``/``python3`` on.
        entrypoint: ``"vllm serve"`` or ``"api_server"``; ``first_arg`` the index of its first
            argument in ``argv``
            (:func:`~kubectl_kvreset.engines.vllm.entrypoints.vllm_entrypoint`).
        env: the environment vLLM sees; ``unresolved``, ``notes``, ``unevaluated``: what reading
            the command found so far (``notes`` is extended).
        config_reader: reads a ``--config FILE``; ``config_version`` the image's vLLM release.

    Raises:
        ServeCommandError: malformed vLLM arguments (see
            :func:`~kubectl_kvreset.engines.vllm.servecmd.parse_argv`).
    """
    argv, config = _read_config(argv, entrypoint, first_arg, notes, config_reader, config_version)
    parsed = walk_flags(argv[first_arg:])
    model, default_unknown = _model(parsed, entrypoint, notes, config.error, config_version)
    served_raw = last_value(parsed, "served-model-name")
    port, dpl, ports = _api_ports(parsed, notes, config.error)
    scheme = "https" if ("ssl-certfile" in parsed.flags or "ssl-keyfile" in parsed.flags) else "http"
    engines, engines_flags = _engines(parsed, dpl)
    ktc = _kv_transfer_config(parsed, notes)
    size, backend = _kv_offloading(parsed, notes)
    config_file = _config_file(parsed, config, port, notes)
    return ServeConfig(
        argv=tuple(argv),
        entrypoint=entrypoint,
        model=model,
        served_model_name=served_raw.split("\0")[0] if served_raw else None,
        api_ports=tuple(sorted(set(ports))),
        scheme=scheme,
        kv_transfer_config=MappingProxyType(ktc) if ktc is not None else None,
        kv_offloading_size_gib=size,
        kv_offloading_backend=backend,
        data_parallel_size_local=dpl,
        config_file=config_file,
        unresolved_vars=tuple(unresolved),
        notes=tuple(notes),
        env=MappingProxyType(dict(env)),
        engines_per_port=engines,
        config_source=config.source,
        config_error=config.error,
        unevaluated=tuple(dict.fromkeys(unevaluated)),
        model_unknown=default_unknown,
        engines_flags=engines_flags,
        engines_unknown=engines_unknown_reason(engines_flags, unevaluated, config.error),
    )
