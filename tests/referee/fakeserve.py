"""Serve one :class:`tests.sim.fakevllm.FakeVLLM` on a loopback port, through the same HTTP
layer the simulated pods use (``tests/sim/podhttp.py``), so the referee reads the fake's answers
exactly as the plugin would."""

from __future__ import annotations

import socket
import threading
from typing import Any

from tests.sim.fakevllm import FakeVLLM
from tests.sim.podhttp import serve_in_thread

__all__ = ["FakeServer"]


class FakeServer:
    """A listening socket on 127.0.0.1 whose connections are answered by ``fake``.

    Use as a context manager; :attr:`base` is ``http://127.0.0.1:PORT``.
    """

    def __init__(self, fake: FakeVLLM) -> None:
        self.fake = fake
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="referee-fake", daemon=True)

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def _request(self, port: int, method: str, path: str, query: str, headers: dict[str, str],
                 body: bytes, **kw: Any) -> Any:
        return self.fake.handle(method, path, query, headers, body, **kw)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            serve_in_thread(conn, self._request, self.fake.port, "referee")

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sock.close()
