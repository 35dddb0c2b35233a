"""InfiniStore purge against the simulator's fake control plane (which answers as
``bytedance/InfiniStore`` ``infinistore/server.py``), and the rows an API-server refusal gives."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kubectl_kvreset.kube import KubeApiError
from kubectl_kvreset.stores.calls import METHODS, StoreCall, plan_calls
from kubectl_kvreset.stores.clear import CLEARERS, StoreResult, run_call
from kubectl_kvreset.stores.config import Address, StoreKind, StoreUse
from kubectl_kvreset.stores.find import FoundStore, StoreUser
from kubectl_kvreset.stores.infinistore import InfiniStoreError, clear_infinistore, kvmap_len
from kubectl_kvreset.stores.refusal import api_refusal, needed_permission
from kubectl_kvreset.stores.resolve import Endpoint, Resolution
from tests.sim.fakeinfinistore import FakeInfiniStore, infinistore_manage_port


class Recorder:
    """``http(method, path, query)`` onto a :class:`FakeInfiniStore`, recording the calls."""

    def __init__(self, store: FakeInfiniStore) -> None:
        self.store = store
        self.calls: list[tuple[str, str]] = []

    def __call__(self, method: str, path: str, query: Sequence[tuple[str, str]]) -> tuple[int, bytes]:
        self.calls.append((method, path))
        status, _headers, body = self.store.handle(method, path, "")
        return status, body


def test_purge_counts_before_and_after() -> None:
    http = Recorder(FakeInfiniStore(18080, keys=7))
    done = clear_infinistore(http)
    assert (done.before, done.purged, done.after, done.confirmed) == (7, 7, 0, True)
    assert http.calls == [("GET", "/kvmap_len"), ("POST", "/purge"), ("GET", "/kvmap_len")]
    again = clear_infinistore(http)
    assert (again.before, again.after) == (0, 0)


def test_dry_run_only_reads_the_count() -> None:
    store = FakeInfiniStore(18080, keys=4)
    http = Recorder(store)
    done = clear_infinistore(http, dry_run=True)
    assert (done.before, done.after, done.purged) == (4, 4, None)
    assert http.calls == [("GET", "/kvmap_len")] and store.snapshot()["keys"] == 4


def test_without_kvmap_len_the_purge_is_not_confirmed() -> None:
    http = Recorder(FakeInfiniStore(18080, keys=3, kvmap_len_route=False))
    done = clear_infinistore(http)
    # the purge's num says how many there were; nothing says none are left
    assert (done.before, done.purged, done.after, done.confirmed) == (3, 3, None, False)


def test_errors_are_raised_with_the_answer() -> None:
    with pytest.raises(InfiniStoreError, match="500"):
        kvmap_len(lambda m, p, q: (500, b"Internal Server Error"))
    with pytest.raises(InfiniStoreError, match="no integer 'len'"):
        kvmap_len(lambda m, p, q: (200, b'{"size": 3}'))
    with pytest.raises(InfiniStoreError, match="/purge"):
        clear_infinistore(lambda m, p, q: (200, b'{"len": 1}') if m == "GET" else (200, b'{"status": "busy"}'))


def test_manage_port_of_the_server_argv() -> None:
    assert infinistore_manage_port(["infinistore", "--service-port", "12345"]) == 18080
    assert infinistore_manage_port(["/usr/local/bin/infinistore", "--manage-port=9100"]) == 9100
    assert infinistore_manage_port(["python3", "-m", "infinistore.server", "--manage-port", "9200"]) == 9200
    assert infinistore_manage_port(["redis-server"]) is None and infinistore_manage_port(None) is None


def _store(kind: StoreKind, *, targeted_only: bool = True) -> FoundStore:
    class P:  # the VllmPod fields FoundStore and plan_calls read
        def __init__(self, name: str) -> None:
            self.namespace, self.name = "st", name

    users = [StoreUser(P("a"), StoreUse(kind, Address("kv", 12345), "store"), True)]  # type: ignore[arg-type]
    if not targeted_only:
        users.append(StoreUser(P("b"), StoreUse(kind, Address("kv", 12345), "store"), False))  # type: ignore[arg-type]
    return FoundStore(kind, Address("kv", 12345, scheme="infinistore"),
                      Resolution("service", "st", "kv", 12345, (Endpoint("st", "kv-0", 12345),)), tuple(users))


def test_infinistore_is_registered_store_wide() -> None:
    assert StoreKind.INFINISTORE in CLEARERS and \
        METHODS[StoreKind.INFINISTORE](_store(StoreKind.INFINISTORE), None) == "POST /purge"
    [alone] = plan_calls([_store(StoreKind.INFINISTORE)], shared=False)
    assert (alone.scope, alone.method, alone.blocked) == ("store", "POST /purge", None)
    [shared] = plan_calls([_store(StoreKind.INFINISTORE, targeted_only=False)], shared=False)
    assert shared.blocked is not None and "--shared-stores" in shared.blocked and "st/b" in shared.blocked


FORBIDDEN = ('pods "kv-0" is forbidden: User "alice" cannot get resource "pods/proxy" in API group "" '
             'in the namespace "st"')


def test_forbidden_names_the_permission_and_the_remedy() -> None:
    assert needed_permission(FORBIDDEN) == "get on pods/proxy in namespace st"
    assert needed_permission('services is forbidden: User "u" cannot list resource "services" in API group "" '
                             'at the cluster scope') == "list on services at the cluster scope"
    assert needed_permission('x cannot create resource "endpointslices" in API group "discovery.k8s.io" in the '
                             'namespace "n"') == "create on endpointslices.discovery.k8s.io in namespace n"
    assert needed_permission("something else") is None
    call = StoreCall(_store(StoreKind.INFINISTORE), "store", None, "POST /purge")
    msg = api_refusal(call, KubeApiError(403, "Forbidden", FORBIDDEN))
    assert "needs get on pods/proxy in namespace st (the clear uses get and create on pods/proxy)" in msg
    assert msg.endswith("what would empty it: POST http://kv:18080/purge on the InfiniStore server")
    other = api_refusal(call, KubeApiError(503, "ServiceUnavailable", "no endpoints"))
    assert other == "the API server refused the call: no endpoints (503 ServiceUnavailable)"


def test_run_call_turns_a_refusal_into_a_failed_row() -> None:
    class Kube:
        def get_object(self, *a: object) -> dict[str, object]:
            raise KubeApiError(403, "Forbidden", "no pods get")

        def pod_proxy(self, *a: object, **k: object) -> object:
            raise KubeApiError(403, "Forbidden", FORBIDDEN)

    call = StoreCall(_store(StoreKind.INFINISTORE), "store", None, "POST /purge")
    result = run_call(Kube(), call)  # type: ignore[arg-type]
    assert isinstance(result, StoreResult) and result.result == "failed"
    assert "needs get on pods/proxy in namespace st" in (result.message or "")
