"""``pods/exec`` over a channel WebSocket (tests/sim/wsstream.py): the argv run in the pod's sandbox
(tests/sim/execsandbox.py), its exit reported as a ``Status`` on the error channel."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from .apibase import (
    _Handler,
    _send_status,
    _truthy,
)
from .apierrors import bad_request
from .clusterbase import PodRecord
from .execsandbox import ExecProcess, ExecSpec, exec_failure_message
from .resourcetypes import Obj
from .wsstream import CLOSE_CHANNEL, V4, V5, ChannelWebSocket, is_upgrade


class ExecHandler:
    """``pods/exec`` (a mixin of :class:`tests.sim.server.SimServer`)."""

    # ---------------- exec and port-forward (WebSocket) ----------------
    def _pod_runtime_for_stream(self, pod: Obj) -> PodRecord | None:
        md = pod["metadata"]
        status = pod.get("status") or {}
        rec = self.cluster.record_for(md.get("namespace", ""), md["name"])
        if status.get("phase") != "Running":
            return None
        return rec

    @staticmethod
    def _exec_status(code: int, failure: str | None, argv: list[str]) -> Obj:
        """The error-channel ``Status`` the kubelet writes (kubelet
        ``pkg/kubelet/cri/streaming/remotecommand/exec.go`` ``ServeExec``; the exit error text
        is containerd's ``error executing command %v, exit code %d``)."""
        if failure is not None:
            err = f"error executing command in container: {failure}"
            return {"metadata": {}, "status": "Failure",
                    "message": f"Internal error occurred: {err}", "reason": "InternalError",
                    "details": {"causes": [{"message": err}]}, "code": 500}
        if code == 0:
            return {"metadata": {}, "status": "Success"}
        argv_text = "[" + " ".join(argv) + "]"
        return {"metadata": {}, "status": "Failure",
                "message": "command terminated with non-zero exit code: error executing "
                           f"command {argv_text}, exit code {code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}

    def _exec(self, h: _Handler, pod: Obj, params: dict[str, list[str]]) -> None:
        """``pods/exec`` over a channel WebSocket (``v5``/``v4.channel.k8s.io``): validate as the
        API server does (``pkg/registry/core/pod/strategy.go`` ``ExecLocation``), upgrade, run
        the argv in the pod's sandbox (tests/sim/execsandbox.py), stream stdout/stderr, feed
        stdin, then write the exit ``Status`` on channel 3 and close."""
        name = pod["metadata"]["name"]
        argv = params.get("command") or []
        container = self._exec_container(pod, params)
        rec = self._pod_runtime_for_stream(pod)
        if rec is None:
            raise bad_request(f'unable to upgrade connection: container not found ("{container}")')
        if not is_upgrade(h.headers):
            # a plain request, or SPDY (kubectl's fallback), which is not served
            raise bad_request("Upgrade request required")
        want_stdin = _truthy((params.get("stdin") or [""])[-1])
        want_stdout = (params.get("stdout") or ["true"])[-1].lower() not in ("0", "false")
        want_stderr = (params.get("stderr") or ["true"])[-1].lower() not in ("0", "false")
        tty = _truthy((params.get("tty") or [""])[-1])
        ws = ChannelWebSocket(h.connection)
        if ws.handshake(h.command, h.path, list(h.headers.items()), [V5, V4]) is None:
            return
        cut = self._pod_faults(rec).get("exec_cut")
        if cut:
            with self._fault_lock:
                st = self._pod_fault_state.setdefault(rec.uid, {"pod": name})
                st["cut_execs"] = st.get("cut_execs", 0) + 1
        if cut == "before":
            ws.close()  # fault: the stream ends before anything ran, without a Status
            return
        view = None
        runtime = rec.runtime if rec is not None else None
        if runtime is not None and self.cluster.config.sandbox:
            getter = getattr(runtime, "exec_view", None)
            view = getter(container) if getter is not None else None
        if view is None:
            why = ("the simulator runs no commands (bubblewrap unavailable)"
                   if not self.cluster.config.sandbox else "the pod has no runtime")
            _send_status(ws, self._exec_status(0, why, argv))
            ws.close()
            return
        proc = ExecProcess(ExecSpec(argv=list(argv), env=view.env, binds=view.binds,
                                    shm_dir=view.shm_dir, hostname=name, ports=view.ports,
                                    request=runtime.request if runtime is not None else None,
                                    workdir=view.workdir,
                                    connect=getattr(runtime, "connect", None)), stdin=want_stdin)
        try:
            try:
                proc.start()
            except OSError as e:
                _send_status(ws, self._exec_status(0, f"cannot run bubblewrap: {e}", argv))
                ws.close()
                return
            outcome = self._exec_pump(ws, proc, want_stdout, want_stderr, tty)
            if outcome != "done":
                proc.kill()
                if outcome == "timeout":
                    _send_status(ws, self._exec_status(
                        0, f"command timed out after {self.exec_timeout:g}s", argv))
                ws.close()
                return
            code, failure = proc.finish()
            if cut == "after":
                ws.close()  # fault: the command ran, its output was sent, the Status never is
                return
            exec_id = rec.uid.replace("-", "") * 2
            _send_status(ws, self._exec_status(
                code, exec_failure_message(failure, exec_id) if failure else None, argv))
            ws.close()
        finally:
            _close_exec(proc)

    @staticmethod
    def _exec_container(pod: Obj, params: dict[str, list[str]]) -> str:
        """The container an exec names (``container``; the only one when left out), validated
        with the API server's words (400): a command is required, a name among several."""
        name = pod["metadata"]["name"]
        spec = pod.get("spec") or {}
        argv = params.get("command") or []
        if not argv:
            raise bad_request("you must specify at least 1 command")
        names = [str(c.get("name")) for c in spec.get("containers") or []]
        inits = [str(c.get("name")) for c in spec.get("initContainers") or []]
        container = (params.get("container") or [""])[-1]
        if not container:
            if len(names) == 1:
                container = names[0]
            else:
                msg = (f"a container name must be specified for pod {name}, choose one of: "
                       f"[{' '.join(names)}]")
                if inits:
                    msg += f" or one of the init containers: [{' '.join(inits)}]"
                raise bad_request(msg)
        if container not in names and container not in inits:
            raise bad_request(f"container {container} is not valid for pod {name}")
        return container

    def _exec_pump(self, ws: ChannelWebSocket, proc: ExecProcess, want_stdout: bool,
                   want_stderr: bool, tty: bool) -> str:
        """Stream the started command's stdout (channel 1) and stderr (2, or 1 under a tty) and
        feed it stdin (channel 0; closed on the close channel) until both outputs end and it
        exits (``"done"``), the client leaves, or ``exec_timeout`` passes (``"timeout"``)."""
        assert proc.proc is not None and proc.proc.stdout is not None
        assert proc.proc.stderr is not None
        popen = proc.proc
        out_fd, err_fd = popen.stdout.fileno(), popen.stderr.fileno()  # type: ignore[union-attr]
        open_fds = {out_fd, err_fd}

        def reader(fd: int, channel: int, keep: bool) -> Callable[[], bool]:
            def cb() -> bool:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    open_fds.discard(fd)
                    return False
                if keep:
                    ws.send(channel, data)
                return True
            return cb

        def on_message(channel: int, data: bytes) -> None:
            stdin = popen.stdin
            if channel == 0 and stdin is not None and data:
                try:
                    stdin.write(data)
                    stdin.flush()
                except OSError:
                    pass
            elif channel == CLOSE_CHANNEL and data[:1] == b"\x00" and stdin is not None:
                try:
                    stdin.close()
                except OSError:
                    pass

        fds = {out_fd: reader(out_fd, 1, want_stdout),
               err_fd: reader(err_fd, 1 if tty else 2, want_stderr)}
        outcome = ws.run(fds, on_message, lambda: not open_fds and popen.poll() is not None,
                         time.monotonic() + self.exec_timeout)
        return outcome


def _close_exec(proc: ExecProcess) -> None:
    """Kill an exec's command if still running, close its pipes, reap it, remove its files."""
    proc.kill()
    if proc.proc is not None:
        for f in (proc.proc.stdin, proc.proc.stdout, proc.proc.stderr):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        try:
            proc.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            pass
    proc.cleanup()
