"""The consent rule for an API reset that is itself store-wide (vLLM's MooncakeStoreConnector runs
``remove_all`` on ``reset_external=true`` from 0.23): who holds it, how the pod's plan changes,
and how the CacheReset rows read once clear-store emptied a store."""

from __future__ import annotations

import json
from typing import Any

from packaging.version import Version

from kubectl_kvreset.job.planning import pod_plan, store_wide_reset
from kubectl_kvreset.job.probes import Probe
from kubectl_kvreset.job.resetconsent import ResetHold, from_mooncake_connector, reset_holds
from kubectl_kvreset.podapi import CallFailure
from kubectl_kvreset.pods import VllmPod, describe_pod
from kubectl_kvreset.pool import NOT_RUN
from kubectl_kvreset.stores.calls import plan_calls
from kubectl_kvreset.stores.config import Address, StoreKind, StoreUse
from kubectl_kvreset.stores.find import FoundStore, StoreUser
from kubectl_kvreset.stores.resolve import Endpoint, Resolution
from kubectl_kvreset.tiers import TierKind, layout_from_config

MOONCAKE = {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}
MULTI = {"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": [
    {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}, MOONCAKE]}}
MASTER = "kv-mooncake-master.st.svc.cluster.local:50051"


def vllm(name: str, ktc: dict[str, Any] = MOONCAKE, image: str = "vllm/vllm-openai:v0.32.0") -> VllmPod:
    pod = describe_pod({"metadata": {"name": name, "namespace": "st", "uid": f"uid-{name}"},
                        "spec": {"containers": [{"name": "vllm", "image": image,
                                                 "env": [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"},
                                                         {"name": "MOONCAKE_CONFIG_PATH", "value": "/m/mc.json"}],
                                                 "command": ["vllm", "serve", "org/m", "--kv-transfer-config",
                                                             json.dumps(ktc)]}]}})
    assert pod is not None
    return pod


def master(users: list[tuple[VllmPod, bool]], *, unlisted: tuple[str, ...] = (),
           source: str = "MOONCAKE_CONFIG_PATH /m/mc.json") -> FoundStore:
    addr = Address("kv-mooncake-master.st.svc.cluster.local", 50051)
    use = StoreUse(StoreKind.MOONCAKE, addr, "store", source=source)
    res = Resolution("service", "st", "kv-mooncake-master", 50051,
                     (Endpoint("st", "kv-mooncake-master-0", 50051, True),))
    return FoundStore(StoreKind.MOONCAKE, addr, res, tuple(StoreUser(p, use, t) for p, t in users), unlisted)


def test_an_untargeted_user_of_the_master_holds_the_targets_reset() -> None:
    one, two, other = vllm("one"), vllm("two"), vllm("other")
    calls = plan_calls([master([(one, True), (two, True), (other, False)])], shared=False)
    holds = reset_holds([one, two], calls, shared=False)
    assert set(holds) == {one.uid, two.uid}
    hold = holds[one.uid]
    assert hold.others == ("st/other",) and hold.unknown is None
    assert "st/other" in hold.reason() and MASTER in hold.reason() and "remove_all" in hold.reason()
    # the flag, or every user targeted: no hold
    assert reset_holds([one, two], calls, shared=True) == {}
    every = plan_calls([master([(one, True), (two, True), (other, True)])], shared=False)
    assert reset_holds([one, two, other], every, shared=False) == {}


def test_unlisted_namespaces_and_an_unknown_master_count_as_other_users() -> None:
    one = vllm("one")
    calls = plan_calls([master([(one, True)], unlisted=("other namespaces",))], shared=False)
    hold = reset_holds([one], calls, shared=False)[one.uid]
    assert hold.unlisted == ("other namespaces",) and "cannot be listed" in hold.reason()
    # the ConfigMap naming the master could not be read: other users cannot be ruled out
    unknown = reset_holds([one], [], ["st/one: MOONCAKE_CONFIG_PATH /m/mc.json: not permitted"], shared=False)
    assert unknown[one.uid].unknown == "MOONCAKE_CONFIG_PATH /m/mc.json: not permitted"
    assert "not known" in unknown[one.uid].reason()


def test_lmcache_on_the_same_master_is_another_user_but_not_the_connectors_master() -> None:
    assert from_mooncake_connector(StoreUse(StoreKind.MOONCAKE, None, "store", source="kv_connector_extra_config"))
    assert from_mooncake_connector(StoreUse(StoreKind.MOONCAKE, None, "store", source="env MOONCAKE_MASTER"))
    assert not from_mooncake_connector(StoreUse(StoreKind.MOONCAKE, None, "store", source="env LMCACHE_REMOTE_URL"))
    one = vllm("one", {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    calls = plan_calls([master([(one, True)], source="env LMCACHE_REMOTE_URL")], shared=False)
    # a pod without MooncakeStoreConnector gets the unknown hold, applied only if its live
    # configuration shows the connector (its reset is not store-wide otherwise)
    hold = reset_holds([one], calls, shared=False)[one.uid]
    assert hold.unknown is not None
    plan = pod_plan(one, Probe("0.32.0", None), "none", False, hold)
    assert plan.query == (("reset_external", "true"),)


HOLD = ResetHold(f"{MASTER} (service st/kv-mooncake-master)", ("st/other",))


def test_a_held_pod_is_reset_with_reset_external_false_and_its_store_left_with_the_flag() -> None:
    pod = vllm("one")
    free = pod_plan(pod, Probe("0.32.0", None), "none", False)
    assert free.query == (("reset_external", "true"),) and free.steps.left == ()
    held = pod_plan(pod, Probe("0.32.0", None), "none", True, HOLD)
    assert held.query == (("reset_external", "false"), ("reset_running_requests", "true"))
    [left] = held.steps.left
    assert left.tier.kind is TierKind.SHARED and left.flag == "--shared-stores"
    assert "reset_external=false" in left.reason and "st/other" in left.reason
    assert "restart does not clear" not in left.reason
    assert [t.kind for t in held.steps.steps[0].empties] == [TierKind.GPU]
    assert any("reset_external=false" in n for n in held.notes)


def test_before_023_the_reset_is_not_store_wide_and_is_sent_as_before() -> None:
    pod = vllm("old", image="vllm/vllm-openai:v0.22.0")
    assert not store_wide_reset(pod.layout, Version("0.22.0"))
    plan = pod_plan(pod, Probe("0.22.0", None), "none", False, HOLD)
    assert plan.query == (("reset_external", "true"),)
    assert plan.steps.left[0].flag is None and "before vLLM 0.23" in plan.steps.left[0].reason


def test_an_unknown_version_is_held_as_the_newest() -> None:
    pod = vllm("one")
    assert store_wide_reset(pod.layout, None)
    failed = pod_plan(pod, Probe(None, CallFailure("timeout", "no answer")), "none", False, HOLD)
    assert failed.query == (("reset_external", "false"),)
    not_probed = pod_plan(pod, NOT_RUN, "none", False, HOLD)
    assert not_probed.query == (("reset_external", "false"),)
    [left] = not_probed.steps.left
    assert left.flag == "--shared-stores" and "st/other" in left.reason


def test_every_tier_reset_external_would_empty_is_left_too() -> None:
    pod = vllm("multi", MULTI)
    free = pod_plan(pod, Probe("0.32.0", None), "none", False)
    assert {t.kind for t in free.steps.steps[0].empties} == {TierKind.GPU, TierKind.CPU, TierKind.SHARED}
    held = pod_plan(pod, Probe("0.32.0", None), "none", False, HOLD)
    by = {lt.tier.kind: lt for lt in held.steps.left}
    assert set(by) == {TierKind.CPU, TierKind.SHARED}
    assert by[TierKind.CPU].flag is not None and by[TierKind.CPU].flag.startswith("--shared-stores")
    assert by[TierKind.CPU].flag.endswith("or --fallback=restart") and "st/other" in by[TierKind.CPU].reason
    assert held.steps.needs == "restart"
    # a restart empties the CPU tier instead (and sends nothing to the store)
    restart = pod_plan(pod, Probe("0.32.0", None), "restart", False, HOLD)
    assert restart.has("restart") and [lt.tier.kind for lt in restart.steps.left] == [TierKind.SHARED]


def test_layout_of_the_multi_connector_pod() -> None:
    layout = layout_from_config(MULTI)
    assert [t.kind for t in layout.tiers] == [TierKind.GPU, TierKind.CPU, TierKind.SHARED]


def _outcome(pods: list[VllmPod], version: str) -> tuple[Any, Any]:
    from types import SimpleNamespace

    from kubectl_kvreset.job.outcome import RunResults, build_outcome
    from kubectl_kvreset.job.planning import ClearOptions, Plan
    from kubectl_kvreset.podapi import ResetResult
    from kubectl_kvreset.vllm_api import ResetAnswer, ResetOutcome

    plans = [pod_plan(p, Probe(version, None), "none", False) for p in pods]
    scope = SimpleNamespace(namespace="st", skipped=(), pods=tuple(pods))
    plan = Plan(scope, ClearOptions(), plans)  # type: ignore[arg-type]
    ok = ResetResult("/reset_prefix_cache", ResetAnswer(ResetOutcome.CLEARED, "success", False), None, 1, 0, 0.0)
    results = RunResults(resets={("st", p.name, p.container, 8000): [ok] for p in pods})
    return plan, build_outcome(plan, results, [], interrupted=False)


def test_the_cache_reset_row_says_where_a_store_emptied_by_clear_store_went() -> None:
    from kubectl_kvreset.job.outcome import EMPTIED_BY_CLEAR_STORE, with_store_results
    from kubectl_kvreset.report import ExitCode

    # vLLM 0.22: no reset hook, the API reset leaves the store
    one, other = vllm("one", image="vllm/vllm-openai:v0.22.0"), vllm("other")
    plan, outcome = _outcome([one], "0.22.0")
    [row] = outcome.rows
    assert row["shared"] == "left" and row["result"] == "partial" and row["left"], row
    calls = plan_calls([master([(one, True), (other, False)])], shared=True)
    emptied = {"store": "mooncake-master", "address": MASTER, "scope": "store", "before": 4, "after": 0,
               "unit": "keys", "result": "emptied"}
    after = with_store_results(outcome, plan, calls, [emptied])
    [row] = after.rows
    assert row["shared"] == EMPTIED_BY_CLEAR_STORE and row["left"] == [] and row["result"] == "emptied", row
    assert "StoreClear mooncake-master" in row["message"] and "4 -> 0 keys" in row["message"]
    assert "left" not in row["message"] and after.exit_code is ExitCode.OK
    # a store row left (or failed) changes nothing
    kept = with_store_results(outcome, plan, calls, [{**emptied, "result": "left", "after": 4}])
    assert kept.rows == outcome.rows and kept.exit_code is ExitCode.FAILED
    # another pod's store row does not touch this row
    theirs = plan_calls([master([(other, True)])], shared=False)
    assert with_store_results(outcome, plan, theirs, [emptied]).rows == outcome.rows
