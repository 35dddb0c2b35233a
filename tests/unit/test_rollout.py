"""kubectl_kvreset.rollout: kubectl's Deployment rule, the LeaderWorkerSet rule, patches, ordering, and the
wait / re-read logic against an in-memory API."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from kubectl_kvreset.devmode import DEV_MODE_ENV
from kubectl_kvreset.discovery import Owner
from kubectl_kvreset.kube import KubeApiError, KubeConnectionError
from kubectl_kvreset.rollout import (
    RESTARTED_AT,
    deployment_restart_patch,
    deployment_rollout_state,
    lws_restart_patch,
    lws_rollout_state,
    pod_problems,
    read_dev_mode,
    restart_owner,
    restart_owners,
    restart_timestamp,
    role_phases,
    set_dev_mode,
    wait_rollout,
)
from tests.sim.store import json_patch

# ---- kubectl's Deployment rule ----


def dep(gen: int = 2, observed: int = 2, replicas: int = 2, **status: Any) -> dict[str, Any]:
    return {"kind": "Deployment", "metadata": {"name": "d", "generation": gen},
            "spec": {"replicas": replicas}, "status": {"observedGeneration": observed, **status}}


@pytest.mark.parametrize("obj, done, text", [
    (dep(observed=1, replicas=2, updatedReplicas=2, replicas_=2), False, "spec update to be observed"),
    (dep(updatedReplicas=1, replicas=2), False, "1 out of 2 new replicas have been updated"),
    (dep(updatedReplicas=2, availableReplicas=2, **{"replicas": 2}), True, "successfully rolled out"),
])
def test_deployment_rule_basic(obj: dict[str, Any], done: bool, text: str) -> None:
    obj["status"].pop("replicas_", None)
    state = deployment_rollout_state(obj)
    assert state.done is done and text in state.message


def test_deployment_rule_every_step() -> None:
    d = dep()
    d["status"].update({"replicas": 3, "updatedReplicas": 2, "availableReplicas": 1})
    assert deployment_rollout_state(d).message == "1 old replicas are pending termination"
    d["status"]["replicas"] = 2
    assert deployment_rollout_state(d).message == "1 of 2 updated replicas are available"
    d["status"]["availableReplicas"] = 2
    assert deployment_rollout_state(d).done
    # zero fields are omitted by the API: they count as 0
    empty = dep()
    assert deployment_rollout_state(empty).message == "0 out of 2 new replicas have been updated"


def test_deployment_rule_uses_the_patch_generation() -> None:
    d = dep(gen=2, observed=2, updatedReplicas=2, availableReplicas=2)
    d["status"]["replicas"] = 2
    assert deployment_rollout_state(d).done
    assert not deployment_rollout_state(d, generation=3).done


def test_deployment_progress_deadline_fails() -> None:
    d = dep(conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}])
    state = deployment_rollout_state(d)
    assert state.failed and not state.done and "exceeded its progress deadline" in state.message


# ---- LeaderWorkerSet rule ----


def lws_obj(replicas: int = 1, size: int = 2, gen: int = 1, **status: Any) -> dict[str, Any]:
    return {"kind": "LeaderWorkerSet", "metadata": {"name": "w", "generation": gen},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": {}}},
            "status": status}


def pod(name: str, uid: str, ready: bool = True, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}], **extra}}


def test_lws_rule() -> None:
    ok = lws_obj(readyReplicas=1, updatedReplicas=1, replicas=1, observedGeneration=1)
    pods = [pod("w-0", "a"), pod("w-0-1", "b")]
    assert lws_rollout_state(ok, pods).done
    assert not lws_rollout_state(ok, pods, generation=2).done
    assert "old pods pending" in lws_rollout_state(ok, pods, old_uids={"a"}).message
    assert "1 of 2 pods ready" in lws_rollout_state(ok, [pod("w-0", "c"), pod("w-0-1", "d", ready=False)]).message
    assert "0 of 1 groups ready" == lws_rollout_state(lws_obj(updatedReplicas=1), pods).message
    updating = lws_obj(readyReplicas=1, updatedReplicas=1,
                       conditions=[{"type": "UpdateInProgress", "status": "True", "message": "x"}])
    assert "rolling update in progress" in lws_rollout_state(updating, pods).message
    # old LWS versions write no observedGeneration: the pod checks carry the rule
    no_gen = lws_obj(readyReplicas=1, updatedReplicas=1)
    assert lws_rollout_state(no_gen, pods, generation=5).done


# ---- patches and ordering ----


def test_restart_timestamp_is_rfc3339_with_offset() -> None:
    stamp = restart_timestamp(datetime(2026, 9, 1, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2))))
    assert stamp == "2026-09-01T10:00:00+02:00"


def test_restart_patches() -> None:
    assert deployment_restart_patch("T") == {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: "T"}}}}}
    worker_only = lws_restart_patch(lws_obj(), "T")
    stamp = {"metadata": {"annotations": {RESTARTED_AT: "T"}}}
    assert worker_only == {"spec": {"leaderWorkerTemplate": {"workerTemplate": stamp}}}
    with_leader = lws_obj()
    with_leader["spec"]["leaderWorkerTemplate"]["leaderTemplate"] = {"spec": {}}
    templates = lws_restart_patch(with_leader, "T")["spec"]["leaderWorkerTemplate"]
    assert set(templates) == {"workerTemplate", "leaderTemplate"}


def test_role_phases() -> None:
    d, p, o = Owner("Deployment", "dec"), Owner("Deployment", "pre"), Owner("Deployment", "agg")
    phases = role_phases([("ns", d, "decode"), ("ns", o, None), ("ns", p, "prefill"), ("ns", d, "decode")])
    assert phases == [[("ns", p, "prefill")], [("ns", d, "decode")], [("ns", o, None)]]


def test_pod_problems_names_the_cause() -> None:
    crashing = pod("d-1", "u", ready=False, containerStatuses=[{
        "name": "vllm", "restartCount": 5, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1}}}])
    assert pod_problems([crashing, pod("d-2", "v")]) == [
        "pod d-1: container vllm CrashLoopBackOff (last exit code 1, 5 restarts)"]


def test_pod_problems_names_the_schedulers_reason() -> None:
    pending = {"metadata": {"name": "d-3", "uid": "w"}, "status": {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]}}
    assert pod_problems([pending]) == [
        "pod d-3: Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."]


# ---- an in-memory API ----


def merge(dst: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            merge(dst[k], v)
        elif v is None:
            dst.pop(k, None)
        else:
            dst[k] = copy.deepcopy(v)


class FakeKube:
    """Deployments and LWS in one namespace. A patch that changes the spec bumps the
    generation; each GET afterwards moves the status one step (observe, then ready after
    ``ready_after`` reads); ``fail_patch`` scripts errors per PATCH call."""

    def __init__(self, objs: list[dict[str, Any]], ready_after: int = 1, never_ready: bool = False) -> None:
        self.objs = {(o["kind"], o["metadata"]["name"]): o for o in objs}
        self.ready_after = ready_after
        self.never_ready = never_ready
        self.reads: dict[str, int] = {}
        self.patches: list[tuple[str, Any, str]] = []
        self.fail_patch: list[tuple[Exception, bool]] = []  # (error, apply before raising)
        self.log: list[str] = []
        for o in objs:
            self._settle(o)

    def _settle(self, o: dict[str, Any]) -> None:
        n = o["spec"].get("replicas", 1)
        if o["kind"] == "Deployment":
            o["status"] = {"observedGeneration": o["metadata"]["generation"], "replicas": n, "updatedReplicas": n,
                           "availableReplicas": n}
        else:
            o["status"] = {"replicas": n, "updatedReplicas": n, "readyReplicas": n}

    def _kind(self, plural: str) -> str:
        return {"deployments": "Deployment", "leaderworkersets": "LeaderWorkerSet"}[plural]

    def get_object(self, gv: str, plural: str, ns: str, name: str) -> dict[str, Any]:
        if plural in ("configmaps", "secrets"):
            raise KubeApiError(404, "NotFound", f"{plural} {name} not found")
        o = self.objs.get((self._kind(plural), name))
        if o is None:
            raise KubeApiError(404, "NotFound", f"{name} not found")
        key = name
        self.reads[key] = self.reads.get(key, 0) + 1
        if self.reads[key] >= self.ready_after and not self.never_ready:
            self._settle(o)
            self.log.append(f"ready {name}")
        return copy.deepcopy(o)

    def list_items(self, gv: str, plural: str, ns: str | None, **kw: Any) -> list[dict[str, Any]]:
        if plural == "pods":
            if self.never_ready:
                return [pod("x-1", "u1", ready=False, containerStatuses=[
                    {"name": "vllm", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}])]
            return []
        return [copy.deepcopy(o) for (k, _), o in self.objs.items() if k == "Deployment"]

    def send_json(self, method: str, path: str, body: Any, *, content_type: str, query: Any = ()) -> dict[str, Any]:
        name = path.rsplit("/", 1)[1]
        kind = "LeaderWorkerSet" if "leaderworkersets" in path else "Deployment"
        o = self.objs[(kind, name)]
        self.patches.append((name, body, content_type))
        self.log.append(f"patch {name}")
        apply_first = True
        error: Exception | None = None
        if self.fail_patch:
            error, apply_first = self.fail_patch.pop(0)
        if apply_first:
            before = copy.deepcopy(o["spec"])
            if content_type == "application/json-patch+json":
                o.update(json_patch(o, body))
            else:
                merge(o, body)
            if o["spec"] != before:
                o["metadata"]["generation"] += 1
                self.reads[name] = 0
                o["status"]["observedGeneration"] = o["status"].get("observedGeneration", 1)
                o["status"]["availableReplicas"] = 0
                o["status"]["readyReplicas"] = 0
        if error is not None:
            raise error
        return copy.deepcopy(o)


def deployment_obj(name: str, env: list[dict[str, Any]] | None = None, **meta: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "vllm", "image": "vllm/vllm-openai:v0.26.0", "command": ["vllm", "serve", "m"]}
    if env is not None:
        c["env"] = env
    return {"kind": "Deployment", "metadata": {"name": name, "generation": 1, **meta},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [c]}}}}


def no_sleep(_: float) -> None:
    return None


def test_wait_times_out_with_the_cause() -> None:
    kube = FakeKube([deployment_obj("d")], never_ready=True)
    kube.objs[("Deployment", "d")]["status"]["availableReplicas"] = 0
    ticks = iter(range(100))
    state = wait_rollout(kube, "ns", Owner("Deployment", "d"), generation=1, timeout_s=3.0,
                         clock=lambda: float(next(ticks)), sleep=no_sleep)
    assert state.timed_out and not state.done
    assert "not rolled out within 3 s" in state.message and "CrashLoopBackOff" in state.message


def test_restart_deployment_waits_for_rollout() -> None:
    kube = FakeKube([deployment_obj("d")])
    res = restart_owner(kube, "ns", Owner("Deployment", "d"), "decode", timeout_s=30)
    assert res.result == "restarted", res.message
    name, body, ctype = kube.patches[0]
    assert ctype == "application/strategic-merge-patch+json"
    assert RESTARTED_AT in body["spec"]["template"]["metadata"]["annotations"]


def test_paused_deployment_is_refused_and_not_patched() -> None:
    d = deployment_obj("d")
    d["spec"]["paused"] = True
    kube = FakeKube([d])
    res = restart_owner(kube, "ns", Owner("Deployment", "d"), timeout_s=5)
    assert res.result == "refused" and "paused" in res.message and kube.patches == []


def test_unsupported_kind_and_controller_owned_are_refused() -> None:
    owned_by = [{"kind": "DisaggregatedSet", "name": "ds", "controller": True}]
    kube = FakeKube([deployment_obj("d", ownerReferences=owned_by)])
    assert restart_owner(kube, "ns", Owner("ReplicaSet", "rs"), timeout_s=5).result == "refused"
    res = restart_owner(kube, "ns", Owner("Deployment", "d"), timeout_s=5)
    assert res.result == "refused" and "DisaggregatedSet/ds" in res.message and kube.patches == []


def test_prefill_before_decode_and_decode_skipped_when_prefill_fails() -> None:
    kube = FakeKube([deployment_obj("pre"), deployment_obj("dec"), deployment_obj("agg")])
    owners = [("ns", Owner("Deployment", "dec"), "decode"), ("ns", Owner("Deployment", "pre"), "prefill"),
              ("ns", Owner("Deployment", "agg"), None)]
    results = restart_owners(kube, owners, timeout_s=30, progress=None)
    assert [r.owner.name for r in results] == ["pre", "dec", "agg"] and all(r.ok for r in results)
    assert kube.log.index("ready pre") < kube.log.index("patch dec")

    failing = FakeKube([deployment_obj("pre"), deployment_obj("dec")])
    failing.objs[("Deployment", "pre")]["spec"]["paused"] = True
    results = restart_owners(failing, owners[:2], timeout_s=30, progress=None)
    assert [(r.owner.name, r.result) for r in results] == [("pre", "refused"), ("dec", "skipped")]
    assert "#49238" in results[1].message and failing.patches == []


def test_scheduler_note_after_restart() -> None:
    epp = deployment_obj("epp")
    epp["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/llm-d/llm-d-inference-scheduler:v0.2.1"
    kube = FakeKube([deployment_obj("d"), epp])
    (res,) = restart_owners(kube, [("ns", Owner("Deployment", "d"), None)], timeout_s=30, progress=None)
    assert res.ok and any("#2853" in n and "deployment/epp" in n for n in res.notes)


def test_patch_5xx_applied_is_not_resent() -> None:
    kube = FakeKube([deployment_obj("d", [{"name": DEV_MODE_ENV, "value": "true"}])])
    kube.fail_patch = [(KubeApiError(504, "Timeout", "etcd slow"), True)]
    res = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=True, timeout_s=30)
    assert res.result == "enabled", res.message
    assert len(kube.patches) == 1


def test_patch_timeout_not_applied_is_rebuilt_and_sent_once_more() -> None:
    kube = FakeKube([deployment_obj("d")])
    kube.fail_patch = [(KubeConnectionError("no answer within 30 s"), False)]
    res = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=True, timeout_s=30)
    assert res.result == "enabled" and len(kube.patches) == 2
    env = kube.objs[("Deployment", "d")]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": DEV_MODE_ENV, "value": "1"}]


def test_patch_4xx_is_a_failure_without_retry() -> None:
    kube = FakeKube([deployment_obj("d")])
    kube.fail_patch = [(KubeApiError(403, "Forbidden", "cannot patch deployments"), False)]
    res = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=True, timeout_s=30)
    assert res.result == "failed" and "Forbidden" in res.message and len(kube.patches) == 1


def test_set_dev_mode_second_run_sends_nothing_and_disable_removes() -> None:
    kube = FakeKube([deployment_obj("d", [{"name": "A", "value": "a"}])])
    first = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=True, timeout_s=30)
    assert first.result == "enabled"
    assert "unauthenticated" in first.message.replace("without authentication", "unauthenticated")
    assert "--disable deployment/d" in first.message and "caches are empty" in first.message
    second = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=True, timeout_s=30)
    assert second.result == "unchanged" and len(kube.patches) == 1 and second.state == "on"
    off = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=False, timeout_s=30)
    assert off.result == "disabled" and off.state == "off"
    container = kube.objs[("Deployment", "d")]["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "A", "value": "a"}]


def test_set_dev_mode_refuses_managed_owner_unless_ignored() -> None:
    owned = deployment_obj("d", annotations={"argocd.argoproj.io/tracking-id": "bench:apps/Deployment:ns/d"})
    kube = FakeKube([owned])
    res = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=True, timeout_s=30)
    assert res.result == "refused" and "Argo CD/bench" in res.message and "--ignore-owner" in res.message
    assert kube.patches == []
    res = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=True, ignore_owner=True, timeout_s=30)
    assert res.result == "enabled"


def test_read_dev_mode_row() -> None:
    kube = FakeKube([deployment_obj("d", [{"name": DEV_MODE_ENV, "value": "true"}])])
    res = read_dev_mode(kube, "ns", Owner("Deployment", "d"), "decode")
    row = res.row()
    assert (row["dev_mode"], row["value"], row["source"], row["accepted"], row["result"]) == (
        "invalid", "true", "env", False, "read")
    assert "--enable deployment/d" in row["message"]


class RacingKube(FakeKube):
    """FakeKube whose objects carry a ``resourceVersion``, bumped by every write; a patch that
    writes a stale one gets 409 ``Conflict`` and changes nothing, as the API server answers.
    ``racers`` run one per PATCH, just before it arrives: other writers changing the owner."""

    def __init__(self, objs: list[dict[str, Any]], racers: list[Any]) -> None:
        super().__init__(objs)
        self.racers = list(racers)
        self.conflicts = 0
        for o in self.objs.values():
            o["metadata"]["resourceVersion"] = "1"

    def write(self, name: str, edit: Any) -> None:
        o = self.objs[("Deployment", name)]
        edit(o)
        o["metadata"]["generation"] += 1
        o["metadata"]["resourceVersion"] = str(int(o["metadata"]["resourceVersion"]) + 1)

    def send_json(self, method: str, path: str, body: Any, *, content_type: str, query: Any = ()) -> dict[str, Any]:
        if self.racers:
            self.racers.pop(0)(self)
        name = path.rsplit("/", 1)[1]
        o = self.objs[("Deployment", name)]
        asked = json_patch(o, body)["metadata"].get("resourceVersion")
        if asked != o["metadata"]["resourceVersion"]:
            self.conflicts += 1
            self.patches.append((name, body, content_type))
            raise KubeApiError(409, "Conflict", f'Operation cannot be fulfilled on deployments.apps "{name}": the '
                               "object has been modified; please apply your changes to the latest version and "
                               "try again")
        out = super().send_json(method, path, body, content_type=content_type, query=query)
        o["metadata"]["resourceVersion"] = str(int(o["metadata"]["resourceVersion"]) + 1)
        out["metadata"]["resourceVersion"] = o["metadata"]["resourceVersion"]
        return out


def _env(kube: FakeKube) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = kube.objs[("Deployment", "d")]["spec"]["template"]["spec"]["containers"][0]["env"]
    return env


def test_conflict_with_a_run_that_enabled_first_rereads_and_says_unchanged() -> None:
    def other_run(k: RacingKube) -> None:  # a second devmode --enable, whose patch lands first
        k.write("d", lambda o: o["spec"]["template"]["spec"]["containers"][0]["env"].append(
            {"name": DEV_MODE_ENV, "value": "1"}))

    kube = RacingKube([deployment_obj("d", [{"name": "A", "value": "a"}])], [other_run])
    res = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=True, timeout_s=30)
    assert res.result == "unchanged" and res.ok and res.state == "on", res.message
    assert "meanwhile by another writer" in res.message and "nothing sent by this run" in res.message
    assert kube.conflicts == 1 and len(kube.patches) == 1
    assert _env(kube) == [{"name": "A", "value": "a"}, {"name": DEV_MODE_ENV, "value": "1"}]


def test_conflict_with_an_unrelated_write_rebuilds_and_sends_again() -> None:
    def others(k: RacingKube) -> None:
        k.write("d", lambda o: o["spec"]["template"]["spec"]["containers"][0]["env"].insert(
            0, {"name": "B", "value": "b"}))

    kube = RacingKube([deployment_obj("d", [{"name": "A", "value": "a"}])], [others, others])
    res = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=True, timeout_s=30)
    assert res.result == "enabled", res.message
    assert kube.conflicts == 2 and len(kube.patches) == 3
    assert _env(kube) == [{"name": "B", "value": "b"}, {"name": "B", "value": "b"}, {"name": "A", "value": "a"},
                          {"name": DEV_MODE_ENV, "value": "1"}]


def test_an_owner_that_keeps_changing_fails_after_bounded_retries() -> None:
    from kubectl_kvreset.rollout import CONFLICT_RETRIES

    def churn(k: RacingKube) -> None:
        k.write("d", lambda o: o["metadata"].setdefault("labels", {}).update({"n": str(len(k.patches))}))

    kube = RacingKube([deployment_obj("d")], [churn] * 20)
    res = set_dev_mode(kube, "ns", Owner("Deployment", "d"), enable=True, timeout_s=30)
    assert res.result == "failed" and "failed twice" in res.message and "has been modified" in res.message, res.message
    assert len(kube.patches) == CONFLICT_RETRIES + 2 and DEV_MODE_ENV not in str(_env_or_none(kube))


def _env_or_none(kube: FakeKube) -> Any:
    return kube.objs[("Deployment", "d")]["spec"]["template"]["spec"]["containers"][0].get("env")


def test_a_cancel_ends_the_wait_and_the_row_says_the_restart_was_requested() -> None:
    kube = FakeKube([deployment_obj("d")], never_ready=True)
    stops = iter([False, True])  # no cancel before the patch, then one during the wait
    res = restart_owner(kube, "ns", Owner("Deployment", "d"), timeout_s=300, stop=lambda: next(stops, True))
    assert res.result == "interrupted" and res.requested and not res.ok, res
    assert "restart requested" in res.message and "not waited for" in res.message
    assert len(kube.patches) == 1


def test_a_cancel_before_the_patch_sends_nothing_and_later_phases_do_not_start() -> None:
    from kubectl_kvreset.pool import Cancel
    from kubectl_kvreset.rollout import restart_owners

    kube = FakeKube([deployment_obj("pre"), deployment_obj("dec")])
    cancel = Cancel()
    cancel.set()
    owners = [("ns", Owner("Deployment", "pre"), "prefill"), ("ns", Owner("Deployment", "dec"), "decode")]
    results = restart_owners(kube, owners, timeout_s=30, progress=None, cancel=cancel)
    assert [(r.owner.name, r.result, r.requested) for r in results] == [("pre", "interrupted", False),
                                                                        ("dec", "interrupted", False)]
    assert kube.patches == [] and all("before its patch" in r.message for r in results)
