"""Transport to the API server: one ``ssl.SSLContext`` and a pool of at most ``pool_size``
keep-alive connections (:class:`Transport`), a proxy honoured as kubectl honours it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from .client import _LibraryLog, _quiet_library
from .errors import _too_large

_LOG = logging.getLogger("kubectl_kvreset")

class _KeepAlive:
    """At most ``size`` keep-alive HTTP/1.1 connections to one API server (the standard
    library's ``http.client``, sharing one ``ssl.SSLContext``), for the plain requests of a run.

    urllib3's pool does the same with about 0.25 ms more CPU per request (URL parsing, header
    containers, response wrappers, measured by ``make bench``): with three reset routes per pod
    that was most of the plugin's CPU per pod. Same rules as that pool with ``block=True`` and
    ``retries=False``: a caller waits when all ``size`` connections are busy (so a run makes at
    most ``size`` TLS handshakes), an idle connection the server has closed is dropped before
    reuse, nothing is re-sent here, redirects are returned as they are.

    Raises from :meth:`request`: ``TimeoutError`` (the bound was hit), ``OSError`` (refused,
    reset, TLS failure) and ``http.client.HTTPException`` (a malformed or cut answer).
    """

    def __init__(self, host: str, port: int, ssl_context: Any, size: int, prefix: str = "") -> None:
        self.host = host
        self.port = port
        #: the server URL's own path (a cluster behind a path-routing proxy), put before each target
        self.prefix = prefix.rstrip("/")
        self.ssl_context = ssl_context
        self.size = max(1, size)
        self._idle: list[Any] = []
        self._open = 0
        self._cond = threading.Condition()
        #: the TLS session (``ssl.SSLSession``) of the first connection whose server sent a session
        #: ticket: every later connection offers it, so the server resumes it instead of a full handshake
        self._session: Any = None

    def _take(self) -> Any:
        # an idle connection (the most recent first), or None: the caller may open one
        import select

        with self._cond:
            while True:
                while self._idle:
                    conn = self._idle.pop()
                    sock = conn.sock
                    try:
                        dropped = sock is None or bool(select.select([sock], [], [], 0)[0])
                    except (OSError, ValueError):
                        dropped = True
                    if not dropped:
                        return conn
                    conn.close()  # closed by the server while idle (or sent what nobody asked for)
                    self._open -= 1
                if self._open < self.size:
                    self._open += 1
                    return None
                self._cond.wait()

    def _give(self, conn: Any, keep: bool) -> None:
        with self._cond:
            if keep:
                self._idle.append(conn)
            else:
                if conn is not None:
                    conn.close()
                self._open -= 1
            self._cond.notify()

    def request(self, method: str, target: str, body: bytes | None, headers: Mapping[str, str],
                bound: float | None, limit: int | None = None) -> tuple[int, dict[str, str], bytes]:
        """Send one request (``target``: path and query) and read the whole answer:
        ``(status, headers with lower-case names, body)``. ``bound`` (seconds, None: only the
        30 s connect bound) limits the connect and each read. ``limit`` (bytes, None: none)
        caps the body: at most ``limit + 1`` bytes are read, and a longer answer (or a
        ``Content-Length`` above it) raises :class:`KubeAnswerTooLarge` and drops the
        connection, whose rest is never read."""
        conn = self._take()
        keep = False
        try:
            if conn is None:
                conn = self._connect(min(bound or 30.0, 30.0))
            conn.sock.settimeout(bound or None)
            conn.request(method, self.prefix + target, body=body, headers=headers)
            resp = conn.getresponse()
            if limit is not None and (resp.length or 0) > limit:
                raise _too_large(f"{method} {target}", limit)
            data = resp.read() if limit is None else resp.read(limit + 1)
            if limit is not None and len(data) > limit:
                raise _too_large(f"{method} {target}", limit)
            keep = not resp.will_close
            if self._session is None and self.ssl_context is not None:
                # a TLS 1.3 ticket comes after the handshake: it has been read with this answer
                session = conn.sock.session
                if session is not None and session.has_ticket:
                    self._session = session
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            self._give(conn, keep)

    def _connect(self, timeout: float) -> Any:
        """A new connection, connected: TCP (``TCP_NODELAY``, as ``http.client`` sets it), then
        TLS offering :attr:`_session`, which the server resumes when it still accepts it (else a
        full handshake, verified by :attr:`ssl_context` as always).

        A resumed handshake skips the certificate's signature and its verification: on the
        loopback against the simulator (``tests/sim/server.py``) about 0.9 ms instead of 2.7 ms of
        both sides' CPU, and a run opens up to ``size`` connections, most of them at once when
        the resets start. Go's ``crypto/tls``, which serves kube-apiserver, sends TLS 1.3 session
        tickets unless ``SessionTicketsDisabled`` (https://pkg.go.dev/crypto/tls#Config), and
        Python's ``ssl`` resumes one through ``wrap_socket(session=...)``
        (https://docs.python.org/3/library/ssl.html#ssl-session)."""
        import http.client

        if self.ssl_context is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            conn.connect()
            return conn
        conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ssl_context)
        http.client.HTTPConnection.connect(conn)  # the TCP part of HTTPSConnection.connect
        conn.sock = self.ssl_context.wrap_socket(conn.sock, server_hostname=conn.host, session=self._session)
        return conn

    def close(self) -> None:
        """Close the idle connections."""
        with self._cond:
            while self._idle:
                self._idle.pop().close()
                self._open -= 1


class Transport:
    """The HTTP side of a connection: one ``ssl.SSLContext`` (CA, client certificate, verify
    mode: built once, as loading a CA bundle per connection costs about 0.5 ms of CPU) and a pool
    of at most ``pool_size`` keep-alive connections to the API server (:attr:`keep_alive`, or
    the urllib3 :attr:`pool` behind a proxy or with ``tls-server-name``). The pool
    blocks a caller when all its connections are busy rather than opening more, so a run makes
    at most ``pool_size`` TLS handshakes for plain requests (each WebSocket stream, exec or
    port-forward, opens its own connection with the same context).

    ``configuration`` is the client's ``Configuration`` as its loaders filled it (``host``,
    ``ssl_ca_cert``, ``cert_file``, ``key_file``, ``verify_ssl``, ``tls_server_name``,
    ``proxy``, ``no_proxy``, ``api_key``, ``refresh_api_key_hook``).
    """

    def __init__(self, configuration: Any, pool_size: int) -> None:
        import ssl

        self.configuration = configuration
        self.pool_size = max(1, int(pool_size))
        self.tls_material = (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file,
                             bool(configuration.verify_ssl))
        self.ssl_context: ssl.SSLContext | None = None
        if str(configuration.host).startswith("https"):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            if configuration.verify_ssl:
                if configuration.ssl_ca_cert:
                    ctx.load_verify_locations(cafile=configuration.ssl_ca_cert)
                else:
                    ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
            else:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if configuration.cert_file:
                ctx.load_cert_chain(configuration.cert_file, configuration.key_file or None)
            ctx.set_alpn_protocols(["http/1.1"])
            self.ssl_context = ctx
        proxy = getattr(configuration, "proxy", None)
        self._proxied = bool(proxy) and not _bypass_proxy(str(configuration.host),
                                                         getattr(configuration, "no_proxy", None) or "")
        self._pool: Any = None
        self._pool_lock = threading.Lock()
        #: the plain requests' keep-alive connections (:class:`_KeepAlive`); None behind a proxy
        #: or with ``tls-server-name``, where the urllib3 pool (:attr:`pool`) serves them
        self.keep_alive: _KeepAlive | None = None
        if not self._proxied and not getattr(configuration, "tls_server_name", None):
            from urllib.parse import urlsplit

            url = urlsplit(str(configuration.host))
            if url.hostname and url.scheme in ("http", "https"):
                self.keep_alive = _KeepAlive(url.hostname, url.port or (443 if url.scheme == "https" else 80),
                                             self.ssl_context if url.scheme == "https" else None, self.pool_size,
                                             url.path)
        self._timeouts: dict[float | None, Any] = {}
        self._auth_lock = threading.Lock()
        self._auth_log = _LibraryLog()

    @property
    def pool(self) -> Any:
        """The urllib3 pool (``ProxyManager`` behind a proxy kubectl would use, else
        ``PoolManager``) of at most ``pool_size`` connections sharing :attr:`ssl_context`, built
        on first use: it serves the requests :attr:`keep_alive` does not (a proxy,
        ``tls-server-name``), so a run without those never imports urllib3."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = self._make_pool()
            return self._pool

    def _make_pool(self) -> Any:
        import urllib3

        configuration = self.configuration
        kwargs: dict[str, Any] = {"num_pools": 2, "maxsize": self.pool_size, "block": True, "retries": False}
        if self.ssl_context is not None:
            if configuration.verify_ssl:
                kwargs["cert_reqs"] = "CERT_REQUIRED"
            else:
                kwargs["cert_reqs"] = "CERT_NONE"
                # the user asked for it (--insecure-skip-tls-verify, as kubectl, which says
                # nothing per request): no urllib3 warning on every new connection
                import warnings

                warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
            kwargs["ssl_context"] = self.ssl_context
            if getattr(configuration, "tls_server_name", None):
                kwargs["server_hostname"] = configuration.tls_server_name
        if self._proxied:
            return urllib3.ProxyManager(proxy_url=configuration.proxy,
                                        proxy_headers=getattr(configuration, "proxy_headers", None), **kwargs)
        return urllib3.PoolManager(**kwargs)

    def timeout(self, bound: float | None) -> Any:
        """The ``urllib3.Timeout`` for a request bound (seconds; None or 0: only the 30 s
        connect bound), built once per value."""
        found = self._timeouts.get(bound)
        if found is None:
            import urllib3

            found = urllib3.Timeout(total=bound) if bound else urllib3.Timeout(connect=30.0)
            self._timeouts[bound] = found
        return found

    def authorization(self) -> tuple[str | None, list[str]]:
        """The ``Authorization`` header value (None without a token), refreshed by the client's
        hook when the token has expired (an exec plugin runs again), and the library's log
        messages of that refresh (a failed plugin logs instead of raising)."""
        with self._auth_lock, _quiet_library(self._auth_log) as log:
            value = self.configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        return (str(value) if value else None), log.messages

    def ws_sslopt(self) -> dict[str, Any]:
        """websocket-client ``sslopt`` reusing :attr:`ssl_context`."""
        opts: dict[str, Any] = {"context": self.ssl_context}
        if getattr(self.configuration, "tls_server_name", None):
            opts["server_hostname"] = self.configuration.tls_server_name
        return opts


def _bypass_proxy(host: str, no_proxy: str) -> bool:
    from urllib.parse import urlsplit

    hostname = urlsplit(host).hostname or ""
    for entry in (e.strip() for e in no_proxy.split(",")):
        if entry == "*" or (entry and (hostname == entry.lstrip(".") or hostname.endswith("." + entry.lstrip(".")))):
            return True
    return False
