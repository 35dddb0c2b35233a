"""One live progress line on stderr while a command works, when stderr is a terminal and stdout
is a table (never in a pipe, never with ``-o json|yaml|name|jsonpath|custom-columns``):

    clear: 41/64 ports done, 2 busy (retrying, 14 s left), 1 restarting

The line is redrawn in place (carriage return, erase to the end of the line) on every event and
twice a second (the seconds left count down), cut to the terminal's width so it never wraps.
Other messages printed meanwhile (:func:`say`) erase it, are printed, and the line is drawn
again below them. Pure click and the standard library: no progress-bar package is needed for
one line.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import TextIO

from ..printers import MACHINE_FORMATS

__all__ = ["LiveLine", "active", "live_progress", "say"]

_ERASE = "\r\x1b[K"


class LiveLine:
    """The live line of one run (``verb``: the command's name), fed by :meth:`events` (the
    job's ``events`` callback: ``ports``, ``busy``, ``done``, ``restarting``, ``restarted``)."""

    def __init__(self, verb: str, stream: TextIO) -> None:
        self.verb = verb
        self.stream = stream
        self.total = 0
        self.done: set[str] = set()
        self.busy_until: dict[str, float] = {}
        self.restarting: set[str] = set()
        self.shown = ""
        self.lock = threading.RLock()
        self.closed = threading.Event()
        self.ticker = threading.Thread(target=self._tick, name="kvreset-progress", daemon=True)
        self.ticker.start()

    def events(self, kind: str, key: str, value: float | None) -> None:
        """One event of the job (:data:`kubectl_kvreset.job.execute.Events`); redraws."""
        with self.lock:
            if kind == "ports":
                self.total = int(value or 0)
            elif kind == "busy":
                self.busy_until[key] = time.monotonic() + float(value or 0.0)
            elif kind == "done":
                self.done.add(key)
                self.busy_until.pop(key, None)
            elif kind == "restarting":
                self.restarting.add(key)
            elif kind == "restarted":
                self.restarting.discard(key)
            self._draw()

    def text(self) -> str:
        """The line as it stands: ``clear: 41/64 ports done, 2 busy (retrying, 14 s left), 1 restarting``."""
        with self.lock:
            now = time.monotonic()
            parts = [f"{self.verb}: {len(self.done)}/{self.total} ports done"]
            busy = {k: t for k, t in self.busy_until.items() if k not in self.done}
            if busy:
                left = max(0, round(max(busy.values()) - now))
                parts.append(f"{len(busy)} busy (retrying, {left} s left)")
            if self.restarting:
                parts.append(f"{len(self.restarting)} restarting")
            return ", ".join(parts)

    def _draw(self) -> None:
        if self.closed.is_set():
            return
        width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)
        line = self.text()[:width]
        if line != self.shown:
            self._write(_ERASE + line)
            self.shown = line

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: stop drawing
            self.closed.set()

    def _tick(self) -> None:
        while not self.closed.wait(0.5):
            with self.lock:
                self._draw()

    def say(self, message: str) -> None:
        """Print ``message`` on its own line(s) above the live line."""
        with self.lock:
            if self.shown:
                self._write(_ERASE)
            self._write(message + "\n")
            self.shown = ""
            self._draw()

    def close(self) -> None:
        """Erase the line and stop drawing (the rows and the summary come next)."""
        with self.lock:
            if self.shown:
                self._write(_ERASE)
            self.shown = ""
            self.closed.set()
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None


_ACTIVE: LiveLine | None = None


def live_progress(output: str, verb: str) -> LiveLine | None:
    """A :class:`LiveLine` on stderr when stderr is a terminal and ``output`` (the ``-o`` value)
    is a table, else None. Messages of :func:`say` go above it while it is open."""
    global _ACTIVE
    if output.partition("=")[0] in MACHINE_FORMATS or not sys.stderr.isatty():
        return None
    _ACTIVE = LiveLine(verb, sys.stderr)
    return _ACTIVE


def active() -> LiveLine | None:
    """The open live line, if any."""
    return _ACTIVE


def say(message: str) -> bool:
    """Print ``message`` above the open live line; False when none is open (print it as usual)."""
    line = _ACTIVE
    if line is None or line.closed.is_set():
        return False
    line.say(message)
    return True
