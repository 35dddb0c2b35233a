"""Questions asked on a terminal before anything changes, that a SIGINT or SIGTERM ends at once.

``click.confirm`` and ``click.prompt`` read with ``input()``. Python runs a signal's handler in
the main thread between bytecodes only; a signal that lands just before the read blocks (or that
the kernel delivers to another thread, such as a worker of the ``kubernetes`` client's pool)
leaves the main thread blocked in ``read(2)`` until a line is typed, and a read that does return
``EINTR`` is retried (PEP 475). Here the answer is read with ``select`` on standard input and a
self-pipe that the interpreter's C-level signal handler writes to, whichever thread it runs in
(:func:`signal.set_wakeup_fd`): a signal wakes the ``select``, and the Python handler
(:func:`.signals.on_signal`) then runs in the main thread and raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
from collections.abc import Iterator, Sequence

import click

__all__ = ["ask_choice", "ask_yes_no"]


@contextlib.contextmanager
def _wakeup_pipe() -> Iterator[int | None]:
    """The read end of a pipe the interpreter writes a byte to on every signal (main thread
    only, else None), the previous wakeup fd restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    try:
        yield read_fd
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)


def _read_line() -> str:
    """One line of standard input, without its newline; a signal raises from its handler
    while this waits.

    Raises:
        click.Abort: end of input (^D) before a newline: nothing was answered.
    """
    fd = sys.stdin.fileno()
    data = b""
    with _wakeup_pipe() as wake:
        while True:
            ready, _, _ = select.select([fd] if wake is None else [fd, wake], [], [])
            if wake is not None and wake in ready:
                # a signal arrived: its Python handler runs at the next bytecode and raises
                # (signals.on_signal); if it returned, go on waiting for the answer
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake, 512):
                        pass
            if fd in ready:
                byte = os.read(fd, 1)  # one byte at a time: what follows the line stays unread
                if not byte:
                    raise click.Abort
                if byte == b"\n":
                    return data.decode(errors="replace").rstrip("\r")
                data += byte


def _ask(text: str) -> str:
    click.echo(text, nl=False, err=True)
    try:
        return _read_line().strip()
    finally:
        sys.stderr.flush()


def ask_yes_no(question: str) -> bool:
    """Ask ``question [y/N]:`` on stderr until the answer is y/yes or n/no (an empty answer is
    no), as ``click.confirm(question, default=False, err=True)`` asks.

    Raises:
        click.Abort: end of input; ``KeyboardInterrupt`` from the signal handler on a signal.
    """
    while True:
        answer = _ask(f"{question} [y/N]: ").lower()
        if answer in ("y", "yes"):
            return True
        if answer in ("", "n", "no"):
            return False
        click.echo("error: invalid input", err=True)


def ask_choice(question: str, choices: Sequence[str], default: str) -> str:
    """Ask ``question (a, b, c) [default]:`` on stderr until the answer is one of ``choices``
    (an empty answer is ``default``), as ``click.prompt`` with a ``click.Choice`` asks.

    Raises:
        click.Abort: end of input; ``KeyboardInterrupt`` from the signal handler on a signal.
    """
    while True:
        answer = _ask(f"{question} ({', '.join(choices)}) [{default}]: ") or default
        if answer in choices:
            return answer
        click.echo(f"error: {answer!r} is not one of {', '.join(repr(c) for c in choices)}.", err=True)
