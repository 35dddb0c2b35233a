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
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ...shellscript import Shell, ShellScriptError
from .configfile import ConfigFileError, config_args

#: Reads a ``--config`` path of the container: returns ``(yaml_text, where)`` (``where`` names
#: the source for notes, e.g. ``ConfigMap vllm-config key config.yaml``); raises
#: :class:`~kubectl_kvreset.engines.vllm.configfile.ConfigFileError` when the file cannot be read.
ConfigReader = Callable[[str], "tuple[str, str]"]

__all__ = [
    "BOOLEAN_FLAGS",
    "DEFAULT_MODEL",
    "DEFAULT_ENTRYPOINTS",
    "ServeCommandError",
    "ServeConfig",
    "engines_unknown_reason",
    "expand_human_readable_json",
    "human_readable_int",
    "image_entrypoint",
    "image_vllm_release",
    "kubernetes_expand",
    "parse_argv",
    "parse_container",
    "unevaluated_in",
    "known_model",
    "model_unknown_reason",
    "MODEL_REDIRECT_ENV",
]


class ServeCommandError(ValueError):
    """A vLLM command line that vLLM itself would reject, or that cannot be read.

    The message names the flag (e.g. ``--kv-transfer-config: invalid JSON ...``) or the shell
    construct (unbalanced quotes) at fault.
    """


@dataclass(frozen=True)
class ServeConfig:
    """What a vLLM API server was told on its command line.

    Attributes:
        argv: the vLLM invocation after every expansion, from ``vllm``/``python3`` on.
        entrypoint: ``"vllm serve"`` or ``"api_server"``
            (``python3 -m vllm.entrypoints.openai.api_server``).
        model: the positional model of ``vllm serve`` or ``--model``; None when absent.
        served_model_name: the first ``--served-model-name`` value, or None.
        api_ports: every API server port, ascending. ``--port`` (default 8000); with
            ``--data-parallel-multi-port-external-lb`` one port per local DP rank,
            ``port .. port+N-1`` where N is ``--data-parallel-size-local``. Empty when the port
            could not be resolved (see ``notes``).
        scheme: ``"https"`` when ``--ssl-certfile``/``--ssl-keyfile`` is given, else ``"http"``.
        kv_transfer_config: decoded ``--kv-transfer-config`` (dotted keys merged, human-readable
            numbers expanded), or None.
        kv_offloading_size_gib: ``--kv-offloading-size`` in GiB, or None.
        kv_offloading_backend: ``--kv-offloading-backend``; ``"native"`` when only the size is
            given; None without a size.
        data_parallel_size_local: ``--data-parallel-size-local`` (``-dpl``), or None.
        config_file: ``--config FILE`` (or ``--config=FILE``, which vLLM does not expand).
        config_source: where the file's flags were read from (``ConfigMap NAME key K``), None
            when it was not read.
        config_error: why a ``--config`` file vLLM reads could not be read (its port and tiers
            are then not established), else None.
        unresolved_vars: names of ``$VAR``/``$(VAR)`` references the environment could not
            resolve (kept literally in ``argv``).
        unevaluated: ``(literal, reason)`` for each construct kept as written in ``argv``
            because it could not be evaluated here (command substitution, an unset variable, a
            ``$(VAR)`` whose value the spec does not hold): a value holding ``literal`` is not
            what vLLM sees (:func:`unevaluated_in`).
        notes: human-readable remarks about what could not be known.
        env: the environment vLLM would see: the container env plus what the script exported or
            set for the command (e.g. ``export VLLM_USE_SIMPLE_KV_OFFLOAD=1``).
        engines_per_port: how many engines (DP ranks) answer behind each API port, from
            :func:`engines_behind_port`; 1 without data parallelism or with one API server per
            rank.
        model_unknown: why ``model`` is not the name vLLM uses (``model_config.model``, which
            names the FS tier's directories and LMCache's keys and files): it holds a construct
            not evaluated, vLLM redirects it, or it is a remote URI (:func:`model_unknown_reason`);
            None when ``model`` is that name. Per-model steps are then left.
        model_live: ``model`` is the running server's ``model_config.model`` (read from
            ``/server_info``), not the spec's: nothing redirects it any more.
        engines_flags: the data-parallel flags that decide ``engines_per_port`` as vLLM reads
            them (``("--data-parallel-size $(DP)",)``); empty without them or with one API
            server per rank.
        engines_unknown: why the flags do not establish ``engines_per_port`` (a value holding a
            construct not evaluated, such as ``$(DP)`` from a ConfigMap, or an unread
            ``--config`` file), so more engines than counted may answer behind the port; None
            when they do.
        engines_secret: ``engines_per_port`` was read from a Secret's value, which is never
            shown (the count is used, not printed).
    """

    argv: tuple[str, ...]
    entrypoint: str
    model: str | None
    served_model_name: str | None
    api_ports: tuple[int, ...]
    scheme: str
    kv_transfer_config: Mapping[str, Any] | None
    kv_offloading_size_gib: float | None
    kv_offloading_backend: str | None
    data_parallel_size_local: int | None
    config_file: str | None
    unresolved_vars: tuple[str, ...]
    notes: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    engines_per_port: int = 1
    config_source: str | None = None
    config_error: str | None = None
    unevaluated: tuple[tuple[str, str], ...] = ()
    model_unknown: str | None = None
    model_live: bool = False
    engines_flags: tuple[str, ...] = ()
    engines_unknown: str | None = None
    engines_secret: bool = False


#: vLLM's model-redirect variable (``vllm/envs.py``): a file mapping model names to others.
MODEL_REDIRECT_ENV = "VLLM_MODEL_REDIRECT_PATH"
_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def model_unknown_reason(model: str | None, unevaluated: Sequence[tuple[str, str]], env: Mapping[str, str],
                         redirect_source: str | None = None) -> str | None:
    """Why ``model`` (as the command line names it) is not the name vLLM's
    ``model_config.model`` takes, or None when it is.

    * it holds a construct left as written (:func:`unevaluated_in`);
    * ``VLLM_MODEL_REDIRECT_PATH`` is set in ``env`` (or by ``redirect_source``, a ``valueFrom``
      the spec does not hold): vLLM replaces the name by the one that file maps it to, a local
      directory (``vllm/transformers_utils/utils.py::maybe_model_redirect``, called from
      ``vllm/config/model.py::ModelConfig.__post_init__``);
    * it is a URI (``s3://``, ``gs://``, other schemes alike): vLLM 0.32 mirrors an object-store
      model into a temporary local directory and uses that directory as ``model``
      (``vllm/config/model.py::maybe_pull_model_tokenizer_for_runai`` sets ``self.model`` to
      ``ObjectStorageModel.dir``, ``vllm/transformers_utils/runai_utils.py``).
    """
    if not model:
        return None
    unknown = unevaluated_in(model, unevaluated)
    if unknown:
        return f"the model name {model!r} cannot be evaluated from the pod spec: {'; '.join(unknown)}"
    if env.get(MODEL_REDIRECT_ENV) or redirect_source:
        where = redirect_source or f"{MODEL_REDIRECT_ENV}={env.get(MODEL_REDIRECT_ENV)}"
        return (f"{MODEL_REDIRECT_ENV} is set ({where}): vLLM replaces the model name {model!r} by the one that "
                "file maps it to (vllm/transformers_utils/utils.py::maybe_model_redirect), which the plugin does "
                "not read")
    if _URI_RE.match(model):
        return (f"the model {model!r} is a remote URI: vLLM copies it to a local directory and uses that directory "
                "as the model name (vllm/config/model.py::maybe_pull_model_tokenizer_for_runai), which the pod "
                "spec does not say")
    return None


def known_model(cfg: ServeConfig) -> str | None:
    """The model name vLLM uses (``model_config.model``) when the spec tells it, else None
    (see :attr:`ServeConfig.model_unknown`)."""
    return None if cfg.model_unknown else cfg.model


def unevaluated_in(value: str | None, unevaluated: Sequence[tuple[str, str]]) -> list[str]:
    """Why ``value`` (a path or setting read from the command line or its environment) is not
    what the server sees: the reasons of the ``unevaluated`` constructs (see
    :attr:`ServeConfig.unevaluated`) whose literal text it holds; empty when none.

    A value holding such a literal was built around a construct the reader left as written, so
    the real value is unknown (a literal that the spec itself writes, e.g. in single quotes,
    is never recorded there and does not count)."""
    if not value:
        return []
    return list(dict.fromkeys(reason for literal, reason in unevaluated if literal and literal in value))


def engines_behind_port(dp_size: int | None, dp_local: int | None, *, external_lb: bool,
                        hybrid_lb: bool) -> int:
    """The number of engines one API server port fronts (vLLM's DP load-balancing modes,
    ``vllm/v1/engine/core_client.py::EngineCoreClient.make_async_mp_client``: external LB
    (``--data-parallel-external-lb``, ``--data-parallel-multi-port-external-lb``) gives a
    client per DP rank, so one engine per API server; internal LB (the default with
    ``--data-parallel-size`` N) gives ``DPLBAsyncMPClient``, one API server balancing over
    every rank, N; hybrid LB (``--data-parallel-hybrid-lb``) balances over the node's local
    ranks, ``--data-parallel-size-local``)."""
    if external_lb:
        return 1
    if hybrid_lb:
        return max(dp_local or dp_size or 1, 1)
    return max(dp_size or dp_local or 1, 1)


def engines_unknown_reason(flags: Sequence[str], unevaluated: Sequence[tuple[str, str]],
                           config_error: str | None) -> str | None:
    """Why the data-parallel ``flags`` (``"--data-parallel-size VALUE"`` items, see
    :attr:`ServeConfig.engines_flags`) do not establish the engines behind a port, or None
    when they do: a value that is not an integer (the reasons of the ``unevaluated`` constructs
    it holds, e.g. a ``$(DP)`` whose ConfigMap is not read), or a ``--config`` file that could
    not be read (``config_error``), which may set the size itself."""
    why: list[str] = []
    for flag in flags:
        name, _, raw = flag.partition(" ")
        try:
            int(raw)
        except ValueError:
            reasons = unevaluated_in(raw, unevaluated)
            why.append(f"{name} {raw}: " + ("; ".join(reasons) if reasons else "not an integer here"))
    if config_error is not None:
        why.append(f"the --config file, which may set the data-parallel size, was not read ({config_error})")
    return "; ".join(why) or None


# --------------------------------------------------------------------------------------------
# Image entrypoints
# --------------------------------------------------------------------------------------------

_VLLM_SERVE: tuple[str, ...] = ("vllm", "serve")
_API_SERVER: tuple[str, ...] = ("python3", "-m", "vllm.entrypoints.openai.api_server")

#: Image repository glob (tag and digest removed, ``docker.io/`` and ``library/`` dropped) ->
#: the entrypoint argv the image runs when a container has no ``command``; None = not vLLM.
#: First match wins. Sources: ``vllm/vllm-openai`` images have ``ENTRYPOINT ["vllm","serve"]``
#: (vLLM ``docker/Dockerfile``); llm-d images start ``python -m vllm.entrypoints.openai.api_server``
#: (llm-d ``docker/Dockerfile.cuda``). llm-d's sidecar, router and
#: scheduler images share the ``ghcr.io/llm-d/llm-d`` prefix and are excluded first.
DEFAULT_ENTRYPOINTS: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("*sidecar*", None),
    ("*router*", None),
    ("*inference-scheduler*", None),
    ("*inference-sim*", None),
    ("*kv-cache*", None),
    ("vllm/vllm-openai", _VLLM_SERVE),
    ("vllm/vllm-openai-*", _VLLM_SERVE),
    ("ghcr.io/llm-d/llm-d", _API_SERVER),
    ("ghcr.io/llm-d/llm-d-*", _API_SERVER),
)

EntrypointTable = Sequence[tuple[str, "tuple[str, ...] | None"]]


def _image_repository(image: str) -> str:
    """Return ``image`` without tag or digest, and without ``docker.io/`` / ``library/``."""
    ref = image.strip().split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        ref = ref[:colon]
    for prefix in ("docker.io/", "index.docker.io/"):
        ref = ref.removeprefix(prefix)
    ref = ref.removeprefix("library/")
    return ref


def image_entrypoint(
    image: str, table: EntrypointTable = DEFAULT_ENTRYPOINTS
) -> tuple[str, ...] | None:
    """Return the argv an image runs when the container has no ``command``.

    Args:
        image: an image reference such as ``vllm/vllm-openai:v0.23.0`` or
            ``ghcr.io/llm-d/llm-d-cuda:v0.8.0@sha256:...``.
        table: ordered (repository glob, entrypoint or None) pairs; the first match wins.

    Returns:
        ``("vllm", "serve")`` for ``vllm/vllm-openai``, ``("python3", "-m",
        "vllm.entrypoints.openai.api_server")`` for llm-d images, None for anything else
        (unknown images and llm-d's non-vLLM images such as the routing sidecar).
    """
    repo = _image_repository(image)
    for pattern, entry in table:
        if fnmatch.fnmatchcase(repo, pattern):
            return entry
    return None


def image_vllm_release(image: str) -> tuple[int, int, int] | None:
    """The vLLM release a ``vllm/vllm-openai[-*]:vX.Y.Z[-suffix]`` image tag names, else None.

    Only vLLM's own images: llm-d images carry llm-d's version, not vLLM's (llm-d
    builds vLLM from a pinned commit, ``docker/common-versions``). Used before any call, where
    the running server cannot be asked yet (the
    nested-mapping rule of ``--config`` files, :mod:`kubectl_kvreset.engines.vllm.configfile`).
    """
    repo = _image_repository(image)
    if not (repo == "vllm/vllm-openai" or fnmatch.fnmatchcase(repo, "vllm/vllm-openai-*")):
        return None
    ref = image.strip().split("@", 1)[0]
    tag = ref[ref.rfind(":") + 1:] if ref.rfind(":") > ref.rfind("/") else ""
    m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+.].*)?$", tag)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


# --------------------------------------------------------------------------------------------
# Kubernetes $(VAR) expansion
# --------------------------------------------------------------------------------------------


def kubernetes_expand(text: str, env: Mapping[str, str], unresolved: list[str] | None = None,
                      unevaluated: list[tuple[str, str]] | None = None) -> str:
    """Expand ``$(VAR)`` references in one ``command``/``args`` item as the kubelet does.

    ``$$`` becomes ``$``; ``$(NAME)`` becomes ``env[NAME]`` when defined and stays literal
    otherwise (its name is appended to ``unresolved`` when NAME looks like a variable name, and
    ``("$(NAME)", reason)`` to ``unevaluated``: the kubelet expands it from the container's
    whole environment, ``envFrom`` and ``valueFrom`` sources and service variables included,
    which ``env`` may not hold); any other ``$`` is kept. Rule from Kubernetes
    ``third_party/forked/golang/expansion``.
    """
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2:close]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i:close + 1])
                        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
                            if unresolved is not None:
                                unresolved.append(name)
                            if unevaluated is not None:
                                unevaluated.append((text[i:close + 1], (
                                    f"$({name}) is not resolved: {name} is not a literal env entry of the "
                                    "container (a valueFrom or envFrom source, or none, which the kubelet "
                                    "then leaves as written)")))
                    i = close + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


# --------------------------------------------------------------------------------------------
# Human-readable numbers (vllm/utils/argparse_utils.py::human_readable_int and
# vllm/engine/arg_utils.py::_expand_json_human_readable_numbers, vLLM >= 0.20)
# --------------------------------------------------------------------------------------------

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT])$", re.ASCII)
_HUMAN_IN_JSON_RE = re.compile(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b", re.ASCII)


def human_readable_int(value: str) -> int:
    """Convert ``"25.6k"``/``"80g"``/``"2G"``/``"1000"`` to an int as vLLM does.

    Lower-case suffixes ``k m g t`` are powers of 1000 and allow decimals; upper-case ``K M G T``
    are powers of 1024 and must be whole numbers.

    Raises:
        ValueError: not a number of that form (including a decimal with an upper-case suffix).
    """
    text = value.strip()
    m = _HUMAN_RE.match(text)
    if m is None:
        return int(text)
    number, suffix = m.group(1), m.group(2)
    if suffix in _DECIMAL:
        try:
            return int(float(number) * _DECIMAL[suffix])
        except OverflowError as exc:
            raise ValueError(f"number too large: {value!r}") from exc
    if "." in number:
        raise ValueError(f"decimals are not allowed with binary suffix {suffix!r}: {value!r}")
    return int(number) * _BINARY[suffix]


def expand_human_readable_json(text: str) -> str:
    """Replace bare human-readable numbers (``80g``, ``1K``) outside JSON strings by integers.

    Raises:
        ValueError: a decimal with a binary (upper-case) suffix, such as ``1.5G``.
    """
    out: list[str] = []
    seg_start = 0
    i = 0
    n = len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_str = False
                out.append(text[seg_start:i + 1])
                seg_start = i + 1
        elif c == '"':
            out.append(_HUMAN_IN_JSON_RE.sub(lambda m: str(human_readable_int(m.group(0))),
                                             text[seg_start:i]))
            seg_start = i
            in_str = True
        i += 1
    tail = text[seg_start:]
    out.append(tail if in_str else _HUMAN_IN_JSON_RE.sub(
        lambda m: str(human_readable_int(m.group(0))), tail))
    return "".join(out)


_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$", re.ASCII)


def python_module(words: Sequence[str]) -> tuple[str, int] | None:
    """If ``words`` run a module with a Python interpreter (``python``, ``python3``,
    ``python3.12``; any path), return ``(module, index of the word after it)``, else None.

    Interpreter options before ``-m`` are skipped: single-dash flags (``-u``, ``-O``) and ``-X``/``-W``
    with their value; a ``--`` option, a script path or ``-c`` is not a module run.
    ``python3 -u -m vllm.entrypoints.openai.api_server --port 8000`` -> ("vllm.entrypoints.openai.api_server", 4).
    """
    if not words or not _PYTHON_RE.match(words[0].rsplit("/", 1)[-1]):
        return None
    j = 1
    while j < len(words):
        arg = words[j]
        if arg == "-m":
            return (words[j + 1], j + 2) if j + 1 < len(words) else None
        if arg in ("-X", "-W"):
            j += 2
        elif arg.startswith("-") and not arg.startswith("--"):
            j += 1
        else:
            return None
    return None


def _vllm_entrypoint(words: Sequence[str]) -> tuple[str, int] | None:
    """If ``words`` start a vLLM API server, return (entrypoint, index of its first argument).

    ``vllm serve ...`` -> ("vllm serve", 2); ``python3 [-u] -m vllm.entrypoints.openai.api_server``
    -> ("api_server", k); ``python -m vllm.entrypoints.cli.main serve`` -> ("vllm serve", k).
    Other ``vllm`` sub-commands (``vllm launch render``, ``vllm bench``) are not API servers.
    """
    if not words:
        return None
    base = words[0].rsplit("/", 1)[-1]
    if base == "vllm":
        if len(words) > 1 and words[1] == "serve":
            return "vllm serve", 2
        return None
    run = python_module(words)
    if run is not None:
        module, k = run
        if module == "vllm.entrypoints.openai.api_server":
            return "api_server", k
        if module == "vllm.entrypoints.cli.main" and k < len(words) and words[k] == "serve":
            return "vllm serve", k + 1
    return None


# --------------------------------------------------------------------------------------------
# vLLM flags
# --------------------------------------------------------------------------------------------

#: vLLM flags that take no value (``store_true``/``BooleanOptionalAction``), normalised to
#: dashes. Needed so that a following positional (the model of ``vllm serve``) is not read as
#: their value. Any ``--no-*`` flag is also boolean. From ``vllm/engine/arg_utils.py`` and
#: ``vllm/entrypoints/openai/cli_args.py``.
BOOLEAN_FLAGS: frozenset[str] = frozenset({
    "enable-expert-parallel", "data-parallel-multi-port-external-lb", "enable-dbo",
    "data-parallel-hybrid-lb", "data-parallel-external-lb", "enable-eplb", "enforce-eager",
    "trust-remote-code", "enable-prefix-caching", "enable-chunked-prefill",
    "disable-log-requests", "enable-log-requests", "disable-log-stats", "enable-log-outputs",
    "enable-auto-tool-choice", "disable-frontend-multiprocessing", "enable-lora",
    "enable-lora-bias", "fully-sharded-loras", "enable-sleep-mode", "headless",
    "disable-custom-all-reduce", "disable-sliding-window", "skip-tokenizer-init",
    "enable-request-id-headers", "disable-fastapi-docs", "enable-server-load-tracking",
    "enable-force-include-usage", "enable-prompt-tokens-details", "disable-uvicorn-access-log",
    "enable-tokenizer-info-endpoint", "return-tokens-as-token-ids", "async-scheduling",
    "disable-cascade-attn", "kv-sharing-fast-prefill", "enable-prompt-embeds",
    "disable-chunked-mm-input", "use-tqdm-on-load", "enable-ssl-refresh",
    "disable-async-output-proc", "calculate-kv-scales", "disable-hybrid-kv-cache-manager",
    "enable-return-routed-experts", "enable-reasoning", "log-error-stack",
    "enable-multimodal-encoder-data-parallel", "enable-mfu-metrics", "enable-log-deltas",
    "disable-mm-preprocessor-cache", "enable-chunked-local-attn", "ray-workers-use-nsight",
    "enable-layerwise-nvtx-tracing", "enable-microbatching", "enable-elastic-ep",
    "allow-deprecated-quantization", "enable-dual-batch-overlap", "disable-log-stats-server",
})

#: Flags that take one or more values (argparse ``nargs="+"``): argparse gives such a flag every
#: following token up to the next ``-``-prefixed one, so a positional model written after it is
#: the flag's value, not the model. The list is every ``nargs="+"``/``"*"`` action of vLLM 0.32.0's
#: ``vllm serve`` parser (``vllm/entrypoints/cli/serve.py::ServeSubcommand.subparser_init`` ->
#: ``vllm/entrypoints/openai/cli_args.py::make_arg_parser``, options from
#: ``vllm/engine/arg_utils.py::EngineArgs.add_cli_args`` and ``FrontendArgs``); none is ``"*"``.
#: ``cuda-graph-sizes`` and ``prompt-adapters`` are the ``nargs="+"`` flags of earlier releases.
_MULTI_VALUE_FLAGS = frozenset({
    "allowed-media-domains", "api-key", "collect-detailed-traces", "cpu-offload-params",
    "cudagraph-capture-sizes", "ignore-patterns", "kv-cache-dtype-skip-layers",
    "logits-processors", "lora-modules", "lora-target-modules", "numa-bind-cpus",
    "numa-bind-nodes", "offload-params", "served-model-name", "sleep-preserve-parameter-names",
    "cuda-graph-sizes", "prompt-adapters",
})

#: vLLM 0.32.0 serve flags that are proper prefixes of a multi-value flag (so they are not
#: abbreviations of it). argparse's ``allow_abbrev`` (on in vLLM's parser) reads any other
#: proper prefix, e.g. ``--api-ke``, as the flag it abbreviates.
_PREFIX_FLAGS = frozenset({"numa-bind", "kv-cache-dtype"})


def _multi_value(name: str) -> bool:
    """Does ``--name`` (normalised) take every following value, as a multi-value flag or an
    abbreviation of one (argparse ``allow_abbrev``)?"""
    if name in _MULTI_VALUE_FLAGS:
        return True
    return (name not in _PREFIX_FLAGS and name not in BOOLEAN_FLAGS and len(name) > 2
            and any(flag.startswith(name) for flag in _MULTI_VALUE_FLAGS))


#: The model ``vllm serve`` loads when none is named (``vllm/config/model.py::ModelConfig.model``
#: in vLLM 0.32.0), and the release it is known for.
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
DEFAULT_MODEL_RELEASE = (0, 32)

#: Short vLLM aliases -> long flag (``vllm/engine/arg_utils.py``).
_SHORT_FLAGS = {
    "-tp": "tensor-parallel-size", "-pp": "pipeline-parallel-size",
    "-dp": "data-parallel-size", "-dpl": "data-parallel-size-local",
    "-dpa": "data-parallel-address", "-dpp": "data-parallel-rpc-port",
    "-dpr": "data-parallel-rank", "-dpb": "data-parallel-backend",
    "-dph": "data-parallel-hybrid-lb", "-dpe": "data-parallel-external-lb",
    "-ep": "enable-expert-parallel", "-q": "quantization", "-asc": "api-server-count",
    "-cc": "compilation-config", "-ac": "attention-config",
}
_SHORT_BOOLEAN = frozenset({"-dph", "-dpe", "-ep"})


def _normalise_flag(raw: str) -> str:
    """``--kv_transfer_config.kv_connector`` -> ``kv-transfer-config.kv_connector``.

    Underscores become dashes only before the first dot, as vLLM's ``FlexibleArgumentParser``
    does; the dotted part names JSON keys and keeps its spelling.
    """
    name = raw.lstrip("-")
    head, dot, tail = name.partition(".")
    return head.replace("_", "-") + dot + tail


def _is_value_token(token: str) -> bool:
    """Can ``token`` be the value of a preceding flag? (not a flag; negative numbers are)."""
    return not token.startswith("-") or bool(re.match(r"^-[0-9]", token)) or token == "-"


@dataclass
class _Parsed:
    """Raw result of walking vLLM's argv."""

    flags: dict[str, list[str]] = field(default_factory=dict)   # name -> values per occurrence
    dotted: list[tuple[str, str]] = field(default_factory=list)  # (flag.path, value) in order
    positionals: list[str] = field(default_factory=list)
    config_eq_form: bool = False


def _walk_flags(args: Sequence[str]) -> _Parsed:
    """Split vLLM's arguments into flags, dotted dict flags and positionals."""
    parsed = _Parsed()
    i = 0
    n = len(args)
    while i < n:
        tok = args[i]
        if tok == "--":
            parsed.positionals.extend(args[i + 1:])
            break
        if tok.startswith("-") and not _is_value_token(tok):
            if tok.startswith("--"):
                raw_name, eq, inline = tok.partition("=")
                name = _normalise_flag(raw_name)
            else:
                short, eq, inline = tok.partition("=")
                if short in _SHORT_FLAGS:
                    name = _SHORT_FLAGS[short]
                elif short.startswith("-O") and len(short) > 2:
                    name, eq, inline = "compilation-config", "=", short[2:]
                else:
                    name = short.lstrip("-")
            if name == "config" and eq:
                parsed.config_eq_form = True
            values: list[str]
            if eq:
                values = [inline]
            elif name in BOOLEAN_FLAGS or name.startswith("no-") or tok in _SHORT_BOOLEAN:
                values = []
            elif tok.startswith("--") and _multi_value(name):
                name = next((f for f in sorted(_MULTI_VALUE_FLAGS) if f.startswith(name)), name)
                values = []
                while i + 1 < n and _is_value_token(args[i + 1]):
                    values.append(args[i + 1])
                    i += 1
            elif i + 1 < n and _is_value_token(args[i + 1]):
                values = [args[i + 1]]
                i += 1
            else:
                values = []
            if "." in name:
                parsed.dotted.append((name, values[0] if values else "true"))
            else:
                parsed.flags.setdefault(name, []).append(" ".join(values) if name not in
                                                         _MULTI_VALUE_FLAGS else "\0".join(values))
        else:
            parsed.positionals.append(tok)
        i += 1
    return parsed


def _decode_dotted_value(value: str) -> Any:
    """Value of a dotted dict flag: JSON, else a human-readable int, else the string (vLLM)."""
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        pass
    try:
        return human_readable_int(value)
    except ValueError:
        return value


def _merge_dotted(items: Sequence[tuple[str, str]], flag: str) -> dict[str, Any]:
    """Build the dict vLLM builds from ``--flag.a.b value`` items (``key+`` appends to a list)."""
    result: dict[str, Any] = {}
    for name, raw in items:
        path = name.split(".")[1:]
        if not path or any(p == "" for p in path):
            raise ServeCommandError(f"--{flag}: malformed dotted key {name!r}")
        value = _decode_dotted_value(raw)
        node = result
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
            node = child
        last = path[-1]
        if last.endswith("+"):
            last = last[:-1]
            existing = node.get(last)
            if isinstance(existing, list):
                existing.append(value)
            else:
                node[last] = [value]
        else:
            node[last] = value
    return result


def _decode_json_flag(flag: str, text: str) -> dict[str, Any]:
    """Decode a JSON dict flag value (human-readable numbers expanded).

    Raises:
        ServeCommandError: not valid JSON or not an object; the message names ``--flag``.
    """
    try:
        decoded = json.loads(expand_human_readable_json(text))
    except (ValueError, RecursionError) as exc:
        raise ServeCommandError(f"--{flag}: invalid JSON ({exc}): {text[:120]!r}") from exc
    if not isinstance(decoded, dict):
        raise ServeCommandError(f"--{flag}: expected a JSON object, got {type(decoded).__name__}")
    return decoded


def _last(parsed: _Parsed, name: str) -> str | None:
    values = parsed.flags.get(name)
    return values[-1] if values else None


def _int_flag(parsed: _Parsed, name: str, notes: list[str]) -> tuple[int | None, bool]:
    """(value, ok) of an int flag; a value holding an unexpanded ``$`` is noted, not raised."""
    raw = _last(parsed, name)
    if raw is None:
        return None, True
    try:
        return int(raw), True
    except ValueError:
        if "$" in raw:
            notes.append(f"--{name} {raw!r} could not be resolved")
            return None, False
        raise ServeCommandError(f"--{name}: not an integer: {raw!r}") from None


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


def _build_config(argv: list[str], entrypoint: str, first_arg: int, env: Mapping[str, str],
                  unresolved: list[str], notes: list[str],
                  config_reader: ConfigReader | None = None,
                  config_version: tuple[int, ...] | None = None,
                  unevaluated: Sequence[tuple[str, str]] = ()) -> ServeConfig:
    """Turn a vLLM invocation into a :class:`ServeConfig` (``--config FILE`` read through
    ``config_reader`` when given)."""
    config_source: str | None = None
    config_error: str | None = None
    config_path: str | None = None
    if "--config" in argv[first_arg:]:
        at = argv.index("--config", first_arg)
        config_path = argv[at + 1] if at + 1 < len(argv) else None
        if config_reader is None:
            config_error = "the file lives in the pod and was not read"
        else:
            try:
                argv, config_source = _splice_config(argv, entrypoint, first_arg, config_reader, notes,
                                                     config_version)
            except ConfigFileError as exc:
                config_error = str(exc)
    parsed = _walk_flags(argv[first_arg:])

    model = _last(parsed, "model")
    if entrypoint == "vllm serve" and parsed.positionals:
        model = parsed.positionals[0]
    default_unknown: str | None = None
    if model is None:
        # values are not shown: --api-key's are secrets
        swallowed = [f"{len(v.split(chr(0)))} value(s) to the {name} flag" for name in sorted(_MULTI_VALUE_FLAGS)
                     for v in parsed.flags.get(name, []) if v]
        why = ("no model is named" + (f" (argparse gives every value after a multi-value flag to that flag: "
                                      f"{'; '.join(swallowed)})" if swallowed else ""))
        if config_error is not None:
            pass  # the unread file may name it: no model, as without a swallowing flag
        elif config_version is not None and tuple(config_version[:2]) == DEFAULT_MODEL_RELEASE:
            model = DEFAULT_MODEL
            notes.append(f"{why}: vLLM {'.'.join(map(str, config_version))} serves its default model {DEFAULT_MODEL} "
                         "(vllm/config/model.py::ModelConfig.model)")
        elif swallowed:
            default_unknown = (f"{why}: vLLM serves its default model, which depends on the release "
                               f"({DEFAULT_MODEL} in vLLM 0.32, vllm/config/model.py::ModelConfig.model) and "
                               "the image does not name a release this plugin knows")
    served_raw = _last(parsed, "served-model-name")
    served = served_raw.split("\0")[0] if served_raw else None

    port, port_ok = _int_flag(parsed, "port", notes)
    if port is None and port_ok and config_error is None:
        port = 8000
    dpl, dpl_ok = _int_flag(parsed, "data-parallel-size-local", notes)
    if port is not None and not 0 < port < 65536:
        raise ServeCommandError(f"--port: {port} is not a TCP port")
    if dpl is not None and not 0 < dpl <= 4096:
        raise ServeCommandError(f"--data-parallel-size-local: {dpl} out of range")
    if "data-parallel-multi-port-external-lb" in parsed.flags and port is not None:
        count = dpl
        if count is None and dpl_ok:
            dps, _ = _int_flag(parsed, "data-parallel-size", notes)
            count = dps if dps is not None else 1
            notes.append("--data-parallel-multi-port-external-lb without "
                         f"--data-parallel-size-local: assumed {count} local API server(s)")
        if count is None:
            ports: tuple[int, ...] = (port,)
            notes.append("number of local DP API servers unknown; only the first port listed")
        else:
            ports = tuple(p for p in range(port, port + max(min(count, 4096), 1)) if p < 65536)
    else:
        ports = (port,) if port is not None else ()

    scheme = "https" if ("ssl-certfile" in parsed.flags or "ssl-keyfile" in parsed.flags) else "http"
    try:
        dp_size, _ = _int_flag(parsed, "data-parallel-size", [])
    except ServeCommandError:
        dp_size = None  # vLLM itself refuses it; the engine count stays unknown (1)
    external_lb = ("data-parallel-multi-port-external-lb" in parsed.flags
                   or "data-parallel-external-lb" in parsed.flags)
    engines = engines_behind_port(
        dp_size if dp_size is None or 0 < dp_size <= 4096 else None, dpl,
        external_lb=external_lb, hybrid_lb="data-parallel-hybrid-lb" in parsed.flags)
    engines_flags = () if external_lb else tuple(
        f"--{name} {raw}" for name in ("data-parallel-size", "data-parallel-size-local")
        if (raw := _last(parsed, name)) is not None)

    ktc: dict[str, Any] | None = None
    full = _last(parsed, "kv-transfer-config")
    dotted = [(k, v) for k, v in parsed.dotted if k.startswith("kv-transfer-config.")]
    if dotted:
        ktc = _merge_dotted(dotted, "kv-transfer-config")
        if full is not None:
            notes.append("--kv-transfer-config given both as JSON and as dotted keys: "
                         "vLLM keeps the dotted keys only")
    elif full is not None:
        ktc = _decode_json_flag("kv-transfer-config", full)

    size_raw = _last(parsed, "kv-offloading-size")
    size: float | None = None
    if size_raw is not None:
        try:
            size = float(size_raw)
        except ValueError:
            if "$" not in size_raw:
                raise ServeCommandError(f"--kv-offloading-size: not a number: {size_raw!r}") from None
            notes.append(f"--kv-offloading-size {size_raw!r} could not be resolved")
    backend = _last(parsed, "kv-offloading-backend")
    if backend is None and size is not None:
        backend = "native"

    config_file = _last(parsed, "config")
    if config_path is not None:
        config_file = config_path
    if config_source is not None:
        notes.append(f"--config {config_file}: flags read from {config_source}")
    elif config_error is not None:
        notes.append(f"--config {config_file}: {config_error}; the port and tiers set there are "
                     "not known" + ("" if port is None else f" (port {port} is from the command line)"))
    elif config_file is not None and parsed.config_eq_form:
        notes.append(f"--config={config_file} is accepted but not expanded by vLLM (only "
                     "'--config FILE' is, vllm/utils/argparse_utils.py): its flags do not apply")

    return ServeConfig(
        argv=tuple(argv),
        entrypoint=entrypoint,
        model=model,
        served_model_name=served,
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
        config_source=config_source,
        config_error=config_error,
        unevaluated=tuple(dict.fromkeys(unevaluated)),
        model_unknown=default_unknown,
        engines_flags=engines_flags,
        engines_unknown=engines_unknown_reason(engines_flags, unevaluated, config_error),
    )


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
    shell = Shell(env, wanted=lambda words: _vllm_entrypoint(words) is not None, external=external)
    try:
        found = shell.run_words(list(argv))
    except RecursionError as exc:
        raise ServeCommandError("command line too deeply nested to read") from exc
    except ShellScriptError as exc:
        raise ServeCommandError(str(exc)) from exc
    if found is None:
        return None
    words, cmd_env = found
    entry = _vllm_entrypoint(words)
    if entry is None:  # pragma: no cover - run_words only returns vLLM invocations
        return None
    entrypoint, first = entry
    try:
        return _build_config(list(words), entrypoint, first, cmd_env, shell.unresolved,
                             shell.notes, config_reader, config_version, shell.unevaluated)
    except RecursionError as exc:
        raise ServeCommandError("vLLM arguments too deeply nested to read") from exc


def _env_sources(container: Mapping[str, Any]) -> dict[str, str]:
    """Where the kubelet takes the variables of ``container`` that the spec does not hold
    literally: name -> ``ConfigMap NAME key K`` / ``Secret NAME key K`` for ``valueFrom``
    entries, and ``*`` -> the ``envFrom`` sources (which may set any name)."""
    out: dict[str, str] = {}
    literal: set[str] = set()
    env_from = bool(container.get("envFrom"))
    for entry in container.get("env") or []:
        vf = entry.get("valueFrom") if isinstance(entry, Mapping) else None
        if not isinstance(vf, Mapping):
            # a later literal entry replaces an earlier valueFrom one (the last entry wins)
            if isinstance(entry, Mapping):
                name = str(entry.get("name"))
                out.pop(name, None)
                literal.discard(name)
                # a value referring to a variable not read here is expanded by the kubelet
                # with that variable's real value (k8s.io/kubernetes/third_party/forked/golang/
                # expansion, earlier entries only), so it is not known either
                # (the value itself is not shown: it may hold a secret)
                for used in _k8s_refs(str(entry.get("value") or "")):
                    if used in out or (env_from and used not in literal):
                        out[name] = (f"its env value, which refers to $({used}), and {used} comes from "
                                     f"{out.get(used) or 'envFrom'}")
                        break
                else:
                    literal.add(name)
            continue
        literal.discard(str(entry.get("name")))
        for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = vf.get(key)
            if isinstance(ref, Mapping):
                out[str(entry.get("name"))] = f"{kind} {ref.get('name')} key {ref.get('key')}"
    froms = [f"{kind} {(src.get(key) or {}).get('name')}" for src in container.get("envFrom") or []
             if isinstance(src, Mapping)
             for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")) if key in src]
    if froms:
        out["*"] = "envFrom " + ", ".join(froms)
    return out


def _k8s_refs(text: str) -> list[str]:
    """The names of the ``$(NAME)`` references of one env value (``$$`` escapes ``$``)."""
    return [m.group(1) for m in re.finditer(r"\$\$|\$\(([^)]*)\)", text) if m.group(1) is not None]


_REF_NAME_RE = re.compile(r"^\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|\(([A-Za-z_][A-Za-z0-9_]*)\))$")


def _sourced_reason(literal: str, reason: str, sources: Mapping[str, str]) -> str:
    """``reason`` for an unevaluated ``$NAME``/``${NAME}``/``$(NAME)``, naming the ConfigMap or
    Secret the kubelet takes NAME from when the spec says (the command is read from the pod
    spec alone, so such a value is not known here)."""
    m = _REF_NAME_RE.match(literal)
    if m is None:
        return reason
    name = m.group(1) or m.group(2) or m.group(3)
    if name in sources:
        return (f"{literal}: {name} comes from {sources[name]}, which is not read with the pod spec (write the "
                "value literally in the command or the container's env so the plugin can read it)")
    if "*" in sources:
        return f"{reason}; {sources['*']} may set {name}"
    return reason


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
    sources = _env_sources(container)
    cfg = parse_argv(command + args, env, config_reader,
                     image_vllm_release(str(container.get("image", ""))),
                     external=frozenset(n for n in sources if n != "*"))
    if cfg is None:
        return None
    merged_unresolved = tuple(dict.fromkeys([*unresolved, *cfg.unresolved_vars]))
    # a $(NAME) the kubelet leaves as written and the shell then reads (``$(hostname)``) is
    # named by the shell's reason alone
    by_shell = {literal for literal, _ in cfg.unevaluated}
    merged_unevaluated = tuple(dict.fromkeys(
        (literal, _sourced_reason(literal, reason, sources))
        for literal, reason in [*cfg.unevaluated, *(u for u in k8s_unevaluated if u[0] not in by_shell)]))
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
                       or model_unknown_reason(cfg.model, merged_unevaluated, cfg.env, sources.get(MODEL_REDIRECT_ENV))),
    )
