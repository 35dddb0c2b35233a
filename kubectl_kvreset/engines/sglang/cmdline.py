"""Read an SGLang server command line, as a pod spec writes it, into a :class:`SglangConfig`.

Pure: no I/O. What starts SGLang's HTTP server (sglang ``python/sglang/launch_server.py``,
``python/sglang/cli/serve.py``): ``python3 [-u] -m sglang.launch_server ARGS`` and ``sglang serve
ARGS``, directly or in a ``bash -c`` script (read by :class:`~kubectl_kvreset.shellscript.Shell`,
after the kubelet's ``$(VAR)`` expansion, :func:`~kubectl_kvreset.engines.k8senv.kubernetes_expand`).
The flags (sglang ``python/sglang/srt/server_args.py``, ``ServerArgs.add_cli_args``): ``--port``
(default 30000), ``--host``, ``--model-path``/``--model``, ``--served-model-name``,
``--dp-size``/``--dp``/``--data-parallel-size``, ``--api-key``, ``--admin-api-key``,
``--enable-hierarchical-cache``, ``--hicache-storage-backend``, ``--enable-cache-report``,
``--enable-metrics``, ``--ssl-certfile``/``--ssl-keyfile``, ``--tp-size``, ``--pp-size``,
``--hicache-storage-backend-extra-config`` (a JSON object). argparse reads ``_`` and ``-`` alike
only where sglang declares both; both spellings are accepted here, and the last occurrence wins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...redact import redact_argv
from ...shellscript import Shell, ShellScriptError
from ..argv import python_module
from ..base import ServeConfig, ServerCommandError
from ..k8senv import env_sources, kubernetes_expand, sourced_reason

__all__ = ["DEFAULT_PORT", "FILE_DIR_DEFAULT", "FILE_DIR_ENV", "KeySource", "SglangConfig", "parse_container",
           "sglang_entrypoint"]

#: ``--port``'s default (``ServerArgs.port``).
DEFAULT_PORT = 30000

#: Flags that take no value (store_true) among those read here and the common ones around them.
_BOOLEAN = frozenset({
    "enable-hierarchical-cache", "enable-cache-report", "enable-metrics", "trust-remote-code",
    "disable-radix-cache", "disable-cuda-graph", "enable-dp-attention", "skip-server-warmup",
    "enable-torch-compile", "disable-overlap-schedule", "enable-mixed-chunk", "log-requests",
    "enable-lmcache", "enable-p2p-check", "disable-custom-all-reduce", "enable-dp-lm-head",
})

_ALIASES = {"model": "model-path", "dp": "dp-size", "data-parallel-size": "dp-size",
            "tp": "tp-size", "tensor-parallel-size": "tp-size",
            "pp": "pp-size", "pipeline-parallel-size": "pp-size"}

#: The file backend's directory: this env variable, else ``file_storage_path`` of the extra
#: config, else ``/tmp/hicache`` (sglang ``srt/mem_cache/hicache_storage.py`` ``HiCacheFile``).
FILE_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
FILE_DIR_DEFAULT = "/tmp/hicache"

#: SGLang 0.5.23 builds its storage hash extension (``hicache_hash_cpp``) in the prefetch thread on
#: the first prompt that queues a storage prefetch; a ``/flush_cache`` during that build joins the
#: thread for 10 s, then raises in the scheduler and the server exits
#: (``srt/managers/cache_controller.py`` ``_stop_storage_threads``; observed, builds of 5-20 s).
PREFETCH_NOTE = ("SGLang 0.5.23 with a HiCache storage backend exits when /flush_cache arrives while its storage "
                 "prefetch thread still builds its hash extension (the first long prompt after a start, 5-20 s on a "
                 "loaded node): a clear then may stop the server; --hicache-storage-prefetch-policy wait_complete, "
                 "or TORCH_EXTENSIONS_DIR on a pre-built copy, avoids it")


@dataclass(frozen=True)
class KeySource:
    """Where one API key of the server comes from: ``flag`` (``--api-key`` or
    ``--admin-api-key``), its ``value`` when the spec holds it (literal or through a literal env
    entry; never shown: ``repr`` omits it), else ``secret`` ``(name, key)`` of the Secret an env
    ``valueFrom.secretKeyRef`` names, read with the user's rights at reset time, and ``unread``:
    why the value is not known (a ConfigMap, an ``envFrom`` source, a command substitution)."""

    flag: str
    value: str | None = field(default=None, repr=False)
    secret: tuple[str, str] | None = None
    unread: str | None = None


@dataclass(frozen=True)
class SglangConfig(ServeConfig):
    """:class:`~kubectl_kvreset.engines.base.ServeConfig` with SGLang's own facts.

    Attributes:
        host: ``--host`` (default ``127.0.0.1``: a server bound there answers only inside the pod).
        dp_size: ``--dp-size`` (1 without data parallelism); ``/flush_cache`` answers with the
            first rank's reply only (``managers/tokenizer_control_mixin.py``; sglang issue #39562).
        hierarchical_cache: ``--enable-hierarchical-cache`` (the HiCache host tier).
        storage_backend: ``--hicache-storage-backend`` (``file``, ``mooncake``, ``hf3fs``, ``nixl``...), or None.
        cache_report: ``--enable-cache-report`` (``meta_info.cached_tokens`` in answers).
        metrics: ``--enable-metrics`` (``/metrics``).
        api_key: the ``--api-key`` source, or None.
        admin_key: the ``--admin-api-key`` source, or None.
        tp_size: ``--tp-size`` (1 by default); pp_size: ``--pp-size`` (1 by default);
            dp_attention: ``--enable-dp-attention``.
        storage_dir: with the ``file`` storage backend, the directory its files are written to
            (:data:`FILE_DIR_ENV`, else the extra config's ``file_storage_path``, else
            :data:`FILE_DIR_DEFAULT`), None otherwise or when it cannot be read
            (``storage_dir_unknown`` says why).
        storage_dir_source: where ``storage_dir`` was read (``env SGLANG_...``,
            ``--hicache-storage-backend-extra-config file_storage_path``, ``default``).
        storage_dir_unknown: why the file backend's directory is not known, or None.
    """

    host: str = "127.0.0.1"
    dp_size: int = 1
    hierarchical_cache: bool = False
    storage_backend: str | None = None
    cache_report: bool = False
    metrics: bool = False
    api_key: KeySource | None = None
    admin_key: KeySource | None = None
    tp_size: int = 1
    pp_size: int = 1
    dp_attention: bool = False
    storage_dir: str | None = None
    storage_dir_source: str | None = None
    storage_dir_unknown: str | None = None

    @property
    def reset_key(self) -> KeySource | None:
        """The key ``/flush_cache`` asks for (ADMIN_OPTIONAL, sglang ``srt/utils/auth.py``): the
        admin key when ``--admin-api-key`` is set, else the API key, else None (open)."""
        return self.admin_key or self.api_key


def sglang_entrypoint(words: Sequence[str]) -> tuple[str, int] | None:
    """``(entrypoint, index of its first argument)`` when ``words`` start SGLang's HTTP server:
    ``python3 [-u] -m sglang.launch_server`` -> ``("sglang.launch_server", k)``, ``sglang serve``
    -> ``("sglang serve", 2)``; else None (``python -m sglang_router.launch_router`` is a router)."""
    if not words:
        return None
    if words[0].rsplit("/", 1)[-1] == "sglang":
        return ("sglang serve", 2) if len(words) > 1 and words[1] == "serve" else None
    run = python_module(words)
    if run is not None and run[0] == "sglang.launch_server":
        return "sglang.launch_server", run[1]
    return None


def _starts_vllm(words: Sequence[str]) -> bool:
    """``vllm serve`` / ``python -m vllm.entrypoints...``: a vLLM server command (its words only;
    the vLLM engine reads it)."""
    if not words:
        return False
    if words[0].rsplit("/", 1)[-1] == "vllm":
        return len(words) > 1 and words[1] == "serve"
    run = python_module(words)
    return run is not None and run[0].startswith("vllm.entrypoints.")


def _flags(args: Sequence[str]) -> dict[str, str | None]:
    """``--name[=value]`` / ``--name value`` -> name (``_`` read as ``-``, aliases folded) ->
    the last value (None for a boolean flag)."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("--") or arg == "--":
            continue
        key, eq, value = arg[2:].partition("=")
        name = key.replace("_", "-")
        name = _ALIASES.get(name, name)
        if eq:
            out[name] = value
        elif name in _BOOLEAN:
            out[name] = None
        elif i < len(args) and not args[i].startswith("--"):
            out[name] = args[i]
            i += 1
        else:
            out[name] = None
    return out


def _int_flag(flags: Mapping[str, str | None], name: str, default: int) -> int:
    raw = flags.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ServerCommandError(f"SGLang's --{name} {raw!r} is not an integer") from None


def _key_source(flag: str, value: str | None, container: Mapping[str, Any],
                sources: Mapping[str, str]) -> KeySource | None:
    """The :class:`KeySource` of ``flag`` whose value after expansion is ``value``: a ``$(VAR)`` /
    ``$VAR`` left unexpanded names its Secret when an env entry says so."""
    if value is None:
        return None
    if not value.startswith("$"):
        return KeySource(flag, value=value)
    literal = value
    name = literal.strip("$(){}")
    for entry in container.get("env") or []:
        ref = ((entry.get("valueFrom") or {}).get("secretKeyRef") or {}) if entry.get("name") == name else {}
        if ref.get("name") and ref.get("key"):
            return KeySource(flag, secret=(str(ref["name"]), str(ref["key"])))
    return KeySource(flag, unread=sourced_reason(literal, f"{literal} is not known from the pod spec", sources))


def _also_vllm(words: list[str], env: Mapping[str, str], sources: Mapping[str, str]) -> bool:
    """Whether the same command also starts a vLLM server (a script whose SGLang command sits in a
    branch, an ``echo`` or a comment around ``vllm serve``): such a container stays vLLM's, as it
    was before SGLang had an engine, rather than being refused as a script of two engines."""
    shell = Shell(env, wanted=_starts_vllm, external=frozenset(n for n in sources if n != "*"))
    try:
        return shell.run_words(list(words)) is not None
    except (ShellScriptError, RecursionError):
        return False


def _storage_dir(flags: Mapping[str, str | None], env: Mapping[str, str],
                 unevaluated: Sequence[tuple[str, str]],
                 sources: Mapping[str, str]) -> tuple[str | None, str | None, str | None]:
    """``(directory, where it was read, why unknown)`` of the file storage backend, in
    ``HiCacheFile``'s order: the env variable, the extra config's ``file_storage_path``, the default.
    Unknown when the variable may be set where the spec does not show its value (a ConfigMap or
    Secret reference, an ``envFrom`` source, a file the script sources: ``sources``)."""
    if FILE_DIR_ENV in sources or ("*" in sources and FILE_DIR_ENV not in env):   # env wins over envFrom
        why = sourced_reason(f"${FILE_DIR_ENV}", f"{FILE_DIR_ENV} is not known from the pod spec", sources)
        return None, None, f"the file backend's directory is not known: {why}"
    value, source = env.get(FILE_DIR_ENV), f"env {FILE_DIR_ENV}"
    if not value:
        raw = flags.get("hicache-storage-backend-extra-config")
        if raw:
            try:
                doc = json.loads(raw)
            except ValueError:
                return None, None, ("--hicache-storage-backend-extra-config is not a JSON object the plugin can read, "
                                    "so the file backend's directory is not known")
            if not isinstance(doc, dict):
                return None, None, "--hicache-storage-backend-extra-config is not a JSON object"
            value, source = doc.get("file_storage_path"), "--hicache-storage-backend-extra-config file_storage_path"
            if value is not None and not isinstance(value, str):
                return None, None, "file_storage_path of --hicache-storage-backend-extra-config is not a string"
    if not value:
        value, source = FILE_DIR_DEFAULT, "default"
    hidden = [why for literal, why in unevaluated if literal in value]
    if hidden or "$" in value or not value.startswith("/"):
        return None, source, (f"the file backend's directory {value!r} ({source}) cannot be evaluated from the pod "
                              f"spec{': ' + hidden[0] if hidden else ''}")
    return value, source, None


def parse_container(container: Mapping[str, Any], env: Mapping[str, str]) -> SglangConfig | None:
    """The :class:`SglangConfig` of one pod-spec container, or None when it does not start
    SGLang's server (a container without ``command`` runs its ``args`` as the command: SGLang's
    images have no entrypoint of their own).

    Raises:
        ServerCommandError: an unreadable script or a non-integer ``--port``/``--dp-size``.
    """
    unresolved: list[str] = []
    unevaluated: list[tuple[str, str]] = []
    words = [kubernetes_expand(str(w), env, unresolved, unevaluated)
             for w in (container.get("command") or []) + (container.get("args") or [])]
    if not words:
        return None
    sources = env_sources(container)
    shell = Shell(env, wanted=lambda w: sglang_entrypoint(w) is not None,
                  external=frozenset(n for n in sources if n != "*"))
    try:
        found = shell.run_words(words)
    except RecursionError as exc:
        raise ServerCommandError("command line too deeply nested to read") from exc
    except ShellScriptError as exc:
        raise ServerCommandError(str(exc)) from exc
    if found is None or _also_vllm(words, env, sources):
        return None
    argv, cmd_env = found
    entry = sglang_entrypoint(argv)
    if entry is None:  # pragma: no cover - run_words only returns wanted commands
        return None
    entrypoint, first = entry
    args = list(argv[first:])
    flags = _flags(args)
    port = _int_flag(flags, "port", DEFAULT_PORT)
    dp_size = _int_flag(flags, "dp-size", 1)
    tp_size = _int_flag(flags, "tp-size", 1)
    pp_size = _int_flag(flags, "pp-size", 1)
    unevaluated.extend(shell.unevaluated)
    notes = list(shell.notes)
    ports: tuple[int, ...] = (port,)
    hidden = [(literal, why) for literal, why in shell.unevaluated
              if any(a == literal and not (i and args[i - 1].startswith("-") and "=" not in args[i - 1])
                     for i, a in enumerate(args))]
    if hidden:
        # a whole argument the script reader could not evaluate (its "$@" after a sourced file, a
        # command substitution), not a flag's value, may stand for any flags: the port, --dp-size and the HiCache
        # flags the server sees are then not those read here, so none of them is trusted
        ports = ()
        notes.append(f"the SGLang server's flags are not known: {hidden[0][0]} ({hidden[0][1]}) may hold any "
                     "of them (--port, --dp-size, the HiCache flags), so its port and tiers are not established; "
                     "give them literally in the container's command or args")
    backend = flags.get("hicache-storage-backend") if "enable-hierarchical-cache" in flags else None
    if backend and flags.get("hicache-storage-prefetch-policy") != "wait_complete":
        notes.append(PREFETCH_NOTE)
    external = dict(sources)
    if shell.opaque:   # a sourced file or an eval may set the variable
        external.setdefault(FILE_DIR_ENV, shell.opaque)
    storage_dir, dir_source, dir_unknown = (_storage_dir(flags, {**env, **cmd_env}, unevaluated, external)
                                            if backend == "file" else (None, None, None))
    if backend == "file" and not ports:
        storage_dir, dir_unknown = None, "the server's flags are not known"
    return SglangConfig(
        argv=tuple(redact_argv(list(argv))), entrypoint=entrypoint, model=flags.get("model-path"),
        served_model_name=flags.get("served-model-name"), api_ports=ports,
        scheme="https" if flags.get("ssl-certfile") or flags.get("ssl-keyfile") else "http",
        kv_transfer_config=None, kv_offloading_size_gib=None, kv_offloading_backend=None,
        data_parallel_size_local=None, config_file=None,
        unresolved_vars=tuple(dict.fromkeys([*unresolved, *shell.unresolved])), notes=tuple(notes),
        env=dict(cmd_env), unevaluated=tuple(dict.fromkeys(unevaluated)),
        host=flags.get("host") or "127.0.0.1", dp_size=dp_size,
        hierarchical_cache="enable-hierarchical-cache" in flags,
        storage_backend=backend, tp_size=tp_size, pp_size=pp_size, storage_dir=storage_dir,
        dp_attention="enable-dp-attention" in flags,
        storage_dir_source=dir_source, storage_dir_unknown=dir_unknown,
        cache_report="enable-cache-report" in flags, metrics="enable-metrics" in flags,
        api_key=_key_source("--api-key", flags.get("api-key"), container, sources),
        admin_key=_key_source("--admin-api-key", flags.get("admin-api-key"), container, sources),
    )
