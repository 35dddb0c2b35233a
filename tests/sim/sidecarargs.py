"""The args of the llm-d routing sidecar (tests/sim/sidecar.py) as the sidecar's Go flag parsing
reads them."""

from __future__ import annotations

from dataclasses import dataclass

from .images import is_legacy_sidecar_image
from .serveargs import _int


@dataclass(frozen=True)
class SidecarArgs:
    """The routing sidecar's listening setup.

    ``ports``: ``port + i`` for i in range(data_parallel_size); ``vllm_ports``: the vLLM port each
    forwards to (``vllm_port + i``); ``secure``: TLS on the sidecar ports (``--secure-proxy``,
    default true). Source: llm-d-inference-scheduler ``pkg/sidecar/proxy/options.go``,
    ``data_parallel.go``.
    """

    port: int
    vllm_port: int
    dp_size: int
    secure: bool

    @property
    def ports(self) -> tuple[int, ...]:
        """Listening ports, one per DP rank."""
        return tuple(self.port + i for i in range(self.dp_size))

    @property
    def vllm_ports(self) -> tuple[int, ...]:
        """vLLM ports the listening ports forward to, index-aligned with :attr:`ports`."""
        return tuple(self.vllm_port + i for i in range(self.dp_size))


def _go_bool(text: str) -> bool | None:
    low = text.lower()
    if low in ("1", "t", "true"):
        return True
    if low in ("0", "f", "false"):
        return False
    return None


def parse_sidecar_args(args: list[str], image: str = "") -> SidecarArgs:
    """Read the routing sidecar's Go-style flags (``-port=8000``, ``--port 8000``,
    ``--secure-proxy=false``, ``--data-parallel-size=8``). Unknown flags are ignored; bad numbers
    keep the default. The ``--vllm-port`` default is 8001 for the legacy
    ``llm-d-routing-sidecar`` image and 8200 otherwise (llm-d-router PR #1723).
    """
    values: dict[str, str] = {}
    bools: dict[str, bool] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("-") and len(tok) > 1:
            name, eq, value = tok.lstrip("-").partition("=")
            if eq:
                values[name] = value
            elif name in ("secure-proxy", "enable-ssrf-protection", "enable-prefiller-sampling",
                          "secure-serving"):
                bools[name] = True
            elif i + 1 < len(args) and not args[i + 1].startswith("-"):
                values[name] = args[i + 1]
                i += 1
            else:
                bools[name] = True
        i += 1
    secure = True
    if "secure-proxy" in values:
        parsed = _go_bool(values["secure-proxy"])
        secure = True if parsed is None else parsed
    elif "secure-proxy" in bools:
        secure = bools["secure-proxy"]
    default_vllm = 8001 if is_legacy_sidecar_image(image) else 8200
    return SidecarArgs(
        port=_int(values.get("port"), 8000),
        vllm_port=_int(values.get("vllm-port"), default_vllm),
        dp_size=max(1, _int(values.get("data-parallel-size"), 1)),
        secure=secure,
    )
