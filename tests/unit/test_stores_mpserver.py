"""LMCache MP server L1 clear (kubectl_kvreset/stores/mpserver.py) against a fake HTTP port that
answers as each release does (read in the wheels' ``lmcache/v1/multiprocess/http_server.py``:
0.4.3 ``/api/clear-cache`` and
``/api/status``, 0.5.0 ``/clear-cache``, 0.5.1+ ``/cache/clear`` with ``tier``/``force``) and as
LMCache 0.5.6 was seen to answer (tests/peers/test_stores_mpserver.py: ``/status`` shape, 404 for the old
paths, 405 for a wrong method, 400 for another tier)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from kubectl_kvreset.stores.calls import METHODS
from kubectl_kvreset.stores.config import StoreKind
from kubectl_kvreset.stores.mpserver import (
    FORCE_FLAG,
    L1Count,
    MpClear,
    MpServerError,
    clear_l1,
    clear_method,
    l1_status,
    parse_status,
    summary,
    zmq_only_remedy,
)

OBJECT_BYTES = 65536


class FakeMp:
    """An MP server's HTTP port of one release: ``objects`` in L1, ``locked`` of them locked
    (kept by ``force: false``), ``l2`` adapters' status entries."""

    def __init__(self, version: str = "0.5.6", objects: int = 6, *, locked: int = 0,
                 l2: Sequence[dict[str, Any]] = (), status_shape: str = "multi") -> None:
        self.version, self.objects, self.locked, self.l2 = version, objects, locked, list(l2)
        self.status_shape = status_shape
        self.calls: list[tuple[str, str, Any]] = []

    def _status(self) -> dict[str, Any]:
        l1 = {"is_healthy": True, "total_object_count": self.objects, "memory_used_bytes": self.objects * OBJECT_BYTES,
              "memory_total_bytes": 268435456}
        sm: dict[str, Any] = {"is_healthy": True, "l2_adapters": self.l2, "num_l2_adapters": len(self.l2)}
        if self.status_shape == "multi":
            sm["l1_managers"] = {"_default": l1}
            sm["l1_manager"] = l1
        elif self.status_shape == "single":
            sm["l1_manager"] = l1
        else:
            sm = {"is_healthy": True}
        return {"is_healthy": True, "engine_type": "MPCacheServer", "storage_manager": sm}

    def _clear(self, force: bool) -> None:
        self.objects = 0 if force else min(self.objects, self.locked)

    def __call__(self, method: str, path: str, query: Sequence[tuple[str, str]],
                 body: bytes | None) -> tuple[int, bytes]:
        parsed = json.loads(body) if body else None
        self.calls.append((method, path, parsed))
        v = tuple(int(x) for x in self.version.split("."))
        status_path = "/api/status" if v < (0, 5, 0) else "/status"
        if path == status_path:
            return (200, json.dumps(self._status()).encode()) if method == "GET" else \
                (405, b'{"detail":"Method Not Allowed"}')
        if v >= (0, 5, 1) and path == "/cache/clear":
            if method != "POST":
                return 405, b'{"detail":"Method Not Allowed"}'
            req = parsed or {}
            if req.get("tier", "l1") != "l1":
                return 400, b'{"detail":"tier \'l2\' not supported; only \'l1\'"}'
            self._clear(bool(req.get("force", v < (0, 5, 6))))
            return 200, b'{"status":"ok","cleared":{"tier":"l1"}}'
        if v[:2] == (0, 5) and v[2] == 0 and path == "/clear-cache" and method == "POST":
            self._clear(bool((parsed or {}).get("force", True)))
            return 200, b'{"status":"ok"}'
        if v[:2] == (0, 4) and path == "/api/clear-cache" and method == "POST":
            self._clear(True)  # the body is ignored
            return 200, b'{"status":"ok"}'
        return 404, b'{"detail":"Not Found"}'


def test_056_clear_sends_tier_and_force_false_and_counts_objects_and_bytes() -> None:
    mp = FakeMp("0.5.6", 6)
    done = clear_l1(mp)
    assert (done.before.objects, done.after.objects, done.path) == (6, 0, "/cache/clear")
    assert (done.before.bytes, done.after.bytes) == (6 * OBJECT_BYTES, 0)
    assert ("POST", "/cache/clear", {"tier": "l1", "force": False}) in mp.calls
    assert not any(c[1] in ("/clear-cache", "/api/clear-cache") for c in mp.calls)
    result, before, after, message = summary([("mp/srv-0", done)])
    assert (result, before, after) == ("emptied", 6, 0)
    assert message == f"L1 of mp/srv-0: 6 -> 0 objects, {6 * OBJECT_BYTES} -> 0 bytes"


def test_force_flag_sends_force_true_and_removes_locked_objects() -> None:
    kept = clear_l1(FakeMp("0.5.6", 6, locked=2))
    result, _, after, message = summary([("mp/srv-0", kept)])
    assert (result, after) == ("left", 2) and FORCE_FLAG in (message or "") and "locked" in (message or "")
    mp = FakeMp("0.5.6", 6, locked=2)
    forced = clear_l1(mp, force=True)
    assert ("POST", "/cache/clear", {"tier": "l1", "force": True}) in mp.calls
    assert summary([("mp/srv-0", forced)], force=True)[:3] == ("emptied", 6, 0)
    # 0.5.1-0.5.5 default force to true: the explicit false is what keeps locked objects there too
    old = FakeMp("0.5.3", 6, locked=2)
    assert clear_l1(old).after.objects == 2


@pytest.mark.parametrize(("version", "path", "status_path"), [
    ("0.5.0", "/clear-cache", "/status"),
    ("0.4.3", "/api/clear-cache", "/api/status"),
])
def test_older_releases_fall_back_on_404(version: str, path: str, status_path: str) -> None:
    mp = FakeMp(version, 5)
    done = clear_l1(mp)
    assert (done.before.objects, done.after.objects, done.path, done.after.path) == (5, 0, path, status_path)
    posts = [c[1] for c in mp.calls if c[0] == "POST"]
    assert posts == ["/cache/clear", "/clear-cache", "/api/clear-cache"][:posts.index(path) + 1]
    assert all(c[2] == {"tier": "l1", "force": False} for c in mp.calls if c[0] == "POST")
    result, _, _, message = summary([("mp/srv-0", done)])
    assert result == "emptied" and f"POST {path}" in (message or "")


def test_other_answers_are_not_fallen_back_from() -> None:
    def starting(method: str, path: str, query: Sequence[tuple[str, str]], body: bytes | None) -> tuple[int, bytes]:
        if path == "/status":
            return 200, json.dumps(FakeMp()._status()).encode()
        return 503, b'{"detail":"server not initialized"}'

    with pytest.raises(MpServerError, match="503.*not initialized"):
        clear_l1(starting)
    with pytest.raises(MpServerError, match="GET /status answered 500"):
        l1_status(lambda m, p, q, b: (500, b"boom"))
    with pytest.raises(MpServerError, match="not JSON"):
        l1_status(lambda m, p, q, b: (200, b"<html>"))


def test_no_clear_path_at_all_is_left_with_the_restart() -> None:
    mp = FakeMp("0.5.6", 4)
    no_clear = lambda m, p, q, b: mp(m, p, q, b) if p == "/status" else (404, b"")  # noqa: E731
    done = clear_l1(no_clear)
    assert done.left and "restart" in done.left and done.after.objects == 4
    assert summary([("mp/srv-0", done)])[0] == "left"


def test_dry_run_reads_only() -> None:
    mp = FakeMp("0.5.6", 3)
    done = clear_l1(mp, dry_run=True)
    assert (done.before.objects, done.after.objects, done.path) == (3, 3, None) and mp.objects == 3
    assert all(c[0] == "GET" for c in mp.calls)
    result, before, after, message = summary([("mp/srv-0", done)], dry_run=True, force=True)
    assert (result, before, after) == ("planned", 3, 3) and FORCE_FLAG in (message or "")


def test_l2_behind_the_server_is_left_with_the_reason() -> None:
    mp = FakeMp("0.5.6", 6, l2=[{"is_healthy": True, "type": "MockL2Adapter", "stored_object_count": 6}])
    done = clear_l1(mp)
    assert done.after.objects == 0 and done.after.l2 == ("MockL2Adapter (6 objects)",)
    result, _, after, message = summary([("mp/srv-0", done)])
    assert (result, after) == ("left", 0)
    assert "L2" in (message or "") and "MockL2Adapter" in (message or "") and "L1 only" in (message or "")


def test_status_shapes() -> None:
    assert parse_status(FakeMp(status_shape="single")._status()).objects == 6
    unknown = parse_status(FakeMp(status_shape="none")._status())
    assert (unknown.objects, unknown.bytes) == (None, None)
    assert parse_status({"storage_manager": {"l1_managers": {
        "a": {"total_object_count": 2, "memory_used_bytes": 10},
        "b": {"total_object_count": 3, "memory_used_bytes": 5}}}}) == L1Count(5, 15)
    assert parse_status([1, 2]).objects is None
    # a count that cannot be read is never emptied
    done = clear_l1(FakeMp(status_shape="none"))
    result, _, after, message = summary([("mp/srv-0", done)])
    assert result == "unconfirmed" and after is None and "gave no L1 object count" in (message or "")


def test_several_pods_zmq_only_and_errors() -> None:
    a = clear_l1(FakeMp("0.5.6", 2))
    b = clear_l1(FakeMp("0.5.6", 3))
    assert summary([("mp/a", a), ("mp/b", b)])[:3] == ("emptied", 5, 0)
    zmq = zmq_only_remedy("mp/lmcache-0")
    assert "mp/lmcache-0" in zmq and "restart" in zmq and "lmcache server" in zmq and "--http-port" in zmq
    result, before, after, message = summary([("mp/a", a), ("mp/lmcache-0", zmq)])
    assert (result, before, after) == ("left", None, None) and zmq in (message or "")
    result, _, _, message = summary([("mp/a", a), ("mp/b", MpServerError("GET /status answered 503"))])
    assert result == "failed" and "mp/b: GET /status answered 503" in (message or "")


def test_method_text() -> None:
    assert clear_method() == 'POST /cache/clear {"tier":"l1","force":false}'
    assert clear_method(True) == 'POST /cache/clear {"tier":"l1","force":true}'
    assert METHODS[StoreKind.LMCACHE_MP](None, None) == clear_method()  # type: ignore[arg-type]
    assert isinstance(MpClear(L1Count(0, 0), L1Count(0, 0), None), MpClear)


def test_a_release_without_status_or_clear_is_left_unconfirmed() -> None:
    done = clear_l1(lambda m, p, q, b: (200, b'{"status":"healthy"}') if p == "/api/healthcheck" else (404, b""))
    assert (done.before.objects, done.after.objects, done.path) == (None, None, None) and done.left
    result, before, after, message = summary([("mp/srv-0", done)])
    assert (result, before, after) == ("left", None, None) and "no HTTP clear" in (message or "")


class FakeKube:
    """The two calls the MP clearer makes: ``get`` of the server pod and its pod proxy (the
    answers of ``servers``, by pod name; a missing name is the API server's 403)."""

    def __init__(self, pods: dict[str, dict[str, Any]], servers: dict[str, FakeMp]) -> None:
        self.pods, self.servers = pods, servers
        self.proxied: list[tuple[str, int, str, str | None]] = []

    def get_object(self, api: str, resource: str, ns: str, name: str) -> dict[str, Any]:
        return self.pods[name]

    def pod_proxy(self, ns: str, name: str, port: int, method: str, path: str, query: Any = (), *,
                  body: bytes | None = None, content_type: str | None = None, timeout_s: Any = None) -> Any:
        from kubectl_kvreset.kube import HttpAnswer

        self.proxied.append((name, port, path, content_type))
        if name not in self.servers:
            status = json.dumps({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                                 "message": f'pods "{name}" is forbidden: cannot create resource "pods/proxy"'})
            return HttpAnswer(403, {}, status.encode(), from_apiserver=True)
        code, answer = self.servers[name](method, path, query, body)
        return HttpAnswer(code, {}, answer)


def _pod(name: str, command: list[str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "mp"}, "spec": {"containers": [{"name": "c", "command": command}]}}


def test_the_clearer_reaches_each_pod_on_its_http_port() -> None:
    from kubectl_kvreset.stores.calls import StoreCall
    from kubectl_kvreset.stores.clear import CLEARERS, run_call
    from kubectl_kvreset.stores.find import FoundStore
    from kubectl_kvreset.stores.resolve import Endpoint, Resolution

    eps = (Endpoint("mp", "a", 5555), Endpoint("mp", "b", 5555), Endpoint("mp", "c", 5555, ready=False))
    store = FoundStore(StoreKind.LMCACHE_MP, None, Resolution("service", "mp", "lmcache", 5555, eps), ())
    call = StoreCall(store, "store", None, clear_method())
    kube = FakeKube({"a": _pod("a", ["lmcache", "server", "--http-port", "8181"]),
                     "b": _pod("b", ["lmcache", "server"]), "c": _pod("c", ["lmcache", "server"])},
                    {"a": FakeMp(objects=2), "b": FakeMp(objects=3)})
    assert StoreKind.LMCACHE_MP in CLEARERS
    done = run_call(kube, call)  # type: ignore[arg-type]
    assert (done.before, done.after, done.unit, done.via) == (None, None, "objects", "mp/a:8181, mp/b:8080")
    assert done.result == "left" and "pod mp/c is not ready" in (done.message or "")
    assert ("a", 8181, "/cache/clear", "application/json") in kube.proxied
    assert kube.servers["a"].objects == 0 and kube.servers["b"].objects == 0
    # a refused pod proxy fails the row and names the permission
    kube = FakeKube({"a": _pod("a", ["lmcache", "server"])}, {})
    done = run_call(kube, StoreCall(FoundStore(StoreKind.LMCACHE_MP, None,
                                               Resolution("pod", "mp", "a", None, eps[:1]), ()),
                                    "store", None, clear_method()))  # type: ignore[arg-type]
    assert done.result == "failed" and 'cannot create resource "pods/proxy"' in (done.message or "")
    # a ZMQ-only server: nothing is called
    kube = FakeKube({"a": _pod("a", ["python3", "-m", "lmcache.v1.multiprocess.server"])}, {})
    done = run_call(kube, StoreCall(FoundStore(StoreKind.LMCACHE_MP, None,
                                               Resolution("pod", "mp", "a", None, eps[:1]), ()),
                                    "store", None, clear_method()))  # type: ignore[arg-type]
    assert done.result == "left" and "ZMQ-only" in (done.message or "") and kube.proxied == []
