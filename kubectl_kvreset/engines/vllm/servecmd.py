"""Parse a vLLM server command line, as a pod spec writes it, into a typed :class:`ServeConfig`.

Pure: no I/O, no Kubernetes import. The input is a container dict as the Kubernetes API returns it
(JSON-decoded) plus the container's resolved environment.

What is understood (facts from vLLM's ``FlexibleArgumentParser`` in
``vllm/utils/argparse_utils.py`` and from llm-d manifests):

* Kubernetes' ``$(VAR)`` expansion of ``command``/``args`` (``$$`` escapes ``$``; an unknown
  reference stays literal).
* A container without ``command`` runs its image's entrypoint (:data:`DEFAULT_ENTRYPOINTS`).
* ``bash -c``/``sh -c``/``bash -lc`` scripts: comments, line continuations, several commands
  (``;``, newlines, ``&&``, ``||``, ``|``), ``exec``, ``env``, ``eval``, assignments
  (``X=...``, ``export X=...``), ``$VAR``, ``${VAR}``, ``${VAR:-default}`` and ``$(( ... ))``
  arithmetic (``+ - * / %`` and parentheses, evaluated by a small parser, never ``eval``).
* ``vllm serve MODEL``, ``python3 -m vllm.entrypoints.openai.api_server --model M`` and
  ``python -m vllm.entrypoints.cli.main serve``.
* Flags spelled with ``_`` or ``-``, ``--flag=value`` or ``--flag value``; the last occurrence
  wins (argparse); ``--kv-transfer-config`` as full JSON (may span lines, human-readable numbers
  such as ``80g`` outside strings) or as dotted keys, which win over the full JSON as in vLLM.

This module is the public face: it finds the vLLM invocation in a container or argv
(:func:`parse_container`, :func:`parse_argv`) and re-exports the names of the modules that do the
rest: :mod:`.serveconfig` (:class:`ServeConfig` and the facts derived from it), :mod:`.entrypoints`
(which words start vLLM, image entrypoints), :mod:`.k8senv` (the kubelet's ``$(VAR)`` expansion,
``valueFrom``/``envFrom`` sources), :mod:`.humannum` (human-readable numbers), :mod:`.flags` (the
flag tables and reading an argv into flags) and :mod:`.buildconfig` (flags -> :class:`ServeConfig`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...shellscript import Shell, ShellScriptError
from ..k8senv import env_sources, kubernetes_expand, sourced_reason
from .buildconfig import DEFAULT_MODEL, DEFAULT_MODEL_RELEASE, build_config
from .entrypoints import (
    DEFAULT_ENTRYPOINTS,
    EntrypointTable,
    image_entrypoint,
    image_vllm_release,
    python_module,
    vllm_entrypoint,
)
from .flags import BOOLEAN_FLAGS
from .humannum import expand_human_readable_json, human_readable_int
from .serveconfig import (
    MODEL_REDIRECT_ENV,
    ConfigReader,
    ServeCommandError,
    ServeConfig,
    engines_behind_port,
    engines_unknown_reason,
    known_model,
    model_unknown_reason,
    unevaluated_in,
)

__all__ = [
    "BOOLEAN_FLAGS",
    "DEFAULT_MODEL",
    "DEFAULT_MODEL_RELEASE",
    "DEFAULT_ENTRYPOINTS",
    "ConfigReader",
    "EntrypointTable",
    "ServeCommandError",
    "ServeConfig",
    "engines_behind_port",
    "engines_unknown_reason",
    "expand_human_readable_json",
    "human_readable_int",
    "image_entrypoint",
    "image_vllm_release",
    "kubernetes_expand",
    "parse_argv",
    "parse_container",
    "python_module",
    "unevaluated_in",
    "known_model",
    "model_unknown_reason",
    "MODEL_REDIRECT_ENV",
]


def parse_argv(argv: Sequence[str], env: Mapping[str, str],
               config_reader: ConfigReader | None = None,
               config_version: tuple[int, ...] | None = None,
               external: frozenset[str] = frozenset()) -> ServeConfig | None:
    """Parse a process argv (after Kubernetes expansion) that may start vLLM.

    ``argv`` may be the vLLM invocation itself (``vllm serve ...``, ``python3 -m ...``) or a
    wrapper: ``/bin/bash -c SCRIPT``, ``sh -c``, ``bash -lc``, ``env X=1 vllm ...``,
    ``exec ...``. ``env`` is the process environment (used for ``$VAR`` in scripts).
    ``config_reader`` reads a ``--config FILE`` (see :data:`ConfigReader`); without one such a
    file is not read and ``config_error`` says so. ``config_version``: the vLLM release known
    before any call (the image tag), for the file's nested-mapping rule. ``external``: names
    the kubelet sets from a ``valueFrom`` source not in ``env`` (their ``${NAME:-word}`` is left
    as written, see :class:`~kubectl_kvreset.shellscript.Shell`).

    Returns:
        A :class:`ServeConfig`, or None when no vLLM API server is started.

    Raises:
        ServeCommandError: malformed vLLM arguments (e.g. invalid ``--kv-transfer-config``
            JSON, non-integer ``--port``) or an unreadable script (unbalanced quotes).
    """
    shell = Shell(env, wanted=lambda words: vllm_entrypoint(words) is not None, external=external)
    try:
        found = shell.run_words(list(argv))
    except RecursionError as exc:
        raise ServeCommandError("command line too deeply nested to read") from exc
    except ShellScriptError as exc:
        raise ServeCommandError(str(exc)) from exc
    if found is None:
        return None
    words, cmd_env = found
    entry = vllm_entrypoint(words)
    if entry is None:  # pragma: no cover - run_words only returns vLLM invocations
        return None
    entrypoint, first = entry
    try:
        return build_config(list(words), entrypoint, first, cmd_env, shell.unresolved,
                             shell.notes, config_reader, config_version, shell.unevaluated)
    except RecursionError as exc:
        raise ServeCommandError("vLLM arguments too deeply nested to read") from exc

def parse_container(
    container: Mapping[str, Any],
    env: Mapping[str, str],
    image_entrypoints: EntrypointTable = DEFAULT_ENTRYPOINTS,
    config_reader: ConfigReader | None = None,
) -> ServeConfig | None:
    """Parse a pod-spec container into a :class:`ServeConfig`.

    Args:
        container: one item of ``spec.containers`` as the API returns it (``command``, ``args``,
            ``image`` are read).
        env: the container's resolved environment (name -> value), used for Kubernetes
            ``$(VAR)`` expansion of ``command``/``args`` and for ``$VAR`` in shell scripts.
        image_entrypoints: image -> entrypoint table for containers without ``command``.
        config_reader: reads a ``--config FILE`` of this container (:data:`ConfigReader`).

    Returns:
        None when the container does not run a vLLM API server (or its image is unknown and it
        has no ``command``).

    Raises:
        ServeCommandError: see :func:`parse_argv`.
    """
    unresolved: list[str] = []
    k8s_unevaluated: list[tuple[str, str]] = []
    command = [kubernetes_expand(str(x), env, unresolved, k8s_unevaluated) for x in container.get("command") or []]
    args = [kubernetes_expand(str(x), env, unresolved, k8s_unevaluated) for x in container.get("args") or []]
    notes: list[str] = []
    if not command:
        entry = image_entrypoint(str(container.get("image", "")), image_entrypoints)
        if entry is None:
            return None
        command = list(entry)
        notes.append(f"no command: image entrypoint {' '.join(entry)!r} assumed")
    sources = env_sources(container)
    cfg = parse_argv(command + args, env, config_reader,
                     image_vllm_release(str(container.get("image", ""))),
                     external=frozenset(n for n in sources if n != "*"))
    if cfg is None:
        return None
    return _with_kubelet_facts(cfg, notes, unresolved, k8s_unevaluated, sources)


def _with_kubelet_facts(cfg: ServeConfig, notes: Sequence[str], unresolved: Sequence[str],
                        k8s_unevaluated: Sequence[tuple[str, str]], sources: Mapping[str, str]) -> ServeConfig:
    """``cfg`` (read from the expanded argv) with what the kubelet's expansion found first: its
    ``notes`` before the argv's, its ``unresolved`` names and ``k8s_unevaluated`` references
    merged in, every reason naming the ConfigMap or Secret a variable comes from (``sources``,
    :func:`~kubectl_kvreset.engines.k8senv.env_sources`), and the engine and model facts
    read again over the merged constructs."""
    merged_unresolved = tuple(dict.fromkeys([*unresolved, *cfg.unresolved_vars]))
    # a $(NAME) the kubelet leaves as written and the shell then reads (``$(hostname)``) is
    # named by the shell's reason alone
    by_shell = {literal for literal, _ in cfg.unevaluated}
    merged_unevaluated = tuple(dict.fromkeys(
        (literal, sourced_reason(literal, reason, sources))
        for literal, reason in [*cfg.unevaluated, *(u for u in k8s_unevaluated if u[0] not in by_shell)]))
    redirect_source = sources.get(MODEL_REDIRECT_ENV)
    return ServeConfig(
        argv=cfg.argv, entrypoint=cfg.entrypoint, model=cfg.model,
        served_model_name=cfg.served_model_name, api_ports=cfg.api_ports, scheme=cfg.scheme,
        kv_transfer_config=cfg.kv_transfer_config,
        kv_offloading_size_gib=cfg.kv_offloading_size_gib,
        kv_offloading_backend=cfg.kv_offloading_backend,
        data_parallel_size_local=cfg.data_parallel_size_local, config_file=cfg.config_file,
        unresolved_vars=merged_unresolved, notes=tuple(notes) + cfg.notes, env=cfg.env,
        engines_per_port=cfg.engines_per_port,
        config_source=cfg.config_source, config_error=cfg.config_error,
        unevaluated=merged_unevaluated,
        engines_flags=cfg.engines_flags,
        engines_unknown=engines_unknown_reason(cfg.engines_flags, merged_unevaluated, cfg.config_error),
        model_unknown=(cfg.model_unknown
                       or model_unknown_reason(cfg.model, merged_unevaluated, cfg.env, redirect_source)),
    )
