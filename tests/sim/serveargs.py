"""The simulator's own minimal reading of a vLLM argv and of a routing sidecar's args.

Deliberately independent of the plugin's parser (the simulator checks the plugin). It reads an
argv the sandbox recorded (already word-split by the real shell), never a shell script.

Rules and their sources:
- Flag spelling: ``--flag value`` and ``--flag=value``; ``_`` and ``-`` are interchangeable in flag
  names (vLLM ``vllm/utils/argparse_utils.py::FlexibleArgumentParser``).
- ``--kv-transfer-config`` JSON, human-readable numbers inside it (``80g``: powers of 1000,
  ``80G``: powers of 1024, vLLM >= 0.20 ``engine/arg_utils.py``), dotted keys
  ``--kv-transfer-config.a.b v`` merged into one object (the dotted form wins over a full JSON),
  ``+`` suffix appends to a list (same parser).
- ``--kv-offloading-size <GiB>`` with ``--kv-offloading-backend native|lmcache`` (vLLM >= 0.11.2
  ``vllm/config/vllm.py::_post_init_kv_transfer_config``).
- API ports: ``--port`` (default 8000); with ``--data-parallel-multi-port-external-lb`` one API
  server per local DP rank on ``port + i`` for ``i in range(data_parallel_size_local)``;
  ``--data-parallel-supervisor-port`` is not an API port (llm-d wide-ep LWS manifest, fixture 06).
- Sidecar: ``--port``/``-port`` (8000), ``--vllm-port`` (8200; legacy image 8001),
  ``--data-parallel-size`` N (listens port..port+N-1, forwards to vllm-port+i),
  ``--secure-proxy`` (default true = TLS) (llm-d-inference-scheduler ``pkg/sidecar/proxy/options.go``).
- ``--config FILE`` (separate token only; ``--config=FILE`` is never expanded): the YAML file's
  top-level keys become flags placed after ``serve MODEL`` (first for the api_server module), so
  the command line wins; ``true`` -> ``--key``, ``false`` -> ``--no-key``, a list -> ``--key a b``,
  a mapping -> ``--key <JSON>``, else ``--key str(value)`` (vLLM 0.32.0
  ``vllm/utils/argparse_utils.py``, ``FlexibleArgumentParser._pull_args_from_config`` and
  ``load_config_file``). The file is read from the pod's volume by the caller (``read_file``).
- Kubernetes ``$(VAR)`` expansion of command/args (``$$`` escapes; an undefined variable stays as
  written), as ``k8s.io/kubernetes/third_party/forked/golang/expansion`` does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .connectorinfo import (
    ConnectorInfo,
    read_connectors,
)
from .images import image_entrypoint

__all__ = [
    "ConnectorInfo",
    "ServeArgs",
    "container_argv",
    "expand_human_numbers",
    "expand_k8s_vars",
    "human_readable_int",
    "parse_vllm_argv",
    "read_connectors",
    "vllm_args_of",
]

DEFAULT_MODEL = "Qwen/Qwen3-0.6B"


def expand_k8s_vars(text: str, env: dict[str, str]) -> str:
    """Expand Kubernetes ``$(VAR)`` references in a command/args string.

    ``$(NAME)`` with NAME in ``env`` -> its value; an undefined NAME stays ``$(NAME)``; ``$$`` ->
    ``$`` (so ``$$(NAME)`` gives the literal ``$(NAME)``); any other ``$`` is literal.
    Never raises.
    """
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "$" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append(text[i:])
                break
            name = text[i + 2:end]
            out.append(env[name] if name in env else text[i:end + 1])
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def container_argv(container: dict[str, Any], env: dict[str, str]) -> list[str] | None:
    """What a container execs: ``command`` + ``args`` after ``$(VAR)`` expansion.

    Without ``command`` the image's entrypoint (:func:`tests.sim.images.image_entrypoint`) is
    prepended to ``args``; None when there is no command and the image is unknown. Kubernetes
    rule: ``command`` replaces the ENTRYPOINT, ``args`` replaces CMD.
    """
    command = container.get("command") or []
    args = container.get("args") or []
    cmd = [expand_k8s_vars(str(a), env) for a in command]
    rest = [expand_k8s_vars(str(a), env) for a in args]
    if not cmd:
        entry = image_entrypoint(str(container.get("image") or ""))
        if entry is None:
            return None
        cmd = entry
    return cmd + rest


def human_readable_int(text: str) -> int | None:
    """vLLM's human-readable integer: ``k/m/g/t`` = 10^3..10^12 (decimals allowed, ``25.6k``),
    ``K/M/G/T`` = 2^10..2^40 (decimals rejected). Plain integers pass. None when not readable.

    Source: ``vllm/utils/argparse_utils.py::human_readable_int``.
    """
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT])", text.strip())
    if not m:
        try:
            return int(text.strip())
        except ValueError:
            return None
    number, suffix = m.group(1), m.group(2)
    if suffix.islower():
        scale: int = 1000 ** ("kmgt".index(suffix) + 1)
        return int(float(number) * scale)
    if "." in number:
        return None
    factor: int = 1024 ** ("KMGT".index(suffix) + 1)
    return int(number) * factor


_JSON_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_HUMAN_NUMBER = re.compile(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b")


def expand_human_numbers(text: str) -> str:
    """Expand bare human-readable numbers (``80g``) outside JSON strings, as vLLM >= 0.20 does
    before ``json.loads`` (``engine/arg_utils.py::_expand_json_human_readable_numbers``).
    A number that cannot be expanded (``1.5G``) is left as written."""

    def repl(m: re.Match[str]) -> str:
        value = human_readable_int(m.group(0))
        return m.group(0) if value is None else str(value)

    parts: list[str] = []
    pos = 0
    for s in _JSON_STRING.finditer(text):
        parts.append(_HUMAN_NUMBER.sub(repl, text[pos:s.start()]))
        parts.append(s.group(0))
        pos = s.end()
    parts.append(_HUMAN_NUMBER.sub(repl, text[pos:]))
    return "".join(parts)


def _loads_value(text: str) -> Any:
    """A dotted-key value: JSON, else human-readable int, else the string
    (``vllm/utils/argparse_utils.py::FlexibleArgumentParser``)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    number = human_readable_int(text)
    return text if number is None else number


@dataclass(frozen=True)
class ServeArgs:
    """What the simulator reads from a ``vllm serve`` / ``api_server`` argv.

    ``api_ports``: the HTTP ports the server listens on (one per local DP rank under
    ``--data-parallel-multi-port-external-lb``); ``dp_ranks``: the global DP rank of each of those
    ports (``--data-parallel-start-rank`` + i), empty without multi-port; ``model``: positional or
    ``--model``; ``served_model_name``: first ``--served-model-name`` or the model;
    ``kv_transfer_config``: the parsed JSON object or None; ``kv_config_error``: why it could not
    be parsed; ``kv_offloading_size`` in GiB; ``tls``: ``--ssl-certfile`` given (HTTPS);
    ``engines``: the engines (DP ranks) behind each API port: ``--data-parallel-size`` under
    vLLM's internal load balancing (one API server over every rank), the local ranks under
    ``--data-parallel-hybrid-lb``, 1 under external load balancing (a server per rank);
    ``first_engine``: the DP rank of the first of them, which its ``/metrics`` ``engine`` label
    shows (``vllm/v1/engine/core_client.py``: ``engine_ranks_managed`` starts at the client's
    ``data_parallel_rank``: ``--data-parallel-start-rank`` under hybrid load balancing,
    ``--data-parallel-rank`` under external; 0 under internal load balancing). Under
    multi-port external load balancing each port's rank is in ``dp_ranks``. ``api_servers``:
    the API server processes behind the port: ``--api-server-count`` (``-asc``), else, for
    ``vllm serve``, the engines behind the port (0.32.0 ``vllm/entrypoints/cli/serve.py``:
    internal load balancing defaults it to ``--data-parallel-size``, hybrid to
    ``--data-parallel-size-local``, external and multi-port to 1); more than one puts
    prometheus_client in multiprocess mode.
    """

    argv: tuple[str, ...]
    port: int = 8000
    api_ports: tuple[int, ...] = (8000,)
    dp_ranks: tuple[int, ...] = ()
    model: str = DEFAULT_MODEL
    served_model_name: str = DEFAULT_MODEL
    kv_transfer_config: dict[str, Any] | None = None
    kv_config_error: str | None = None
    kv_offloading_size: float | None = None
    kv_offloading_backend: str | None = None
    tls: bool = False
    extra: dict[str, str] = field(default_factory=dict)
    engines: int = 1
    first_engine: int = 0
    api_servers: int = 1
    config_file: str | None = None
    config_error: str | None = None

    def connectors(self, env: dict[str, str] | None = None, version: str | None = None) -> list[ConnectorInfo]:
        """The server's connectors (see :func:`read_connectors`)."""
        return read_connectors(self.kv_transfer_config, self.kv_offloading_size, self.kv_offloading_backend, env,
                               version)

    def live_kv_transfer_config(self, env: dict[str, str] | None = None,
                                version: str | None = None) -> dict[str, Any] | None:
        """The ``kv_transfer_config`` the server runs with, as ``/server_info?config_format=json``
        shows it: ``--kv-transfer-config`` as given, else what ``--kv-offloading-size`` makes of it
        (``vllm/config/vllm.py::_post_init_kv_transfer_config``: ``native`` -> the CPU
        OffloadingConnector with ``cpu_bytes_to_use``, or SimpleCPUOffloadConnector where
        :func:`read_connectors` picks it; ``lmcache`` -> LMCacheConnectorV1 with a local CPU
        backend; ``kv_role`` ``kv_both``), else None."""
        if self.kv_transfer_config:
            return self.kv_transfer_config
        if self.kv_offloading_size is None:
            return None
        name = read_connectors(None, self.kv_offloading_size, self.kv_offloading_backend, env, version)[0].name
        if name == "LMCacheConnectorV1":
            extra: dict[str, Any] = {"lmcache.local_cpu": True, "lmcache.max_local_cpu_size": self.kv_offloading_size}
        else:
            extra = {"cpu_bytes_to_use": int(self.kv_offloading_size * 2**30)}
        return {"kv_connector": name, "kv_role": "kv_both", "kv_connector_extra_config": extra}


_PY = re.compile(r"^python(\d(\.\d+)?)?$")
_SERVER_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")


def vllm_args_of(argv: list[str]) -> tuple[list[str], bool] | None:
    """Split a recorded argv into (server args, positional model allowed), or None if not vLLM.

    Recognised: ``vllm serve ...`` (positional model), ``python[3] -m
    vllm.entrypoints.openai.api_server ...`` (``--model`` only), ``python[3] -m
    vllm.entrypoints.cli.main serve ...``. argv[0] may be a path.
    """
    if not argv:
        return None
    prog = argv[0].rsplit("/", 1)[-1]
    if prog == "vllm":
        if len(argv) >= 2 and argv[1] == "serve":
            return argv[2:], True
        return None
    if _PY.match(prog):
        rest = argv[1:]
        while rest and rest[0] in ("-u", "-B", "-O", "-E", "-s", "-I"):
            rest = rest[1:]
        if len(rest) >= 2 and rest[0] == "-m":
            if rest[1] in _SERVER_MODULES:
                return rest[2:], False
            if rest[1] == "vllm.entrypoints.cli.main" and len(rest) >= 3 and rest[2] == "serve":
                return rest[3:], True
        return None
    return None


def _norm(flag: str) -> str:
    return "--" + flag.lstrip("-").replace("_", "-")


def _yaml_flags(text: str) -> list[str]:
    """The flags a vLLM ``--config`` YAML file stands for (module docstring); raises ValueError."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"config file is not YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("config file is not a mapping")
    out: list[str] = []
    for key, value in data.items():
        if value is True:
            out.append(f"--{key}")
        elif value is False:
            out.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                out += [f"--{key}", *map(str, value)]
        elif isinstance(value, dict):
            out += [f"--{key}", json.dumps(value)]
        else:
            out += [f"--{key}", str(value)]
    return out


def parse_vllm_argv(argv: list[str], read_file: Any = None) -> ServeArgs | None:
    """Read a vLLM server argv (see module docstring). None when argv is not a vLLM server.

    ``read_file``: ``path -> text`` of a file in the pod (raising OSError when it is not there),
    used for ``--config FILE``; without it the file is not read (``config_error`` says so).
    Never raises: a malformed ``--kv-transfer-config`` leaves ``kv_transfer_config`` None and sets
    ``kv_config_error``; a non-integer ``--port`` keeps the default.
    """
    split = vllm_args_of(argv)
    if split is None:
        return None
    args, positional_ok = split
    args, config_file, config_error = _with_config_file(args, positional_ok, read_file)
    values, flags, dotted, positionals = _scan_flags(args)
    port = _int(values.get("--port"), 8000)
    model = values.get("--model") or (positionals[0] if positional_ok and positionals else DEFAULT_MODEL)
    served = values.get("--served-model-name") or model
    served = served.split()[0] if served.split() else model

    kv, kv_error = _kv_transfer_config(values, dotted)
    size: float | None = None
    if "--kv-offloading-size" in values:
        try:
            size = float(values["--kv-offloading-size"])
        except ValueError:
            size = None

    ports, ranks, engines, first, api_servers = _engine_layout(values, flags, port, positional_ok)

    return ServeArgs(
        engines=engines,
        first_engine=max(first, 0),
        api_servers=api_servers,
        argv=tuple(argv),
        port=port,
        api_ports=ports,
        dp_ranks=ranks,
        model=model,
        served_model_name=served,
        kv_transfer_config=kv,
        kv_config_error=kv_error,
        kv_offloading_size=size,
        kv_offloading_backend=values.get("--kv-offloading-backend"),
        tls=bool(values.get("--ssl-certfile")),
        extra={k: v for k, v in values.items() if k not in ("--kv-transfer-config",)},
        config_file=config_file,
        config_error=config_error,
    )


def _with_config_file(args: list[str], positional_ok: bool, read_file: Any
                      ) -> tuple[list[str], str | None, str | None]:
    """``(args, config file, config error)``: ``--config FILE`` replaced by the flags of the YAML
    file (:func:`_yaml_flags`), placed after a positional model as vLLM does."""
    config_file: str | None = None
    config_error: str | None = None
    if "--config" in args:
        at = args.index("--config")
        config_file = args[at + 1] if at + 1 < len(args) else None
        rest = args[:at] + args[at + 2:]
        try:
            if config_file is None or read_file is None:
                raise ValueError("config file not read")
            if config_file.rsplit(".", 1)[-1] not in ("yaml", "yml"):
                raise ValueError("config file must be .yaml or .yml")
            extra = _yaml_flags(read_file(config_file))
        except (OSError, ValueError) as exc:
            config_error = str(exc)
            extra = []
        if positional_ok and rest and not rest[0].startswith("-"):
            args = [rest[0], *extra, *rest[1:]]
        else:
            args = [*extra, *rest]
    return args, config_file, config_error


def _scan_flags(args: list[str]) -> tuple[dict[str, str], set[str], list[tuple[str, str]], list[str]]:
    """``(values, flags, dotted, positionals)`` of server args as argparse reads them: flag values
    by normalised name, valueless flags, ``--kv-transfer-config.<key>`` parts in order, and the
    positional arguments."""
    values: dict[str, str] = {}
    flags: set[str] = set()
    dotted: list[tuple[str, str]] = []
    positionals: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("-") and len(tok) > 1 and not _is_number(tok):
            if "=" in tok:
                name, value = tok.split("=", 1)
                has_value = True
            else:
                name, value, has_value = tok, "", False
            head, _, sub = name.partition(".")
            key = _norm(head)
            nxt = args[i + 1] if i + 1 < len(args) else None
            takes_next = not has_value and nxt is not None and (not nxt.startswith("-") or _is_number(nxt))
            if sub:
                if not has_value and takes_next:
                    value, has_value = str(nxt), True
                    i += 1
                if key == "--kv-transfer-config":
                    dotted.append((sub, value))
            elif has_value:
                values[key] = value
            elif key in _BOOL_FLAGS or not takes_next:
                flags.add(key)
            elif key in _NARGS_PLUS or (key not in ("--numa-bind", "--kv-cache-dtype") and len(key) > 4
                                        and any(f.startswith(key) for f in _NARGS_PLUS)):
                # argparse gives an nargs="+" flag every token up to the next "-"-prefixed one,
                # so a positional model written after it is the flag's value
                taken: list[str] = []
                while i + 1 < len(args) and (not args[i + 1].startswith("-") or _is_number(args[i + 1])):
                    taken.append(args[i + 1])
                    i += 1
                values[key] = " ".join(taken)
            else:
                values[key] = str(nxt)
                i += 1
        else:
            positionals.append(tok)
        i += 1
    return values, flags, dotted, positionals


def _kv_transfer_config(values: dict[str, str], dotted: list[tuple[str, str]]
                        ) -> tuple[dict[str, Any] | None, str | None]:
    """``(kv_transfer_config, error)`` from ``--kv-transfer-config`` JSON or its dotted parts."""
    kv: dict[str, Any] | None = None
    kv_error: str | None = None
    raw = values.get("--kv-transfer-config")
    if dotted:
        kv = {}
        for sub, value in dotted:
            _set_dotted(kv, sub, _loads_value(value))
    elif raw is not None:
        try:
            loaded = json.loads(expand_human_numbers(raw))
            if isinstance(loaded, dict):
                kv = loaded
            else:
                kv_error = "kv-transfer-config is not a JSON object"
        except ValueError as exc:
            kv_error = f"kv-transfer-config is not JSON: {exc}"
    return kv, kv_error


def _engine_layout(values: dict[str, str], flags: set[str], port: int, positional_ok: bool
                   ) -> tuple[tuple[int, ...], tuple[int, ...], int, int, int]:
    """``(API ports, DP ranks, engines, first engine, API servers)`` of the data-parallel flags."""
    ports: tuple[int, ...] = (port,)
    ranks: tuple[int, ...] = ()
    if "--data-parallel-multi-port-external-lb" in flags or "--data-parallel-multi-port-external-lb" in values:
        dp = _int(values.get("--data-parallel-size") or values.get("--dp"), 1)
        local = _int(values.get("--data-parallel-size-local") or values.get("--dpl"), dp)
        start = _int(values.get("--data-parallel-start-rank") or values.get("--dpr"), 0)
        local = max(1, local)
        ports = tuple(port + k for k in range(local))
        ranks = tuple(start + k for k in range(local))

    dp_all = max(1, _int(values.get("--data-parallel-size") or values.get("--dp"), 1))
    dp_local = max(1, _int(values.get("--data-parallel-size-local") or values.get("--dpl"), dp_all))
    external = any(f in flags or f in values for f in ("--data-parallel-multi-port-external-lb",
                                                       "--data-parallel-external-lb"))
    hybrid = "--data-parallel-hybrid-lb" in flags or "--data-parallel-hybrid-lb" in values
    engines = 1 if external else dp_local if hybrid else dp_all
    first = 0
    if hybrid:
        first = _int(values.get("--data-parallel-start-rank") or values.get("-dpr"), 0)
    elif external:
        first = _int(values.get("--data-parallel-rank") or values.get("-dpn"), 0)

    api_servers = _int(values.get("--api-server-count") or values.get("-asc"), 0)
    if api_servers <= 0:
        api_servers = engines if positional_ok else 1
    return ports, ranks, engines, first, api_servers


# vLLM 0.32.0's nargs="+" serve flags (vllm/engine/arg_utils.py, vllm/entrypoints/openai/cli_args.py).
_NARGS_PLUS = {
    "--allowed-media-domains", "--api-key", "--collect-detailed-traces", "--cpu-offload-params",
    "--cudagraph-capture-sizes", "--ignore-patterns", "--kv-cache-dtype-skip-layers",
    "--logits-processors", "--lora-modules", "--lora-target-modules", "--numa-bind-cpus",
    "--numa-bind-nodes", "--offload-params", "--served-model-name",
    "--sleep-preserve-parameter-names",
}


# Flags that never take a value (so the next token is not eaten); only the ones that matter for
# finding the positional model and the values we read.
_BOOL_FLAGS = {
    "--data-parallel-multi-port-external-lb",
    "--data-parallel-external-lb",
    "--data-parallel-hybrid-lb",
    "--enable-expert-parallel",
    "--enforce-eager",
    "--trust-remote-code",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--disable-log-requests",
    "--enable-log-requests",
    "--disable-log-stats",
    "--enable-dbo",
    "--headless",
    "--no-disable-hybrid-kv-cache-manager",
    "--disable-hybrid-kv-cache-manager",
    "--enable-chunked-prefill",
    "--enable-auto-tool-choice",
    "--enable-sleep-mode",
}


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _int(text: str | None, default: int) -> int:
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        return default


def _set_dotted(target: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node = target
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    last = keys[-1]
    if last.endswith("+"):
        last = last[:-1]
        existing = node.get(last)
        if not isinstance(existing, list):
            existing = []
        existing.append(value)
        node[last] = existing
    else:
        node[last] = value


