"""A Redis clear whose port-forward stream is lost mid-way: it opens a new stream and goes on
(the SCAN at the same cursor, an UNLINK whose answer was lost checked with EXISTS), or, when
no stream can be had, the row keeps what was counted: before, deleted, and no after.

The store is a fake speaking RESP over a socketpair (one per connection, as
``Kube.port_forward_socket`` gives): a sorted key list, ``SCAN`` cursors as list positions, and
a rule that drops the connection at a chosen command, before or after running it."""

from __future__ import annotations

import fnmatch
import socket
import threading
from typing import Any

import pytest

from kubectl_kvreset.stores import redisclear
from kubectl_kvreset.stores.calls import StoreCall
from kubectl_kvreset.stores.clear import run_call
from kubectl_kvreset.stores.config import Address, StoreKind, StoreUse
from kubectl_kvreset.stores.find import FoundStore, StoreUser
from kubectl_kvreset.stores.redisclear import RedisStoreError, clear_model_keys
from kubectl_kvreset.stores.resolve import Endpoint, Resolution


class FakeRedis:
    """Keys in order; ``drops``: ``(command, n, after)``: the n-th such command (1-based,
    counted over every connection) closes the connection, after running it when ``after``.
    ``refuse_after``: connections after this many are refused (the stream cannot be had)."""

    def __init__(self, keys: list[str], drops: list[tuple[str, int, bool]] = (), refuse_after: int | None = None
                 ) -> None:  # type: ignore[assignment]
        self.table = sorted(keys)
        self.present = set(keys)
        self.drops = list(drops)
        self.seen: dict[str, int] = {}
        self.connections = 0
        self.refuse_after = refuse_after
        self.lock = threading.Lock()

    @property
    def keys(self) -> list[str]:
        """The keys held now, in order."""
        return [k for k in self.table if k in self.present]

    def connect(self) -> socket.socket:
        self.connections += 1
        if self.refuse_after is not None and self.connections > self.refuse_after:
            raise OSError("the API server refused the upgrade")
        ours, theirs = socket.socketpair()
        threading.Thread(target=self._serve, args=(theirs,), daemon=True).start()
        return ours

    def _serve(self, sock: socket.socket) -> None:
        f = sock.makefile("rb")
        try:
            while True:
                line = f.readline()
                if not line:
                    return
                assert line[:1] == b"*"
                argv = []
                for _ in range(int(line[1:])):
                    size = int(f.readline()[1:])
                    argv.append(f.read(size + 2)[:-2])
                answer = self._command(argv)
                if answer is None:
                    return
                sock.sendall(answer)
        finally:
            f.close()
            sock.close()

    def _command(self, argv: list[bytes]) -> bytes | None:
        name = argv[0].decode().upper()
        with self.lock:
            self.seen[name] = self.seen.get(name, 0) + 1
            drop = next((d for d in self.drops if d[0] == name and d[1] == self.seen[name]), None)
            if drop is not None and not drop[2]:
                return None
            answer = self._run(name, [a.decode() for a in argv[1:]])
            return None if drop is not None else answer

    def _run(self, name: str, args: list[str]) -> bytes:
        if name == "SCAN":
            at, match, count = int(args[0]), args[args.index("MATCH") + 1], int(args[args.index("COUNT") + 1])
            # the cursor is a position in the table of every key ever held, which deletes do not move
            page = self.table[at:at + count]
            nxt = at + count if at + count < len(self.table) else 0
            found = [k for k in page if k in self.present and fnmatch.fnmatchcase(k, match)]
            body = b"".join(b"$%d\r\n%s\r\n" % (len(k), k.encode()) for k in found)
            c = str(nxt).encode()
            return b"*2\r\n$%d\r\n%s\r\n*%d\r\n" % (len(c), c, len(found)) + body
        if name in ("UNLINK", "EXISTS"):
            there = [k for k in args if k in self.present]
            if name == "UNLINK":
                self.present -= set(args)
            return b":%d\r\n" % len(there)
        return b"-ERR unknown command\r\n"


def _keys(a: int, b: int) -> list[str]:
    return [f"org/m@1@0@{i:08x}@half" for i in range(a)] + [f"org/n@1@0@{i:08x}@half" for i in range(b)]


def _clear(fake: FakeRedis, **kw: Any) -> redisclear.RedisClear:
    return clear_model_keys(fake.connect, Address("kv", 6379, scheme="redis"), "org/m", timeout_s=5, **kw)


@pytest.mark.parametrize("drop", [("UNLINK", 2, True), ("UNLINK", 3, False), ("SCAN", 2, False),
                                  ("SCAN", 4, True), ("EXISTS", 1, False)])
def test_a_lost_stream_is_opened_again_and_the_clear_goes_on(drop: tuple[str, int, bool]) -> None:
    fake = FakeRedis(_keys(3500, 700), drops=[("UNLINK", 2, True), drop] if drop[0] == "EXISTS" else [drop])
    done = _clear(fake)
    assert (done.before, done.removed, done.after) == (3500, 3500, 0), done
    assert done.reconnects == (2 if drop[0] == "EXISTS" else 1)
    assert fake.keys == sorted(_keys(0, 700))


def test_no_new_stream_keeps_before_and_what_was_deleted() -> None:
    fake = FakeRedis(_keys(3500, 700), drops=[("UNLINK", 3, True)], refuse_after=1)
    with pytest.raises(RedisStoreError) as caught:
        _clear(fake)
    partial = caught.value.partial
    assert partial is not None
    # the third batch was deleted by the server but its answer never came: unsure, not counted
    assert (partial.before, partial.removed, partial.after, partial.unsure) == (3000, 2000, None, 1000), partial
    assert len([k for k in fake.keys if k.startswith("org/m@")]) == 500
    text = str(caught.value)
    assert "2000 of the 3000 key(s) found so far deleted" in text and "1000 more sent for deletion" in text


def test_a_stream_lost_before_anything_was_done_is_a_plain_failure() -> None:
    fake = FakeRedis(_keys(10, 0), drops=[("SCAN", 1, False)], refuse_after=1)
    with pytest.raises(RedisStoreError) as caught:
        _clear(fake)
    assert caught.value.partial is None and "cannot talk to the store" in str(caught.value)


class _Kube:
    def __init__(self, fake: FakeRedis) -> None:
        self.fake = fake

    def port_forward_socket(self, namespace: str, pod: str, port: int, *, timeout_s: float) -> socket.socket:
        return self.fake.connect()


def _call() -> StoreCall:
    use = StoreUse(StoreKind.REDIS, Address("kv", 6379), "model", model="org/m")
    store = FoundStore(StoreKind.REDIS, Address("kv", 6379, scheme="redis"),
                       Resolution("service", "st", "kv", 6379, (Endpoint("st", "kv-0", 6379),)),
                       (StoreUser(object(), use, True),))  # type: ignore[arg-type]
    return StoreCall(store, "model", "org/m", "SCAN MATCH 'org/m@*' + UNLINK")


def test_the_row_of_a_clear_cut_mid_way_keeps_its_counts() -> None:
    fake = FakeRedis(_keys(2500, 10), drops=[("UNLINK", 2, False)], refuse_after=1)
    row = run_call(_Kube(fake), _call())  # type: ignore[arg-type]
    assert (row.result, row.before, row.after, row.via) == ("failed", 2000, None, "st/kv-0:6379"), row
    assert "1000 of the 2000 key(s) found so far deleted" in (row.message or "")
    assert "1000 more sent" in (row.message or "")


def test_the_row_of_a_resumed_clear_says_emptied_and_names_the_reconnection() -> None:
    fake = FakeRedis(_keys(2500, 10), drops=[("UNLINK", 2, True)])
    row = run_call(_Kube(fake), _call())  # type: ignore[arg-type]
    assert (row.result, row.before, row.after) == ("emptied", 2500, 0), row
    assert "lost 1 time(s)" in (row.message or "") and "2500 key(s) deleted" in (row.message or "")


def test_the_reconnections_are_bounded() -> None:
    fake = FakeRedis(_keys(1500, 0), drops=[("UNLINK", n, False) for n in range(1, 20)])
    with pytest.raises(RedisStoreError) as caught:
        _clear(fake)
    assert caught.value.partial is not None and caught.value.partial.removed == 0
    assert fake.connections == redisclear.RECONNECTS + 1


def test_a_clear_that_makes_progress_between_losses_goes_on() -> None:
    # every other UNLINK's answer is lost (after it ran), and every other SCAN: far more losses than
    # RECONNECTS, but never two in a row without progress
    drops = [("UNLINK", n, True) for n in range(1, 20, 2)] + [("SCAN", n, False) for n in range(2, 30, 2)]
    fake = FakeRedis(_keys(6000, 300), drops=drops)
    done = _clear(fake)
    assert (done.before, done.removed, done.after) == (6000, 6000, 0), done
    assert done.reconnects > redisclear.RECONNECTS
    assert fake.keys == sorted(_keys(0, 300))
