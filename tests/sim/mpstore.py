"""The store side of the fake vLLM's ``LMCacheMPConnector``: its reset hook against the LMCache MP
server the pod's kv-transfer-config names.

vLLM 0.32.0 resolves ``kv_connector: "LMCacheMPConnector"`` to LMCache's own class
(``vllm/distributed/kv_transfer/kv_connector/v1/lmcache_mp_connector.py::
_resolve_lmcache_mp_connector``) unless ``LMCACHE_USE_UPSTREAM_MP`` is set (then vLLM's own
``LMCacheMPConnectorUpstream``, which has no ``reset_cache``); a ``kv_connector_module_path``
naming ``lmcache.integration.vllm.lmcache_mp_connector`` loads LMCache's class whatever the env
says. LMCache 0.5.6's class implements ``reset_cache`` (scheduler role), which sends a
``clear(force=False)`` over ZMQ to the MP server at ``lmcache.mp.host``/``lmcache.mp.port``
(``lmcache/integration/vllm/vllm_multi_process_adapter.py::LMCacheMPSchedulerAdapter.reset_cache``)
and answers True when the server answers. Seen on the real 0.32 CPU build with a real ``lmcache
server``: one reset with ``reset_external=true`` took the server's L1 from 524288 bytes to 0
(tests/peers/test_real_mp_reset.py).

**The stand-in.** The fake speaks no ZMQ. It makes the server do the same work through the
server's own HTTP clear, ``POST /cache/clear {"tier":"l1","force":false}`` on its HTTP port
(``--http-port``, default 8080; a scenario may set ``lmcache_mp_http_port``), which runs the same
``StorageManager.clear`` (lmcache 0.5.6 ``http_apis/cache_api.py::clear_cache``). That works
against the real ``lmcache server`` peer and the simulator's fake one (tests/sim/fakemp.py) alike,
so a test reads from the server afterwards what was really cleared.

**When a server is there.** As for Mooncake (tests/sim/mooncakestore.py): the host of
``lmcache.mp.host`` (``tcp://`` stripped) is looked up in the pod's hosts file (a cluster that
runs real servers, or a pod whose scenario sets ``cluster_dns: true``) or taken as written when it
is a loopback address; otherwise nothing is called and the hook counts as success. A named server
that does not answer makes the hook fail (the reset answers ``success:false``). Only loopback
addresses are ever called.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .mooncakestore import _loopback, hosts_lookup

__all__ = ["DEFAULT_HTTP_PORT", "LMCacheMPHook", "MpReset", "mp_extra"]

DEFAULT_HTTP_PORT = 8080
CLEAR = "/cache/clear"
LMCACHE_MODULE = "lmcache.integration.vllm.lmcache_mp_connector"


def mp_extra(ktc: Mapping[str, Any] | None, depth: int = 0) -> Mapping[str, Any] | None:
    """The ``LMCacheMPConnector`` entry of a kv-transfer-config (a MultiConnector's child
    included), or None."""
    if not isinstance(ktc, Mapping) or depth > 8:
        return None
    if ktc.get("kv_connector") == "LMCacheMPConnector":
        return ktc
    extra = ktc.get("kv_connector_extra_config")
    for child in (extra.get("connectors") or []) if isinstance(extra, Mapping) else []:
        found = mp_extra(child, depth + 1)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class MpReset:
    """One reset hook call: ``server`` as configured, ``via`` the ``ip:port`` called (None when
    not called), ``ok`` what the connector answers, ``detail`` why it failed."""

    server: str | None
    via: str | None
    ok: bool
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """For ``/sim/v1/state``."""
        return {"server": self.server, "via": self.via, "ok": self.ok, "detail": self.detail}


@dataclass
class LMCacheMPHook:
    """``LMCacheMPConnector.reset_cache`` of one fake vLLM (module docstring).

    Args:
        connector: the connector's entry of the kv-transfer-config (``kv_connector_extra_config``
            with ``lmcache.mp.host``, ``kv_connector_module_path``).
        env: the container's environment (``LMCACHE_USE_UPSTREAM_MP``).
        hosts_file: the pod's hosts file, or None.
        http_port: the MP server's HTTP port.
        timeout_s: per call.
    """

    connector: Mapping[str, Any]
    env: Mapping[str, str]
    hosts_file: str | None
    http_port: int = DEFAULT_HTTP_PORT
    timeout_s: float = 10.0
    calls: list[MpReset] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def lmcache_class(self) -> bool:
        """Whether vLLM 0.32 loads LMCache's class (which has the hook) for this connector."""
        module = self.connector.get("kv_connector_module_path")
        if isinstance(module, str) and module:
            return module == LMCACHE_MODULE or (module.startswith("vllm.")
                                                and not self.env.get("LMCACHE_USE_UPSTREAM_MP"))
        return not self.env.get("LMCACHE_USE_UPSTREAM_MP")

    def server(self) -> str | None:
        """``lmcache.mp.host`` as configured (the connector's default ``tcp://localhost``)."""
        extra = self.connector.get("kv_connector_extra_config")
        host = extra.get("lmcache.mp.host") if isinstance(extra, Mapping) else None
        return str(host or "tcp://localhost")

    def _address(self, server: str) -> str | None:
        host = server.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
        if _loopback(host):
            return host
        if self.hosts_file is None:
            return None
        ip = hosts_lookup(self.hosts_file, host)
        return ip if ip is not None and _loopback(ip) else None

    def reset(self) -> bool | None:
        """Clear the server's L1; True on success, False when the server failed, None when the
        class has no hook or no server is modelled (nothing is called). Each call is recorded."""
        if not self.lmcache_class():
            return None
        server = self.server()
        ip = self._address(server) if server else None
        if ip is None:
            return None
        via = f"{ip}:{self.http_port}"
        body = json.dumps({"tier": "l1", "force": False}).encode()
        try:
            conn = http.client.HTTPConnection(ip, self.http_port, timeout=self.timeout_s)
            try:
                conn.request("POST", CLEAR, body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                answer = resp.read()
            finally:
                conn.close()
        except OSError as exc:
            done = MpReset(server, via, False, f"{type(exc).__name__}: {exc}")
        else:
            ok = resp.status == 200
            done = MpReset(server, via, ok, None if ok else f"{resp.status}: {answer[:200].decode('utf-8', 'replace')}")
        with self._lock:
            self.calls.append(done)
        return done.ok

    def snapshot(self) -> list[dict[str, Any]]:
        """Every call so far, oldest first."""
        with self._lock:
            return [c.as_dict() for c in self.calls]
