"""Controllers of the simulated cluster: Deployment -> ReplicaSet -> Pods, LeaderWorkerSet ->
leader and worker Pods, pod start-up (pod runtime, readiness) and owner status.

The controllers react to store events synchronously (on the writing thread, under one
controller lock), so a ``POST`` of a Deployment returns after its ReplicaSet and Pods exist.
Pod runtimes start concurrently on a worker pool; readiness flips after ``ready_delay`` seconds.

The controllers, each with the real-world rules it follows in its docstring:

- Deployment: tests/sim/deployments.py; ReplicaSet: tests/sim/replicasets.py; Job:
  tests/sim/jobs.py; LeaderWorkerSet: tests/sim/leaderworkersets.py; DaemonSet:
  tests/sim/daemonsets.py; each a mixin of :class:`Cluster`, which reacts to the store's events
  and calls them. Pods: tests/sim/podlifecycle.py (start-up, readiness) and
  tests/sim/podvolumes.py (env, volumes).
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .apierrors import ApiError
from .clusterbase import (
    GPU_RESOURCE,
    LWS_GROUP,
    NODE_NAME,
    SA_MOUNT,
    ClusterConfig,
    PodBackend,
    PodRecord,
    _Scheduler,
    controller_of,
    gpu_request,
    random_suffix,
)
from .daemonsets import DaemonSetController
from .deployments import DeploymentController
from .jobs import JobController
from .leaderworkersets import LeaderWorkerSetController
from .network import AddressBlock, Network
from .podlifecycle import PodLifecycle
from .podspecs import apply_dev_mode_to_podspec, pod_specs_of
from .podvolumes import PodVolumes
from .replicasets import ReplicaSetController
from .resourcetypes import Obj, ResourceType
from .scenario import Scenario
from .store import Event, Store, now_rfc3339

# --------------------------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------------------------


class Cluster(PodLifecycle, PodVolumes, DaemonSetController, LeaderWorkerSetController, JobController,
              ReplicaSetController, DeploymentController):
    """Store + controllers + pod runtimes. Use ``create_object`` for every write that creates
    (it fills pod defaults and namespaces); the server routes other writes to the store
    directly, and the controllers follow through store events.
    """

    def __init__(self, store: Store, config: ClusterConfig, scenario: Scenario | None = None,
                 backend: PodBackend | None = None) -> None:
        self.store = store
        self.config = config
        self.scenario = scenario or Scenario()
        self.backend = backend
        self._lock = threading.RLock()
        self._records: dict[str, PodRecord] = {}       # by pod uid
        self._record_order: list[str] = []
        self._ordinals: dict[tuple[str, str, str], itertools.count[int]] = {}
        self._first_gen: dict[tuple[str, str, str], int] = {}
        self.addresses = AddressBlock()
        self.node_names = [f"sim-node-{i}" for i in range(max(1, config.nodes))]
        self._pool = ThreadPoolExecutor(max_workers=config.start_workers,
                                        thread_name_prefix="sim-pod")
        self._scheduler = _Scheduler()
        self._stopped = False
        self._queue: list[tuple[str, str, str]] = []
        self._draining = False
        t = store.types
        self.t_pod = self._t(t.lookup("", "v1", "pods"))
        self.t_ns = self._t(t.lookup("", "v1", "namespaces"))
        self.t_cm = self._t(t.lookup("", "v1", "configmaps"))
        self.t_secret = self._t(t.lookup("", "v1", "secrets"))
        self.t_pvc = self._t(t.lookup("", "v1", "persistentvolumeclaims"))
        self.t_pv = self._t(t.lookup("", "v1", "persistentvolumes"))
        self.t_deploy = self._t(t.lookup("apps", "v1", "deployments"))
        self.t_rs = self._t(t.lookup("apps", "v1", "replicasets"))
        self.t_lws = self._t(t.lookup(LWS_GROUP, "v1", "leaderworkersets"))
        self.t_ds = self._t(t.lookup("apps", "v1", "daemonsets"))
        self.t_svc = self._t(t.lookup("", "v1", "services"))
        self.t_node = self._t(t.lookup("", "v1", "nodes"))
        self.t_sa = self._t(t.lookup("", "v1", "serviceaccounts"))
        self.t_job = self._t(t.lookup("batch", "v1", "jobs"))
        #: the API server (tests/sim/server.py ``SimServer``) once it exists: mints the service
        #: account tokens pods mount and gives its port and CA
        self.api_server: Any = None
        self.network = Network(store, self.addresses, self.record_for,
                               config.state_dir / "net")
        for i, node in enumerate(self.node_names):
            self._create_node(node, self.addresses.node_ip(i))
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease",
                   config.namespace):
            self.ensure_namespace(ns)
        store.subscribe(self._on_event)
        self.network.start()

    def _create_node(self, name: str, ip: str) -> None:
        capacity = {"cpu": "2", "memory": "24Gi", "pods": "110"}
        if self.scenario.gpus_per_node is not None:
            capacity[GPU_RESOURCE] = str(self.scenario.gpus_per_node)
        self.store.create(self.t_node, {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "kubernetes.io/os": "linux"}},
            "spec": {},
            "status": {"addresses": [{"type": "InternalIP", "address": ip},
                                     {"type": "Hostname", "address": name}],
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady"}],
                       "capacity": capacity, "allocatable": dict(capacity)}})

    def host_ip(self, node_name: str | None) -> str:
        """The loopback address of simulated node ``node_name`` (the first node's for an
        unknown name)."""
        try:
            return self.addresses.node_ip(self.node_names.index(str(node_name)))
        except ValueError:
            return self.addresses.node_ip(0)

    @staticmethod
    def _t(t: ResourceType | None) -> ResourceType:
        assert t is not None
        return t

    # ---------------- loading ----------------
    def ensure_namespace(self, ns: str) -> None:
        """Create namespace ``ns`` (phase Active) when it does not exist."""
        if self.store.try_get(self.t_ns, None, ns) is None:
            try:
                self.store.create(self.t_ns, {"metadata": {"name": ns, "labels": {
                    "kubernetes.io/metadata.name": ns}}, "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"}})
            except ApiError as e:
                if e.reason != "AlreadyExists":
                    raise

    def prepare_manifest_object(self, obj: Obj) -> Obj:
        """Apply load-time edits to a manifest object: ``--dev-mode`` into its pod templates and
        scenario replica overrides. Returns a modified deep copy."""
        obj = copy.deepcopy(obj)
        if self.config.real_servers:
            from .realpeers import check_manifest_object
            check_manifest_object(obj, self.config.real_servers)
        if self.config.dev_mode in ("on", "off", "invalid"):
            for spec in pod_specs_of(obj):
                apply_dev_mode_to_podspec(spec, self.config.dev_mode)
        kind = str(obj.get("kind") or "").lower()
        name = (obj.get("metadata") or {}).get("name", "")
        n = self.scenario.replicas_for(kind, name)
        if n is not None and kind in ("deployment", "leaderworkerset", "replicaset",
                                      "statefulset"):
            obj.setdefault("spec", {})["replicas"] = n
        return obj

    def load_objects(self, objs: list[Obj]) -> list[Obj]:
        """Create manifest objects (namespace from the object, else the default one): every
        other kind first, then the workloads (Pods, ReplicaSets, Deployments, LeaderWorkerSets...)
        so that the ConfigMaps and Secrets their env names exist when pods start (as Helm
        orders installs). Raises ``ApiError`` on the first failure (e.g. a duplicate name)."""
        out = []
        workloads = ("Pod", "ReplicaSet", "Deployment", "StatefulSet", "LeaderWorkerSet",
                     "DaemonSet", "Job")
        objs = sorted(objs, key=lambda o: o.get("kind") in workloads)
        for o in objs:
            o = self.prepare_manifest_object(o)
            rtype = self.store.types.ensure(str(o.get("apiVersion") or ""),
                                            str(o.get("kind") or ""))
            ns = (o.get("metadata") or {}).get("namespace") or self.config.namespace
            if rtype is self.t_ns:
                # a Namespace in a manifest may already exist (created on demand, or the
                # --namespace one): take its labels, as `kubectl apply` would
                name = (o.get("metadata") or {}).get("name", "")
                existing = self.store.try_get(self.t_ns, None, name)
                if existing is not None:
                    out.append(existing)
                    continue
            out.append(self.create_object(rtype, o, ns if rtype.namespaced else None))
        return out

    # ---------------- writes ----------------
    def create_object(self, rtype: ResourceType, obj: Obj, namespace: str | None,
                      dry_run: bool = False) -> Obj:
        """Create an object like the API server would, with defaults for Pods (node, phase
        Pending), Deployments (replicas 1, strategy) and LeaderWorkerSets; namespaces are
        created on demand. Controllers react via the store event."""
        obj = copy.deepcopy(obj)
        if rtype.namespaced:
            ns = namespace or (obj.get("metadata") or {}).get("namespace") or \
                self.config.namespace
            if not dry_run:
                self.ensure_namespace(ns)
            namespace = ns
        if rtype is self.t_pod:
            self._admit_service_account(obj, namespace or self.config.namespace)
            self._default_pod(obj)
        elif rtype is self.t_svc:
            self.network.default_service(obj)
        elif rtype is self.t_ds:
            obj["status"] = {}
        elif rtype is self.t_deploy:
            spec = obj.setdefault("spec", {})
            spec.setdefault("replicas", 1)
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
            spec.setdefault("strategy", {"type": "RollingUpdate", "rollingUpdate": {
                "maxSurge": "25%", "maxUnavailable": "25%"}})
            obj["status"] = {}
        elif rtype is self.t_lws:
            spec = obj.setdefault("spec", {})
            spec.setdefault("replicas", 1)
            spec.setdefault("leaderWorkerTemplate", {}).setdefault("size", 1)
            spec.setdefault("startupPolicy", "LeaderCreated")
            obj["status"] = {}
        return self.store.create(rtype, obj, namespace, dry_run=dry_run)

    def _gpus_free(self) -> dict[str, int]:
        """Free ``nvidia.com/gpu`` per node: the scenario's capacity less the requests of the
        live pods bound to it (empty when capacity is unlimited)."""
        cap = self.scenario.gpus_per_node
        if cap is None:
            return {}
        free = dict.fromkeys(self.node_names, cap)
        for p in self.store.list(self.t_pod, None):
            node = (p.get("spec") or {}).get("nodeName")
            if node in free and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                free[node] -= gpu_request(p.get("spec") or {})
        return free

    def _schedule(self, spec: dict[str, Any]) -> str | None:
        """The node a pod without ``nodeName`` is bound to: the first with the GPUs it asks for,
        the first node when capacity is unlimited; None when none fits (Unschedulable)."""
        want = gpu_request(spec)
        free = self._gpus_free()
        if not free or want == 0:
            return NODE_NAME
        return next((n for n in self.node_names if free[n] >= want), None)

    def unschedulable_status(self) -> dict[str, Any]:
        """The status the scheduler leaves on a pod that fits on no node: Pending, PodScheduled
        False with reason ``Unschedulable`` and the scheduler's message (kube-scheduler's
        ``FitError``: ``0/N nodes are available: N Insufficient nvidia.com/gpu.``)."""
        n = len(self.node_names)
        return {"phase": "Pending", "qosClass": "BestEffort", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "lastProbeTime": None, "lastTransitionTime": now_rfc3339(),
            "message": (f"0/{n} nodes are available: {n} Insufficient {GPU_RESOURCE}. preemption: "
                        f"0/{n} nodes are available: {n} No preemption victims found for incoming "
                        "pod.")}]}

    def _admit_service_account(self, obj: Obj, namespace: str) -> None:
        """The ServiceAccount admission plugin, for a pod that names its ``serviceAccountName``
        (pods that name none are left as they are): when the account exists (or is ``default``;
        a real API server refuses a pod whose account is missing, here such a pod only gets no
        token, since fixtures name accounts they do not hold), and unless
        ``automountServiceAccountToken`` is false (pod, else account) the pod gets the projected
        volume ``kube-api-access-<5>`` (token, ``ca.crt`` from the ``kube-root-ca.crt``
        ConfigMap, ``namespace``) mounted read-only at /var/run/secrets/kubernetes.io/serviceaccount
        in every container (k8s.io/kubernetes ``plugin/pkg/admission/serviceaccount``)."""
        spec = obj.setdefault("spec", {})
        sa = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "")
        if not sa:
            return
        spec["serviceAccountName"] = sa
        account = self.store.try_get(self.t_sa, namespace, sa)
        if account is None and sa != "default":
            return   # an account the manifests do not hold (fixtures name some): no token
        auto = spec.get("automountServiceAccountToken")
        if auto is None:
            auto = (account or {}).get("automountServiceAccountToken")
        if auto is False:
            return
        containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
        if any(m.get("mountPath") == SA_MOUNT for c in containers for m in c.get("volumeMounts") or []):
            return
        vol = f"kube-api-access-{random_suffix()}"
        spec.setdefault("volumes", []).append({"name": vol, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
        for c in containers:
            c.setdefault("volumeMounts", []).append({"name": vol, "mountPath": SA_MOUNT, "readOnly": True})
        if self.api_server is not None and self.store.try_get(self.t_cm, namespace, "kube-root-ca.crt") is None:
            try:
                self.store.create(self.t_cm, {"metadata": {"name": "kube-root-ca.crt"}, "data": {
                    "ca.crt": self.api_server.ca_pem().decode()}}, namespace)
            except ApiError:
                pass

    def _default_pod(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if not spec.get("nodeName"):
            with self._lock:
                node = self._schedule(spec)
            if node is None:
                spec.setdefault("restartPolicy", "Always")
                spec.setdefault("schedulerName", "default-scheduler")
                obj["status"] = self.unschedulable_status()
                return
            spec["nodeName"] = node
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        obj["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True",
                            "lastTransitionTime": now_rfc3339()}],
            "hostIP": self.host_ip(spec.get("nodeName")),
            "qosClass": "BestEffort",
            "containerStatuses": [
                {"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "",
                 "ready": False, "restartCount": 0, "started": False,
                 "state": {"waiting": {"reason": "ContainerCreating"}}}
                for c in spec.get("containers") or []],
        }

    # ---------------- events ----------------
    def _on_event(self, ev: Event) -> None:
        if self._stopped:
            return
        with self._lock:
            t = ev.rtype
            md = ev.obj.get("metadata", {})
            ns, name = md.get("namespace", ""), md.get("name", "")
            if ev.type == "DELETED":
                self._cascade(ev.obj)
            if t is self.t_pod:
                if ev.type == "ADDED":
                    self._pod_added(ev.obj)
                elif ev.type == "DELETED":
                    self._pod_deleted(ev.obj)
                    ref = controller_of(ev.obj)
                    if ref is not None:
                        self._enqueue((str(ref.get("kind")), ns, str(ref.get("name"))))
            elif t in (self.t_deploy, self.t_rs, self.t_lws, self.t_ds, self.t_job) and ev.type != "DELETED":
                self._enqueue((t.kind, ns, name))

    def _enqueue(self, key: tuple[str, str, str]) -> None:
        """Queue a reconcile of ``(Kind, ns, name)``. Reconciles never nest: events raised while
        one runs are queued and drained, in order, by the outermost caller on this thread."""
        with self._lock:
            if key not in self._queue:
                self._queue.append(key)
            if self._draining:
                return
            self._draining = True
            try:
                while self._queue:
                    kind, ns, name = self._queue.pop(0)
                    if kind == "Deployment":
                        self.reconcile_deployment(ns, name)
                    elif kind == "ReplicaSet":
                        self.reconcile_replicaset(ns, name)
                    elif kind == "LeaderWorkerSet":
                        self.reconcile_lws(ns, name)
                    elif kind == "DaemonSet":
                        self.reconcile_daemonset(ns, name)
                    elif kind == "Job":
                        self.reconcile_job(ns, name)
            finally:
                self._draining = False

    def _cascade(self, owner: Obj) -> None:
        """Background garbage collection: delete pods and ReplicaSets owned by ``owner``."""
        uid = owner["metadata"].get("uid")
        ns = owner["metadata"].get("namespace")
        for t in (self.t_rs, self.t_pod):
            for o in self.store.list(t, ns):
                if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or []):
                    try:
                        self.store.delete(t, ns, o["metadata"]["name"])
                    except ApiError:
                        pass

    # ---------------- Deployment ----------------
    def _owned(self, t: ResourceType, ns: str, uid: str) -> list[Obj]:
        return [o for o in self.store.list(t, ns)
                if (controller_of(o) or {}).get("uid") == uid]

    def _top_owner(self, obj: Obj) -> tuple[str, str]:
        ref = controller_of(obj)
        if ref and ref.get("kind") == "Deployment":
            return ("Deployment", ref["name"])
        return (obj["kind"], obj["metadata"]["name"])

    def update_owner_status(self, namespace: str, pod: Obj) -> None:
        """Refresh the status of the pod's controller (ReplicaSet or LeaderWorkerSet)."""
        ref = controller_of(pod)
        if ref is None:
            return
        if ref.get("kind") == "ReplicaSet":
            self.update_replicaset_status(namespace, ref["name"])
        elif ref.get("kind") == "LeaderWorkerSet":
            self.update_lws_status(namespace, ref["name"])
        elif ref.get("kind") == "DaemonSet":
            self.update_daemonset_status(namespace, ref["name"])
        elif ref.get("kind") == "Job":
            self._enqueue(("Job", namespace, ref["name"]))

    def call_at(self, due: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the scheduler thread at monotonic time ``due`` (faults use it)."""
        self._scheduler.call_at(due, fn)

    # ---------------- queries ----------------
    def record_for(self, ns: str, name: str) -> PodRecord | None:
        """The record of the live pod ``ns/name`` (None when the pod does not exist or was not
        started by this simulator)."""
        pod = self.store.try_get(self.t_pod, ns, name)
        if pod is None:
            return None
        with self._lock:
            return self._records.get(pod["metadata"]["uid"])

    def records(self) -> list[PodRecord]:
        """Every pod record in creation order, deleted ones included."""
        with self._lock:
            return [self._records[u] for u in self._record_order]

    def wait_started(self, timeout: float = 30.0) -> bool:
        """Block until every live pod has started and passed its ready delay (True), or the
        timeout expires (False)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(r.running or r.deleted or r.held for r in self.records()):
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        """Stop every runtime (real servers in dependency order, tests/sim/realservers.py),
        the Service relays and the worker threads; give the address block back."""
        self._stopped = True
        self._scheduler.stop()
        for r in self.records():
            if r.batch is not None:
                r.batch.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.network.stop()
        live = [r.runtime for r in self.records() if r.runtime is not None and not r.deleted]
        # workers before their stores: runtimes with a lower stop_rank stop first
        ranks = sorted({int(getattr(rt, "stop_rank", 0)) for rt in live})
        for rank in ranks:
            group = [rt for rt in live if int(getattr(rt, "stop_rank", 0)) == rank]
            threads = [threading.Thread(target=self._stop_runtime, args=(rt,)) for rt in group]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        self.addresses.release()
