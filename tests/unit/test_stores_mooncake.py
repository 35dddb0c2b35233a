"""Mooncake master clear against a fake admin port that answers as the real master does
(tests/peers/test_stores_redis_mooncake.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kubectl_kvreset.kube import HttpAnswer, KubeApiError, KubeConnectionError
from kubectl_kvreset.stores.calls import StoreCall
from kubectl_kvreset.stores.clear import run_call
from kubectl_kvreset.stores.config import Address, StoreKind, StoreUse
from kubectl_kvreset.stores.find import FoundStore, StoreUser
from kubectl_kvreset.stores.mooncake import OLD_MASTER_REMEDY, MooncakeError, clear_master, key_count
from kubectl_kvreset.stores.redisclear import model_pattern
from kubectl_kvreset.stores.resolve import Endpoint, Resolution


class FakeMaster:
    def __init__(self, keys: int, *, has_remove_all: bool = True, leased: int = 0) -> None:
        self.keys, self.has_remove_all, self.leased = keys, has_remove_all, leased
        self.calls: list[tuple[str, str, tuple[tuple[str, str], ...]]] = []

    def __call__(self, method: str, path: str, query: Sequence[tuple[str, str]]) -> tuple[int, bytes]:
        self.calls.append((method, path, tuple(query)))
        if (method, path) == ("GET", "/metrics"):
            return 200, (b"# HELP master_key_count keys\n# TYPE master_key_count gauge\n"
                         b"master_key_count %d\nmaster_value_size 0\n" % self.keys)
        if path == "/api/v1/remove_all" and self.has_remove_all:
            if method != "POST":
                return 404, b""
            removable = self.keys if ("force", "true") in query else self.keys - self.leased
            self.keys -= removable
            return 200, b'{"success":true,"removed_count":%d}' % removable
        return 404, b"not found"


def test_remove_all_with_force_counts_before_and_after() -> None:
    master = FakeMaster(8, leased=8)
    result = clear_master(master)
    assert (result.before, result.removed, result.after, result.left) == (8, 8, 0, None)
    assert ("POST", "/api/v1/remove_all", (("force", "true"),)) in master.calls
    again = clear_master(master)
    assert (again.before, again.removed, again.after) == (0, 0, 0)


def test_dry_run_changes_nothing_and_old_master_is_left() -> None:
    master = FakeMaster(5)
    dry = clear_master(master, dry_run=True)
    assert (dry.before, dry.after, dry.removed) == (5, 5, None) and master.keys == 5
    assert all(c[0] == "GET" for c in master.calls)
    old = clear_master(FakeMaster(3, has_remove_all=False))
    assert old.left == OLD_MASTER_REMEDY and old.after == 3 and "v0.3.12.post1" in old.left


def test_metrics_failure_raises() -> None:
    with pytest.raises(MooncakeError, match="503"):
        key_count(lambda m, p, q: (503, b"down"))


def test_model_pattern() -> None:
    assert model_pattern("org/m*1") == "org/m\\*1@*"
    assert model_pattern("m", cluster=True) == "{m@*"


class HungMaster(FakeMaster):
    """``remove_all`` never answers (the call raises as the pod proxy's timeout does);
    ``metrics_after``: how ``/metrics`` answers after that (``"down"``: it raises too)."""

    def __init__(self, keys: int, *, removes: bool, metrics_after: str = "up") -> None:
        super().__init__(keys)
        self.removes, self.metrics_after, self.hung = removes, metrics_after, False

    def __call__(self, method: str, path: str, query: Sequence[tuple[str, str]]) -> tuple[int, bytes]:
        if path == "/api/v1/remove_all":
            self.hung = True
            if self.removes:
                self.keys = 0
            raise TimeoutError("no answer within 3 s")
        if self.hung and self.metrics_after == "down":
            raise TimeoutError("no answer within 3 s")
        return super().__call__(method, path, query)


def test_a_hung_remove_all_keeps_before_and_says_the_outcome_is_unknown() -> None:
    still = clear_master(HungMaster(7, removes=False))
    assert (still.before, still.after, still.removed) == (7, 7, None)
    assert still.unknown is not None and "got no answer (no answer within 3 s)" in still.unknown
    down = clear_master(HungMaster(7, removes=False, metrics_after="down"))
    assert (down.before, down.after, down.unknown is not None) == (7, None, True)
    gone = clear_master(HungMaster(7, removes=True))
    assert (gone.before, gone.after, gone.unknown is not None) == (7, 0, True)


def test_a_refused_or_failing_remove_all_keeps_before() -> None:
    class Refusal(Exception):
        pass

    def refusing(method: str, path: str, query: Sequence[tuple[str, str]]) -> tuple[int, bytes]:
        if method == "POST":
            raise Refusal("forbidden")
        return FakeMaster(4)(method, path, query)

    with pytest.raises(MooncakeError) as caught:
        clear_master(refusing, refused=lambda exc: isinstance(exc, Refusal))
    assert caught.value.before == 4 and isinstance(caught.value.__cause__, Refusal)

    def failing(method: str, path: str, query: Sequence[tuple[str, str]]) -> tuple[int, bytes]:
        return (500, b"boom") if method == "POST" else FakeMaster(4)(method, path, query)

    with pytest.raises(MooncakeError, match="500") as caught:
        clear_master(failing)
    assert caught.value.before == 4


class _MasterKube:
    """A Kube stand-in whose pod proxy reaches ``master``; a ``TimeoutError`` from it becomes
    the ``KubeConnectionError`` the real request raises, ``status`` an API server refusal."""

    def __init__(self, master: FakeMaster, status: int | None = None) -> None:
        self.master, self.status = master, status

    def get_object(self, *args: object) -> None:
        return None

    def pod_proxy(self, ns: str, pod: str, port: int, method: str, path: str, query: list[tuple[str, str]],
                  **kw: object) -> HttpAnswer:
        if self.status is not None and method == "POST":
            raise KubeApiError(self.status, "Forbidden", 'pods "m" is forbidden: User "u" cannot create resource '
                               '"pods/proxy" in API group "" in the namespace "st"')
        try:
            status, body = self.master(method, path, query)
        except TimeoutError as exc:
            raise KubeConnectionError(f"{method} {path}: no answer within 3 s") from exc
        return HttpAnswer(status, {}, body)


def _mooncake_call() -> StoreCall:
    use = StoreUse(StoreKind.MOONCAKE, Address("mc", 50051), "store")
    store = FoundStore(StoreKind.MOONCAKE, Address("mc", 50051),
                       Resolution("service", "st", "mc", 50051, (Endpoint("st", "mc-0", 50051),)),
                       (StoreUser(object(), use, True),))  # type: ignore[arg-type]
    return StoreCall(store, "store", None, "POST /api/v1/remove_all?force=true")


@pytest.mark.parametrize(("master", "want"), [
    (HungMaster(7, removes=False), ("unconfirmed", 7, 7, "master_key_count is 7 afterwards")),
    (HungMaster(7, removes=False, metrics_after="down"), ("unconfirmed", 7, None, "nothing counted what remains")),
    (HungMaster(7, removes=True), ("emptied", 7, 0, "master_key_count is 0 afterwards")),
])
def test_the_row_of_a_hung_master_keeps_before(master: HungMaster, want: tuple[str, int, int | None, str]) -> None:
    row = run_call(_MasterKube(master), _mooncake_call(), timeout_s=3)  # type: ignore[arg-type]
    assert (row.result, row.before, row.after) == want[:3], row
    assert "POST /api/v1/remove_all got no answer" in (row.message or "") and want[3] in (row.message or "")


def test_the_row_of_a_refused_remove_all_keeps_before() -> None:
    row = run_call(_MasterKube(FakeMaster(5), status=403), _mooncake_call())  # type: ignore[arg-type]
    assert (row.result, row.before, row.after) == ("failed", 5, None), row
    assert "the API server refused the call" in (row.message or "") and "pods/proxy" in (row.message or "")
