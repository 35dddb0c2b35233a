"""The DaemonSet controller of the simulated cluster: one pod per simulated node."""

from __future__ import annotations

import copy

from .apierrors import ApiError
from .clusterbase import (
    DAEMONSET_HASH_LABEL,
    template_hash,
)
from .resourcetypes import Obj


class DaemonSetController:
    """DaemonSet -> one Pod per node (a mixin of :class:`tests.sim.controllers.Cluster`)."""

    # ---------------- DaemonSet ----------------
    def reconcile_daemonset(self, ns: str, name: str) -> None:
        """One pod per simulated node (``spec.nodeName`` set, as the DaemonSet controller does
        since 1.12 through node affinity), named ``<ds>-<5 chars>``, label
        ``controller-revision-hash``; a changed template replaces the pods. Status:
        ``desiredNumberScheduled``, ``currentNumberScheduled``, ``numberReady``,
        ``numberAvailable``, ``updatedNumberScheduled``, ``observedGeneration``
        (kubernetes ``pkg/controller/daemon``)."""
        ds = self.store.try_get(self.t_ds, ns, name)
        if ds is None:
            return
        template = (ds.get("spec") or {}).get("template") or {}
        rev = template_hash(template)
        pods = self._owned(self.t_pod, ns, ds["metadata"]["uid"])
        by_node: dict[str, Obj] = {}
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            current = (p["metadata"].get("labels") or {}).get(DAEMONSET_HASH_LABEL) == rev
            if node not in self.node_names or not current or node in by_node:
                try:
                    self.store.delete(self.t_pod, ns, p["metadata"]["name"])
                except ApiError:
                    pass
                continue
            by_node[str(node)] = p
        for node in self.node_names:
            if node in by_node:
                continue
            t = copy.deepcopy(template)
            t.setdefault("metadata", {}).setdefault("labels", {})[DAEMONSET_HASH_LABEL] = rev
            t.setdefault("spec", {})["nodeName"] = node
            self._create_pod_from_template(ds, t, f"{name}-", ("DaemonSet", name))
        self.update_daemonset_status(ns, name)

    def update_daemonset_status(self, ns: str, name: str) -> None:
        """Recompute a DaemonSet's status from its pods."""
        ds = self.store.try_get(self.t_ds, ns, name)
        if ds is None:
            return
        pods = self._owned(self.t_pod, ns, ds["metadata"]["uid"])
        ready = sum(1 for p in pods if self._pod_ready(p))
        status = {"desiredNumberScheduled": len(self.node_names),
                  "currentNumberScheduled": len(pods), "numberMisscheduled": 0,
                  "numberReady": ready, "numberAvailable": ready,
                  "updatedNumberScheduled": len(pods),
                  "observedGeneration": ds["metadata"].get("generation", 1)}
        if ready < len(self.node_names):
            status["numberUnavailable"] = len(self.node_names) - ready
        if status != ds.get("status"):
            self.store.update_status(self.t_ds, ns, name, status)
