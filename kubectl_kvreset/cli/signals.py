"""SIGINT and SIGTERM stop a run the same way: the command line's cancel handle is set.

A SIGTERM is what ``timeout``, a CI runner cancelling a job, ``docker stop`` and the kubelet
send before a SIGKILL; Python's default for it ends the process at once, with nothing printed.
Here both signals go to :func:`on_signal`:

* before anything is changed (discovery, planning, a prompt) the first signal also raises
  ``KeyboardInterrupt`` in the main thread, as Python's own SIGINT handler does, so a blocking
  read or prompt ends at once (nothing was changed yet; the prompts of :mod:`.prompt` wait on a
  wakeup pipe, so a signal another thread receives ends them too); before a sub-command has
  started (options being parsed, its module imported) the process exits at once with the code
  below, printing ``[]`` first when the command line asks for json or yaml;
* inside :func:`changing` (the part of a command that changes things) it only sets the cancel
  handle: no new call starts, calls in flight are waited for (up to 40 s after SIGINT, up to
  :data:`TERM_INFLIGHT_BOUND_S` after SIGTERM), and the command prints the rows of what was
  done;
* a second signal stops the wait for calls in flight: the rows of what is known are printed
  (a call still in flight says ``unknown: interrupted in flight``) and the process exits within
  :data:`SECOND_SIGNAL_EXIT_S`, however busy it is;
* a third signal ends the process at once, with one line on stderr and no traceback.

The exit code is 130 after SIGINT, 143 after SIGTERM (128 + the signal number, as shells
report a process the signal ended).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from ..pool import Cancel
from ..report import ExitCode

__all__ = ["TERM_INFLIGHT_BOUND_S", "changing", "command", "exit_code", "finish", "install", "on_signal", "signal_name",
           "stopped_word"]

#: How long calls in flight may finish after a SIGTERM, seconds: well inside the grace period
#: its senders give before SIGKILL (``docker stop``: 10 s; a pod's terminationGracePeriodSeconds:
#: 30 s by default), so the rows are printed before the process is killed.
TERM_INFLIGHT_BOUND_S = 5.0

#: After a second signal the process exits within this many seconds, rows printed or not.
SECOND_SIGNAL_EXIT_S = 0.8


class _State:
    """What the handler needs: the cancel handle, the first signal, the depth of :func:`changing`."""

    cancel: Cancel | None = None
    signum: int | None = None
    changing = 0
    commands = 0
    count = 0
    output: str | None = None
    #: ends the process soon after a second signal (:func:`_exit_soon`; tests replace it)
    exit_soon: Callable[[int], None]


def install(cancel: Cancel, output: str | None = None) -> None:
    """Route SIGINT and SIGTERM to :func:`on_signal` for ``cancel`` (main thread only; a no-op
    elsewhere, where Python refuses handlers). ``output``: the ``-o`` format the command line
    names, if any; a signal before the sub-command has started prints ``[]`` for json/yaml."""
    _State.cancel, _State.signum, _State.changing, _State.commands, _State.count = cancel, None, 0, 0, 0
    _State.output = output
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(signum, on_signal)
        except ValueError:  # not the main thread (an embedding caller): keep its handlers
            return


def on_signal(signum: int, _frame: FrameType | None) -> None:
    """The handler of SIGINT and SIGTERM (see the module docstring). Never writes to a stream
    (a handler may run while the main thread is writing one)."""
    cancel = _State.cancel
    if cancel is None:
        raise KeyboardInterrupt
    if _State.signum is None or signum == signal.SIGTERM:
        _State.signum = signum
    _State.count += 1
    if _State.count >= 3:
        import os

        os.write(2, f"{stopped_word()} again: exiting now\n".encode())
        os._exit(int(exit_code()))
    if cancel.is_set():
        cancel.abandon()
        _State.exit_soon(int(exit_code()))
    else:
        cancel.set(inflight_bound_s=TERM_INFLIGHT_BOUND_S if signum == signal.SIGTERM else None)
    if _State.commands == 0:  # click would turn a KeyboardInterrupt into "Aborted!" and exit 1
        import os

        if _State.output in ("json", "yaml"):  # a script still reads a list, as with no rows
            os.write(1, b"[]\n")
        os.write(2, f"{stopped_word()} ({signal_name()}) before anything was changed\n".encode())
        raise SystemExit(int(exit_code()))
    if _State.changing == 0:
        raise KeyboardInterrupt


def _exit_soon(code: int) -> None:
    """End the process :data:`SECOND_SIGNAL_EXIT_S` from now unless it has ended by then (a
    daemon timer: the main thread goes on printing the rows meanwhile)."""

    def stop() -> None:
        import os

        flush()
        os._exit(code)

    timer = threading.Timer(SECOND_SIGNAL_EXIT_S, stop)
    timer.daemon = True
    timer.start()


_State.exit_soon = staticmethod(_exit_soon)


class _Depth:
    """A context manager counting how deep the main thread is in one kind of block. A class,
    not ``contextlib.contextmanager``: that one assigns ``__traceback__`` to an exception passing
    through, which the frozen dataclass errors of ``kube`` refuse."""

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def __enter__(self) -> None:
        setattr(_State, self.attr, getattr(_State, self.attr) + 1)

    def __exit__(self, *exc: object) -> None:
        setattr(_State, self.attr, getattr(_State, self.attr) - 1)


def command() -> _Depth:
    """The run of a sub-command (its error handling maps ``KeyboardInterrupt`` to the exit code)."""
    return _Depth("commands")


def changing() -> _Depth:
    """The block of a command that changes things: a signal inside it only sets the cancel
    handle, so the command goes on to print the rows of what was done."""
    return _Depth("changing")


def exit_code() -> ExitCode:
    """The exit code of a stopped run: 143 after a SIGTERM, else 130."""
    return ExitCode.TERMINATED if _State.signum == signal.SIGTERM else ExitCode.INTERRUPTED


def stopped_word() -> str:
    """``terminated`` after SIGTERM, else ``interrupted``."""
    return "terminated" if _State.signum == signal.SIGTERM else "interrupted"


def signal_name() -> str:
    """``SIGTERM`` or ``SIGINT`` (the signal that stopped the run), for messages."""
    return "SIGTERM" if _State.signum == signal.SIGTERM else "SIGINT"


def flush() -> None:
    """Flush stdout and stderr (the rows must be out before a SIGKILL that may follow a SIGTERM)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def finish(code: int) -> NoReturn:
    """Exit with ``code`` once stdout and stderr are flushed. After a cancel that left calls
    running (abandoned in flight, each still bounded by its own timeout), the process does not
    wait for their threads, as the interpreter's exit would: the ``atexit`` functions run (the
    ``kubernetes`` client removes its temporary certificate files there), then the process ends."""
    flush()
    cancel = _State.cancel
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive() and not t.daemon]
    if cancel is not None and cancel.is_set() and others:
        import atexit
        import os

        atexit._run_exitfuncs()
        flush()
        os._exit(code)
    sys.exit(code)
