"""The ReplicaSet controller of the simulated cluster: pods from the template up to ``replicas``."""

from __future__ import annotations

from typing import Any

from .apierrors import ApiError
from .clusterbase import (
    controller_of,
)


class ReplicaSetController:
    """ReplicaSet -> Pods (a mixin of :class:`tests.sim.controllers.Cluster`)."""

    # ---------------- ReplicaSet ----------------
    def reconcile_replicaset(self, ns: str, name: str) -> None:
        """Create or delete pods until the ReplicaSet has ``spec.replicas`` live pods, then write
        its status and its Deployment's status."""
        with self._lock:
            rs = self.store.try_get(self.t_rs, ns, name)
            if rs is None:
                return
            want = int((rs.get("spec") or {}).get("replicas", 1))
            pods = self._owned(self.t_pod, ns, rs["metadata"]["uid"])
            if len(pods) < want:
                top = self._top_owner(rs)
                for _ in range(want - len(pods)):
                    self._create_pod_from_template(rs, (rs.get("spec") or {}).get("template")
                                                   or {}, f"{name}-", top)
            elif len(pods) > want:
                pods.sort(key=lambda p: p["metadata"]["creationTimestamp"], reverse=True)
                for p in pods[: len(pods) - want]:
                    try:
                        self.store.delete(self.t_pod, ns, p["metadata"]["name"])
                    except ApiError:
                        pass
            self.update_replicaset_status(ns, name)

    def update_replicaset_status(self, ns: str, name: str) -> None:
        """Write a ReplicaSet's status and then its owner Deployment's."""
        with self._lock:
            rs = self.store.try_get(self.t_rs, ns, name)
            if rs is None:
                return
            pods = self._owned(self.t_pod, ns, rs["metadata"]["uid"])
            ready = sum(1 for p in pods if self._pod_ready(p))
            status: dict[str, Any] = {"replicas": len(pods),
                                      "observedGeneration": rs["metadata"].get("generation", 1)}
            if pods:
                status["fullyLabeledReplicas"] = len(pods)
            if ready:
                status["readyReplicas"] = ready
                status["availableReplicas"] = ready
            self.store.update_status(self.t_rs, ns, name, status)
            ref = controller_of(rs)
            if ref and ref.get("kind") == "Deployment":
                self.update_deployment_status(ns, ref["name"])
