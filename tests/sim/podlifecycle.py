"""The pod lifecycle of the simulated cluster: a pod created from an owner's template, recorded,
scheduled, its runtime started on the worker pool, probed, made Ready, stopped."""

from __future__ import annotations

import copy
import hashlib
import itertools
import sys
import time
from typing import Any

from .apierrors import ApiError
from .batchpods import BatchRun, is_batch_spec
from .clusterbase import (
    PodRecord,
    RuntimeLike,
    controller_of,
    owner_ref,
    random_suffix,
)
from .podspecs import is_vllm_container
from .resourcetypes import Obj
from .store import now_rfc3339


class PodLifecycle:
    """Pods from creation to deletion (a mixin of :class:`tests.sim.controllers.Cluster`)."""

    # ---------------- Pods ----------------
    @staticmethod
    def _pod_ready(pod: Obj) -> bool:
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready":
                return bool(c.get("status") == "True")
        return False

    def _first_generation(self, ns: str, owner: tuple[str, str] | None) -> int:
        """How many pods the owner's first generation has (the pods made when it was created,
        which start with warm caches; later ones, replacements and scale-ups, start cold):
        ``spec.replicas`` of a Deployment / ReplicaSet / StatefulSet, ``replicas x size`` of a
        LeaderWorkerSet, 1 for a bare pod; fixed the first time it is asked."""
        key = (ns, *(owner or ("Pod", "")))
        found = self._first_gen.get(key)
        if found is not None:
            return found
        n = 1
        if owner is not None:
            kind, name = owner
            t = {"Deployment": self.t_deploy, "ReplicaSet": self.t_rs,
                 "LeaderWorkerSet": self.t_lws, "DaemonSet": self.t_ds}.get(kind)
            if t is None and kind == "StatefulSet":
                t = self.store.types.lookup("apps", "v1", "statefulsets")
            obj = self.store.try_get(t, ns, name) if t is not None else None
            spec = (obj or {}).get("spec") or {}
            try:
                n = int(spec.get("replicas", 1))
                if kind == "LeaderWorkerSet":
                    n *= int((spec.get("leaderWorkerTemplate") or {}).get("size", 1))
                if kind == "DaemonSet":
                    n = len(self.node_names)
            except (TypeError, ValueError):
                n = 1
        if owner is not None:
            self._first_gen[key] = n
        return n

    def _next_ordinal(self, ns: str, owner: tuple[str, str] | None, pname: str) -> int:
        key = (ns, *(owner or ("Pod", pname)))
        counter = self._ordinals.setdefault(key, itertools.count())
        return next(counter)

    def _create_pod_from_template(self, owner: Obj, template: dict[str, Any],
                                  generate_prefix: str | None, top: tuple[str, str],
                                  fixed_name: str | None = None) -> Obj | None:
        ns = owner["metadata"]["namespace"]
        tmd = template.get("metadata") or {}
        md: dict[str, Any] = {"namespace": ns, "labels": dict(tmd.get("labels") or {}),
                              "ownerReferences": [owner_ref(owner)]}
        if tmd.get("annotations"):
            md["annotations"] = dict(tmd["annotations"])
        pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": md,
                    "spec": copy.deepcopy(template.get("spec") or {})}
        for _ in range(20):
            md["name"] = fixed_name or f"{generate_prefix}{random_suffix()}"
            try:
                return self.create_object(self.t_pod, pod, ns)
            except ApiError as e:
                if e.reason != "AlreadyExists" or fixed_name:
                    raise
        return None

    def _allocate_ip(self, pod: Obj) -> str:
        """A pod's address: its node's for ``hostNetwork: true``, else a fresh loopback one
        (tests/sim/network.py)."""
        spec = pod.get("spec") or {}
        if spec.get("hostNetwork"):
            return self.host_ip(spec.get("nodeName"))
        return self.addresses.pod_ip()

    def _pod_added(self, pod: Obj) -> None:
        md = pod["metadata"]
        uid = md["uid"]
        if uid in self._records:
            return
        ref = controller_of(pod)
        owner: tuple[str, str] | None = None
        if ref is not None:
            owner = (ref["kind"], ref["name"])
            if ref["kind"] == "ReplicaSet":
                rs = self.store.try_get(self.t_rs, md["namespace"], ref["name"])
                if rs is not None:
                    owner = self._top_owner(rs)
        ordinal = self._next_ordinal(md["namespace"], owner, md["name"])
        match_owner = (owner[0].lower(), owner[1]) if owner else ("pod", md["name"])
        overrides, network = self.scenario.pod_settings(match_owner, ordinal, md["namespace"],
                                                        md["name"])
        first = self._first_generation(md["namespace"], owner)
        if "cold" not in overrides and ordinal >= first:
            overrides["cold"] = True
        scheduled = bool((pod.get("spec") or {}).get("nodeName"))
        rec = PodRecord(namespace=md["namespace"], name=md["name"], uid=uid,
                        pod_ip=self._allocate_ip(pod) if scheduled else "", owner=owner,
                        ordinal=ordinal, overrides=overrides, network=network,
                        created=time.monotonic())
        self._records[uid] = rec
        self._record_order.append(uid)
        if not scheduled:
            rec.held = "unschedulable"
            return
        if overrides.get("container_creating"):
            rec.held = "container-creating"
            self.store.update_status(self.t_pod, rec.namespace, rec.name,
                                     self.creating_status(pod))
            return
        self._pool.submit(self._start_pod, rec)

    def creating_status(self, pod: Obj) -> dict[str, Any]:
        """A bound pod whose containers are still being created (image pull, volume mount):
        Pending, every container waiting in ``ContainerCreating``, as the kubelet reports it."""
        spec = pod.get("spec") or {}
        now = now_rfc3339()
        names = " ".join(sorted(str(c.get("name", "")) for c in spec.get("containers") or []))
        return {
            "phase": "Pending", "hostIP": self.host_ip(spec.get("nodeName")),
            "qosClass": (pod.get("status") or {}).get("qosClass", "BestEffort"),
            "startTime": now,
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "False",
                 "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                 "message": f"containers with unready status: [{names}]",
                 "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
                 "message": f"containers with unready status: [{names}]",
                 "lastTransitionTime": now},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [
                {"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "",
                 "ready": False, "restartCount": 0, "started": False,
                 "state": {"waiting": {"reason": "ContainerCreating"}}}
                for c in spec.get("containers") or []],
        }

    def _bind_unschedulable(self) -> None:
        """Retry the scheduler on pods left Unschedulable (GPUs were freed): bind each that
        now fits (``spec.nodeName``) and start it."""
        for rec in [r for r in self.records() if r.held == "unschedulable" and not r.deleted]:
            pod = self.store.try_get(self.t_pod, rec.namespace, rec.name)
            if pod is None or pod["metadata"]["uid"] != rec.uid:
                continue
            node = self._schedule(pod.get("spec") or {})
            if node is None:
                continue
            new = copy.deepcopy(pod)
            new["spec"]["nodeName"] = node
            new["status"] = {**self.creating_status(new), "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}]}
            self.store.replace(self.t_pod, rec.namespace, rec.name, new, check_rv=False)
            rec.held = None
            rec.pod_ip = self._allocate_ip(new)
            rec.created = time.monotonic()
            self._pool.submit(self._start_pod, rec)

    def _pod_deleted(self, pod: Obj) -> None:
        rec = self._records.get(pod["metadata"]["uid"])
        if rec is None:
            return
        rec.deleted = True
        rec.ready = False
        self.network.hosts.remove(rec.uid)
        if rec.batch is not None:
            rec.batch.stop()
        rt = rec.runtime
        if rt is not None:
            self._pool.submit(self._stop_runtime, rt)
        if self.scenario.gpus_per_node is not None and rec.held is None:
            self._bind_unschedulable()

    @staticmethod
    def _stop_runtime(rt: RuntimeLike) -> None:
        try:
            rt.stop()
        except Exception as e:  # pragma: no cover - defensive
            print(f"sim: runtime stop failed: {e!r}", file=sys.stderr)

    # ---- start-up ----
    def _start_pod(self, rec: PodRecord) -> None:
        try:
            pod = self.store.try_get(self.t_pod, rec.namespace, rec.name)
            if pod is None or pod["metadata"]["uid"] != rec.uid or rec.deleted:
                return
            spec = pod.get("spec") or {}
            env_by_container = {}
            for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
                env_by_container[c.get("name", "")] = self.resolve_env(pod, c, rec.pod_ip)
            rec.env = env_by_container
            pdir = self._pod_dir(rec)
            shm_dir = pdir / "shm"
            work_dir = pdir / "work"
            shm_dir.mkdir(parents=True, exist_ok=True)
            work_dir.mkdir(parents=True, exist_ok=True)
            volume_dirs = self.provision_volumes(pod, rec, shm_dir)
            # a hosts file naming the cluster's Services: for pods that run real servers, and for
            # a pod whose scenario says ``cluster_dns: true`` (its fake connectors then reach the
            # Services, tests/sim/mpstore.py)
            if self.config.real_servers or rec.overrides.get("real_server") or rec.overrides.get("cluster_dns"):
                rec.overrides["real_servers"] = sorted(self.config.real_servers)
                rec.overrides["sim_state_dir"] = str(self.config.state_dir)
                rec.overrides["hosts_file"] = str(self.network.hosts.add(
                    rec.uid, rec.namespace, [(rec.pod_ip, rec.name)]))
                self.network.mark_dirty(rec.namespace)
            if self.config.sandbox and is_batch_spec(spec) and not any(
                    is_vllm_container(c) for c in spec.get("containers") or []):
                rec.batch = BatchRun(
                    name=rec.name, spec=copy.deepcopy(spec),
                    env_for=lambda c, rec=rec: self._batch_env(rec, c),
                    volume_dirs=volume_dirs, shm_dir=shm_dir, log_dir=pdir / "logs",
                    on_done=lambda run, rec=rec: self._batch_done(rec, run))
            elif self.backend is not None:
                ctx = self.backend.context_cls(
                    namespace=rec.namespace, name=rec.name, uid=rec.uid, pod_ip=rec.pod_ip,
                    spec=copy.deepcopy(spec), env_by_container=env_by_container,
                    volume_dirs=volume_dirs, shm_dir=shm_dir, work_dir=work_dir,
                    overrides=dict(rec.overrides), default_version=self.config.default_version,
                    sandbox=self.config.sandbox)
                rt = self.backend.runtime_cls(ctx)
                rec.runtime = rt
                rt.start()
                rec.crashed = bool(rt.crashed)
        except Exception as e:
            rec.runtime_error = repr(e)
            print(f"sim: pod {rec.namespace}/{rec.name} runtime failed: {e!r}", file=sys.stderr)
        rec.started = True
        if rec.deleted and rec.runtime is not None:
            self._stop_runtime(rec.runtime)
            return
        due = rec.created + self.config.ready_delay
        if due <= time.monotonic():
            self._mark_running(rec)
        else:
            self._scheduler.call_at(due, lambda: self._mark_running(rec))

    def _mark_running(self, rec: PodRecord) -> None:
        """Pending -> Running; Ready unless the runtime crash-loops (vLLM container waiting in
        ``CrashLoopBackOff``, Ready False)."""
        if rec.deleted or self._stopped:
            return
        with self._lock:
            pod = self.store.try_get(self.t_pod, rec.namespace, rec.name)
            if pod is None or pod["metadata"]["uid"] != rec.uid:
                return
            if getattr(rec.runtime, "is_ready", None) is not None and not rec.crashed:
                rec.probe_ok = False    # Ready once the servers' own health answers
            status = self.running_status(pod, rec)
            rec.running = True
            rec.ready = not rec.crashed and rec.probe_ok is not False
            self.store.update_status(self.t_pod, rec.namespace, rec.name, status)
            self.update_owner_status(rec.namespace, pod)
        if rec.batch is not None:
            rec.batch.start()
        if rec.probe_ok is not None:
            self._scheduler.call_at(time.monotonic() + 0.5, lambda: self._submit_probe(rec))

    def _submit_probe(self, rec: PodRecord) -> None:
        if self._stopped or rec.deleted:
            return
        try:
            self._pool.submit(self._probe, rec)
        except RuntimeError:   # shutting down
            pass

    def _probe(self, rec: PodRecord) -> None:
        """A readiness probe of a runtime with ``is_ready()`` (real servers): restart what
        exited (``probe()``), then Ready follows the servers' health; again in 1 s."""
        rt = rec.runtime
        if rt is None or self._stopped or rec.deleted:
            return
        try:
            getattr(rt, "probe", lambda: None)()
            ok = bool(rt.is_ready())  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a failing probe is an unready pod
            ok = False
        if ok != rec.probe_ok:
            rec.probe_ok = ok
            self.set_pod_ready(rec, ok)
        self._scheduler.call_at(time.monotonic() + 1.0, lambda: self._submit_probe(rec))

    def set_pod_ready(self, rec: PodRecord, ready: bool, why: str = "") -> None:
        """Fault support: a Running pod's vLLM container goes not-Ready (Ready and
        ContainersReady False with reason ``ContainersNotReady``, the container ``ready:
        false``, as a failing readiness probe shows it) or back to Ready. A deleted or
        crashed pod is left alone. The owner's status follows."""
        if rec.deleted or self._stopped or rec.crashed or not rec.running:
            return
        with self._lock:
            pod = self.store.try_get(self.t_pod, rec.namespace, rec.name)
            if pod is None or pod["metadata"]["uid"] != rec.uid:
                return
            status = self.running_status(pod, rec)
            if not ready:
                vc = None
                if rec.runtime is not None:
                    try:
                        vc = rec.runtime.state().get("vllm_container")
                    except Exception:
                        vc = None
                names = {vc} if vc else {c.get("name") for c in (pod.get("spec") or {}).get(
                    "containers") or []}
                for c in status["conditions"]:
                    if c["type"] in ("Ready", "ContainersReady"):
                        c["status"] = "False"
                        c["reason"] = "ContainersNotReady"
                        c["message"] = "containers with unready status: [" + " ".join(
                            sorted(str(n) for n in names if n)) + "]"
                for s in status.get("containerStatuses") or []:
                    if s.get("name") in names:
                        s["ready"] = False
                        if why:
                            s["lastState"] = {"terminated": {"exitCode": 1, "reason": why}}
            rec.ready = ready
            self.store.update_status(self.t_pod, rec.namespace, rec.name, status)
            self.update_owner_status(rec.namespace, pod)

    def running_status(self, pod: Obj, rec: PodRecord) -> dict[str, Any]:
        """The ``status`` of a started pod: phase Running, pod IP, container statuses; a crashed
        runtime's vLLM container(s) wait in ``CrashLoopBackOff`` and the pod is not Ready."""
        spec = pod.get("spec") or {}
        now = now_rfc3339()
        started = (pod.get("status") or {}).get("startTime") or now
        crashed_names: set[str] = set()
        if rec.crashed:
            vc = None
            crashing: list[str] = []
            if rec.runtime is not None:
                try:
                    st = rec.runtime.state()
                    vc = st.get("vllm_container")
                    crashing = list(st.get("crashed_containers") or [])
                except Exception:
                    vc = None
            crashed_names = set(crashing) if crashing else {vc} if vc else {
                c.get("name") for c in spec.get("containers") or [] if is_vllm_container(c)}
            if not crashed_names and spec.get("containers"):
                crashed_names = {spec["containers"][0].get("name")}

        def cstatus(c: dict[str, Any], init: bool) -> dict[str, Any]:
            name = c.get("name", "")
            cid = "containerd://" + hashlib.sha256(f"{rec.uid}/{name}".encode()).hexdigest()
            if name in crashed_names:
                return {"name": name, "image": c.get("image", ""), "imageID": "",
                        "containerID": cid, "ready": False, "restartCount": 5, "started": False,
                        "state": {"waiting": {"reason": "CrashLoopBackOff", "message":
                                              f"back-off 2m40s restarting failed container="
                                              f"{name} pod={rec.name}_{rec.namespace}({rec.uid})"}},
                        "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                                     "startedAt": started, "finishedAt": now}}}
            return {"name": name, "image": c.get("image", ""), "imageID": "",
                    "containerID": cid, "ready": name not in unready, "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": started}}}

        if rec.probe_ok is False and not crashed_names:
            crashed_names = set()
            unready = {c.get("name") for c in spec.get("containers") or []}
        else:
            unready = set(crashed_names)
        ready = not unready
        cond = "True" if ready else "False"
        conds: list[dict[str, Any]] = [
            {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": cond, "lastTransitionTime": now},
            {"type": "ContainersReady", "status": cond, "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        ]
        if not ready:
            for c in conds[2:4]:
                c["reason"] = "ContainersNotReady"
                c["message"] = "containers with unready status: [" + " ".join(
                    sorted(n for n in unready if n)) + "]"
        host_ip = self.host_ip(spec.get("nodeName"))
        st: dict[str, Any] = {
            "phase": "Running", "conditions": conds, "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}], "podIP": rec.pod_ip, "podIPs": [{"ip": rec.pod_ip}],
            "startTime": started, "qosClass": (pod.get("status") or {}).get("qosClass",
                                                                            "BestEffort"),
            "containerStatuses": [cstatus(c, False) for c in spec.get("containers") or []],
        }
        inits = spec.get("initContainers") or []
        if inits:
            st["initContainerStatuses"] = []
            for c in inits:
                s = cstatus(c, True)
                if c.get("restartPolicy") != "Always":
                    s = {**s, "ready": True, "started": False, "state": {"terminated": {
                        "exitCode": 0, "reason": "Completed", "startedAt": started,
                        "finishedAt": started}}}
                st["initContainerStatuses"].append(s)
        return st
