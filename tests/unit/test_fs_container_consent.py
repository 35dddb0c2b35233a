"""``clear --container a`` on a pod with two vLLM containers on the same FS-tier volume: the
container left out is a user of the volume like any other pod (one consent rule), so the
model it serves there is held back without ``--shared-stores`` and its other model is kept."""

from __future__ import annotations

from typing import Any

from kubectl_kvreset.fs import plan_fs_clear
from kubectl_kvreset.pods import describe_pod_containers
from tests.unit.test_fstier import MODEL, ktc_fs, pod

ROOT = "/mnt/files-storage/kv"


def two_containers(second_model: str) -> list[Any]:
    """Every vLLM container of one pod (``a`` serves MODEL, ``b`` ``second_model``), both with
    an FS tier under ROOT on the same PVC."""
    base = pod("p0", ktc_fs(ROOT))
    first = base.raw["spec"]["containers"][0]
    first["name"] = "a"
    second = {**first, "name": "b", "args": [second_model if x == MODEL else x for x in first["args"]]}
    second["args"] = [("8001" if x == "8000" else x) for x in second["args"]]
    base.raw["spec"]["containers"].append(second)
    found = describe_pod_containers(base.raw)
    assert sorted(p.container for p in found) == ["a", "b"]
    return found


def test_the_left_out_container_serving_the_same_model_holds_it_back() -> None:
    universe = two_containers(MODEL)
    targets = [p for p in universe if p.container == "a"]
    (t,) = plan_fs_clear(targets, universe)
    assert t.model_only and t.models == () and t.held_models
    assert t.held is not None and "container b" in t.held
    assert any("container b" in o for o in t.other_pods)
    # --shared-stores is the consent
    (s,) = plan_fs_clear(targets, universe, shared_stores=True)
    assert s.held is None and s.models and s.model_only


def test_the_left_out_container_serving_another_model_keeps_its_directories() -> None:
    universe = two_containers("org/other")
    targets = [p for p in universe if p.container == "a"]
    (t,) = plan_fs_clear(targets, universe)
    # never the whole root: only container a's model, container b's is kept
    assert t.model_only and t.held is None and t.models
    assert any("container b" in k and "org/other" in k for k in t.kept_pods)


def test_both_containers_targeted_empty_the_volume_whole() -> None:
    universe = two_containers("org/other")
    (t,) = plan_fs_clear(universe, universe)
    assert not t.model_only and t.held is None and t.other_pods == ()


def two_lmcache_containers(second_model: str) -> list[Any]:
    """Both vLLM containers of one pod write LMCache's local disk on the same PVC directory."""
    from tests.unit.test_fs_scoped_safety import lmcache_pod

    base = lmcache_pod("l0", MODEL, owner="l").raw
    first = base["spec"]["containers"][0]
    first["name"] = "a"
    second = {**first, "name": "b", "args": [("8001" if x == "8000" else second_model if x == MODEL else x)
                                              for x in first["args"]]}
    base["spec"]["containers"].append(second)
    found = describe_pod_containers(base)
    assert sorted(p.container for p in found) == ["a", "b"]
    return found


def test_the_lmcache_disk_of_a_left_out_container_is_a_user() -> None:
    from kubectl_kvreset.job.storedisk import plan_disks
    from tests.unit.test_fs_scoped_safety import ClaimKube

    for second, blocked in ((MODEL, True), ("org/other", False)):
        universe = two_lmcache_containers(second)
        targets = [p for p in universe if p.container == "a"]
        (call,) = plan_disks(ClaimKube({}, {}), targets, universe, {}, shared=False,  # type: ignore[arg-type]
                             list_pods=lambda _ids: ([], None))
        # never the whole directory: container b writes there
        assert call.scope == "model" and call.model == MODEL, call
        assert (call.blocked is not None) is blocked, call
        if blocked:
            assert call.blocked is not None and "container b" in call.blocked and "--shared-stores" in call.blocked
        else:
            assert any("container b" in k and "org/other" in k for k in call.kept), call
        (call,) = plan_disks(ClaimKube({}, {}), universe, universe, {}, shared=False,  # type: ignore[arg-type]
                             list_pods=lambda _ids: ([], None))
        assert call.scope == "store" and call.blocked is None


def test_a_store_user_left_out_by_container_is_named_with_its_container() -> None:
    from kubectl_kvreset.stores.calls import plan_calls
    from kubectl_kvreset.stores.config import StoreKind, StoreUse
    from kubectl_kvreset.stores.find import FoundStore, StoreUser
    from kubectl_kvreset.stores.resolve import Resolution

    a, b = two_containers(MODEL)
    use = StoreUse(kind=StoreKind.MOONCAKE, address=None, scope="store", source="test", model=MODEL)
    store = FoundStore(StoreKind.MOONCAKE, None, Resolution("service", "llm", "mc"),
                       (StoreUser(a, use, True), StoreUser(b, use, False)), ())
    (call,) = plan_calls([store], shared=False)
    assert call.blocked is not None and "llm/p0 (container b)" in call.blocked, call
