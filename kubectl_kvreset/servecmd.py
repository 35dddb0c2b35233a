"""Parse a vLLM server command line, as a pod spec writes it, into a typed :class:`ServeConfig`.

Pure: no I/O, no Kubernetes import. The input is a container dict as the Kubernetes API returns it
(JSON-decoded) plus the container's resolved environment.

What is understood (facts from vLLM's ``FlexibleArgumentParser`` in
``vllm/utils/argparse_utils.py`` and from llm-d manifests; see the project's research notes):

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .shellscript import Shell, ShellScriptError

__all__ = [
    "BOOLEAN_FLAGS",
    "DEFAULT_ENTRYPOINTS",
    "ServeCommandError",
    "ServeConfig",
    "expand_human_readable_json",
    "human_readable_int",
    "image_entrypoint",
    "kubernetes_expand",
    "parse_argv",
    "parse_container",
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
        config_file: ``--config FILE``; the file lives in the pod and is not read here.
        unresolved_vars: names of ``$VAR``/``$(VAR)`` references the environment could not
            resolve (kept literally in ``argv``).
        notes: human-readable remarks about what could not be known.
        env: the environment vLLM would see: the container env plus what the script exported or
            set for the command (e.g. ``export VLLM_USE_SIMPLE_KV_OFFLOAD=1``).
        engines_per_port: how many engines (DP ranks) answer behind each API port, from
            :func:`engines_behind_port`; 1 without data parallelism or with one API server per
            rank.
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


# --------------------------------------------------------------------------------------------
# Image entrypoints
# --------------------------------------------------------------------------------------------

_VLLM_SERVE: tuple[str, ...] = ("vllm", "serve")
_API_SERVER: tuple[str, ...] = ("python3", "-m", "vllm.entrypoints.openai.api_server")

#: Image repository glob (tag and digest removed, ``docker.io/`` and ``library/`` dropped) ->
#: the entrypoint argv the image runs when a container has no ``command``; None = not vLLM.
#: First match wins. Sources: ``vllm/vllm-openai`` images have ``ENTRYPOINT ["vllm","serve"]``
#: (research/vllm.md §4); llm-d images start ``python -m vllm.entrypoints.openai.api_server``
#: (llm-d ``docker/Dockerfile.cuda``, research/llmd.md §2.2). llm-d's sidecar, router and
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


# --------------------------------------------------------------------------------------------
# Kubernetes $(VAR) expansion
# --------------------------------------------------------------------------------------------


def kubernetes_expand(text: str, env: Mapping[str, str], unresolved: list[str] | None = None) -> str:
    """Expand ``$(VAR)`` references in one ``command``/``args`` item as the kubelet does.

    ``$$`` becomes ``$``; ``$(NAME)`` becomes ``env[NAME]`` when defined and stays literal
    otherwise (its name is appended to ``unresolved`` when NAME looks like a variable name);
    any other ``$`` is kept. Rule from Kubernetes ``third_party/forked/golang/expansion``.
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
                        if unresolved is not None and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
                            unresolved.append(name)
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
    if _PYTHON_RE.match(base):
        j = 1
        while j < len(words):
            arg = words[j]
            if arg == "-m" and j + 1 < len(words):
                module = words[j + 1]
                if module == "vllm.entrypoints.openai.api_server":
                    return "api_server", j + 2
                if module == "vllm.entrypoints.cli.main" and j + 2 < len(words) and words[j + 2] == "serve":
                    return "vllm serve", j + 3
                return None
            if arg in ("-X", "-W"):
                j += 2
                continue
            if arg.startswith("-") and not arg.startswith("--"):
                j += 1
                continue
            return None
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

#: Flags that take one or more values (argparse ``nargs="+"``).
_MULTI_VALUE_FLAGS = frozenset({"served-model-name", "lora-modules", "cuda-graph-sizes",
                                "prompt-adapters"})

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
            elif name in _MULTI_VALUE_FLAGS:
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


def _build_config(argv: list[str], entrypoint: str, first_arg: int, env: Mapping[str, str],
                  unresolved: list[str], notes: list[str]) -> ServeConfig:
    """Turn a vLLM invocation into a :class:`ServeConfig`."""
    parsed = _walk_flags(argv[first_arg:])

    model = _last(parsed, "model")
    if entrypoint == "vllm serve" and parsed.positionals:
        model = parsed.positionals[0]
    served_raw = _last(parsed, "served-model-name")
    served = served_raw.split("\0")[0] if served_raw else None

    port, port_ok = _int_flag(parsed, "port", notes)
    if port is None and port_ok:
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
    engines = engines_behind_port(
        dp_size if dp_size is None or 0 < dp_size <= 4096 else None, dpl,
        external_lb=("data-parallel-multi-port-external-lb" in parsed.flags
                     or "data-parallel-external-lb" in parsed.flags),
        hybrid_lb="data-parallel-hybrid-lb" in parsed.flags)

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
    if config_file is not None:
        notes.append(f"--config {config_file}: the file lives in the pod and was not read; "
                     "flags set there are unknown")
        if parsed.config_eq_form:
            notes.append("--config=FILE is accepted but not expanded by vLLM (only '--config FILE')")

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
    )


def parse_argv(argv: Sequence[str], env: Mapping[str, str]) -> ServeConfig | None:
    """Parse a process argv (after Kubernetes expansion) that may start vLLM.

    ``argv`` may be the vLLM invocation itself (``vllm serve ...``, ``python3 -m ...``) or a
    wrapper: ``/bin/bash -c SCRIPT``, ``sh -c``, ``bash -lc``, ``env X=1 vllm ...``,
    ``exec ...``. ``env`` is the process environment (used for ``$VAR`` in scripts).

    Returns:
        A :class:`ServeConfig`, or None when no vLLM API server is started.

    Raises:
        ServeCommandError: malformed vLLM arguments (e.g. invalid ``--kv-transfer-config``
            JSON, non-integer ``--port``) or an unreadable script (unbalanced quotes).
    """
    shell = Shell(env, wanted=lambda words: _vllm_entrypoint(words) is not None)
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
                             shell.notes)
    except RecursionError as exc:
        raise ServeCommandError("vLLM arguments too deeply nested to read") from exc


def parse_container(
    container: Mapping[str, Any],
    env: Mapping[str, str],
    image_entrypoints: EntrypointTable = DEFAULT_ENTRYPOINTS,
) -> ServeConfig | None:
    """Parse a pod-spec container into a :class:`ServeConfig`.

    Args:
        container: one item of ``spec.containers`` as the API returns it (``command``, ``args``,
            ``image`` are read).
        env: the container's resolved environment (name -> value), used for Kubernetes
            ``$(VAR)`` expansion of ``command``/``args`` and for ``$VAR`` in shell scripts.
        image_entrypoints: image -> entrypoint table for containers without ``command``.

    Returns:
        None when the container does not run a vLLM API server (or its image is unknown and it
        has no ``command``).

    Raises:
        ServeCommandError: see :func:`parse_argv`.
    """
    unresolved: list[str] = []
    command = [kubernetes_expand(str(x), env, unresolved) for x in container.get("command") or []]
    args = [kubernetes_expand(str(x), env, unresolved) for x in container.get("args") or []]
    notes: list[str] = []
    if not command:
        entry = image_entrypoint(str(container.get("image", "")), image_entrypoints)
        if entry is None:
            return None
        command = list(entry)
        notes.append(f"no command: image entrypoint {' '.join(entry)!r} assumed")
    cfg = parse_argv(command + args, env)
    if cfg is None:
        return None
    merged_unresolved = tuple(dict.fromkeys([*unresolved, *cfg.unresolved_vars]))
    return ServeConfig(
        argv=cfg.argv, entrypoint=cfg.entrypoint, model=cfg.model,
        served_model_name=cfg.served_model_name, api_ports=cfg.api_ports, scheme=cfg.scheme,
        kv_transfer_config=cfg.kv_transfer_config,
        kv_offloading_size_gib=cfg.kv_offloading_size_gib,
        kv_offloading_backend=cfg.kv_offloading_backend,
        data_parallel_size_local=cfg.data_parallel_size_local, config_file=cfg.config_file,
        unresolved_vars=merged_unresolved, notes=tuple(notes) + cfg.notes, env=cfg.env,
        engines_per_port=cfg.engines_per_port,
    )
