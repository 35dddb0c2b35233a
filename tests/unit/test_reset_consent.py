"""The consent rule for an API reset that is itself store-wide (vLLM's MooncakeStoreConnector runs
``remove_all`` on ``reset_external=true`` from 0.23): who holds it, how the pod's plan changes,
and how the CacheReset rows read once clear-store emptied a store."""

from __future__ import annotations

import json
from typing import Any

from packaging.version import Version

from kubectl_kvreset.engines.vllm.kvconfig import layout_from_config
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
from kubectl_kvreset.tiers import TierKind

MOONCAKE = {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}
MULTI = {"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": [
    {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}, MOONCAKE]}}
MASTER = "kv-mooncake-master.st.svc.cluster.local:50051"


def mooncake_hold(holds: dict[str, tuple[ResetHold, ...]], uid: str) -> ResetHold:
    """The pod's hold for MooncakeStoreConnector's hook (each pod also gets one per other hook)."""
    [hold] = [h for h in holds[uid] if h.hook.connector == "MooncakeStoreConnector"]
    return hold


def moon_only(holds: dict[str, tuple[ResetHold, ...]]) -> dict[str, tuple[ResetHold, ...]]:
    return {uid: rows for uid, h in holds.items()
            if (rows := tuple(r for r in h if r.hook.connector == "MooncakeStoreConnector"))}


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
    hold = mooncake_hold(holds, one.uid)
    assert hold.others == ("st/other",) and hold.unknown is None
    assert "st/other" in hold.reason() and MASTER in hold.reason() and "remove_all" in hold.reason()
    # the flag, or every user targeted: no hold
    assert reset_holds([one, two], calls, shared=True) == {}
    every = plan_calls([master([(one, True), (two, True), (other, True)])], shared=False)
    assert moon_only(reset_holds([one, two, other], every, shared=False)) == {}


def test_unlisted_namespaces_and_an_unknown_master_count_as_other_users() -> None:
    one = vllm("one")
    calls = plan_calls([master([(one, True)], unlisted=("other namespaces",))], shared=False)
    hold = mooncake_hold(reset_holds([one], calls, shared=False), one.uid)
    assert hold.unlisted == ("other namespaces",) and "cannot be listed" in hold.reason()
    # the ConfigMap naming the master could not be read: other users cannot be ruled out
    unknown = reset_holds([one], [], ["st/one: MOONCAKE_CONFIG_PATH /m/mc.json: not permitted"], shared=False)
    assert mooncake_hold(unknown, one.uid).unknown == "MOONCAKE_CONFIG_PATH /m/mc.json: not permitted"
    assert "not known" in mooncake_hold(unknown, one.uid).reason()


def test_lmcache_on_the_same_master_is_another_user_but_not_the_connectors_master() -> None:
    assert from_mooncake_connector(StoreUse(StoreKind.MOONCAKE, None, "store", source="kv_connector_extra_config"))
    assert from_mooncake_connector(StoreUse(StoreKind.MOONCAKE, None, "store", source="env MOONCAKE_MASTER"))
    assert not from_mooncake_connector(StoreUse(StoreKind.MOONCAKE, None, "store", source="env LMCACHE_REMOTE_URL"))
    one = vllm("one", {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    calls = plan_calls([master([(one, True)], source="env LMCACHE_REMOTE_URL")], shared=False)
    # a pod without MooncakeStoreConnector gets the unknown hold, applied only if its live
    # configuration shows the connector (its reset is not store-wide otherwise)
    hold = reset_holds([one], calls, shared=False)[one.uid]
    assert all(h.unknown is not None for h in hold)
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

    from kubectl_kvreset.engines.vllm.api import ResetAnswer, ResetOutcome
    from kubectl_kvreset.job.outcome import RunResults, build_outcome
    from kubectl_kvreset.job.planning import ClearOptions, Plan
    from kubectl_kvreset.podapi import ResetResult

    plans = [pod_plan(p, Probe(version, None), "none", False) for p in pods]
    scope = SimpleNamespace(namespace="st", skipped=(), skipped_others=(), pods=tuple(pods))
    plan = Plan(scope, ClearOptions(), plans)  # type: ignore[arg-type]
    ok = ResetResult("/reset_prefix_cache", ResetAnswer(ResetOutcome.CLEARED, "success", False), None, 1, 0, 0.0)
    results = RunResults(resets={("st", p.name, p.container, 8000): [ok] for p in pods})
    return plan, build_outcome(plan, results, [], interrupted=False)


def test_the_cache_reset_row_says_where_a_store_emptied_by_clear_store_went() -> None:
    from kubectl_kvreset.job.outcome import EMPTIED_BY_CLEAR_STORE, with_store_results
    from kubectl_kvreset.job.storedone import StoreDone
    from kubectl_kvreset.report import ExitCode

    # vLLM 0.22: no reset hook, the API reset leaves the store
    one, other = vllm("one", image="vllm/vllm-openai:v0.22.0"), vllm("other")
    plan, outcome = _outcome([one], "0.22.0")
    [row] = outcome.rows
    assert row["shared"] == "left" and row["result"] == "partial" and row["left"], row
    calls = plan_calls([master([(one, True), (other, False)])], shared=True)
    emptied = StoreDone(calls[0], "emptied", 4, 0, "keys")
    assert (emptied.store, emptied.address, emptied.scope) == ("mooncake-master", MASTER, "store")
    after = with_store_results(outcome, plan, [emptied])
    [row] = after.rows
    assert row["shared"] == EMPTIED_BY_CLEAR_STORE and row["left"] == [] and row["result"] == "emptied", row
    assert "StoreClear mooncake-master" in row["message"] and "4 -> 0 keys" in row["message"]
    assert "left" not in row["message"] and after.exit_code is ExitCode.OK
    # a store row left (or failed) changes nothing
    kept = with_store_results(outcome, plan, [StoreDone(calls[0], "left", 4, 4, "keys")])
    assert kept.rows == outcome.rows and kept.exit_code is ExitCode.FAILED
    # another pod's store row does not touch this row
    theirs = plan_calls([master([(other, True)])], shared=False)
    assert with_store_results(outcome, plan, [StoreDone(theirs[0], "emptied", 4, 0, "keys")]).rows == outcome.rows


# --- LMCacheMPConnector: vLLM 0.32 loads LMCache's class, whose reset_cache clears the MP server's L1

MP = {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"lmcache.mp.host": "tcp://lmcache-mp.st.svc.cluster.local",
                                    "lmcache.mp.port": 5555}}
MP_SERVER = "lmcache-mp.st.svc.cluster.local:5555"


def mp_pod(name: str, ktc: dict[str, Any] = MP, env: dict[str, str] | None = None) -> VllmPod:
    pod = describe_pod({"metadata": {"name": name, "namespace": "st", "uid": f"uid-{name}"},
                        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.32.0",
                                                 "env": [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}]
                                                 + [{"name": k, "value": v} for k, v in (env or {}).items()],
                                                 "command": ["vllm", "serve", f"org/{name}", "--kv-transfer-config",
                                                             json.dumps(ktc)]}]}})
    assert pod is not None
    return pod


def mp_server(users: list[tuple[VllmPod, bool]], *, unlisted: tuple[str, ...] = ()) -> FoundStore:
    addr = Address("lmcache-mp.st.svc.cluster.local", 5555)
    use = StoreUse(StoreKind.LMCACHE_MP, addr, "store", source="kv_connector_extra_config lmcache.mp.host")
    res = Resolution("service", "st", "lmcache-mp", 5555, (Endpoint("st", "lmcache-mp-0", 5555, True),))
    return FoundStore(StoreKind.LMCACHE_MP, addr, res, tuple(StoreUser(p, use, t) for p, t in users), unlisted)


def mp_hold(holds: dict[str, tuple[ResetHold, ...]], uid: str) -> ResetHold:
    [hold] = [h for h in holds[uid] if h.hook.connector == "LMCacheMPConnector"]
    return hold


def test_the_hook_table_names_each_store_wide_reset_with_its_source() -> None:
    from kubectl_kvreset.plan import STORE_WIDE_HOOKS

    by = {h.connector: h for h in STORE_WIDE_HOOKS}
    assert set(by) == {"MooncakeStoreConnector", "LMCacheMPConnector"}
    assert "_resolve_lmcache_mp_connector" in by["LMCacheMPConnector"].source
    assert "remove_all" in by["MooncakeStoreConnector"].source
    layout = mp_pod("a").layout
    [tier] = [t for t in layout.tiers if t.kind is TierKind.SHARED]
    assert tier.spec is None and by["LMCacheMPConnector"].reaches(tier, Version("0.32.0"))
    # vLLM before reset_external (0.13) ignores the hook
    assert not by["LMCacheMPConnector"].reaches(tier, Version("0.12.0"))


def test_an_mp_pod_whose_server_another_model_uses_is_reset_with_reset_external_false() -> None:
    a, b = mp_pod("a"), mp_pod("b")
    calls = plan_calls([mp_server([(a, True), (b, False)])], shared=False)
    holds = reset_holds([a], calls, shared=False)
    hold = mp_hold(holds, a.uid)
    assert hold.others == ("st/b",) and MP_SERVER in hold.reason() and "st/b" in hold.reason()
    assert "L1" in hold.reason() and "LMCACHE_USE_UPSTREAM_MP" in hold.reason()
    free = pod_plan(a, Probe("0.32.0", None), "none", False)
    assert free.query == (("reset_external", "true"),)
    held = pod_plan(a, Probe("0.32.0", None), "none", False, holds[a.uid])
    assert held.query == (("reset_external", "false"),)
    [left] = held.steps.left
    assert left.tier.store == "lmcache-mp" and left.flag == "--shared-stores"
    assert "reset_external=false" in left.reason and "st/b" in left.reason and MP_SERVER in left.reason
    assert any("reset_external=false" in n and "st/b" in n for n in held.notes)
    # the Mooncake hook's unknown row does not apply: this server runs no MooncakeStoreConnector
    assert "Mooncake" not in left.reason
    # every user targeted, or the flag: reset_external=true
    both = plan_calls([mp_server([(a, True), (b, True)])], shared=False)
    every = reset_holds([a, b], both, shared=False)
    assert all(h.hook.connector != "LMCacheMPConnector" for h in every.get(a.uid, ()))
    assert pod_plan(a, Probe("0.32.0", None), "none", False, every.get(a.uid)).query == (("reset_external", "true"),)
    assert reset_holds([a], calls, shared=True) == {}


def test_the_mp_servers_tier_is_never_counted_emptied_by_the_reset_the_store_step_confirms_it() -> None:
    a = mp_pod("a")
    free = pod_plan(a, Probe("0.32.0", None), "none", False)
    [shared] = [e for e in free.effects if e.tier.kind is TierKind.SHARED]
    assert not shared.emptied_by_api_reset and "_resolve_lmcache_mp_connector" in shared.reason
    assert [lt.tier.store for lt in free.steps.left] == ["lmcache-mp"]


def test_upstream_mp_in_the_env_loads_vllms_own_class_which_has_no_hook() -> None:
    up = mp_pod("up", env={"LMCACHE_USE_UPSTREAM_MP": "1"})
    [tier] = [t for t in up.layout.tiers if t.kind is TierKind.SHARED]
    assert tier.spec == "LMCacheMPConnectorUpstream"
    assert not store_wide_reset(up.layout, Version("0.32.0"))
    hold = ResetHold("x", ("st/b",), hook=mp_hold({"u": reset_holds([up], [], shared=False)[up.uid]}, "u").hook)
    plan = pod_plan(up, Probe("0.32.0", None), "none", False, hold)
    assert plan.query == (("reset_external", "true"),)
    assert "LMCACHE_USE_UPSTREAM_MP" in plan.effects[-1].reason
    # kv_connector_module_path naming LMCache's module loads LMCache's class whatever the env says
    ext = mp_pod("ext", {**MP, "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector"},
                 env={"LMCACHE_USE_UPSTREAM_MP": "1"})
    assert store_wide_reset(ext.layout, Version("0.32.0"))
    # vLLM's own module path still goes through the resolver
    own = mp_pod("own", {**MP, "kv_connector_module_path": "vllm.distributed.kv_transfer.kv_connector.v1."
                                                            "lmcache_mp_connector"},
                 env={"LMCACHE_USE_UPSTREAM_MP": "1"})
    assert not store_wide_reset(own.layout, Version("0.32.0"))


def test_an_mp_pod_whose_server_is_not_known_or_unlisted_namespaces_is_held() -> None:
    a = mp_pod("a")
    unknown = reset_holds([a], [], shared=False)
    hold = mp_hold(unknown, a.uid)
    assert hold.unknown == "no store address was found in its configuration" and "not known" in hold.reason()
    assert pod_plan(a, Probe("0.32.0", None), "none", False, unknown[a.uid]).query == (("reset_external", "false"),)
    calls = plan_calls([mp_server([(a, True)], unlisted=("other namespaces",))], shared=False)
    hold = mp_hold(reset_holds([a], calls, shared=False), a.uid)
    assert hold.unlisted == ("other namespaces",) and "cannot be listed" in hold.reason()
    # an unknown version counts as the newest (the hook may be there)
    assert pod_plan(a, NOT_RUN, "none", False, hold).query == (("reset_external", "false"),)


def test_a_pod_with_both_hooks_names_each_store_in_its_own_row() -> None:
    both = {"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": [
        MOONCAKE, MP]}}
    pod = vllm("both", both)
    calls = plan_calls([master([(pod, True), (vllm("other"), False)]), mp_server([(pod, True), (mp_pod("b"), False)])],
                       shared=False)
    holds = reset_holds([pod], calls, shared=False)
    assert {h.hook.connector for h in holds[pod.uid]} == {"MooncakeStoreConnector", "LMCacheMPConnector"}
    plan = pod_plan(pod, Probe("0.32.0", None), "none", False, holds[pod.uid])
    assert plan.query == (("reset_external", "false"),)
    by = {lt.tier.store: lt for lt in plan.steps.left}
    assert "st/other" in by["mooncake-master"].reason and "st/b" not in by["mooncake-master"].reason
    assert "st/b" in by["lmcache-mp"].reason and "st/other" not in by["lmcache-mp"].reason
    assert {lt.flag for lt in by.values()} == {"--shared-stores"}


def test_the_stores_a_planned_reset_empties_itself_are_the_ones_counted_first() -> None:
    from kubectl_kvreset.job.resetconsent import reset_reaches

    a, b = mp_pod("a"), mp_pod("b")
    every = plan_calls([mp_server([(a, True), (b, True)])], shared=False)
    plans = [pod_plan(p, Probe("0.32.0", None), "none", False) for p in (a, b)]
    assert reset_reaches(every, plans) == tuple(every)
    # a held reset (reset_external=false) empties nothing: its store is not counted first
    held = plan_calls([mp_server([(a, True), (b, False)])], shared=False)
    hold = reset_holds([a], held, shared=False)
    assert reset_reaches(held, [pod_plan(a, Probe("0.32.0", None), "none", False, hold[a.uid])]) == ()
    # vLLM's own class (LMCACHE_USE_UPSTREAM_MP) has no hook
    up = mp_pod("up", env={"LMCACHE_USE_UPSTREAM_MP": "1"})
    alone = plan_calls([mp_server([(up, True)])], shared=False)
    assert reset_reaches(alone, [pod_plan(up, Probe("0.32.0", None), "none", False)]) == ()
    # Mooncake before 0.23: no hook either
    old = vllm("old", image="vllm/vllm-openai:v0.22.0")
    moon = plan_calls([master([(old, True)])], shared=False)
    assert reset_reaches(moon, [pod_plan(old, Probe("0.22.0", None), "none", False)]) == ()
    new = vllm("new")
    moon = plan_calls([master([(new, True)])], shared=False)
    assert reset_reaches(moon, [pod_plan(new, Probe("0.32.0", None), "none", False)]) == tuple(moon)


def test_the_store_row_shows_the_count_before_the_resets_and_what_the_store_step_found() -> None:
    from types import SimpleNamespace

    from kubectl_kvreset.job.storeclear import StorePlan, StoreRun, store_row, with_counts_before_reset
    from kubectl_kvreset.job.storedone import StoreDone
    from kubectl_kvreset.report import ExitCode
    from kubectl_kvreset.stores.clear import StoreResult

    a = mp_pod("a")
    [call] = plan_calls([mp_server([(a, True)])], shared=False)
    plan = StorePlan(SimpleNamespace(namespace="st"), (call,), ())  # type: ignore[arg-type]
    found = StoreResult("emptied", 0, 0, "objects", "st/lmcache-mp-0:8080",
                        "L1 of st/lmcache-mp-0: 0 -> 0 objects, 0 -> 0 bytes")
    report = StoreRun("StoreClear", [], [StoreDone(call, "emptied", 0, 0, "objects")])
    report.add(store_row(call, found), ExitCode.OK)
    out = with_counts_before_reset(report, plan, {id(call): (6, "objects")})
    [row] = out.rows
    [done] = out.done  # the typed result says the same as the row
    assert (done.result, done.before, done.after) == ("emptied", 6, 0)
    assert (row["result"], row["before"], row["after"]) == ("emptied", 6, 0) and out.exit_code is ExitCode.OK
    assert row["message"].startswith("6 objects before the targets' resets") and \
        "0 objects when the store step ran" in row["message"] and "0 -> 0 bytes" in row["message"]
    assert with_counts_before_reset(report, plan, {}).rows == report.rows


def test_a_pod_whose_live_configuration_alone_shows_lmcache_mp_is_held() -> None:
    """``--kv-offloading-backend lmcache`` makes vLLM 0.32 run LMCacheMPConnector
    (``vllm/config/vllm.py::_post_init_kv_transfer_config``) where the spec shows another
    connector: the running server's configuration decides, and its store is not known."""
    from kubectl_kvreset.engines.vllm.liveconfig import LiveConfig

    pod = vllm("off", {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    holds = reset_holds([pod], [], shared=False)
    live = Probe("0.32.0", None, live=LiveConfig(True, {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both"}))
    plan = pod_plan(pod, live, "none", False, holds[pod.uid])
    assert plan.query == (("reset_external", "false"),)
    [left] = [lt for lt in plan.steps.left if lt.tier.store == "lmcache-mp"]
    assert left.flag == "--shared-stores" and "its spec names no LMCacheMPConnector" in left.reason
    assert "Mooncake" not in left.reason
    # the same pod whose live configuration is the spec's: sent as before
    same = Probe("0.32.0", None, live=LiveConfig(True, {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}))
    assert pod_plan(pod, same, "none", False, holds[pod.uid]).query == (("reset_external", "true"),)
