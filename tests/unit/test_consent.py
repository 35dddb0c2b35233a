"""The one consent rule (:mod:`kubectl_kvreset.consent`) and the places that use it: a
store-wide deletion needs every user targeted; a per-model one needs no pod outside the targets
serving that model there (by name, by a look-alike name, with a model that cannot be read, from a
place that cannot be evaluated, in a namespace that cannot be listed); other models' pods keep
their data and are named as kept."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kubectl_kvreset.consent import SHARED_FLAG, User, hold, kept, unlisted_user
from kubectl_kvreset.fs import plan_fs_clear, run_fs_clear
from kubectl_kvreset.stores.calls import plan_calls
from kubectl_kvreset.stores.config import StoreKind, StoreUse
from kubectl_kvreset.stores.find import FoundStore, StoreUser
from kubectl_kvreset.stores.lmcachekey import may_write_as
from kubectl_kvreset.stores.resolve import Resolution
from tests.unit.test_fstier import MODEL, LocalKube, ktc_fs, pod

ROOT = "/mnt/files-storage/kv"
HOSTPATH = {"name": "kv", "hostPath": {"path": "/srv/kv"}}


# ----------------------------------------------------------------------------- the rule itself

def test_store_wide_needs_every_user_targeted() -> None:
    assert hold([], given=False) is None
    held = hold([User("b/p", "org/other")], given=False)
    assert held is not None and held.why == "others" and held.names == ("b/p",)
    # a pod that serves no model still uses the store
    assert hold([User("b/sidecar", serves=False)], given=False) is not None
    assert hold([User("b/p", "org/other")], given=True) is None


@pytest.mark.parametrize("user,why", [
    (User("b/p", "org/m"), "same"),
    (User("b/p", None), "same"),                         # its model cannot be read: it may serve org/m
    (User("b/p", "org-m"), "alike"),                     # LMCache writes '/' as '-': the same file names
    (User("b/p", "org/m", unsure="disk from $(DIR)"), "unsure"),
    (User("b/p", "org/other", unsure="disk from $(DIR)"), None),  # writes another model's names
    (unlisted_user(), "unlisted"),
    (User("b/p", "org/m2"), None),                       # a look-alike name that is another model
    (User("b/p", "org/m@v2"), None),
    (User("b/job", serves=False), None),                 # mounts the volume, serves no model
])
def test_per_model_needs_no_untargeted_pod_serving_that_model(user: User, why: str | None) -> None:
    held = hold([user], model="org/m", given=False, alike=may_write_as)
    assert (held.why if held else None) == why
    assert hold([user], model="org/m", given=True, alike=may_write_as) is None


def test_the_first_reason_wins_and_unlisted_comes_last() -> None:
    users = [unlisted_user("ns-x"), User("b/other", "org/x"), User("b/same", "org/m")]
    held = hold(users, model="org/m", given=False)
    assert held is not None and held.why == "same" and held.names == ("b/same",)
    assert kept(users, "org/m") == (User("b/other", "org/x"),)
    assert kept(users, None) == ()


def test_kept_names_model_and_plain_pods() -> None:
    users = [User("b/x", "org/x"), User("b/job", serves=False), User("b/u", None)]
    assert [u.shown() for u in kept(users, "org/m")] == ["b/x (org/x)", "b/job"]
    assert User("b/u", None).shown() == "b/u (model unknown)"


# ----------------------------------------------------------------------------- the stores

def _store(kind: StoreKind, users: list[tuple[Any, str | None, bool]], unlisted: tuple[str, ...] = ()) -> FoundStore:
    scope = "model" if kind is StoreKind.REDIS else "store"
    rows = tuple(StoreUser(p, StoreUse(kind=kind, address=None, scope=scope, source="test", model=m), t)
                 for p, m, t in users)
    return FoundStore(kind, None, Resolution("service", "ns", "redis"), rows, unlisted)


def _vllm(name: str, ns: str = "ta", model: str = MODEL) -> Any:
    return pod(name, None, ns=ns, model=model, volumes=(), mounts=())


def test_a_redis_row_keeps_other_models_and_names_them() -> None:
    target, same, other = _vllm("t"), _vllm("s", ns="tb"), _vllm("o", ns="tc", model="org/x")
    store = _store(StoreKind.REDIS, [(target, MODEL, True), (other, "org/x", False)])
    [call] = plan_calls([store], shared=False)
    assert call.blocked is None and call.others == () and call.kept == ("tc/o (org/x)",)
    store = _store(StoreKind.REDIS, [(target, MODEL, True), (same, MODEL, False), (other, "org/x", False)])
    [call] = plan_calls([store], shared=False)
    assert call.blocked is not None and SHARED_FLAG in call.blocked and "tb/s" in call.blocked
    assert call.others == ("tb/s",) and call.kept == ("tc/o (org/x)",)
    store = _store(StoreKind.REDIS, [(target, MODEL, True)], unlisted=("tz",))
    [call] = plan_calls([store], shared=False)
    assert call.blocked is not None and "cannot be listed (tz)" in call.blocked
    [call] = plan_calls([store], shared=True)
    assert call.blocked is None


def test_a_store_wide_row_needs_every_user() -> None:
    target, other = _vllm("t"), _vllm("o", ns="tc", model="org/x")
    [call] = plan_calls([_store(StoreKind.MOONCAKE, [(target, None, True), (other, None, False)])], shared=False)
    assert call.blocked is not None and "tc/o" in call.blocked and call.others == ("tc/o",) and call.kept == ()
    [call] = plan_calls([_store(StoreKind.MOONCAKE, [(target, None, True)])], shared=False)
    assert call.blocked is None


# ----------------------------------------------------------------------------- the FS tier

def _fs(name: str, ns: str, model: str = MODEL, root: str = ROOT) -> Any:
    return pod(name, ktc_fs(root), ns=ns, model=model, volumes=(HOSTPATH,), owner=name)


def test_fs_same_model_in_another_namespace_is_held_and_nothing_runs() -> None:
    target, theirs = _fs("a", "ta"), _fs("b", "tb")
    (t,) = plan_fs_clear([target], [target, theirs])
    assert t.model_only and t.models == () and t.held_models == (MODEL,)
    assert t.held is not None and "tb/b" in t.held and SHARED_FLAG in t.held and "--whole-tier" in t.held
    assert t.sharers == (f"tb/b ({MODEL})",) and t.kept_pods == ()
    kube = LocalKube()
    res = run_fs_clear(kube, t)  # type: ignore[arg-type]
    assert res.result == "left" and kube.calls == [] and "tb/b" in (res.message or "")
    (s,) = plan_fs_clear([target], [target, theirs], shared_stores=True)
    assert s.models == (MODEL,) and s.held is None
    (w,) = plan_fs_clear([target], [target, theirs], whole_tier=True)
    assert not w.model_only and w.held is None


def test_fs_other_model_and_other_directory_are_kept_not_held() -> None:
    target = _fs("a", "ta")
    other_model = _fs("b", "tb", model="org/x")
    elsewhere = _fs("c", "tc", root="/mnt/files-storage/other")  # same model, writes another directory
    (t,) = plan_fs_clear([target], [target, other_model, elsewhere])
    assert t.models == (MODEL,) and t.held is None, t
    assert set(t.kept_pods) == {"tb/b (org/x)", "tc/c"}


def test_fs_unlisted_namespaces_and_unknown_models_hold() -> None:
    target = _fs("a", "ta")
    (t,) = plan_fs_clear([target], [target], unlisted="pods of namespaces that cannot be listed")
    assert t.held_models == (MODEL,) and "cannot be listed" in (t.held or "")
    unknown = dataclasses.replace(_fs("b", "tb"), serve=dataclasses.replace(_fs("b", "tb").serve, model=None))
    (u,) = plan_fs_clear([target], [target, unknown])
    assert u.held_models == (MODEL,) and "model unknown" in (u.held or ""), u


def test_fs_a_non_vllm_pod_on_the_volume_keeps_the_per_model_deletion() -> None:
    target = _fs("a", "ta")
    job = {"metadata": {"name": "backup", "namespace": "tb"},
           "spec": {"nodeName": "node-a", "volumes": [HOSTPATH],
                    "containers": [{"name": "c", "image": "busybox", "volumeMounts": [
                        {"name": "kv", "mountPath": "/data"}]}]}}
    (t,) = plan_fs_clear([target], [target], other_pod_objects=[job])
    assert t.model_only and t.models == (MODEL,) and t.held is None and t.kept_pods == ("tb/backup",)
