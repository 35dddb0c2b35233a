"""Which pods of a manifest run real servers (``--real-servers``, tests/sim/realservers.py) and what
the peers' CPU builds refuse: the peer of a container, the manifest checks, the flags of a real
vLLM."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from .argvflag import _flag_value
from .podspecs import is_vllm_container, pod_specs_of

PEER_NAMES = ("vllm", "redis", "lmcache", "mooncake", "sglang")


DP_OUTSIDE_FLAGS = ("--data-parallel-external-lb", "--data-parallel-hybrid-lb",
                    "--data-parallel-multi-port-external-lb", "--data-parallel-rank", "-dpr",
                    "--data-parallel-start-rank", "--data-parallel-address", "-dpa", "--headless")


LMCACHE_IN_PROCESS = ("LMCacheConnectorV1", "LMCacheConnectorV1Dynamic")


_ACCELERATOR_CONNECTORS = {
    "NixlConnector": "NIXL needs a GPU",
    "OffloadingConnector": "CPU offloading is only supported on CUDA-alike and XPU GPUs",
    "P2pNcclConnector": "NCCL needs a GPU",
    "MooncakeConnector": "Mooncake's transfer connector needs a GPU",
}


def _peers() -> Any:
    import tests.peers as peers
    return peers


def parse_real_servers(text: str | None) -> frozenset[str]:
    """``--real-servers`` value -> peer names. ``all`` = every installed peer; an explicit
    name must be installed. Raises ``ValueError`` naming an unknown or missing peer and
    ``make peers``."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    if not names:
        return frozenset()
    peers = _peers()
    out: set[str] = set()
    for n in names:
        if n == "all":
            out.update(p for p in PEER_NAMES if not peers.missing(p))
            continue
        if n not in PEER_NAMES:
            raise ValueError(f"--real-servers: unknown server {n!r} (choose from "
                             f"{', '.join(PEER_NAMES)} or all)")
        if peers.missing(n):
            raise ValueError(f"--real-servers: {n} is not installed (run make peers)")
        out.add(n)
    return frozenset(out)


def _venv_of(exe: str) -> Path:
    return Path(exe).parent.parent


def _base_prefix(venv: Path) -> Path | None:
    """The Python installation a venv was made from (``home`` in its pyvenv.cfg, one up)."""
    try:
        for line in (venv / "pyvenv.cfg").read_text().splitlines():
            k, _, v = line.partition("=")
            if k.strip() == "home":
                return Path(v.strip()).resolve().parent
    except OSError:
        pass
    return None


def _vllm_container(c: dict[str, Any]) -> bool:
    return is_vllm_container(c)


def real_kind(container: dict[str, Any], argv: list[str] | None) -> str | None:
    """The real server a container runs: ``redis``, ``mooncake-master``, ``mooncake-client``,
    ``lmcache-controller``, ``lmcache-worker``, ``lmcache-mp``, ``sglang``, ``sglang-router``,
    ``vllm``, or None."""
    from .realsglang import sglang_command

    sgl = sglang_command(argv)
    if sgl is not None:
        return sgl[0]
    words = [os.path.basename(a) for a in (argv or [])]
    text = " ".join(argv or [])
    image = str(container.get("image") or "").split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    if "redis-server" in words or (not container.get("command") and image in ("redis", "valkey")):
        return "redis"
    if "mooncake_master" in words:
        return "mooncake-master"
    if "mooncake_client" in words:
        return "mooncake-client"
    if "lmcache_controller" in words or "lmcache.v1.api_server" in text:
        return "lmcache-controller"
    if "lmcache.v1.standalone" in text:
        return "lmcache-worker"
    if "lmcache" in words and "server" in words[words.index("lmcache"):][:2]:
        return "lmcache-mp"
    if _vllm_container(container):
        return "vllm"
    return None


def peer_of(kind: str) -> str:
    """The ``--real-servers`` name of a server kind (``lmcache-mp`` -> ``lmcache``)."""
    return kind.split("-")[0]


def _without_flags(argv: list[str], *names: str) -> list[str]:
    """``argv`` without the ``--name V`` / ``--name=V`` forms of ``names``."""
    out, skip = [], False
    bare = {n.lstrip("-") for n in names}
    for tok in argv:
        if skip:
            skip = False
            continue
        stem = tok.lstrip("-").split("=", 1)[0]
        if tok.startswith("-") and stem in bare:
            skip = "=" not in tok
            continue
        out.append(tok)
    return out


def cpu_refusals(argv: list[str]) -> list[str]:
    """Why vLLM's CPU build cannot run this ``vllm serve`` argv: one message per refused flag,
    naming it (empty: it can). Source: vLLM ``vllm/platforms/cpu.py`` (CPU
    offloading and external DP fail on 0.32.0 CPU)."""
    out = []
    for names, what in ((("--tensor-parallel-size", "-tp"), "tensor parallel"),
                        (("--pipeline-parallel-size", "-pp"), "pipeline parallel")):
        v = _flag_value(argv, *names)
        if v is not None and v.isdigit() and int(v) > 1:
            out.append(f"{names[0]} {v}: {what} > 1 does not run on vLLM's CPU build")
    dp = _flag_value(argv, "--data-parallel-size", "-dp")
    if dp is not None and dp.isdigit() and int(dp) > 1:
        outside = [f for f in DP_OUTSIDE_FLAGS if any(t == f or t.startswith(f + "=") for t in argv)]
        local = _flag_value(argv, "--data-parallel-size-local", "-dpl")
        if local is not None and local != dp:
            outside.append("--data-parallel-size-local")
        if outside:
            out.append(f"--data-parallel-size {dp} with {' '.join(outside)}: only internal load balancing "
                       "(every engine behind one API server) runs on vLLM's CPU build")
    if any(t == "--enable-expert-parallel" or t.startswith("--enable-expert-parallel=")
           for t in argv):
        out.append("--enable-expert-parallel: expert parallel does not run on vLLM's CPU build")
    if _flag_value(argv, "--kv-offloading-size") is not None:
        out.append("--kv-offloading-size: CPU offloading is only supported on CUDA-alike and "
                   "XPU GPUs")
    raw = _flag_value(argv, "--kv-transfer-config")
    if raw:
        try:
            cfg = json.loads(raw)
        except ValueError:
            cfg = None
        names = []
        if isinstance(cfg, dict):
            names.append(str(cfg.get("kv_connector") or ""))
            extra = cfg.get("kv_connector_extra_config") or {}
            for sub in (extra.get("connectors") or []) if isinstance(extra, dict) else []:
                if isinstance(sub, dict):
                    names.append(str(sub.get("kv_connector") or ""))
        for n in names:
            if n in _ACCELERATOR_CONNECTORS:
                out.append(f"--kv-transfer-config kv_connector {n}: {_ACCELERATOR_CONNECTORS[n]}"
                           " (not on vLLM's CPU build)")
    return out


def _connector_names(ktc: Any, depth: int = 0) -> list[str]:
    """Every ``kv_connector`` a kv-transfer-config names (a MultiConnector's children too)."""
    if not isinstance(ktc, dict) or depth > 8:
        return []
    out = [str(ktc.get("kv_connector") or "")]
    extra = ktc.get("kv_connector_extra_config")
    for child in (extra.get("connectors") or []) if isinstance(extra, dict) else []:
        out += _connector_names(child, depth + 1)
    return [n for n in out if n]


def check_manifest_object(obj: dict[str, Any], real: frozenset[str]) -> None:
    """At load, with ``vllm`` among ``real``: raise ``ValueError`` naming the object, container
    and flag when a vLLM container's literal command/args cannot run on the CPU build."""
    if "vllm" not in real:
        return
    from .realsglang import sglang_command
    md = obj.get("metadata") or {}
    for spec in pod_specs_of(obj):
        for c in spec.get("containers") or []:
            if not isinstance(c, dict) or not _vllm_container(c):
                continue
            argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
            if sglang_command(argv) is not None:
                continue
            text = " ".join(argv)
            if len(argv) <= 3 and ("-c" in argv):   # a shell script: split it as the shell would
                try:
                    argv = shlex.split(text)
                except ValueError:
                    pass
            why = cpu_refusals(argv)
            if why:
                raise ValueError(f"{obj.get('kind')} {md.get('name')} container {c.get('name')}"
                                 f": {why[0]}; use a manifest valid on the CPU build for "
                                 "--real-servers vllm")
