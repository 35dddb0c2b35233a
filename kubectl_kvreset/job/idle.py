"""``clear --wait-idle DURATION``: before the reset, wait until every targeted engine runs and
queues nothing, so no request is preempted or failed.

An engine is busy while its ``vllm:num_requests_running`` or ``vllm:num_requests_waiting``
(``GET /metrics``, per ``engine`` label; vLLM 0.32.0 ``vllm/v1/metrics/loggers.py``) is above 0.
Each poll reads every targeted port once (in parallel); a port whose ``/metrics`` cannot be
read counts as busy with the reason. A progress line names the busy engines whenever the set
changes. At the deadline the job goes on: a reset on a busy engine answers ``success:false``
(retried within ``--busy-timeout``) and its row says ``busy``; nothing is forced unless
``--preempt-running`` was given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..engines.vllm.api import MetricsParseError
from ..podapi import PodCaller, PodRef, fetch_metrics
from ..pods import ApiPort, VllmPod
from ..pool import Cancel, NotRun, parallel

__all__ = ["busy_engines", "wait_idle"]


def busy_engines(caller: PodCaller, ports: Sequence[tuple[VllmPod, ApiPort]], *, max_concurrency: int = 16,
                 cancel: Cancel | None = None) -> list[str]:
    """The busy engines of ``ports`` now, as ``pod:port engine E (R running, W waiting)``
    (``pod:port (why)`` where ``/metrics`` cannot be read)."""
    def one(unit: tuple[VllmPod, ApiPort]) -> list[str]:
        pod, port = unit
        got = fetch_metrics(caller, PodRef(pod.namespace, pod.name, pod.container), port.port, scheme=port.scheme,
                            attempts=1)
        where = f"{pod.name}:{port.port}"
        if got.text is None:
            return [f"{where} (GET /metrics: {got.error})"]
        try:
            counts = pod.engine.request_counts(got.text)
        except (MetricsParseError, ValueError) as exc:
            return [f"{where} (GET /metrics: {exc})"]
        if counts is None:
            return [f"{where} (its /metrics does not count {pod.engine.name}'s running requests)"]
        out = []
        for label, (running, waiting) in counts.items():
            if running or waiting:
                name = f" engine {label}" if label else ""
                out.append(f"{where}{name} ({running} running, {waiting} waiting)")
        return out

    results = parallel(list(ports), one, max_concurrency, cancel)
    return [line for r in results if not isinstance(r, NotRun) for line in r]


def wait_idle(caller: PodCaller, ports: Sequence[tuple[VllmPod, ApiPort]], deadline_s: float, *,
              progress: Callable[[str], None] | None = None, cancel: Cancel | None = None,
              max_concurrency: int = 16, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> list[str]:
    """Poll :func:`busy_engines` about once a second until none is busy or ``deadline_s``
    seconds pass (or ``cancel`` is set). Returns the engines still busy (empty: all idle)."""
    cancel = cancel or Cancel()
    end = clock() + deadline_s
    shown: list[str] | None = None
    while True:
        busy = busy_engines(caller, ports, max_concurrency=max_concurrency, cancel=cancel)
        if not busy or clock() >= end or cancel.is_set():
            return busy
        if progress is not None and busy != shown:
            progress(f"waiting for {len(busy)} busy engine(s) to be idle: " + ", ".join(busy[:5])
                     + (f" and {len(busy) - 5} more" if len(busy) > 5 else ""))
            shown = busy
        sleep(min(1.0, max(0.0, end - clock())))
