"""The Deployment controller of the simulated cluster: one ReplicaSet per pod template, status as
``kubectl rollout status`` reads it.

Real-world rules followed:

Deployment: ReplicaSet ``<deploy>-<pod-template-hash>``, pods ``<rs>-<5 chars>`` from the
alphabet of k8s.io/apimachinery ``pkg/util/rand`` (``bcdfghjklmnpqrstvwxz2456789``), label
``pod-template-hash`` (k8s.io/kubernetes ``pkg/controller/deployment/sync.go``); status fields
and conditions as ``kubectl rollout status`` reads them (kubectl
``pkg/polymorphichelpers/rollout_status.go``). A changed template makes a new ReplicaSet and
scales the old ones to 0 at once (a Recreate-like rollout; surge/unavailability budgets are not
modelled).
"""

from __future__ import annotations

import copy
from typing import Any

from .clusterbase import (
    owner_ref,
    template_hash,
)
from .resourcetypes import Obj
from .store import now_rfc3339


class DeploymentController:
    """Deployment -> ReplicaSets (a mixin of :class:`tests.sim.controllers.Cluster`)."""

    def reconcile_deployment(self, ns: str, name: str) -> None:
        """Make the ReplicaSet of the current template hold ``spec.replicas`` pods, scale older
        ReplicaSets to 0, and write the Deployment's status."""
        with self._lock:
            dep = self.store.try_get(self.t_deploy, ns, name)
            if dep is None:
                return
            spec = dep.get("spec") or {}
            replicas = int(spec.get("replicas", 1))
            template = copy.deepcopy(spec.get("template") or {})
            h = template_hash(template)
            rs_name = f"{name}-{h}"
            owned = self._owned(self.t_rs, ns, dep["metadata"]["uid"])
            revisions = [int((r["metadata"].get("annotations") or {}).get(
                "deployment.kubernetes.io/revision", "0") or 0) for r in owned]
            current = next((r for r in owned if r["metadata"]["name"] == rs_name), None)
            if current is None and spec.get("paused") and owned:
                # a paused Deployment does not roll a changed template: its newest ReplicaSet
                # keeps the pods (and follows a scale), as the deployment controller does
                newest = max(owned, key=lambda r: int((r["metadata"].get("annotations") or {}).get(
                    "deployment.kubernetes.io/revision", "0") or 0))
                self._scale_rs(newest, replicas)
                self.update_deployment_status(ns, name)
                return
            if current is None:
                revision = str(max(revisions, default=0) + 1)
                labels = dict((template.get("metadata") or {}).get("labels") or {})
                labels["pod-template-hash"] = h
                tmpl = copy.deepcopy(template)
                tmpl.setdefault("metadata", {})["labels"] = labels
                selector = copy.deepcopy(spec.get("selector") or {"matchLabels": {}})
                selector.setdefault("matchLabels", {})["pod-template-hash"] = h
                rs = {"metadata": {"name": rs_name, "namespace": ns, "labels": labels,
                                   "annotations": {
                                       "deployment.kubernetes.io/desired-replicas": str(replicas),
                                       "deployment.kubernetes.io/max-replicas": str(replicas),
                                       "deployment.kubernetes.io/revision": revision},
                                   "ownerReferences": [owner_ref(dep)]},
                      "spec": {"replicas": replicas, "selector": selector, "template": tmpl},
                      "status": {"replicas": 0}}
                # scale the old ones down first (Recreate-like)
                for old in owned:
                    self._scale_rs(old, 0)
                self.store.create(self.t_rs, rs, ns)
                dep = self.store.try_get(self.t_deploy, ns, name) or dep
                ann = dict(dep["metadata"].get("annotations") or {})
                if ann.get("deployment.kubernetes.io/revision") != revision:
                    new = copy.deepcopy(dep)
                    new["metadata"].setdefault("annotations", {})[
                        "deployment.kubernetes.io/revision"] = revision
                    self.store.replace(self.t_deploy, ns, name, new, check_rv=False)
            else:
                for old in owned:
                    if old is not current:
                        self._scale_rs(old, 0)
                self._scale_rs(current, replicas)
            self.update_deployment_status(ns, name)

    def _scale_rs(self, rs: Obj, n: int) -> None:
        if int((rs.get("spec") or {}).get("replicas", 1)) == n:
            return
        new = copy.deepcopy(rs)
        new["spec"]["replicas"] = n
        new["metadata"].setdefault("annotations", {})[
            "deployment.kubernetes.io/desired-replicas"] = str(n)
        self.store.replace(self.t_rs, rs["metadata"]["namespace"], rs["metadata"]["name"], new,
                           check_rv=False)

    def update_deployment_status(self, ns: str, name: str) -> None:
        """Write ``status`` of a Deployment from its ReplicaSets' pods (fields read by
        ``kubectl rollout status``)."""
        with self._lock:
            dep = self.store.try_get(self.t_deploy, ns, name)
            if dep is None:
                return
            spec = dep.get("spec") or {}
            want = int(spec.get("replicas", 1))
            h = template_hash(spec.get("template") or {})
            total = updated = ready = 0
            for rs in self._owned(self.t_rs, ns, dep["metadata"]["uid"]):
                pods = self._owned(self.t_pod, ns, rs["metadata"]["uid"])
                total += len(pods)
                nready = sum(1 for p in pods if self._pod_ready(p))
                ready += nready
                if rs["metadata"]["name"] == f"{name}-{h}":
                    updated = len(pods)
            old = dep.get("status") or {}
            status: dict[str, Any] = {"observedGeneration": dep["metadata"].get("generation", 1)}
            if total:
                status["replicas"] = total
            if updated:
                status["updatedReplicas"] = updated
            if ready:
                status["readyReplicas"] = ready
                status["availableReplicas"] = ready
            if total - ready > 0:
                status["unavailableReplicas"] = total - ready
            available = ready >= want
            complete = updated == want and total == want and ready >= want
            rs_name = f"{name}-{h}"
            status["conditions"] = [
                self._condition(old, "Available", available,
                                "MinimumReplicasAvailable" if available
                                else "MinimumReplicasUnavailable",
                                "Deployment has minimum availability." if available
                                else "Deployment does not have minimum availability."),
                self._condition(old, "Progressing", True,
                                "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                                f'ReplicaSet "{rs_name}" has successfully progressed.' if complete
                                else f'ReplicaSet "{rs_name}" is progressing.'),
            ]
            if spec.get("paused"):
                status["conditions"][1] = {
                    "type": "Progressing", "status": "Unknown", "reason": "DeploymentPaused",
                    "message": "Deployment is paused", "lastUpdateTime": now_rfc3339(),
                    "lastTransitionTime": now_rfc3339()}
                prev = next((c for c in old.get("conditions") or []
                             if c.get("type") == "Progressing"), None)
                if prev and prev.get("reason") == "DeploymentPaused":
                    status["conditions"][1] = prev
            self.store.update_status(self.t_deploy, ns, name, status)

    @staticmethod
    def _condition(old_status: dict[str, Any], ctype: str, ok: bool, reason: str,
                   message: str) -> dict[str, Any]:
        prev = next((c for c in old_status.get("conditions") or [] if c.get("type") == ctype),
                    None)
        st = "True" if ok else "False"
        now = now_rfc3339()
        if prev and prev.get("status") == st and prev.get("reason") == reason:
            return prev  # type: ignore[no-any-return]
        return {"type": ctype, "status": st, "reason": reason, "message": message,
                "lastUpdateTime": now,
                "lastTransitionTime": prev["lastTransitionTime"]
                if prev and prev.get("status") == st else now}
