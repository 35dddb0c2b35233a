"""The Job controller of the simulated cluster: pods run to completion, counted into the Job's status."""

from __future__ import annotations

import copy
import sys
import time
from typing import Any

from .apierrors import ApiError
from .batchpods import BatchRun
from .clusterbase import (
    PodRecord,
)
from .store import now_rfc3339


class JobController:
    """Job -> Pods run to completion (a mixin of :class:`tests.sim.controllers.Cluster`)."""

    # ---------------- Job ----------------
    def reconcile_job(self, ns: str, name: str) -> None:
        """One pod at a time (``parallelism`` and ``completions`` are taken as 1): the Job gets
        its ``controller-uid`` selector and template labels, a pod ``<job>-<5>`` while none is
        active, none succeeded and the failed ones are within ``backoffLimit`` (default 6);
        then ``Complete`` or ``Failed`` (``BackoffLimitExceeded``), as the Job controller
        writes them (k8s.io/kubernetes ``pkg/controller/job``)."""
        with self._lock:
            job = self.store.try_get(self.t_job, ns, name)
            if job is None:
                return
            uid = job["metadata"]["uid"]
            labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                      "controller-uid": uid, "job-name": name}
            spec = job.get("spec") or {}
            tlabels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            if not spec.get("selector") or any(tlabels.get(k) != v for k, v in labels.items()):
                new = copy.deepcopy(job)
                nspec = new.setdefault("spec", {})
                nspec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
                nspec.setdefault("backoffLimit", 6)
                nspec.setdefault("completions", 1)
                nspec.setdefault("parallelism", 1)
                tmd = nspec.setdefault("template", {}).setdefault("metadata", {})
                tmd["labels"] = {**(tmd.get("labels") or {}), **labels}
                self.store.replace(self.t_job, ns, name, new, check_rv=False)
                return   # the update's event reconciles again
            status = dict(job.get("status") or {})
            conds = status.get("conditions") or []
            if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conds):
                return
            pods = self._owned(self.t_pod, ns, uid)
            phases = [(p.get("status") or {}).get("phase") for p in pods]
            succeeded = phases.count("Succeeded")
            failed = phases.count("Failed")
            active = len(phases) - succeeded - failed
            now = now_rfc3339()
            status.setdefault("startTime", now)
            status.update({"active": active, "succeeded": succeeded, "failed": failed,
                           "ready": sum(1 for p in pods if self._pod_ready(p))})
            try:
                backoff = int(spec.get("backoffLimit", 6))
            except (TypeError, ValueError):
                backoff = 6
            if succeeded >= 1:
                status["conditions"] = [
                    {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                     "message": "Reached expected number of succeeded pods", "lastProbeTime": now,
                     "lastTransitionTime": now},
                    {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                     "message": "Reached expected number of succeeded pods", "lastProbeTime": now,
                     "lastTransitionTime": now}]
                status["completionTime"] = now
            elif failed > backoff:
                status["conditions"] = [
                    {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                     "message": "Job has reached the specified backoff limit", "lastProbeTime": now,
                     "lastTransitionTime": now},
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                     "message": "Job has reached the specified backoff limit", "lastProbeTime": now,
                     "lastTransitionTime": now}]
            elif active == 0:
                try:
                    self._create_pod_from_template(job, spec.get("template") or {}, f"{name}-", ("Job", name))
                    status["active"] = 1
                except ApiError as e:
                    print(f"sim: job {ns}/{name}: FailedCreate: {e}", file=sys.stderr)
            if status != (job.get("status") or {}):
                self.store.update_status(self.t_job, ns, name, status)

    def _batch_env(self, rec: PodRecord, container: dict[str, Any]) -> dict[str, str]:
        """A batch container's env, resolved when it starts (the API server's port is known
        by then: pods loaded from manifests start before it listens)."""
        for _ in range(100):
            if self.api_server is None or self.api_server.port:
                break
            time.sleep(0.1)
        pod = self.store.try_get(self.t_pod, rec.namespace, rec.name)
        return self.resolve_env(pod, container, rec.pod_ip) if pod is not None else {}

    def _batch_done(self, rec: PodRecord, run: BatchRun) -> None:
        """A batch pod's containers have ended: phase ``Succeeded`` or ``Failed``, each
        container ``terminated`` with its exit code, as the kubelet reports it; the Job follows."""
        if rec.deleted or self._stopped:
            return
        with self._lock:
            pod = self.store.try_get(self.t_pod, rec.namespace, rec.name)
            if pod is None or pod["metadata"]["uid"] != rec.uid:
                return
            spec = pod.get("spec") or {}
            status = copy.deepcopy(pod.get("status") or {})
            exits = {e.name: e for e in run.exits}
            inits = {e.name: e for e in run.init_exits}

            def cstatus(c: dict[str, Any], ex: Any) -> dict[str, Any]:
                base = {"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "",
                        "ready": False, "restartCount": 0, "started": False}
                if ex is None or ex.exit_code is None:
                    return {**base, "state": {"waiting": {"reason": "PodInitializing"}}}
                term = {"exitCode": ex.exit_code, "reason": ex.reason, "startedAt": ex.started_at,
                        "finishedAt": ex.finished_at}
                if ex.message:
                    term["message"] = ex.message
                return {**base, "state": {"terminated": term}}

            status["phase"] = "Succeeded" if run.succeeded else "Failed"
            status["containerStatuses"] = [cstatus(c, exits.get(c.get("name", "")))
                                           for c in spec.get("containers") or []]
            if spec.get("initContainers"):
                status["initContainerStatuses"] = [cstatus(c, inits.get(c.get("name", "")))
                                                   for c in spec.get("initContainers") or []]
            reason = "PodCompleted" if run.succeeded else "PodFailed"
            for c in status.get("conditions") or []:
                if c.get("type") in ("Ready", "ContainersReady"):
                    c.update({"status": "False", "reason": reason})
                    c.pop("message", None)
            rec.running = False
            rec.ready = False
            self.store.update_status(self.t_pod, rec.namespace, rec.name, status)
            self.update_owner_status(rec.namespace, pod)
