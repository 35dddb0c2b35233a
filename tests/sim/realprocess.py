"""One real server process of a pod (tests/sim/realservers.py): its launch, health checks (HTTP
status, Redis PING), the relay of a port it cannot bind on the pod's address, and its stop."""

from __future__ import annotations

import http.client
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .network import pump_sockets

STOP_GRACE = 5.0


def _http_status(ip: str, port: int, path: str, timeout: float = 2.0) -> int | None:
    try:
        conn = http.client.HTTPConnection(ip, port, timeout=timeout)
        try:
            conn.request("GET", path)
            return conn.getresponse().status
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return None


def _redis_ping(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=2) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _running(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


class _PortRelay:
    """``ip:port`` -> ``127.0.0.1:target``: the manifest's port of a server that had to be
    moved to a free port (it binds 0.0.0.0)."""

    def __init__(self, ip: str, port: int, target: int) -> None:
        self.target = target
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((ip, port))
        self._sock.listen(64)
        threading.Thread(target=self._accept, daemon=True, name=f"sim-relay-{port}").start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                conn.close()
                continue
            up.settimeout(None)
            threading.Thread(target=pump_sockets, args=(conn, up), daemon=True).start()

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


@dataclass
class Launch:
    """How to run one real server: ``argv`` inside the sandbox, ``env`` (whole), ``ports`` it
    serves on the pod address (for port-forward, exec and the proxy), ``moved`` (manifest
    port -> the free port it really listens on, at 127.0.0.1), ``probe`` kind and port,
    ``extra_binds`` ``(host path, sandbox path)`` read-only, ``notes``."""

    kind: str
    container: str
    argv: list[str]
    env: dict[str, str]
    ports: list[int]
    probe: tuple[str, int, str] | None
    moved: dict[int, int] = field(default_factory=dict)
    extra_binds: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class RealServer:
    """One running real server (a bubblewrap sandbox). ``start()`` launches it, ``healthy()``
    asks its health, ``poll()`` restarts it after it exited (back-off 1..16 s), ``stop()``
    ends it (SIGTERM to its processes, SIGKILL after ``STOP_GRACE`` s). Thread-safe."""

    def __init__(self, launch: Launch, pod_ip: str, bwrap_prefix: list[str], log: Path) -> None:
        self.launch = launch
        self.pod_ip = pod_ip
        self.prefix = bwrap_prefix
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.exit_codes: list[int] = []
        self._lock = threading.Lock()
        self._next_start = 0.0
        self._stopped = False
        self._relays: list[_PortRelay] = []

    def start(self) -> None:
        """Launch (or relaunch) the sandbox, output appended to the log file."""
        with self._lock:
            if self._stopped:
                return
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab") as log:
                log.write(f"--- start {time.strftime('%H:%M:%S')}: "
                          f"{shlex.join(self.launch.argv)}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(
                    [*self.prefix, "--", *self.launch.argv], stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            if not self._relays:
                for port, target in self.launch.moved.items():
                    try:
                        self._relays.append(_PortRelay(self.pod_ip, port, target))
                    except OSError as e:
                        self.launch.notes.append(f"cannot relay {self.pod_ip}:{port}: {e}")

    def alive(self) -> bool:
        """True while the server's sandbox runs."""
        p = self.proc
        return p is not None and p.poll() is None

    def poll(self) -> None:
        """Restart a server that exited, after its back-off (kubelet ``CrashLoopBackOff``)."""
        p = self.proc
        if self._stopped or p is None or p.poll() is None:
            return
        now = time.monotonic()
        if self._next_start == 0.0:
            self.exit_codes.append(int(p.returncode))
            self._next_start = now + min(16.0, 2.0 ** min(self.restarts, 4))
            return
        if now >= self._next_start:
            self._next_start = 0.0
            self.restarts += 1
            self.start()

    def healthy(self) -> bool:
        """The server's own health answer (module docstring); False while it is not running."""
        if not self.alive():
            return False
        probe = self.launch.probe
        if probe is None:
            return True
        how, port, path = probe
        if how == "redis":
            return _redis_ping(self.pod_ip, port)
        if how == "tcp":
            try:
                with socket.create_connection((self.pod_ip, port), timeout=2):
                    return True
            except OSError:
                return False
        status = _http_status(self.pod_ip, port, path)
        if how == "http-any":
            return status is not None
        return status == 200

    def _sandbox_pids(self) -> list[int]:
        """Every process of the sandbox (same process group or pid namespace as bwrap)."""
        p = self.proc
        if p is None:
            return []
        try:
            ns = os.readlink(f"/proc/{p.pid}/ns/pid")
        except OSError:
            ns = None
        inner_ns = None
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                pgid = os.getpgid(pid)
                pns = os.readlink(f"/proc/{pid}/ns/pid")
            except OSError:
                continue
            if pgid == p.pid or (inner_ns is not None and pns == inner_ns):
                out.append(pid)
                if pns != ns:
                    inner_ns = pns
        return out

    def _comm(self, pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ""

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM every process of the sandbox except bubblewrap's own, wait up to ``grace``
        seconds, then SIGKILL the process group (bubblewrap's death takes its pid namespace,
        so nothing survives). Idempotent."""
        with self._lock:
            self._stopped = True
            for r in self._relays:
                r.close()
            p = self.proc
        if p is None:
            return
        if p.poll() is None:
            for pid in self._sandbox_pids():
                if self._comm(pid) != "bwrap":
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except OSError:
                        pass
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        left = self._sandbox_pids()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass
        # SIGKILL is asynchronous: return once every process of the sandbox is gone (or a
        # zombie waiting for its reaper), at most 5 s later
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_running(pid) for pid in left):
            time.sleep(0.05)

    def state(self) -> dict[str, Any]:
        """``kind``, ``container``, ``argv``, ``pid``, ``running``, ``restarts``,
        ``exit_codes``, ``ports``, ``moved_ports``, ``log``, ``notes``."""
        p = self.proc
        return {"kind": self.launch.kind, "container": self.launch.container,
                "argv": list(self.launch.argv), "pid": p.pid if p is not None else None,
                "running": self.alive(), "restarts": self.restarts,
                "exit_codes": list(self.exit_codes), "ports": list(self.launch.ports),
                "moved_ports": {str(k): v for k, v in self.launch.moved.items()},
                "log": str(self.log_path), "notes": list(self.launch.notes)}
