"""One bounded parallel run, stopped through a cancel handle the caller owns.

No global state: the caller creates a :class:`Cancel`, passes it to every phase of a run, and
decides what a cancel means to the user (the command line prints a line on stderr and exits 130).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")
R = TypeVar("R")

#: How long calls already in flight may finish after a cancel (each is bounded on its own too).
INFLIGHT_BOUND_S = 40.0


class Cancel:
    """A cancel handle: once :meth:`set`, no new work of the run starts, and calls in flight
    are waited for up to :attr:`inflight_bound_s` seconds (:data:`INFLIGHT_BOUND_S` unless a
    :meth:`set` shortened it; :meth:`abandon` stops that wait too).

    ``on_cancel(in_flight)`` is called once, with the number of calls still running, when a
    parallel phase (or a wait, through :meth:`notify`) notices the cancel (the command line says
    so on stderr); it must not raise.
    Thread-safe: :meth:`set` may be called from a signal handler or another thread.
    """

    def __init__(self, on_cancel: Callable[[int], None] | None = None) -> None:
        self._set = threading.Event()
        self._abandon = threading.Event()
        self._told = False
        self.on_cancel = on_cancel
        self.inflight_bound_s = INFLIGHT_BOUND_S

    def set(self, *, inflight_bound_s: float | None = None) -> None:
        """Cancel the run (idempotent). ``inflight_bound_s`` (seconds) shortens the wait for
        the calls in flight, never lengthens it (a SIGTERM's sender waits less than a user)."""
        if inflight_bound_s is not None:
            self.inflight_bound_s = min(self.inflight_bound_s, inflight_bound_s)
        self._set.set()

    def is_set(self) -> bool:
        """True once the run was cancelled."""
        return self._set.is_set()

    def abandon(self) -> None:
        """Cancel, and stop waiting for the calls in flight."""
        self._set.set()
        self._abandon.set()

    def abandoned(self) -> bool:
        """True once :meth:`abandon` was called."""
        return self._abandon.is_set()

    def clear(self) -> None:
        """Reset the handle for a new run."""
        self._set.clear()
        self._abandon.clear()
        self._told = False
        self.inflight_bound_s = INFLIGHT_BOUND_S

    def notify(self, in_flight: int) -> None:
        """Call ``on_cancel(in_flight)`` the first time a phase notices the cancel; later calls
        do nothing."""
        if not self._told and self.on_cancel is not None:
            self._told = True
            self.on_cancel(in_flight)


class NotRun:
    """The result of an item :func:`parallel` did not run (or whose call did not finish)
    because the run was cancelled."""

    def __repr__(self) -> str:
        return "NOT_RUN"


NOT_RUN = NotRun()


class InFlight(NotRun):
    """The result of an item whose call had started when the run was cancelled and had not
    ended when the wait for it stopped: the request may have reached the server and been acted
    on, so a report must not say that nothing was done (unlike :data:`NOT_RUN`)."""

    def __repr__(self) -> str:
        return "IN_FLIGHT"


IN_FLIGHT = InFlight()


def _finished(f: Future[R]) -> bool:
    return f.done() and not f.cancelled() and f.exception() is None


def parallel(items: Iterable[T], fn: Callable[[T], R], max_workers: int,
             cancel: Cancel | None = None) -> list[R | NotRun]:
    """Apply ``fn`` to every item with at most ``max_workers`` calls in flight; results come
    back in the items' order. An exception raised by ``fn`` propagates (after the pool stops).

    Once ``cancel`` is set (by the caller, or here when Ctrl-C reaches the waiting thread as
    ``KeyboardInterrupt``), no new item starts: items not started get :data:`NOT_RUN`, calls in
    flight are waited for up to :attr:`Cancel.inflight_bound_s` (a second Ctrl-C, or
    :meth:`Cancel.abandon`, stops waiting) and those that did not finish get :data:`IN_FLIGHT`
    (their threads are left to end on their own bounds).
    """
    from concurrent.futures import ThreadPoolExecutor, wait  # not at import: --help stays fast

    items = list(items)
    cancel = cancel or Cancel()
    if not items:
        return []
    if cancel.is_set():
        return [NOT_RUN] * len(items)
    pool = ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(items))))
    # one event set by the last call to finish: waiting on every pending future at each wake-up
    # (concurrent.futures.wait) costs CPU quadratic in the number of items
    all_done = threading.Event()
    count_lock = threading.Lock()
    left = [len(items)]

    def one_done(_: Future[R]) -> None:
        with count_lock:
            left[0] -= 1
            if left[0] == 0:
                all_done.set()

    futures = [pool.submit(fn, item) for item in items]
    try:
        for f in futures:
            f.add_done_callback(one_done)
        while not all_done.is_set() and not cancel.is_set():
            all_done.wait(timeout=0.2)
        if all_done.is_set():
            pool.shutdown(wait=True)
            return [f.result() for f in futures]
    except KeyboardInterrupt:
        cancel.set()
    for f in futures:
        f.cancel()
    running = [f for f in futures if not f.cancelled() and not f.done()]
    cancel.notify(len(running))
    try:
        waited = 0.0
        while running and waited < cancel.inflight_bound_s and not cancel.abandoned():
            wait(running, timeout=0.2)
            waited += 0.2
            running = [f for f in running if not f.done()]
    except KeyboardInterrupt:
        cancel.abandon()
    pool.shutdown(wait=False, cancel_futures=True)
    out: list[R | NotRun] = []
    for f in futures:
        if _finished(f):
            out.append(f.result())
        else:
            out.append(IN_FLIGHT if f in running else NOT_RUN)
    return out
