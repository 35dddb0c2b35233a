"""The bounded parallel map and its cancel handle (owned by the caller, no global state)."""

from __future__ import annotations

import threading
import time

from kubectl_kvreset.pool import IN_FLIGHT, INFLIGHT_BOUND_S, NOT_RUN, Cancel, NotRun, parallel


def test_results_in_order_and_bounded() -> None:
    lock = threading.Lock()
    running = peak = 0

    def work(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return i * i

    assert parallel(range(20), work, 4) == [i * i for i in range(20)]
    assert peak <= 4


def test_a_cancel_from_another_thread_stops_new_work() -> None:
    cancel = Cancel()
    told: list[int] = []
    cancel.on_cancel = told.append
    started: list[int] = []

    def work(i: int) -> int:
        started.append(i)
        if i == 0:
            cancel.set()  # the caller's handle, set while the run is going
        time.sleep(0.05)
        return i

    got = parallel(range(50), work, 2, cancel)
    assert got[0] == 0
    assert NOT_RUN in got and len(started) < 50
    assert told and told[0] <= 2  # told once, with the calls still in flight
    # a second run under the same handle starts nothing until it is cleared
    assert parallel([1, 2], work, 2, cancel) == [NOT_RUN, NOT_RUN]
    cancel.clear()
    assert parallel([1, 2], work, 2, cancel) == [1, 2]


def test_abandon_stops_waiting_for_calls_in_flight() -> None:
    cancel = Cancel()
    release = threading.Event()

    def work(i: int) -> int:
        if i == 0:
            cancel.abandon()
        release.wait(5)
        return i

    start = time.monotonic()
    got = parallel(range(3), work, 3, cancel)
    release.set()
    assert got == [IN_FLIGHT, IN_FLIGHT, IN_FLIGHT]  # started, not finished: maybe acted on
    assert time.monotonic() - start < 4.5  # not the 5 s the calls would take


def test_a_shorter_bound_ends_the_wait_and_tells_started_from_not_started_calls() -> None:
    cancel = Cancel()
    release = threading.Event()
    both = threading.Barrier(2)

    def work(i: int) -> int:
        both.wait(5)  # items 0 and 1 run at once; the others wait for a worker
        if i == 0:
            cancel.set(inflight_bound_s=0.0)  # as SIGTERM does: do not wait for calls in flight
        release.wait(5)
        return i

    got = parallel(range(4), work, 2, cancel)
    release.set()
    assert got == [IN_FLIGHT, IN_FLIGHT, NOT_RUN, NOT_RUN]
    assert isinstance(IN_FLIGHT, NotRun)  # a caller that only knows NOT_RUN still sees "no result"


def test_set_never_lengthens_the_bound_and_clear_restores_it() -> None:
    cancel = Cancel()
    cancel.set(inflight_bound_s=5.0)
    cancel.set(inflight_bound_s=30.0)
    assert cancel.inflight_bound_s == 5.0
    cancel.clear()
    assert cancel.inflight_bound_s == INFLIGHT_BOUND_S and not cancel.is_set()
