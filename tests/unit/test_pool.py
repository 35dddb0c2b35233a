"""The bounded parallel map and its cancel handle (owned by the caller, no global state)."""

from __future__ import annotations

import threading
import time

from kubectl_kvreset.pool import NOT_RUN, Cancel, parallel


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
    assert got == [NOT_RUN, NOT_RUN, NOT_RUN]
    assert time.monotonic() - start < 4.5  # not the 5 s the calls would take
