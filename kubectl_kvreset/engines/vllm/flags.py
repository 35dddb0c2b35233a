"""vLLM's ``vllm serve`` flags: which take no value, which take many, and reading an argv into them.

Flags spelled with ``_`` or ``-``, ``--flag=value`` or ``--flag value``, vLLM's short aliases
(``-tp``, ``-dpl``, ``-O3``), argparse abbreviations of multi-value flags, dotted dict keys
(``--kv-transfer-config.kv_connector X``) and JSON dict values (:func:`walk_flags`,
:func:`merge_dotted`, :func:`decode_json_flag`); the last occurrence wins (:func:`last_value`).
Facts from vLLM's ``FlexibleArgumentParser`` in ``vllm/utils/argparse_utils.py``. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .humannum import expand_human_readable_json, human_readable_int
from .serveconfig import ServeCommandError

__all__ = [
    "BOOLEAN_FLAGS",
    "MULTI_VALUE_FLAGS",
    "ParsedFlags",
    "decode_json_flag",
    "int_flag",
    "last_value",
    "merge_dotted",
    "walk_flags",
]

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
MULTI_VALUE_FLAGS = frozenset({
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
    if name in MULTI_VALUE_FLAGS:
        return True
    return (name not in _PREFIX_FLAGS and name not in BOOLEAN_FLAGS and len(name) > 2
            and any(flag.startswith(name) for flag in MULTI_VALUE_FLAGS))


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
class ParsedFlags:
    """Raw result of walking vLLM's argv.

    Attributes:
        flags: normalised flag name -> its value per occurrence, in order (a multi-value flag's
            values joined by ``"\\0"``, others by a space; ``""`` for a flag without a value).
        dotted: ``(flag.path, value)`` of each dotted dict flag, in order (``"true"`` without a value).
        positionals: the arguments that are no flag's value, in order.
        config_eq_form: ``--config=FILE`` was written (vLLM does not expand that form).
    """

    flags: dict[str, list[str]] = field(default_factory=dict)
    dotted: list[tuple[str, str]] = field(default_factory=list)
    positionals: list[str] = field(default_factory=list)
    config_eq_form: bool = False

    def add(self, name: str, values: Sequence[str]) -> None:
        """Record one occurrence of ``--name`` with ``values`` (dotted names go to ``dotted``)."""
        if "." in name:
            self.dotted.append((name, values[0] if values else "true"))
        else:
            self.flags.setdefault(name, []).append(" ".join(values) if name not in
                                                   MULTI_VALUE_FLAGS else "\0".join(values))


def _flag_name(tok: str) -> tuple[str, bool, str]:
    """``(name, inline, value)`` of one flag token: its normalised long name, whether it carries
    its value after ``=``, and that value. ``--kv_offloading_size=8`` -> ``("kv-offloading-size",
    True, "8")``; vLLM's short aliases name their long flag (``-dpl 2`` -> ``data-parallel-size-local``)
    and ``-O3`` is ``--compilation-config=3``."""
    if tok.startswith("--"):
        raw_name, eq, inline = tok.partition("=")
        return _normalise_flag(raw_name), bool(eq), inline
    short, eq, inline = tok.partition("=")
    if short in _SHORT_FLAGS:
        return _SHORT_FLAGS[short], bool(eq), inline
    if short.startswith("-O") and len(short) > 2:
        return "compilation-config", True, short[2:]
    return short.lstrip("-"), bool(eq), inline


def _flag_values(args: Sequence[str], i: int, name: str) -> tuple[str, list[str], int]:
    """The values that follow flag ``args[i]`` (named ``name``, no ``=value``) as argparse gives
    them: ``(name, values, index of the last token used)``. A boolean flag takes none, a
    multi-value flag (or its abbreviation, then completed in ``name``) every following value
    token, any other flag the next value token when there is one."""
    tok = args[i]
    if name in BOOLEAN_FLAGS or name.startswith("no-") or tok in _SHORT_BOOLEAN:
        return name, [], i
    n = len(args)
    if tok.startswith("--") and _multi_value(name):
        name = next((f for f in sorted(MULTI_VALUE_FLAGS) if f.startswith(name)), name)
        values: list[str] = []
        while i + 1 < n and _is_value_token(args[i + 1]):
            values.append(args[i + 1])
            i += 1
        return name, values, i
    if i + 1 < n and _is_value_token(args[i + 1]):
        return name, [args[i + 1]], i + 1
    return name, [], i


def walk_flags(args: Sequence[str]) -> ParsedFlags:
    """Split vLLM's arguments (after the entrypoint words) into flags, dotted dict flags and
    positionals (everything after ``--`` is positional)."""
    parsed = ParsedFlags()
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            parsed.positionals.extend(args[i + 1:])
            break
        if tok.startswith("-") and not _is_value_token(tok):
            name, inline, value = _flag_name(tok)
            if name == "config" and inline:
                parsed.config_eq_form = True
            if inline:
                values = [value]
            else:
                name, values, i = _flag_values(args, i, name)
            parsed.add(name, values)
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


def merge_dotted(items: Sequence[tuple[str, str]], flag: str) -> dict[str, Any]:
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


def decode_json_flag(flag: str, text: str) -> dict[str, Any]:
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


def last_value(parsed: ParsedFlags, name: str) -> str | None:
    """The value of the last ``--name`` (argparse: the last occurrence wins), or None without one."""
    values = parsed.flags.get(name)
    return values[-1] if values else None


def int_flag(parsed: ParsedFlags, name: str, notes: list[str]) -> tuple[int | None, bool]:
    """(value, ok) of an int flag; a value holding an unexpanded ``$`` is noted, not raised."""
    raw = last_value(parsed, name)
    if raw is None:
        return None, True
    try:
        return int(raw), True
    except ValueError:
        if "$" in raw:
            notes.append(f"--{name} {raw!r} could not be resolved")
            return None, False
        raise ServeCommandError(f"--{name}: not an integer: {raw!r}") from None
