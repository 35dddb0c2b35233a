"""The LeaderWorkerSet controller of the simulated cluster: leader and worker pods per group.

Real-world rules followed:

LeaderWorkerSet (kubernetes-sigs/lws ``api/leaderworkerset/v1``): pods ``<lws>-<i>`` (leader,
from ``leaderTemplate`` or else ``workerTemplate``) and ``<lws>-<i>-<j>``; labels
``leaderworkerset.sigs.k8s.io/name``, ``/group-index``, ``/worker-index``,
``/template-revision-hash``; env ``LWS_LEADER_ADDRESS`` (``<lws>-<i>.<lws>.<ns>``),
``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX`` injected into every container as the LWS pod webhook
does. Simplification: the pods' owner reference names the LeaderWorkerSet itself (real LWS
puts a StatefulSet in between).
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from .apierrors import ApiError
from .clusterbase import (
    LWS_LABEL,
    template_hash,
)
from .resourcetypes import Obj


class LeaderWorkerSetController:
    """LeaderWorkerSet -> leader and worker Pods (a mixin of :class:`tests.sim.controllers.Cluster`)."""

    # ---------------- LeaderWorkerSet ----------------
    def reconcile_lws(self, ns: str, name: str) -> None:
        """Make groups ``0..replicas-1`` of ``size`` pods each exist with the current templates
        (a pod of an older template revision is replaced), delete pods of groups beyond
        ``replicas``, and write the LWS status."""
        with self._lock:
            lws = self.store.try_get(self.t_lws, ns, name)
            if lws is None:
                return
            spec = lws.get("spec") or {}
            replicas = int(spec.get("replicas", 1))
            lwt = spec.get("leaderWorkerTemplate") or {}
            size = int(lwt.get("size", 1))
            worker_t = lwt.get("workerTemplate") or {}
            leader_t = lwt.get("leaderTemplate") or worker_t
            rev = template_hash({"l": leader_t, "w": worker_t})
            existing = {p["metadata"]["name"]: p
                        for p in self._owned(self.t_pod, ns, lws["metadata"]["uid"])}
            wanted = set()
            for i in range(replicas):
                for j in range(size):
                    pname = f"{name}-{i}" if j == 0 else f"{name}-{i}-{j}"
                    wanted.add(pname)
                    cur = existing.get(pname)
                    if cur is not None:
                        labels = cur["metadata"].get("labels") or {}
                        if labels.get(f"{LWS_LABEL}/template-revision-hash") == rev:
                            continue
                        try:
                            self.store.delete(self.t_pod, ns, pname)
                        except ApiError:
                            pass
                    self._create_lws_pod(lws, leader_t if j == 0 else worker_t, i, j, size,
                                         rev, pname)
            for pname in set(existing) - wanted:
                try:
                    self.store.delete(self.t_pod, ns, pname)
                except ApiError:
                    pass
            self.update_lws_status(ns, name)

    def _create_lws_pod(self, lws: Obj, template: dict[str, Any], group: int, worker: int,
                        size: int, rev: str, pname: str) -> None:
        name = lws["metadata"]["name"]
        ns = lws["metadata"]["namespace"]
        tmpl = copy.deepcopy(template)
        md = tmpl.setdefault("metadata", {})
        labels = md.setdefault("labels", {})
        labels.update({f"{LWS_LABEL}/name": name, f"{LWS_LABEL}/group-index": str(group),
                       f"{LWS_LABEL}/worker-index": str(worker),
                       f"{LWS_LABEL}/template-revision-hash": rev,
                       f"{LWS_LABEL}/group-key": hashlib.sha1(
                           f"{ns}/{name}-{group}".encode()).hexdigest()})
        ann = md.setdefault("annotations", {})
        ann[f"{LWS_LABEL}/size"] = str(size)
        if worker:
            ann[f"{LWS_LABEL}/leader-name"] = f"{name}-{group}"
        pspec = tmpl.setdefault("spec", {})
        pspec.setdefault("hostname", pname)
        pspec.setdefault("subdomain", name)
        inject = [{"name": "LWS_LEADER_ADDRESS", "value": f"{name}-{group}.{name}.{ns}"},
                  {"name": "LWS_GROUP_SIZE", "value": str(size)},
                  {"name": "LWS_WORKER_INDEX", "value": str(worker)}]
        for key in ("containers", "initContainers"):
            for c in pspec.get(key) or []:
                have = {e.get("name") for e in c.get("env") or []}
                c["env"] = [e for e in inject if e["name"] not in have] + list(c.get("env") or [])
        self._create_pod_from_template(lws, tmpl, None, ("LeaderWorkerSet", name), pname)

    def update_lws_status(self, ns: str, name: str) -> None:
        """Write a LeaderWorkerSet's status: groups created, ready (every pod ready), updated,
        and conditions Available/Progressing."""
        with self._lock:
            lws = self.store.try_get(self.t_lws, ns, name)
            if lws is None:
                return
            spec = lws.get("spec") or {}
            replicas = int(spec.get("replicas", 1))
            size = int((spec.get("leaderWorkerTemplate") or {}).get("size", 1))
            pods = {p["metadata"]["name"]: p
                    for p in self._owned(self.t_pod, ns, lws["metadata"]["uid"])}
            groups = ready_groups = 0
            for i in range(replicas):
                members = [pods.get(f"{name}-{i}" if j == 0 else f"{name}-{i}-{j}")
                           for j in range(size)]
                if members[0] is not None:
                    groups += 1
                if all(m is not None and self._pod_ready(m) for m in members):
                    ready_groups += 1
            old = lws.get("status") or {}
            available = ready_groups >= replicas
            status: dict[str, Any] = {
                "replicas": groups, "readyReplicas": ready_groups, "updatedReplicas": groups,
                "hpaPodSelector": f"{LWS_LABEL}/name={name},{LWS_LABEL}/worker-index=0",
                "observedGeneration": lws["metadata"].get("generation", 1),
                "conditions": [
                    self._condition(old, "Available", available, "AllGroupsReady" if available
                                    else "GroupsNotReady",
                                    "All replicas are ready" if available
                                    else "Some replicas are not ready"),
                    self._condition(old, "Progressing", not available,
                                    "GroupsProgressing" if not available else "GroupsReady",
                                    "Replicas are progressing" if not available
                                    else "Replicas are ready"),
                ]}
            self.store.update_status(self.t_lws, ns, name, status)
