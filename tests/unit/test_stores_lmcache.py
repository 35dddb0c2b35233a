"""The LMCache controller and worker-API clears against the answers LMCache 0.5.6 gave
(the same calls made again on the real controller and standalone worker by
tests/peers/test_stores_lmcache.py), and the consent rule for instance and worker scope."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from kubectl_kvreset.stores.calls import SHARED_FLAG, plan_calls
from kubectl_kvreset.stores.config import Address, StoreKind, StoreUse
from kubectl_kvreset.stores.find import FoundStore, StoreUser
from kubectl_kvreset.stores.lmcache_controller import ControllerError, clear_instance, locations_for
from kubectl_kvreset.stores.lmcache_worker import WorkerError, clear_workers, hot_cache_count
from kubectl_kvreset.stores.resolve import Endpoint, Resolution

# GET /controller/workers?instance_id=inst1 on the real 0.5.6 controller (one standalone worker)
WORKERS = ('{"workers":[{"instance_id":"inst1","worker_id":0,"ip":"127.0.0.5","port":8500,"peer_init_url":null,'
           '"registration_time":1796122554.531406,"last_heartbeat_time":1796122554.531406,"key_count":%d}],'
           '"total_count":1}')
NO_WORKERS = b'{"detail":"No workers found for instance nope"}'
NOT_FOUND = b'{"detail":"Not Found"}'
EXECUTOR_500 = b'{"detail":"The number of tokens cleared should be the same across all workers."}'
# the worker's /metrics (the lines that matter) and DELETE /cache/clear, as 0.5.6 printed them
METRICS = ('# HELP lmcache:local_cpu_hot_cache_count The size of the hot_cache\n'
           '# TYPE lmcache:local_cpu_hot_cache_count gauge\n'
           'lmcache:local_cpu_hot_cache_count{model_name="test/model",role="worker",served_model_name="",'
           'worker_id="0"} %d.0\n'
           '# HELP lmcache:pinned_memory_objs_count The number of pinned memory objects\n'
           '# TYPE lmcache:pinned_memory_objs_count gauge\n'
           'lmcache:pinned_memory_objs_count{model_name="test/model",role="worker",served_model_name="",'
           'worker_id="0"} 0.0\n')
CLEARED = '{\n  "status": "success",\n  "num_removed": %d\n}'
NO_ENGINE = b'{\n  "error": "LMCache API is unavailable",\n  "message": "LMCache engine not configured."\n}'


class Controller:
    """A controller that answers as the real one: ``keys`` per read of the worker list."""

    def __init__(self, keys: Sequence[int], *, workers: bytes | None = None, clear: tuple[int, bytes] | None = None):
        self.keys = list(keys)
        self.workers = workers
        self.clear = clear
        self.calls: list[tuple[str, str, tuple[tuple[str, str], ...], Any]] = []

    def __call__(self, method: str, path: str, query: Sequence[tuple[str, str]] = (),
                 body: bytes | None = None) -> tuple[int, bytes]:
        self.calls.append((method, path, tuple(query), json.loads(body) if body else None))
        if path == "/controller/workers":
            if self.workers is not None:
                return 404, self.workers
            count = self.keys.pop(0) if len(self.keys) > 1 else self.keys[0]
            return 200, (WORKERS % count).encode()
        if path == "/clear":
            return self.clear or (200, b'{"event_id":"Clear0f3c","num_tokens":1024}')
        return 404, NOT_FOUND


def test_controller_clear_checks_the_instance_clears_and_waits_for_the_count() -> None:
    ctl = Controller([4, 4, 0])
    pauses: list[float] = []
    done = clear_instance(ctl, "inst1", sleep=pauses.append)
    assert (done.before, done.after, done.tokens, done.workers, done.locations) == (4, 0, 1024, 1,
                                                                                   ("LocalCPUBackend",))
    gets = [c for c in ctl.calls if c[1] == "/controller/workers"]
    # never the unparameterised list: it answers from a 30 s cache
    assert all(c[2] == (("instance_id", "inst1"),) for c in gets) and len(gets) == 3
    assert [c[3] for c in ctl.calls if c[1] == "/clear"] == [{"instance_id": "inst1", "location": "LocalCPUBackend"}]
    assert ctl.calls[0][1] == "/controller/workers"  # checked before any clear
    assert len(pauses) == 1


def test_controller_unknown_instance_is_said_plainly_and_nothing_is_sent() -> None:
    ctl = Controller([0], workers=NO_WORKERS)
    done = clear_instance(ctl, "nope")
    assert done.left is not None and done.left.startswith("the controller knows no worker of instance nope: ")
    assert "should be the same" not in done.left
    assert [c[1] for c in ctl.calls] == ["/controller/workers"]


def test_controller_without_the_workers_route_clears_but_cannot_count() -> None:
    done = clear_instance(Controller([0], workers=NOT_FOUND), "inst1")
    assert (done.before, done.after, done.tokens, done.workers) == (None, None, 1024, None)
    # ... and an unknown instance there is still said plainly, not as the executor's 500 text
    done = clear_instance(Controller([0], workers=NOT_FOUND, clear=(500, EXECUTOR_500)), "nope")
    assert done.left is not None and done.left.startswith("the controller knows no worker of instance nope")


def test_controller_errors_name_the_call_and_the_detail() -> None:
    with pytest.raises(ControllerError, match="different token counts"):
        clear_instance(Controller([8], clear=(500, EXECUTOR_500)), "inst1")
    with pytest.raises(ControllerError, match=r"POST /clear LocalCPUBackend: 500: Worker 1 not registered"):
        clear_instance(Controller([8], clear=(500, b'{"detail":"Worker 1 not registered for instance inst1"}')),
                       "inst1")
    with pytest.raises(ControllerError, match="answered 503: down"):
        clear_instance(lambda m, p, q=(), b=None: (503, b"down"), "inst1")


def test_controller_dry_run_only_counts_and_a_pinned_remainder_stays_counted() -> None:
    ctl = Controller([4])
    done = clear_instance(ctl, "inst1", dry_run=True)
    assert (done.before, done.after, done.tokens) == (4, 4, None) and all(c[1] != "/clear" for c in ctl.calls)
    pauses: list[float] = []
    done = clear_instance(Controller([4, 1]), "inst1", sleep=pauses.append, settle=(0.1, 0.2))
    assert (done.before, done.after) == (4, 1) and pauses == [0.1, 0.2]


def test_locations_follow_the_configuration() -> None:
    assert locations_for(False) == ("LocalCPUBackend",)
    assert locations_for(True) == ("LocalCPUBackend", "LocalDiskBackend")


class Worker:
    def __init__(self, chunks: list[int], removed: int = 1024, delete: tuple[int, bytes] | None = None,
                 metrics: bool = True) -> None:
        self.chunks, self.removed, self.delete, self.metrics = chunks, removed, delete, metrics
        self.calls: list[tuple[str, str]] = []

    def __call__(self, method: str, path: str, query: Sequence[tuple[str, str]] = (),
                 body: bytes | None = None) -> tuple[int, bytes]:
        self.calls.append((method, path))
        if path == "/metrics":
            if not self.metrics:
                return 200, b"# HELP python_info x\n# TYPE python_info gauge\npython_info 1.0\n"
            return 200, (METRICS % self.chunks.pop(0)).encode()
        if (method, path) == ("DELETE", "/cache/clear"):
            return self.delete or (200, (CLEARED % self.removed).encode())
        return 404, NOT_FOUND


def test_worker_clear_every_port_counts_chunks_and_sums_tokens() -> None:
    workers = {7000: Worker([4, 0]), 7001: Worker([2, 0], removed=512)}
    done = clear_workers(workers.__getitem__, [7000, 7001])
    assert (done.before, done.after, done.removed, done.ports) == (6, 0, 1536, (7000, 7001))
    assert workers[7000].calls == [("GET", "/metrics"), ("DELETE", "/cache/clear"), ("GET", "/metrics")]
    assert hot_cache_count(Worker([3]), 7000) == 3


def test_worker_without_the_count_claims_only_the_removal() -> None:
    done = clear_workers(lambda port: Worker([], metrics=False), [7000])
    assert (done.before, done.after, done.removed) == (None, None, 1024)


def test_worker_dry_run_and_refusals() -> None:
    w = Worker([4])
    done = clear_workers(lambda port: w, [7000], dry_run=True)
    assert (done.before, done.after, done.removed) == (4, 4, None) and ("DELETE", "/cache/clear") not in w.calls
    with pytest.raises(WorkerError, match="port 6999: no LMCache engine"):
        clear_workers(lambda port: Worker([4, 4], delete=(503, NO_ENGINE)), [6999])
    with pytest.raises(WorkerError, match="port 7000: DELETE /cache/clear answered 404"):
        clear_workers(lambda port: Worker([4, 4], delete=(404, NOT_FOUND)), [7000])
    with pytest.raises(WorkerError, match="answered 500"):
        clear_workers(lambda port: Worker([4, 4], delete=(500, b'{"error":"Failed to clear cache"}')), [7000])


# ---- consent -----------------------------------------------------------------------------------

def _user(name: str, instance: str | None, targeted: bool, kind: StoreKind = StoreKind.LMCACHE_CONTROLLER) -> StoreUser:
    scope = "instance" if kind is StoreKind.LMCACHE_CONTROLLER else "worker"
    use = StoreUse(kind, Address("ctl.lmc", 8300), scope, model="m", instance_id=instance, ports=(7000,))
    return StoreUser(SimpleNamespace(namespace="lmc", name=name), use, targeted)  # type: ignore[arg-type]


def _store(users: list[StoreUser], unlisted: tuple[str, ...] = (),
           kind: StoreKind = StoreKind.LMCACHE_CONTROLLER) -> FoundStore:
    res = Resolution("service", "lmc", "ctl", 8300, (Endpoint("lmc", "ctl-0", 8300),))
    return FoundStore(kind, Address("ctl.lmc", 8300), res, tuple(users), unlisted)


def test_instance_scope_one_call_per_instance_and_consent_per_instance() -> None:
    store = _store([_user("a-0", "inst-a", True), _user("a-1", "inst-a", False), _user("b-0", "inst-b", True),
                    _user("c-0", "inst-c", False)])
    calls = plan_calls([store], shared=False)
    assert [(c.scope, c.instance) for c in calls] == [("instance", "inst-a"), ("instance", "inst-b")]
    a, b = calls
    assert a.others == ("lmc/a-1",) and a.blocked is not None and SHARED_FLAG in a.blocked and "lmc/a-1" in a.blocked
    # another instance's pods (c-0) do not hold back inst-b: its clear removes only inst-b's cache
    assert b.blocked is None and b.others == ()
    assert b.method.startswith("GET /controller/workers?instance_id=, then POST /clear")
    assert all(c.blocked is None for c in plan_calls([store], shared=True))


def test_instance_scope_unlisted_namespaces_and_missing_instance_id() -> None:
    [call] = plan_calls([_store([_user("a-0", "inst-a", True)], unlisted=("team-x",))], shared=False)
    assert call.blocked is not None and "team-x" in call.blocked and SHARED_FLAG in call.blocked
    [call] = plan_calls([_store([_user("a-0", None, True)])], shared=True)
    assert call.blocked is not None and "lmcache_instance_id" in call.blocked


def test_worker_scope_is_the_pods_own_and_needs_no_consent() -> None:
    store = _store([_user("a-0", None, True, StoreKind.LMCACHE_WORKER)], unlisted=("team-x",),
                   kind=StoreKind.LMCACHE_WORKER)
    [call] = plan_calls([store], shared=False)
    assert (call.scope, call.blocked, call.method) == ("worker", None, "DELETE /cache/clear on port 7000")


def test_a_pod_the_controller_clears_gets_no_second_clear_through_its_worker_api() -> None:
    ctl = _store([_user("a-0", "inst-a", True), _user("b-0", "inst-b", True), _user("b-1", "inst-b", False)])
    worker_a = _store([_user("a-0", "inst-a", True, StoreKind.LMCACHE_WORKER)], kind=StoreKind.LMCACHE_WORKER)
    worker_b = _store([_user("b-0", "inst-b", True, StoreKind.LMCACHE_WORKER)], kind=StoreKind.LMCACHE_WORKER)
    calls = plan_calls([ctl, worker_a, worker_b], shared=False)
    # a-0: the controller clears it; b-0: the controller call is held back (b-1 shares inst-b),
    # so the pod's own worker API clears it, and b-1's part of inst-b stays
    assert [(c.scope, c.instance, c.blocked is None) for c in calls] == [
        ("instance", "inst-a", True), ("worker", None, True)]
    assert calls[1].store is worker_b
    # with the flag the controller clears inst-b (b-1's part too), once
    calls = plan_calls([ctl, worker_a, worker_b], shared=True)
    assert [(c.scope, c.instance, c.blocked is None) for c in calls] == [
        ("instance", "inst-a", True), ("instance", "inst-b", True)]
    # without a worker API for b-0, the held-back call stays to say why
    calls = plan_calls([ctl, worker_a], shared=False)
    assert [(c.scope, c.instance, c.blocked is None) for c in calls] == [
        ("instance", "inst-a", True), ("instance", "inst-b", False)]


# ---- the CacheReset row of a pod whose LMCache CPU tier the store step emptied ----------------

def _outcome(cpu_connector: str, *, other_left: bool = False) -> tuple[Any, Any]:
    from kubectl_kvreset.job.outcome import LeftRow, Outcome, PortOutcome, result_columns
    from kubectl_kvreset.plan import LeftTier, PodSteps, TierEffect
    from kubectl_kvreset.report import ExitCode, Report
    from kubectl_kvreset.tiers import Tier, TierKind

    gpu = Tier(TierKind.GPU, None, None)
    cpu = Tier(TierKind.CPU, cpu_connector, None)
    fs = Tier(TierKind.FS, cpu_connector, None, root_dir="/kv")
    why = "LMCache connectors do not implement reset_cache"
    effects = [TierEffect(gpu, True, "prefix cache", None), TierEffect(cpu, False, why, "restart")]
    left = [LeftTier(cpu, why, "--fallback=restart")]
    tiers: dict[str, tuple[str, ...]] = {"gpu": ("emptied",), "cpu": ("left",)}
    rows = [LeftRow("cpu", why, "--fallback=restart")]
    if other_left:
        effects.append(TierEffect(fs, False, "no clear", "clear-fs"))
        left.append(LeftTier(fs, "no clear", None))
        tiers["fs"] = ("left",)
        rows.append(LeftRow("fs:/kv", "no clear", None))
    pod = SimpleNamespace(namespace="lmc", name="v-0", container="vllm")
    pplan = SimpleNamespace(pod=pod, effects=tuple(effects), not_running=None,
                            steps=PodSteps((), tuple(left), "restart"))
    po = PortOutcome(namespace="lmc", pod="v-0", container="vllm", port=8000, role=None, owner="deployment/v",
                     version="0.32.0", tiers=tiers, result="partial",
                     messages=tuple(f"{r.tier} left: {r.reason}" + (f"; to empty it: {r.remedy}" if r.remedy else "")
                                    for r in rows),
                     steps=("api-reset",), calls=1, busy_answers=0, left=tuple(rows), code=ExitCode.FAILED)
    report = Report("CacheReset", result_columns("lmc"))
    report.add(po.row(), po.code)
    return SimpleNamespace(pods=[pplan]), Outcome((po,), (), False, report)


def test_the_lmcache_cpu_tier_takes_the_store_rows_result() -> None:
    from kubectl_kvreset.job.outcome import with_lmcache_clears
    from kubectl_kvreset.report import ExitCode

    plan, outcome = _outcome("LMCacheConnectorV1")
    done = with_lmcache_clears(plan, outcome, {("lmc", "v-0"): ("emptied", "the LMCache controller's POST /clear")})
    [row] = done.report.rows
    assert (row["cpu"], row["result"], row["left"], done.exit_code) == ("emptied", "emptied", [], ExitCode.OK)
    assert row["message"] == "cpu: emptied by the LMCache controller's POST /clear"
    done = with_lmcache_clears(plan, outcome, {("lmc", "v-0"): ("unconfirmed", "LMCache's worker API")})
    [row] = done.report.rows
    assert (row["cpu"], row["result"], done.exit_code) == ("unconfirmed", "unconfirmed", ExitCode.UNCONFIRMED)
    # another pod, or no store clear: unchanged
    assert with_lmcache_clears(plan, outcome, {("lmc", "other"): ("emptied", "x")}).report.rows == outcome.report.rows
    assert with_lmcache_clears(plan, outcome, {}) is outcome


def test_a_tier_still_left_keeps_the_row_partial_and_other_connectors_are_untouched() -> None:
    from kubectl_kvreset.job.outcome import with_lmcache_clears
    from kubectl_kvreset.report import ExitCode

    plan, outcome = _outcome("LMCacheConnectorV1", other_left=True)
    [row] = with_lmcache_clears(plan, outcome, {("lmc", "v-0"): ("emptied", "x")}).report.rows
    assert (row["cpu"], row["fs"], row["result"]) == ("emptied", "left", "partial")
    assert [lt["tier"] for lt in row["left"]] == ["fs:/kv"]
    plan, outcome = _outcome("OffloadingConnector")
    done = with_lmcache_clears(plan, outcome, {("lmc", "v-0"): ("emptied", "x")})
    assert done.report.rows[0]["cpu"] == "left" and done.exit_code is ExitCode.FAILED
