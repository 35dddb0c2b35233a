"""Clearing one model's LMCache keys in Redis or Valkey (research/lmcache.md §3).

LMCache has no key prefix of its own: every key starts with ``<model>@``
(``lmcache/utils.py::CacheEngineKey.to_string``); the Redis connector writes ``<key>kv_bytes``
and ``<key>metadata``, Valkey ``<key>:kv_bytes``/``<key>:metadata`` (cluster mode wraps the key
in ``{}``). So the per-model clear is ``SCAN MATCH '<glob-escaped model>@*'`` and ``UNLINK``
of what it finds, counted before and after (research/real-peers.md §3: this is what empties
them; neither the controller nor the worker API does).

The connection is whatever socket ``connect()`` returns (the API server's port-forward, from
:meth:`kubectl_kvreset.kube.Kube.port_forward_socket`); the RESP protocol is the ``redis``
library's (pure Python; ``hiredis`` is used only when installed).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import Address, glob_escape

__all__ = ["RedisClear", "RedisStoreError", "clear_model_keys", "model_pattern"]

#: SCAN page size and UNLINK batch size.
BATCH = 1000


class RedisStoreError(Exception):
    """The store could not be reached or refused a command (message names it and the fix)."""


@dataclass(frozen=True)
class RedisClear:
    """What a per-model clear did: ``pattern`` matched ``before`` keys, ``removed`` were
    unlinked (0 on a dry run), ``after`` matched at the end."""

    pattern: str
    before: int
    removed: int
    after: int


def model_pattern(model: str, *, cluster: bool = False) -> str:
    """The ``SCAN MATCH`` pattern of a model's keys: ``<escaped model>@*``, or
    ``{<escaped model>@*`` for Valkey's cluster mode (keys wrapped in a hash tag)."""
    return ("{" if cluster else "") + glob_escape(model) + "@*"


def _client(connect: Callable[[], socket.socket], address: Address, *, password: str | None,
            username: str | None, timeout_s: float) -> Any:
    import redis
    from redis.connection import Connection

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
                                socket_timeout=timeout_s, max_connections=1, protocol=2)
    return redis.Redis(connection_pool=pool)


def _scan(client: Any, pattern: str) -> list[bytes]:
    return list(client.scan_iter(match=pattern, count=BATCH))


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
    client = _client(connect, address, password=password if password is not None else address.password,
                     username=username if username is not None else address.username, timeout_s=timeout_s)
    try:
        keys = _scan(client, pattern)
        removed = 0
        if not dry_run:
            for i in range(0, len(keys), BATCH):
                removed += int(client.unlink(*keys[i:i + BATCH]))
        after = len(_scan(client, pattern))
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
        client.close()
    return RedisClear(pattern, len(keys), removed, after)
