"""``pods/portforward`` over a channel WebSocket (tests/sim/wsstream.py): each port's data and error
channel pair carries HTTP to the pod runtime (tests/sim/podhttp.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from .apibase import _Handler
from .apierrors import bad_request
from .network import pump_sockets
from .podhttp import serve_in_thread
from .resourcetypes import Obj
from .wsstream import V4, ChannelWebSocket, is_upgrade


class PortForwardHandler:
    """``pods/portforward`` (a mixin of :class:`tests.sim.server.SimServer`)."""

    def _portforward(self, h: _Handler, pod: Obj, params: dict[str, list[str]]) -> None:
        """``pods/portforward`` over a channel WebSocket (``v4.channel.k8s.io``, kubelet
        ``cri/streaming/portforward/websocket.go``): for the i-th port of ``ports`` channel 2i
        carries the connection's bytes and 2i+1 errors; each channel's first message is the port
        as 2 bytes little-endian. The data channel is one HTTP connection to the pod's port
        (tests/sim/podhttp.py, transport ``portforward``); a port nothing listens on gets the
        runtime's connection-refused message on its error channel."""
        name = pod["metadata"]["name"]
        ports = _forward_ports(params)
        rec = self._pod_runtime_for_stream(pod)
        if rec is None:
            raise bad_request(f'unable to upgrade connection: pod {name} is not running')
        if not is_upgrade(h.headers):
            raise bad_request("Upgrade request required")
        ws = ChannelWebSocket(h.connection)
        if ws.handshake(h.command, h.path, list(h.headers.items()),
                        [V4, "portforward.k8s.io"]) is None:
            return
        runtime = rec.runtime
        served: list[int] | None = None
        getter = getattr(runtime, "served_ports", None)
        if getter is not None:
            served = list(getter())
        locals_: dict[int, socket.socket] = {}
        fds: dict[int, Callable[[], bool]] = {}
        # fault: after this many bytes from the pod the connection drops, without a close frame
        cut = self._pod_faults(rec).get("portforward_cut")
        relayed = [0]

        for i, port in enumerate(ports):
            le = port.to_bytes(2, "little")
            ws.send(2 * i, le)
            ws.send(2 * i + 1, le)
            mine = _forward_socket(runtime, served, port)
            if mine is None:
                ws.send(2 * i + 1, _refused(port, rec.uid))
                continue
            locals_[i] = mine

            def pump(idx: int = i, s: socket.socket = mine) -> bool:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    return False
                ws.send(2 * idx, data)
                relayed[0] += len(data)
                if cut and relayed[0] >= cut:
                    self._cut_forward(h, ws, rec.uid, name)
                    return False
                return True
            fds[mine.fileno()] = pump

        def on_message(channel: int, data: bytes) -> None:
            s = locals_.get(channel // 2)
            if channel % 2 == 0 and s is not None and data:
                try:
                    s.sendall(data)
                except OSError:
                    pass

        try:
            ws.run(fds, on_message, lambda: False, time.monotonic() + self.portforward_timeout)
            ws.close()
        finally:
            for s in locals_.values():
                try:
                    s.close()
                except OSError:
                    pass

    def _cut_forward(self, h: _Handler, ws: ChannelWebSocket, uid: str, name: str) -> None:
        """The ``portforward_cut`` fault: counted, and the connection dropped without a close frame."""
        with self._fault_lock:
            st = self._pod_fault_state.setdefault(uid, {"pod": name})
            st["cut_forwards"] = st.get("cut_forwards", 0) + 1
        ws.closed = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _forward_socket(runtime: Any, served: list[int] | None, port: int) -> socket.socket | None:
    """The simulator's end of a forwarded connection to ``port`` of the pod: a real server's TCP
    connection relayed byte for byte, else an HTTP server (tests/sim/podhttp.py) in a thread; None
    when nothing listens there (``served``: the runtime's ports, None: every port)."""
    listening = runtime is not None and (served is None or port in served)
    upstream = None
    connect = getattr(runtime, "connect", None)
    if listening and connect is not None:
        # a real server: the data channel is its TCP connection, byte for byte
        upstream = connect(port)
        listening = upstream is not None
    if not listening:
        return None
    assert runtime is not None
    mine, theirs = socket.socketpair()
    if upstream is not None:
        threading.Thread(target=pump_sockets, args=(theirs, upstream), daemon=True,
                         name=f"sim-pf-{port}").start()
    else:
        serve_in_thread(theirs, runtime.request, port, "portforward")
    return mine


def _forward_ports(params: dict[str, list[str]]) -> list[int]:
    """The ``ports`` of a port-forward request (repeated or comma-separated); 400 for a bad or
    missing one."""
    ports: list[int] = []
    for value in params.get("ports") or []:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isdigit() or not 0 < int(part) < 65536:
                raise bad_request(f"invalid port: {part!r}")
            ports.append(int(part))
    if not ports:
        raise bad_request("query parameter \"port\" is required")
    return ports


def _refused(port: int, uid: str) -> bytes:
    """The error-channel message of a port nothing listens on, as the container runtime words it."""
    sandbox_id = uid.replace("-", "") * 2
    return (
        f"error forwarding port {port} to pod {sandbox_id}, uid : failed to execute "
        f'portforward in network namespace "/var/run/netns/cni-{uid}": failed '
        f'to connect to localhost:{port} inside namespace "{sandbox_id}", IPv4: dial '
        f"tcp4 127.0.0.1:{port}: connect: connection refused IPv6 dial tcp6 "
        f"[::1]:{port}: connect: connection refused "
    ).encode()
