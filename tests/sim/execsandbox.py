"""``pods/exec``: run a command for real in a pod's sandbox, with the pod's ports on localhost.

Each exec gets its own bubblewrap sandbox (tests/sim/sandbox.py ``pod_view_argv``: the pod's
filesystem view, system directories read-only, the container's volumes at their mountPaths with
subPath, the pod's /dev/shm) in its own network namespace, whose loopback bwrap brings up. The
container's env is the command's whole environment (``PATH`` defaults to the usual image PATH,
``HOSTNAME`` is the pod name, as a container runtime sets them); the argv runs as given, through
no shell.

So that ``localhost:PORT`` inside reaches the pod's servers, the sandbox does not exec the argv
directly: the real ``/usr/bin/python3`` (read-only) runs a small relay (:data:`RELAY_SCRIPT`) that

1. listens on ``127.0.0.1:PORT`` and ``[::1]:PORT`` for every port the pod serves (before the
   command starts, so there is no race);
2. forks and ``execvpe``'s the argv with the container env (PATH lookup in that env); when the
   exec itself fails it writes the reason worded as runc words it (``exec: "foo": executable
   file not found in $PATH``) to a file and exits 127;
3. forwards every accepted connection over a Unix socket bound into the sandbox to the
   simulator, prefixed by the port as 2 bytes big-endian; the simulator serves the bytes as
   HTTP to the pod runtime with transport ``exec`` (tests/sim/podhttp.py);
4. exits with the command's exit status (128 + signal for a killed command).

When the relay exits bwrap's pid namespace dies with it, so a backgrounded child cannot keep the
streams open.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .network import pump_sockets
from .podhttp import PodRequest, serve_in_thread
from .sandbox import DEFAULT_PATH, Bind, pod_view_argv

__all__ = ["ExecProcess", "ExecSpec", "RELAY_SCRIPT", "exec_failure_message"]

SANDBOX_PYTHON = "/usr/bin/python3"
RUN_DIR = "/.sim/run"

RELAY_SCRIPT = r'''"""Simulator exec relay: the pod's ports on localhost, then the command (see execsandbox.py)."""
import json
import os
import socket
import sys
import threading


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def relay(conn, port, path):
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
        up.sendall(port.to_bytes(2, "big"))
    except OSError:
        conn.close()
        up.close()
        return
    t = threading.Thread(target=pump, args=(up, conn), daemon=True)
    t.start()
    pump(conn, up)
    t.join()
    conn.close()
    up.close()


def accept_loop(listener, port, path):
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=relay, args=(conn, port, path), daemon=True).start()


def failure(argv0, env, exc):
    if "/" not in argv0:
        return 'exec: "%s": executable file not found in $PATH' % argv0
    import errno
    if exc.errno == errno.ENOENT:
        return 'exec: "%s": stat %s: no such file or directory' % (argv0, argv0)
    if exc.errno == errno.EACCES:
        return 'exec: "%s": permission denied' % argv0
    return 'exec: "%s": %s' % (argv0, exc.strerror or exc)


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    listeners = []
    for port in cfg["ports"]:
        for fam, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            try:
                s = socket.socket(fam, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if fam == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind((host, port))
                s.listen(128)
                listeners.append((s, port))
            except OSError:
                pass
    argv, env = cfg["argv"], cfg["env"]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.chdir(cfg.get("cwd") or "/")
        except OSError:
            pass
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            os.write(w, failure(argv[0], env, exc).encode())
        os._exit(127)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    if chunks:
        with open(cfg["error"], "wb") as f:
            f.write(b"".join(chunks))
    for s, port in listeners:
        threading.Thread(target=accept_loop, args=(s, port, cfg["socket"]), daemon=True).start()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    sys.stdout.flush()
    os._exit(code if code >= 0 else 128 - code)


main()
'''


def exec_failure_message(reason: str, exec_id: str) -> str:
    """The error containerd + runc give the kubelet when starting an exec fails (the kubelet
    prefixes ``error executing command in container: ``; kubelet
    ``pkg/kubelet/cri/streaming/remotecommand/exec.go``), e.g. for ``reason``
    ``exec: "foo": executable file not found in $PATH``:
    ``failed to exec in container: failed to start exec "<id>": OCI runtime exec failed: exec
    failed: unable to start container process: exec: "foo": executable file not found in $PATH:
    unknown``."""
    return (f'failed to exec in container: failed to start exec "{exec_id}": OCI runtime exec '
            f"failed: exec failed: unable to start container process: {reason}: unknown")


@dataclass
class ExecSpec:
    """One exec: ``argv`` as given (non-empty), the container's ``env``, ``binds``
    (tests/sim/sandbox.py ``volume_binds``), the pod's ``shm_dir``, ``hostname`` (the pod name),
    the pod's served ``ports`` and ``request`` (the runtime's ``request``; None: nothing
    answers), ``workdir`` (the container's ``workingDir``, default /), ``connect`` (a real
    server's runtime: ``connect(port)`` gives a TCP connection to it, carried byte for byte
    instead of being served as HTTP; tests/sim/realservers.py)."""

    argv: list[str]
    env: dict[str, str]
    binds: list[Bind]
    shm_dir: Path
    hostname: str
    ports: list[int] = field(default_factory=list)
    request: PodRequest | None = None
    workdir: str = "/"
    connect: Callable[[int], socket.socket | None] | None = None


class ExecProcess:
    """A running exec: ``start()`` launches bubblewrap with pipes (``proc.stdin`` only when
    ``stdin`` was asked for, ``proc.stdout``, ``proc.stderr``); ``finish()`` after the process
    exited gives ``(exit_code, exec_failure)`` where ``exec_failure`` is runc's reason when the
    argv could not be started (then the exit code means nothing); ``kill()`` ends it;
    ``cleanup()`` removes the run directory. Raises ``OSError`` from ``start()`` when bubblewrap
    cannot be run."""

    def __init__(self, spec: ExecSpec, *, stdin: bool) -> None:
        self.spec = spec
        self.want_stdin = stdin
        # A short host path: a Unix socket path must fit in 108 bytes.
        self.run_dir = Path(tempfile.mkdtemp(prefix="kvx-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._listener: socket.socket | None = None
        self._closed = False

    def _command(self) -> list[str]:
        spec = self.spec
        env = dict(spec.env)
        env.setdefault("PATH", DEFAULT_PATH)
        env.setdefault("HOSTNAME", spec.hostname)
        env.setdefault("HOME", "/root")
        cfg = {"argv": spec.argv, "env": env, "ports": sorted(set(spec.ports)),
               "socket": f"{RUN_DIR}/relay.sock", "error": f"{RUN_DIR}/exec-error",
               "cwd": spec.workdir or "/"}
        (self.run_dir / "config.json").write_text(json.dumps(cfg))
        (self.run_dir / "relay.py").write_text(RELAY_SCRIPT)
        cmd = pod_view_argv(spec.binds, spec.shm_dir)
        cmd += ["--bind", str(self.run_dir), RUN_DIR, "--hostname", spec.hostname[:63] or "pod",
                "--chdir", "/", "--clearenv",
                "--", SANDBOX_PYTHON, "-I", "-S", f"{RUN_DIR}/relay.py",
                f"{RUN_DIR}/config.json"]
        return cmd

    def start(self) -> None:
        """Bind the relay socket, then launch the sandbox."""
        if self.spec.request is not None and self.spec.ports:
            ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            ls.bind(str(self.run_dir / "relay.sock"))
            ls.listen(64)
            self._listener = ls
            threading.Thread(target=self._accept, name="sim-exec-relay", daemon=True).start()
        self.proc = subprocess.Popen(
            self._command(), stdin=subprocess.PIPE if self.want_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

    def _accept(self) -> None:
        ls = self._listener
        assert ls is not None
        request = self.spec.request
        assert request is not None
        while not self._closed:
            try:
                conn, _ = ls.accept()
            except OSError:
                return
            head = b""
            try:
                conn.settimeout(10)
                while len(head) < 2:
                    b = conn.recv(2 - len(head))
                    if not b:
                        break
                    head += b
            except OSError:
                pass
            if len(head) != 2:
                conn.close()
                continue
            conn.settimeout(None)
            port = int.from_bytes(head, "big")
            if self.spec.connect is not None:
                up = self.spec.connect(port)
                if up is None:
                    conn.close()
                    continue
                threading.Thread(target=pump_sockets, args=(conn, up), daemon=True,
                                 name=f"sim-exec-{port}").start()
                continue
            serve_in_thread(conn, request, port, "exec")

    def finish(self) -> tuple[int, str | None]:
        """``(exit code, exec failure reason or None)``; call after the process exited."""
        assert self.proc is not None
        code = self.proc.wait()
        err_file = self.run_dir / "exec-error"
        failure = err_file.read_text("utf-8", "replace") if err_file.exists() else None
        return code, failure

    def kill(self) -> None:
        """Kill the sandbox (its whole process group) if it still runs."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except OSError:
                pass

    def cleanup(self) -> None:
        """Stop relaying and remove the run directory."""
        self._closed = True
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass
        shutil.rmtree(self.run_dir, ignore_errors=True)
