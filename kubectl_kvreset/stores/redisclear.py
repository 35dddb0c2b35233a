"""Clearing one model's LMCache keys in Redis or Valkey (LMCache ``connector/redis_connector.py``,
``connector/valkey_connector.py``).

LMCache has no key prefix of its own: every key starts with ``<model>@``
(``lmcache/utils.py::CacheEngineKey.to_string``); the Redis connector writes ``<key>kv_bytes``
and ``<key>metadata``, Valkey ``<key>:kv_bytes``/``<key>:metadata`` (cluster mode wraps the key
in ``{}``). So the per-model clear is ``SCAN MATCH '<glob-escaped model>@*'``, then a filter of
each key found by the whole key layout (:func:`is_model_key`), and ``UNLINK`` of what passes,
counted before and after (``tests/peers/test_stores_redis_mooncake.py``: this is what empties
them; neither the controller nor the worker API does). The glob alone also matches the keys of
a model whose name merely starts with ``<model>@`` (``org/m@v2`` for ``org/m``); the filter keeps those.

The connection is whatever socket ``connect()`` returns (the API server's port-forward, from
:meth:`kubectl_kvreset.kube.Kube.port_forward_socket`); the RESP protocol is the ``redis``
library's (pure Python; ``hiredis`` is used only when installed).
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .address import Address, glob_escape
from .lmcachekey import KEY_TAIL, other_readings

__all__ = ["RedisClear", "RedisStoreError", "clear_model_keys", "is_model_key", "is_unsure_key", "model_key_regex",
           "model_pattern"]

#: SCAN page size and UNLINK batch size.
BATCH = 1000


class RedisStoreError(Exception):
    """The store could not be reached or refused a command (message names it and the fix).

    ``partial``: what the clear had counted when it stopped (None when it deleted nothing):
    ``before`` the keys found so far, ``removed`` those deleted, ``after`` None.
    """

    def __init__(self, message: str, partial: RedisClear | None = None) -> None:
        super().__init__(message)
        self.partial = partial


@dataclass(frozen=True)
class RedisClear:
    """What a per-model clear did: ``before`` keys of the model (``pattern`` and
    :func:`is_model_key`), ``removed`` unlinked (0 on a dry run), ``after`` left at the end
    (None when the end was not counted). ``reconnects``: streams opened again after one was
    lost mid-clear; ``unsure``: keys of an ``UNLINK`` whose answer was lost and that could not
    be checked (0 unless the clear stopped); ``kept``: keys ``pattern`` matched that are not
    the model's (another model's name starts with ``<model>@``), never unlinked; ``unsure_owner``:
    keys in the model's layout that also read as another model's (:func:`is_unsure_key`), never
    unlinked, and the clear is not complete while there are any."""

    pattern: str
    before: int
    removed: int
    after: int | None
    reconnects: int = 0
    unsure: int = 0
    kept: int = 0
    unsure_owner: int = 0


def model_pattern(model: str, *, cluster: bool = False) -> str:
    """The ``SCAN MATCH`` pattern of a model's keys: ``<escaped model>@*``, or
    ``{<escaped model>@*`` for Valkey's cluster mode (keys wrapped in a hash tag)."""
    return ("{" if cluster else "") + glob_escape(model) + "@*"


#: What may follow a key in the store: the connector's suffix, ``kv_bytes``/``metadata``
#: (``connector/redis_connector.py``), ``:kv_bytes``/``:metadata`` (older Valkey connectors) or none
#: (``resp://``, the 0.5.6 Valkey connector).
_SUFFIX = rb"(?::?kv_bytes|:?metadata)?"


def model_key_regex(model: str) -> re.Pattern[bytes]:
    """The compiled (bytes) expression a whole key of ``model`` matches: ``<model>`` literally,
    then the layout of :data:`kubectl_kvreset.stores.lmcachekey.KEY_TAIL` and a connector suffix, optionally
    inside a cluster hash tag ``{...}`` (before a ``:kv_bytes``/``:metadata`` suffix). Use with ``fullmatch``."""
    name = re.escape(model.encode("utf-8", "surrogateescape"))
    tail = KEY_TAIL.encode()
    return re.compile(rb"(?:" + name + tail + _SUFFIX + rb"|\{" + name + tail + rb"\}(?::kv_bytes|:metadata)?)")


def is_model_key(key: bytes | str, model: str) -> bool:
    """True when ``key`` is one of ``model``'s LMCache keys (:func:`model_key_regex`).

    ``org/m`` never matches ``org/m@v2@1@0@ab@half`` (``v2`` is no world size) nor
    ``org/m2@1@0@ab@half``; a key that also reads as another model's (a model named like
    ``org/m@1@0@ab@half``, with tags) is unsure (:func:`is_unsure_key`) and never matches.
    """
    raw = key.encode("utf-8", "surrogateescape") if isinstance(key, str) else key
    return model_key_regex(model).fullmatch(raw) is not None and not is_unsure_key(raw, model)


_BARE_TAIL = re.compile(KEY_TAIL + _SUFFIX.decode())
_BRACED_TAIL = re.compile(KEY_TAIL + r"\}(?::kv_bytes|:metadata)?")


def is_unsure_key(key: bytes | str, model: str) -> bool:
    """True when ``key`` (one in ``model``'s layout, :func:`model_key_regex`) also reads as a key
    of a model with another name, longer (``org/m@1@0@ab@half`` for ``org/m``) or shorter
    (:func:`kubectl_kvreset.stores.lmcachekey.other_readings`): LMCache writes the very same
    string for both, so the clear neither deletes it nor calls it another model's."""
    text = key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else key
    if text.startswith("{"):
        return other_readings(text[1:], len(model), _BRACED_TAIL)
    return other_readings(text, len(model), _BARE_TAIL)


#: Streams one clear may open again in a row, without a command answered in between, after
#: losing one (the API server's port-forward can end a stream under load or on its idle
#: timeout); a clear that makes progress between losses goes on.
RECONNECTS = 5


def _client(connect: Callable[[], socket.socket], address: Address, *, password: str | None,
            username: str | None, timeout_s: float) -> Any:
    import redis
    from redis.backoff import NoBackoff
    from redis.connection import Connection
    from redis.retry import Retry

    tls = address.tls
    host = address.host

    class ForwardedConnection(Connection):
        """A redis-py connection over the socket ``connect()`` gives (TLS wrapped when the URL
        says ``rediss``, verified against the configured host name)."""

        def _connect(self) -> socket.socket:
            sock = connect()
            if tls:
                ctx = ssl.create_default_context()
                sock = ctx.wrap_socket(sock, server_hostname=host)
            sock.settimeout(timeout_s)
            return sock

    pool = redis.ConnectionPool(connection_class=ForwardedConnection, host=host, port=address.port or 6379,
                                db=address.db or 0, password=password, username=username,
                                socket_timeout=timeout_s, max_connections=1, protocol=2,
                                retry=Retry(NoBackoff(), 0))
    return redis.Redis(connection_pool=pool)


class _Link:
    """The client and its reconnections: :meth:`call` runs a command, and when the stream is
    lost (a connection or timeout error that is not an authentication refusal) opens a new one,
    up to :data:`RECONNECTS` times in a row (``reconnects`` counts them all). The redis
    client's own retries are off (``Retry(NoBackoff(), 0)``) so that an ``UNLINK`` whose answer
    was lost is never sent again blindly: :func:`clear_model_keys` checks what it did first."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.client = make()
        self.reconnects = 0
        self.streak = 0

    def lost(self, exc: BaseException) -> bool:
        """True when ``exc`` is a lost stream (not a refusal) and a new one was made."""
        import redis

        if isinstance(exc, redis.AuthenticationError) or not isinstance(
                exc, (redis.ConnectionError, redis.TimeoutError, OSError)):
            return False
        if self.streak >= RECONNECTS:
            return False
        self.streak += 1
        self.reconnects += 1
        self.client.close()
        self.client = self.make()
        return True

    def call_once(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(client)`` on the current stream, without reconnecting; an answer resets the run
        of losses."""
        answer = fn(self.client)
        self.streak = 0
        return answer

    def call(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(client)``, again on a new stream after a loss (see the class docstring)."""
        while True:
            try:
                answer = fn(self.client)
            except Exception as exc:
                if not self.lost(exc):
                    raise
                continue
            self.streak = 0
            return answer


def _scan_pages(link: _Link, pattern: str) -> Iterator[list[bytes]]:
    """Yield each SCAN page's keys; after a lost stream the scan goes on at the same cursor on
    the new one (a cursor is the server's table position, not the connection's)."""
    cursor = 0

    def page(client: Any) -> tuple[int, list[bytes]]:
        at, keys = client.scan(cursor=cursor, match=pattern, count=BATCH)
        return int(at), list(keys)

    while True:
        cursor, keys = link.call(page)
        yield keys
        if int(cursor) == 0:
            return


def _unlink(link: _Link, keys: list[bytes]) -> int:
    """``UNLINK`` ``keys``: how many it removed. When the stream is lost before the answer,
    the keys still there are counted on the new stream (``EXISTS``) and unlinked; those gone
    count as removed by the lost call."""
    try:
        return int(link.call_once(lambda c: c.unlink(*keys)))
    except Exception as exc:
        if not link.lost(exc):
            raise
    while True:
        try:
            there = int(link.client.exists(*keys))  # not progress: the run of losses goes on
            return len(keys) - there + int(link.call_once(lambda c: c.unlink(*keys)))
        except Exception as exc:
            if not link.lost(exc):
                raise


def clear_model_keys(connect: Callable[[], socket.socket], address: Address, model: str, *,
                     password: str | None = None, username: str | None = None, cluster: bool = False,
                     dry_run: bool = False, timeout_s: float = 30.0) -> RedisClear:
    """Count, and unless ``dry_run`` unlink, every key of ``model`` in the store at ``address``.

    ``password``/``username`` default to the URL's. Raises:
        RedisStoreError: no connection, AUTH refused (``NOAUTH``/``WRONGPASS``), or a command
        failed; the message names the address.
    """
    import redis

    pattern = model_pattern(model, cluster=cluster)
    # LMCache 0.5.6's Valkey connector writes bare keys in cluster mode too
    # (``connector/valkey_connector.py``: ``key.to_string()``), older ones ``{<key>}:...``; the two
    # patterns find disjoint keys (a bare key never starts with ``{``)
    patterns = [pattern, model_pattern(model)] if cluster else [pattern]
    regex = model_key_regex(model)

    def layout(page: list[bytes]) -> list[bytes]:
        return [k for k in page if regex.fullmatch(k if isinstance(k, bytes) else str(k).encode()) is not None]

    def mine(page: list[bytes]) -> list[bytes]:
        return [k for k in layout(page) if not is_unsure_key(k, model)]

    # streams opened, counted where they are made: redis-py's pool also opens a new one by itself
    # when it finds the old one closed between two commands (``ConnectionPool.get_connection``),
    # a loss that never reaches :class:`_Link`
    opened = [0]

    def stream() -> socket.socket:
        opened[0] += 1
        return connect()

    def lost_streams() -> int:
        return max(link.reconnects, opened[0] - 1)

    link = _Link(lambda: _client(stream, address,
                                 password=password if password is not None else address.password,
                                 username=username if username is not None else address.username,
                                 timeout_s=timeout_s))
    before = removed = kept = unsure = 0
    batch: list[bytes] = []
    scanned = False
    try:
        try:
            # each page is unlinked as it comes (SCAN still returns every key present from start
            # to end while others are deleted: Redis docs, SCAN "Scan guarantees"), so memory
            # stays one page and a resumed scan repeats nothing
            for each in patterns:
                for found in _scan_pages(link, each):
                    matching = layout(found)
                    page = [k for k in matching if not is_unsure_key(k, model)]
                    before += len(page)
                    unsure += len(matching) - len(page)
                    kept += len(found) - len(matching)
                    for i in range(0, len(page), BATCH):
                        batch = page[i:i + BATCH]
                        if not dry_run and batch:
                            removed += _unlink(link, batch)
                        batch = []
            scanned = True
            after = before if dry_run else sum(len(mine(p)) for each in patterns for p in _scan_pages(link, each))
        except Exception as exc:
            if isinstance(exc, (redis.AuthenticationError, redis.ResponseError)) or (before == 0 and removed == 0):
                raise
            done = RedisClear(pattern, before, removed, None, lost_streams(), len(batch), kept, unsure)
            raise RedisStoreError(f"{address.display()}: the stream to the store was lost and could not be opened "
                                  f"again ({lost_streams()} reconnection(s)): {_partial(done, dry_run, scanned)}; "
                                  f"last error: {exc}", done) from exc
    except redis.AuthenticationError as exc:
        raise RedisStoreError(f"{address.display()}: authentication refused ({exc}); give the password in "
                              "the remote_url or the Secret LMCache reads it from") from exc
    except redis.ResponseError as exc:
        text = str(exc)
        if "NOAUTH" in text or "WRONGPASS" in text:
            raise RedisStoreError(f"{address.display()}: {text}; the configuration names no usable password") from exc
        raise RedisStoreError(f"{address.display()}: {text}") from exc
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise RedisStoreError(f"{address.display()}: cannot talk to the store over port-forward ({exc})") from exc
    finally:
        link.client.close()
    return RedisClear(pattern, before, removed, after, lost_streams(), kept=kept, unsure_owner=unsure)


def _partial(done: RedisClear, dry_run: bool, scanned: bool) -> str:
    """What a clear that stopped had done, in words."""
    if dry_run:
        return f"{done.before} key(s) counted before it stopped (more may exist)"
    text = f"{done.removed} of the {done.before} key(s) found {'' if scanned else 'so far '}deleted"
    if done.unsure:
        text += f", {done.unsure} more sent for deletion without an answer"
    if scanned:
        return text + "; the count of what remains did not finish"
    return text + "; the scan did not finish, so more may exist, and nothing counted what remains"
