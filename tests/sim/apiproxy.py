"""``pods/proxy`` and ``services/proxy`` of the API server to the pod runtimes, and the faults
(tests/sim/faults.py) that answer, delay or drop API requests and proxied calls."""

from __future__ import annotations

import json
import time
from typing import Any

from .apibase import (
    _HOP_BY_HOP,
    _Dropped,
    _Handler,
    _Reply,
    _Stream,
)
from .apierrors import ApiError, bad_request
from .clusterbase import PodRecord
from .fakevllm import StreamBody
from .faults import hangs


class ProxyHandlers:
    """Proxies and faults (a mixin of :class:`tests.sim.server.SimServer`)."""

    # ---------------- faults ----------------
    def _api_fault(self, verb: str, resource: str, ns: str | None, name: str, user: str) -> None:
        """Apply the first ``faults.api`` rule that fires: sleep, then drop the connection
        (:class:`_Dropped`) or answer its ``Status`` (:class:`_Reply`); else return."""
        action = self.faults.api_action(verb, resource, ns, name, user)
        if action is None:
            return
        if action.delay_s > 0:
            self._stop_event.wait(action.delay_s)
        if action.drop:
            raise _Dropped()
        if action.status is not None:
            raise _Reply(action.status, json.dumps(action.body).encode(),
                         [("Content-Type", "application/json"), *action.headers])

    def _pod_faults(self, rec: PodRecord) -> dict[str, Any]:
        """The per-pod fault keys of the scenario rules matching this pod (owner, ordinal,
        namespace, name, as the controllers match overrides)."""
        owner = (rec.owner[0].lower(), rec.owner[1]) if rec.owner else ("pod", rec.name)
        return self.cluster.scenario.pod_faults(owner, rec.ordinal, rec.namespace, rec.name)

    def _pod_fault_gate(self, ns: str, pname: str, path: str) -> None:
        """Per-pod faults on a proxied call, before the pod is looked up: ``hang`` holds the
        request (up to ``hang_limit``, then 503 ``i/o timeout``); ``delete_on_first_reset``
        deletes the pod on its first ``/reset_*`` call (its controller makes a successor; the
        call then goes on by name: 404 for a new name); ``down_for`` makes the pod refuse
        connections (503 ``connection refused``) and be not Ready for that many seconds from
        its first call (``down_at: first_reset``: its first reset call), then Ready again."""
        rec = self.cluster.record_for(ns, pname)
        if rec is None:
            return
        pf = self._pod_faults(rec)
        if not pf:
            return
        is_reset = path.rstrip("/").startswith("/reset_")
        with self._fault_lock:
            st = self._pod_fault_state.setdefault(rec.uid, {"pod": pname})
        if hangs(pf.get("hang"), path):
            with self._fault_lock:
                st["hung_calls"] = st.get("hung_calls", 0) + 1
            self._stop_event.wait(self.hang_limit)
            raise ApiError(503, "ServiceUnavailable",
                           f"error trying to reach service: dial tcp {rec.pod_ip}: i/o timeout")
        if pf.get("delete_on_first_reset") and is_reset:
            with self._fault_lock:
                first = not st.get("deleted_on_reset")
                st["deleted_on_reset"] = True
            if first:
                try:
                    self.store.delete(self.cluster.t_pod, ns, pname)
                except ApiError:
                    pass
            return
        down = pf.get("down_for")
        if down:
            now = time.monotonic()
            start = False
            with self._fault_lock:
                if "down_until" not in st and (is_reset or pf.get("down_at", "first_call") == "first_call"):
                    st["down_until"] = now + float(down)
                    st["down_since"] = now
                    start = True
                until = st.get("down_until")
            if start:
                self.cluster.set_pod_ready(rec, False, "Error")
                self.cluster.call_at(now + float(down), lambda: self.cluster.set_pod_ready(rec, True))
            if until is not None and now < until:
                with self._fault_lock:
                    st["refused_calls"] = st.get("refused_calls", 0) + 1
                raise ApiError(503, "ServiceUnavailable",
                               f"error trying to reach service: dial tcp {rec.pod_ip}: connect: "
                               "connection refused")

    # ---------------- service proxy ----------------
    def _service_proxy(self, h: _Handler, ns: str, name_part: str, path: str, query: str,
                       body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """``/api/v1/namespaces/NS/services/[scheme:]NAME[:PORT]/proxy/PATH``: one ready
        endpoint of the Service (round robin over its EndpointSlice's ready pods), then as the
        pod proxy to that pod's target port. No ready endpoint: 503 ``no endpoints available
        for service "NAME"`` (k8s.io/kubernetes ``pkg/registry/core/service/storage``
        ``ResourceLocation``)."""
        parts = name_part.split(":")
        scheme, port_s = "http", ""
        if len(parts) == 3:
            scheme, sname, port_s = parts
        elif len(parts) == 2:
            sname, port_s = parts
        else:
            sname = name_part
        targets, _svc = self.cluster.network.ready_targets(ns, sname, port_s)
        with self._fault_lock:
            self._svc_rr = getattr(self, "_svc_rr", 0) + 1
            pick = targets[self._svc_rr % len(targets)]
        return self._proxy(h, ns, f"{scheme}:{pick[0]}:{pick[1]}", path, query, body)

    # ---------------- pod proxy ----------------
    def _proxy(self, h: _Handler, ns: str, name_part: str, path: str, query: str,
               body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        parts = name_part.split(":")
        scheme, port_s = "http", ""
        if len(parts) == 3:
            scheme, pname, port_s = parts
        elif len(parts) == 2:
            pname, port_s = parts
        else:
            pname = name_part
        if scheme not in ("http", "https"):
            raise bad_request(f"unsupported scheme {scheme!r}")
        t_pod = self.cluster.t_pod
        self._pod_fault_gate(ns, pname, path)
        pod = self.store.get(t_pod, ns, pname)
        spec = pod.get("spec") or {}
        port = self._resolve_port(spec, port_s)
        status = pod.get("status") or {}
        ip = status.get("podIP") or ""
        rec: PodRecord | None = self.cluster.record_for(ns, pname)
        if port is None:
            raise ApiError(503, "ServiceUnavailable",
                           f'error trying to reach service: pod "{pname}" has no port '
                           f'"{port_s}"')
        if status.get("phase") != "Running" or not ip:
            raise ApiError(503, "ServiceUnavailable",
                           f'error trying to reach service: pod "{pname}" is not running '
                           f'(phase {status.get("phase", "Pending")}, no pod IP to dial)')
        if rec is not None and rec.network == "unreachable":
            time.sleep(self.unreachable_delay)
            raise ApiError(503, "ServiceUnavailable",
                           f"error trying to reach service: dial tcp {ip}:{port}: i/o timeout")
        headers = {k: v for k, v in h.headers.items()
                   if k.lower() not in ("authorization", "host", "connection", "keep-alive",
                                        "transfer-encoding", "content-length")}
        result = None
        vfault = self.faults.vllm_action(ns, pname, port, path) \
            if rec is not None and rec.runtime is not None and port in self._served_ports(rec) else None
        if vfault == "drop":
            # vLLM closed the connection without answering; the API server's reverse proxy
            # reports the transport error (EOF) as it reports a refused dial
            raise ApiError(503, "ServiceUnavailable", "error trying to reach service: EOF")
        if vfault == "error":
            return 500, [("content-type", "application/json")], json.dumps(
                {"error": {"message": "simulated engine failure", "type": "InternalServerError",
                           "param": None, "code": 500}}).encode()
        if rec is not None and rec.runtime is not None:
            result = rec.runtime.request(port, h.command, path, query, headers, body,
                                         scheme=scheme, transport="proxy")
        if result is None:
            raise ApiError(503, "ServiceUnavailable",
                           f"error trying to reach service: dial tcp {ip}:{port}: connect: "
                           "connection refused")
        code, rheaders, rbody = result
        if isinstance(rbody, StreamBody) and h.command != "HEAD":
            # a streamed completion goes through the proxy chunk by chunk, as the API server's
            # reverse proxy flushes it: the request runs in the fake vLLM while it is read
            raise _Stream(rbody.chunks())
        out = [(k, v) for k, v in rheaders if k.lower() not in _HOP_BY_HOP]
        return code, out, rbody

    @staticmethod
    def _served_ports(rec: PodRecord) -> list[int]:
        getter = getattr(rec.runtime, "served_ports", None)
        if getter is None:
            return []
        try:
            return list(getter())
        except Exception:  # noqa: BLE001 - a fault check must not break the proxy
            return []

    @staticmethod
    def _resolve_port(spec: dict[str, Any], port_s: str) -> int | None:
        """Numeric port, a container port name, or (empty) the first port of the first container
        that declares one, as the API server's pod ``ResourceLocation`` does (80 when none)."""
        if port_s.isdigit():
            return int(port_s)
        containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
        if not port_s:
            for c in spec.get("containers") or []:
                for p in c.get("ports") or []:
                    return int(p.get("containerPort"))
            return 80
        for c in containers:
            for p in c.get("ports") or []:
                if p.get("name") == port_s:
                    return int(p.get("containerPort"))
        return None
