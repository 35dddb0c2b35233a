"""The store side of the fake vLLM's ``MooncakeStoreConnector``: its reset hook against the real
Mooncake master the pod's configuration names.

vLLM 0.32.0 reads the master from the JSON file ``MOONCAKE_CONFIG_PATH`` names, key
``master_server_address`` only (``vllm/distributed/mooncake_store.py::MooncakeStoreConfig.
from_file`` / ``load_from_config``), and on ``reset_external=true`` the connector's
``reset_cache`` ends in ``store.remove_all(force=True)`` on the store client of worker rank 0
(``vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/worker.py::LookupKeyServer``),
answering False when that raises (the reset then answers ``success:false``).

**The stand-in.** The fake holds no Mooncake store client (it would need the Mooncake venv, a
transfer engine and a segment in the simulator's process). It makes the master do the same work
through the master's own admin call, ``POST /api/v1/remove_all?force=true`` on its HTTP metrics
port (``--metrics_port``, default 9003; a scenario may set ``mooncake_admin_port``), which removes
every object as the client's ``remove_all(True)`` does (checked on the real master by
``tests/peers/test_stores_redis_mooncake.py``). So what the
test reads from the master afterwards (``master_key_count``) is what was really removed.

**When a master is there.** The host of ``master_server_address`` is looked up in the pod's
hosts file (tests/sim/network.py writes one, naming every Service, for each pod of a cluster
that runs real servers) or taken as written when it is a loopback address. A pod of a cluster
without real servers has no hosts file: no master is modelled and the hook does nothing (the
reset succeeds, as before). A master that is named and resolves but does not answer makes the
hook fail, as the real client's ``remove_all`` would. Only loopback addresses are ever called.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MooncakeReset", "MooncakeStoreHook", "hosts_lookup"]

DEFAULT_ADMIN_PORT = 9003
REMOVE_ALL = "/api/v1/remove_all?force=true"


def hosts_lookup(hosts_file: str | Path, name: str) -> str | None:
    """The first address a hosts file gives ``name`` (case-insensitive), or None."""
    try:
        text = Path(hosts_file).read_text()
    except OSError:
        return None
    want = name.lower().rstrip(".")
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and want in (w.lower() for w in words[1:]):
            return words[0]
    return None


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class MooncakeReset:
    """One reset hook call: ``master`` as configured, ``via`` the ``ip:port`` called (None when
    not called), ``ok`` what the connector answers, ``removed`` the master's ``removed_count``,
    ``detail`` why it failed."""

    master: str | None
    via: str | None
    ok: bool
    removed: int | None = None
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """For ``/sim/v1/state``."""
        return {"master": self.master, "via": self.via, "ok": self.ok, "removed": self.removed,
                "detail": self.detail}


@dataclass
class MooncakeStoreHook:
    """``MooncakeStoreConnector.reset_cache`` of one fake vLLM (module docstring).

    Args:
        env: the container's environment (``MOONCAKE_CONFIG_PATH``).
        read_file: ``container path -> text`` from the pod's volumes (raises OSError).
        hosts_file: the pod's hosts file, or None (no real servers in this cluster).
        admin_port: the master's HTTP port for ``remove_all``.
        timeout_s: per call.
    """

    env: dict[str, str]
    read_file: Callable[[str], str]
    hosts_file: str | None
    admin_port: int = DEFAULT_ADMIN_PORT
    timeout_s: float = 10.0
    calls: list[MooncakeReset] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def master(self) -> str | None:
        """``master_server_address`` from the ``MOONCAKE_CONFIG_PATH`` JSON, or None."""
        path = self.env.get("MOONCAKE_CONFIG_PATH")
        if not path:
            return None
        try:
            cfg = json.loads(self.read_file(path))
        except (OSError, ValueError):
            return None
        value = cfg.get("master_server_address") if isinstance(cfg, dict) else None
        return str(value) if value else None

    def _address(self, master: str) -> str | None:
        host = master.rsplit(":", 1)[0] if ":" in master else master
        host = host.strip("[]")
        if _loopback(host):
            return host
        if self.hosts_file is None:
            return None
        ip = hosts_lookup(self.hosts_file, host)
        return ip if ip is not None and _loopback(ip) else None

    def modelled(self) -> bool:
        """True when the pod's configuration names a master this cluster can reach."""
        master = self.master()
        return master is not None and self._address(master) is not None

    def reset(self) -> bool | None:
        """Empty the master (``remove_all``); True on success, False when the master failed,
        None when no master is modelled (nothing is called). Each call is recorded."""
        master = self.master()
        ip = self._address(master) if master else None
        if ip is None:
            return None
        via = f"{ip}:{self.admin_port}"
        try:
            conn = http.client.HTTPConnection(ip, self.admin_port, timeout=self.timeout_s)
            try:
                conn.request("POST", REMOVE_ALL, body=b"", headers={"Content-Length": "0"})
                resp = conn.getresponse()
                body = resp.read()
            finally:
                conn.close()
        except OSError as exc:
            done = MooncakeReset(master, via, False, detail=f"{type(exc).__name__}: {exc}")
        else:
            try:
                answer = json.loads(body or b"{}")
            except ValueError:
                answer = {}
            ok = resp.status == 200 and bool(answer.get("success"))
            removed = answer.get("removed_count") if isinstance(answer.get("removed_count"), int) else None
            done = MooncakeReset(master, via, ok, removed,
                                 None if ok else f"{resp.status}: {body[:200].decode('utf-8', 'replace')}")
        with self._lock:
            self.calls.append(done)
        return done.ok

    def snapshot(self) -> list[dict[str, Any]]:
        """Every call so far, oldest first."""
        with self._lock:
            return [c.as_dict() for c in self.calls]
