"""Pods that run to completion (a Job's pods): their containers' commands run for real.

A pod whose ``restartPolicy`` is ``Never`` or ``OnFailure`` and that has no vLLM container is a
batch pod (tests/sim/controllers.py decides). Its init containers run one after the other, then
its containers side by side, each as the kubelet would start it: the argv of ``command`` +
``args`` (``$(VAR)`` expanded, tests/sim/serveargs.py ``container_argv``) under bubblewrap in the
pod's filesystem view (tests/sim/sandbox.py ``pod_view_argv``: read-only system directories, the
container's volumes, a tmpfs /tmp) with exactly the container's resolved env. Unlike the
recorders that find what a vLLM pod serves, these sandboxes share the machine's network (every
address of the simulator is on the loopback), so a container reaches the API server at the
``KUBERNETES_SERVICE_HOST``/``PORT`` its env names, with the service account token mounted.

Each container's stdout and stderr go, merged, to its log (``GET .../pods/NAME/log``). An init
container that exits non-zero ends the pod (``Failed``); the pod is ``Succeeded`` when every
container exits 0. ``OnFailure`` is run as ``Never`` (a failed container is not restarted in
place; the Job controller makes a new pod while its ``backoffLimit`` allows). A run is bounded
by the pod's ``activeDeadlineSeconds`` (default 600 s), then killed (exit code 137).
"""

from __future__ import annotations

import datetime as _dt
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .sandbox import DEFAULT_PATH, pod_view_argv, volume_binds
from .serveargs import container_argv

__all__ = ["BatchRun", "ContainerExit", "is_batch_spec"]

DEFAULT_DEADLINE_S = 600.0


def is_batch_spec(spec: dict[str, Any]) -> bool:
    """True when a pod spec runs to completion (``restartPolicy`` ``Never`` or ``OnFailure``)."""
    return spec.get("restartPolicy") in ("Never", "OnFailure")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerExit:
    """How one container ended: ``exit_code`` (None: never started), kubelet's ``reason``
    (``Completed``, ``Error``, ``DeadlineExceeded``, ``StartError``), start and finish times."""

    name: str
    exit_code: int | None
    reason: str
    started_at: str
    finished_at: str
    message: str = ""


@dataclass
class BatchRun:
    """One batch pod's run. ``start()`` launches it on a thread; ``on_done(self)`` is called once
    every container has ended (``init_exits``, ``exits``, ``succeeded``). ``log(container)``
    reads a container's log so far."""

    name: str
    spec: dict[str, Any]
    env_for: Callable[[dict[str, Any]], dict[str, str]]
    volume_dirs: dict[str, Path]
    shm_dir: Path
    log_dir: Path
    on_done: Callable[[BatchRun], None]
    init_exits: list[ContainerExit] = field(default_factory=list)
    exits: list[ContainerExit] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    done: bool = False
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _stopped: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def succeeded(self) -> bool:
        """True when every container ran and exited 0."""
        return bool(self.exits) and all(e.exit_code == 0 for e in self.exits) and \
            len(self.exits) == len(self.spec.get("containers") or [])

    def log_path(self, container: str) -> Path:
        """Where ``container``'s merged stdout and stderr are kept."""
        return self.log_dir / f"{container}.log"

    def log(self, container: str) -> bytes:
        """The container's log so far (empty before it started)."""
        try:
            return self.log_path(container).read_bytes()
        except OSError:
            return b""

    def start(self) -> None:
        """Run the pod's containers on a daemon thread."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        threading.Thread(target=self._run, name=f"sim-batch-{self.name}", daemon=True).start()

    def stop(self) -> None:
        """Kill whatever still runs (the pod was deleted, the simulator stops)."""
        with self._lock:
            self._stopped = True
            procs = list(self._procs)
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass

    def _run(self) -> None:
        deadline = float(self.spec.get("activeDeadlineSeconds") or DEFAULT_DEADLINE_S)
        try:
            for c in self.spec.get("initContainers") or []:
                if c.get("restartPolicy") == "Always":
                    continue   # a native sidecar: not run here
                ex = self._run_one(c, deadline)
                self.init_exits.append(ex)
                if ex.exit_code != 0 or self._stopped:
                    return
            results: list[ContainerExit] = []
            threads = []
            for c in self.spec.get("containers") or []:
                t = threading.Thread(target=lambda c=c: results.append(self._run_one(c, deadline)),
                                     daemon=True)
                t.start()
                threads.append(t)
            for t in threads:
                t.join()
            order = [c.get("name") for c in self.spec.get("containers") or []]
            self.exits = sorted(results, key=lambda e: order.index(e.name))
        finally:
            self.done = True
            if not self._stopped:
                self.on_done(self)

    def _run_one(self, c: dict[str, Any], deadline: float) -> ContainerExit:
        name = str(c.get("name") or "")
        started = _now()
        env = self.env_for(c)
        argv = container_argv(c, env)
        with self.log_path(name).open("ab") as log:
            if not argv:
                log.write(b"sim: the container has no command and its image's entrypoint is unknown\n")
                return ContainerExit(name, 128, "StartError", started, _now(),
                                     "no command and an unknown image entrypoint")
            cmd = pod_view_argv(volume_binds(c, self.volume_dirs), self.shm_dir)
            # the machine's network (the simulator's addresses are loopback ones), own pid/ipc/uts
            cmd = [t for t in cmd if t not in ("--unshare-all", "--new-session")]
            cmd[1:1] = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
            full = dict(env)
            full.setdefault("PATH", DEFAULT_PATH)
            full.setdefault("HOSTNAME", self.name)
            full.setdefault("HOME", "/root")
            cmd += ["--dir", "/root", "--hostname", self.name[:63] or "pod",
                    "--chdir", str(c.get("workingDir") or "/"), "--clearenv"]
            for k, v in sorted(full.items()):
                if k and "=" not in k:
                    cmd += ["--setenv", k, v]
            cmd += ["--", *argv]
            with self._lock:
                if self._stopped:
                    return ContainerExit(name, None, "Error", started, _now())
                self.running.add(name)
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                self._procs.append(proc)
            try:
                code = proc.wait(timeout=deadline)
                reason = "Completed" if code == 0 else "Error"
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code, reason = 137, "DeadlineExceeded"
            finally:
                self.running.discard(name)
        return ContainerExit(name, code, reason, started, _now())
