"""Where the real servers installed by ``make peers`` (tests/peers/install.sh) live.

Each peer is a virtual environment under ``$KVRESET_PEERS_DIR`` (default ``<repo>/.peers``);
an install counts only once its stamp file ``.kvreset-installed`` is written (the last step of
the install script), so a half-finished install is never used. Redis is Debian's
``redis-server`` on PATH.

Locator functions return the executable's path, or None when the peer is missing:
:func:`vllm`, :func:`lmcache`, :func:`lmcache_controller`, :func:`lmcache_python`,
:func:`mooncake_master`, :func:`mooncake_client`, :func:`mooncake_python`,
:func:`redis_server`, :func:`redis_cli`, :func:`sglang_python`. :func:`require` is the pytest helper: it skips a test
naming the missing peer and ``make peers``, or fails it under ``KVRESET_REQUIRE_PEERS=1`` (CI).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

__all__ = ["PEERS", "lmcache", "lmcache_controller", "lmcache_python", "missing",
           "mooncake_client", "mooncake_master", "mooncake_python", "peers_dir",
           "redis_cli", "redis_server", "require", "require_enabled", "sglang_python", "vllm"]

ROOT = Path(__file__).resolve().parents[2]
STAMP = ".kvreset-installed"


def peers_dir() -> Path:
    """``$KVRESET_PEERS_DIR``, else ``<repo>/.peers``."""
    return Path(os.environ.get("KVRESET_PEERS_DIR") or ROOT / ".peers")


def _venv_exe(venv: str, exe: str) -> str | None:
    base = peers_dir() / venv
    path = base / "bin" / exe
    if (base / STAMP).is_file() and os.access(path, os.X_OK):
        return str(path)
    return None


def vllm() -> str | None:
    """``.peers/vllm/bin/vllm``: vLLM 0.32.0's CPU build (run it with ``VLLM_TARGET_DEVICE=cpu``)."""
    return _venv_exe("vllm", "vllm")


def vllm_python() -> str | None:
    """The vLLM venv's Python (has ``tokenizers`` and ``transformers``)."""
    return _venv_exe("vllm", "python")


def lmcache() -> str | None:
    """``.peers/lmcache/bin/lmcache``: LMCache 0.5.6's CLI (``lmcache server``: the MP server)."""
    return _venv_exe("lmcache", "lmcache")


def lmcache_controller() -> str | None:
    """``.peers/lmcache/bin/lmcache_controller``: LMCache's controller."""
    return _venv_exe("lmcache", "lmcache_controller")


def lmcache_python() -> str | None:
    """The LMCache venv's Python (``-m lmcache.v1.standalone``: a worker without vLLM)."""
    return _venv_exe("lmcache", "python")


def mooncake_master() -> str | None:
    """``.peers/mooncake/bin/mooncake_master`` (Mooncake 0.3.13.post1, non-CUDA wheel)."""
    return _venv_exe("mooncake", "mooncake_master")


def mooncake_client() -> str | None:
    """``.peers/mooncake/bin/mooncake_client``: a segment holder for the master."""
    return _venv_exe("mooncake", "mooncake_client")


def mooncake_python() -> str | None:
    """The Mooncake venv's Python (``from mooncake.store import MooncakeDistributedStore``)."""
    return _venv_exe("mooncake", "python")


def sglang_python() -> str | None:
    """The SGLang venv's Python: SGLang 0.5.23 (``-m sglang.launch_server``, on torch's CPU build)
    and sglang-router 0.3.2 (``-m sglang_router.launch_router``)."""
    return _venv_exe("sglang", "python")


def redis_server() -> str | None:
    """Debian's ``redis-server`` on PATH."""
    return shutil.which("redis-server")


def redis_cli() -> str | None:
    """Debian's ``redis-cli`` on PATH."""
    return shutil.which("redis-cli")


PEERS: dict[str, Callable[[], str | None]] = {
    "vllm": vllm,
    "lmcache": lmcache_controller,
    "mooncake": mooncake_master,
    "redis": redis_server,
    "sglang": sglang_python,
}
"""Peer name (as ``--real-servers`` spells it) -> its main locator."""


def missing(*names: str) -> list[str]:
    """The peers among ``names`` (keys of :data:`PEERS`; ``all`` = every one) not installed.
    Raises ``KeyError`` for an unknown name."""
    wanted = list(PEERS) if "all" in names else list(names)
    return [n for n in wanted if PEERS[n]() is None]


def require_enabled() -> bool:
    """True under ``KVRESET_REQUIRE_PEERS=1`` (CI): a missing peer fails instead of skipping."""
    return os.environ.get("KVRESET_REQUIRE_PEERS", "") not in ("", "0")


def require(*names: str) -> None:
    """In a test: skip (or, under ``KVRESET_REQUIRE_PEERS=1``, fail) unless every peer in
    ``names`` is installed; the message names the missing ones and ``make peers``."""
    import pytest

    gone = missing(*names)
    if not gone:
        return
    where = peers_dir()
    msg = (f"real peer(s) not installed: {', '.join(gone)} (looked in {where} and PATH); "
           "run make peers")
    if require_enabled():
        pytest.fail(msg + " [KVRESET_REQUIRE_PEERS=1]")
    pytest.skip(msg)
