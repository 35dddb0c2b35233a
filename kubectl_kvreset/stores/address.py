"""A store's address as a vLLM pod's configuration names it. Pure: no I/O."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

__all__ = ["Address", "glob_escape", "split_address"]


@dataclass(frozen=True)
class Address:
    """Where a store listens, as the configuration names it.

    Attributes:
        host: host name or IP (brackets removed); ``""`` for a Unix socket.
        port: TCP port, None when neither the configuration nor the scheme gives one.
        scheme: URL scheme (``redis``, ``rediss``, ``tcp``...), ``""`` for ``host:port``.
        db: Redis database number from the URL path, else None.
        username, password: credentials from the URL (``redis://user:pw@host``), else None.
        tls: the scheme asks for TLS (``rediss``, ``valkeys``).
        path: a Unix socket path (``unix://``), else None.
    """

    host: str
    port: int | None
    scheme: str = ""
    db: int | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    path: str | None = None

    def display(self) -> str:
        """The address without credentials, e.g. ``redis://kv-redis.lmc:6379/0``."""
        if self.path is not None:
            return f"unix://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = host + (f":{self.port}" if self.port is not None else "")
        if self.scheme:
            text = f"{self.scheme}://{text}" + (f"/{self.db}" if self.db is not None else "")
        return text


def split_address(text: str, *, default_port: int | None = None,
                  scheme_port: Callable[[str], int | None] = lambda scheme: None) -> Address:
    """Parse ``host``, ``host:port``, ``[v6]:port`` or a URL (``redis://u:p@h:6379/0``,
    ``tcp://h``, ``unix:///run/redis.sock``).

    The port defaults to ``default_port``, else to ``scheme_port(scheme)`` (the kinds' table:
    :func:`kubectl_kvreset.stores.config.parse_address` passes it).

    Raises:
        ValueError: an empty address or a port that is not a number.
    """
    raw = text.strip()
    if not raw:
        raise ValueError("empty address")
    if "://" not in raw:
        raw = "//" + raw
    parts = urlsplit(raw)
    scheme = parts.scheme.lower()
    if scheme == "unix":
        return Address(host="", port=None, scheme="unix", path=parts.path or parts.netloc)
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"address {text!r}: the port is not a number") from exc
    if port is None:
        port = default_port if default_port is not None else scheme_port(scheme)
    db: int | None = None
    path = parts.path.strip("/")
    if scheme in ("redis", "rediss", "valkey", "valkeys") and path.isdigit():
        db = int(path)
    host = parts.hostname or ""
    if not host:
        raise ValueError(f"address {text!r} names no host")
    return Address(host=host, port=port, scheme=scheme, db=db,
                   username=unquote(parts.username) if parts.username else None,
                   password=unquote(parts.password) if parts.password is not None else None,
                   tls=scheme in ("rediss", "valkeys"))


def glob_escape(text: str) -> str:
    """Escape Redis glob specials (``* ? [ ] \\``) so ``SCAN MATCH`` matches ``text``
    literally (Redis ``util.c::stringmatchlen``: a backslash quotes the next character)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)
