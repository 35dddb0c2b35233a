"""Controllers of the simulated cluster: Deployment -> ReplicaSet -> Pods, LeaderWorkerSet ->
leader and worker Pods, pod start-up (pod runtime, readiness) and owner status.

The controllers react to store events synchronously (on the writing thread, under one
controller lock), so a ``POST`` of a Deployment returns after its ReplicaSet and Pods exist.
Pod runtimes start concurrently on a worker pool; readiness flips after ``ready_delay`` seconds.

Real-world rules followed:

- Deployment: ReplicaSet ``<deploy>-<pod-template-hash>``, pods ``<rs>-<5 chars>`` from the
  alphabet of k8s.io/apimachinery ``pkg/util/rand`` (``bcdfghjklmnpqrstvwxz2456789``), label
  ``pod-template-hash`` (k8s.io/kubernetes ``pkg/controller/deployment/sync.go``); status fields
  and conditions as ``kubectl rollout status`` reads them (kubectl
  ``pkg/polymorphichelpers/rollout_status.go``). A changed template makes a new ReplicaSet and
  scales the old ones to 0 at once (a Recreate-like rollout; surge/unavailability budgets are not
  modelled).
- LeaderWorkerSet (kubernetes-sigs/lws ``api/leaderworkerset/v1``): pods ``<lws>-<i>`` (leader,
  from ``leaderTemplate`` or else ``workerTemplate``) and ``<lws>-<i>-<j>``; labels
  ``leaderworkerset.sigs.k8s.io/name``, ``/group-index``, ``/worker-index``,
  ``/template-revision-hash``; env ``LWS_LEADER_ADDRESS`` (``<lws>-<i>.<lws>.<ns>``),
  ``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX`` injected into every container as the LWS pod webhook
  does. Simplification: the pods' owner reference names the LeaderWorkerSet itself (real LWS
  puts a StatefulSet in between).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import heapq
import inspect
import itertools
import json
import random
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .batchpods import BatchRun, is_batch_spec
from .network import AddressBlock, Network
from .podspecs import apply_dev_mode_to_podspec, is_vllm_container, pod_specs_of
from .rbac import service_account_user
from .scenario import Scenario
from .store import ApiError, Event, Obj, ResourceType, Store, now_rfc3339

POD_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_LABEL = "leaderworkerset.sigs.k8s.io"
NODE_NAME = "sim-node-0"
DAEMONSET_HASH_LABEL = "controller-revision-hash"


class RuntimeLike(Protocol):
    """What the controllers need from a pod runtime (tests/sim/pods.py ``PodRuntime``).

    Optional, looked up with ``getattr`` by the server: ``served_ports() -> list[int]``
    (port-forward refuses other ports at once) and ``exec_view(container)`` (exec runs commands
    only for runtimes that have it); ``state(listing_cache=...)`` is passed a per-snapshot cache
    when the runtime accepts it."""

    def start(self) -> None: ...

    @property
    def crashed(self) -> bool: ...

    def request(self, port: int, method: str, path: str, query: str, headers: dict[str, str],
                body: bytes, *, scheme: str = "http", transport: str = "proxy"
                ) -> tuple[int, list[tuple[str, str]], bytes] | None: ...

    def state(self) -> dict[str, Any]: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class PodBackend:
    """How pods come alive: ``context_cls(**fields)`` builds a PodContext and
    ``runtime_cls(ctx)`` a runtime (tests/sim/pods.py). Tests may pass stand-ins."""

    context_cls: Callable[..., Any]
    runtime_cls: Callable[[Any], RuntimeLike]


def default_backend() -> PodBackend | None:
    """The real pod runtime from tests/sim/pods.py, or None (with a note on stderr) when that
    module is not importable: pods then serve nothing."""
    try:
        from . import pods, realservers
    except ImportError as e:  # pragma: no cover - depends on the other module being present
        print(f"sim: pod runtime unavailable ({e}); pods serve nothing", file=sys.stderr)
        return None
    return PodBackend(pods.PodContext, realservers.make_runtime)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


GPU_RESOURCE = "nvidia.com/gpu"
#: where the ServiceAccount admission plugin mounts a pod's token, CA and namespace
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def gpu_request(spec: dict[str, Any]) -> int:
    """The ``nvidia.com/gpu`` a pod spec asks for: the sum over its containers of the request
    (an extended resource's limit is its request when no request is given)."""
    total = 0
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(GPU_RESOURCE, (res.get("limits") or {}).get(
            GPU_RESOURCE, 0))
        try:
            total += int(value)
        except (TypeError, ValueError):
            continue
    return total


def template_hash(template: Any) -> str:
    """A stable 10-character hash of a pod template in the pod-name alphabet (the real
    controller uses FNV-32a of the template rendered by ``SafeEncodeString``; the value differs,
    the shape is the same)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()
    return "".join(POD_NAME_ALPHABET[b % len(POD_NAME_ALPHABET)] for b in digest[:10])


def random_suffix(n: int = 5) -> str:
    """``n`` random characters of ``POD_NAME_ALPHABET`` (generateName's suffix)."""
    return "".join(random.choice(POD_NAME_ALPHABET) for _ in range(n))


def owner_ref(obj: Obj) -> dict[str, Any]:
    """A controller ownerReference to ``obj``."""
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def controller_of(obj: Obj) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true`` (or the first one), or None."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    for r in refs:
        if r.get("controller"):
            return r  # type: ignore[no-any-return]
    return refs[0] if refs else None


_FIELD_LABEL_RE = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")
_VAR_REF_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_var_refs(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion (k8s.io/kubernetes ``third_party/forked/golang/expansion``):
    a defined ``$(VAR)`` is replaced, an undefined one kept, ``$$`` becomes ``$``."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR_REF_RE.sub(sub, text)


def human_age(seconds: float) -> str:
    """Age as kubectl prints it (k8s.io/apimachinery ``duration.HumanDuration``, simplified):
    ``45s``, ``3m20s``, ``12m``, ``2h5m``, ``3d4h``."""
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m" if m < 60 else (f"{m // 60}h{m % 60}m" if m % 60 else f"{m // 60}h")
    h = s // 3600
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"


# --------------------------------------------------------------------------------------------
# Pod records
# --------------------------------------------------------------------------------------------


@dataclass
class PodRecord:
    """What the simulator knows about one pod it started (kept after deletion).

    ``owner`` is the top-level owner ``(Kind, name)`` (Deployment, LeaderWorkerSet, or the
    direct owner) or None for a bare pod; ``ordinal`` the 0-based creation order within it;
    ``network`` a scenario fault (``unreachable``) or None; ``held`` why the pod is not
    started (``unschedulable``: no node has the GPUs it asks for; ``container-creating``: a
    scenario keeps it in ContainerCreating), None once it runs.
    """

    namespace: str
    name: str
    uid: str
    pod_ip: str
    owner: tuple[str, str] | None
    ordinal: int
    overrides: dict[str, Any]
    network: str | None
    created: float
    runtime: RuntimeLike | None = None
    runtime_error: str | None = None
    started: bool = False
    ready: bool = False
    running: bool = False
    crashed: bool = False
    deleted: bool = False
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    probe_ok: bool | None = None
    held: str | None = None
    #: a batch pod's run (tests/sim/batchpods.py), None for pods that serve
    batch: Any = None

    def state(self, listing_cache: dict[str, list[str]] | None = None) -> dict[str, Any]:
        """This pod's entry of ``/sim/v1/state``: the simulator's fields plus the runtime's
        ``state()`` (or an empty skeleton when no runtime serves it). ``listing_cache`` is
        passed to a runtime whose ``state`` accepts it (one directory walk per snapshot)."""
        base: dict[str, Any] = {
            "namespace": self.namespace, "name": self.name, "uid": self.uid,
            "owner": {"kind": self.owner[0], "name": self.owner[1]} if self.owner else None,
            "ordinal": self.ordinal, "pod_ip": self.pod_ip, "ready": self.ready,
            "running": self.running, "crashed": self.crashed, "deleted": self.deleted,
            "network": self.network, "held": self.held,
        }
        rt: dict[str, Any] = {"env": {}, "ports": {}, "fs_tier_files": [], "shm_files": []}
        if self.runtime is not None:
            try:
                fn = self.runtime.state
                try:
                    takes_cache = "listing_cache" in inspect.signature(fn).parameters
                except (TypeError, ValueError):
                    takes_cache = False
                rt = dict(fn(listing_cache=listing_cache) if takes_cache  # type: ignore[call-arg]
                          else fn())
            except Exception as e:  # a broken runtime must not break the state endpoint
                rt["state_error"] = repr(e)
        if self.runtime_error:
            rt["runtime_error"] = self.runtime_error
        rt.update(base)
        return rt


class _Scheduler:
    """A single thread running callbacks at monotonic due times (pod readiness)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="sim-scheduler", daemon=True)
        self._thread.start()

    def call_at(self, due: float, fn: Callable[[], None]) -> None:
        with self._cv:
            heapq.heappush(self._heap, (due, next(self._seq), fn))
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (not self._heap or
                                             self._heap[0][0] > time.monotonic()):
                    timeout = None if not self._heap else self._heap[0][0] - time.monotonic()
                    self._cv.wait(timeout)
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception as e:  # pragma: no cover - defensive
                print(f"sim: scheduled task failed: {e!r}", file=sys.stderr)

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()


# --------------------------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------------------------


@dataclass
class ClusterConfig:
    """Settings of a simulated cluster: default ``namespace``, ``state_dir`` (per-pod dirs,
    PVC dirs, hostPath dirs), ``ready_delay`` seconds, ``dev_mode`` (``on``/``off``/``invalid``/
    None = leave manifests alone), ``default_version`` (--vllm-version), ``sandbox``, ``nodes``
    (simulated nodes ``sim-node-0``.., each at its own loopback address; a DaemonSet runs a pod
    on each), ``real_servers`` (peer names, tests/sim/realservers.py, whose servers pods run
    for real)."""

    namespace: str = "default"
    state_dir: Path = Path(".")
    ready_delay: float = 0.3
    dev_mode: str | None = None
    default_version: str | None = None
    sandbox: bool = False
    start_workers: int = 16
    nodes: int = 1
    real_servers: frozenset[str] = frozenset()


class Cluster:
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
            from .realservers import check_manifest_object
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

    def _top_owner(self, obj: Obj) -> tuple[str, str]:
        ref = controller_of(obj)
        if ref and ref.get("kind") == "Deployment":
            return ("Deployment", ref["name"])
        return (obj["kind"], obj["metadata"]["name"])

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

    # ---- env and volumes ----
    def resolve_env(self, pod: Obj, container: dict[str, Any], pod_ip: str) -> dict[str, str]:
        """Resolve a container's environment as the kubelet does: ``envFrom`` (ConfigMap /
        Secret, with ``prefix``) first, then ``env`` in order with ``$(VAR)`` expansion of
        values; ``valueFrom`` fieldRef (metadata.name/namespace/uid/labels['k']/annotations['k'],
        status.podIP, status.hostIP, spec.nodeName, spec.serviceAccountName), configMapKeyRef,
        secretKeyRef (base64-decoded ``data`` or ``stringData``). A missing source leaves the
        variable unset."""
        md = pod["metadata"]
        ns = md["namespace"]
        env: dict[str, str] = {}
        if self.api_server is not None and any(
                m.get("mountPath") == SA_MOUNT for m in container.get("volumeMounts") or []):
            # the kubelet's service variables of the `kubernetes` Service: here the API
            # server's own loopback address (pods share the machine's loopback)
            port = str(self.api_server.port)
            env.update({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port,
                        "KUBERNETES_SERVICE_PORT_HTTPS": port,
                        "KUBERNETES_PORT": f"tcp://127.0.0.1:{port}",
                        "KUBERNETES_PORT_443_TCP": f"tcp://127.0.0.1:{port}"})
        for ef in container.get("envFrom") or []:
            prefix = ef.get("prefix", "")
            if "configMapRef" in ef:
                cm = self.store.try_get(self.t_cm, ns, ef["configMapRef"].get("name", ""))
                for k, v in ((cm or {}).get("data") or {}).items():
                    env[prefix + k] = str(v)
            elif "secretRef" in ef:
                sec = self.store.try_get(self.t_secret, ns, ef["secretRef"].get("name", ""))
                for k, v in self._secret_data(sec).items():
                    env[prefix + k] = v
        for e in container.get("env") or []:
            name = e.get("name")
            if not name:
                continue
            if "value" in e or "valueFrom" not in e:
                env[name] = expand_var_refs(str(e.get("value", "") or ""), env)
                continue
            vf = e.get("valueFrom") or {}
            val: str | None = None
            if "fieldRef" in vf:
                path = vf["fieldRef"].get("fieldPath", "")
                m = _FIELD_LABEL_RE.match(path)
                if m:
                    val = (md.get(m.group(1)) or {}).get(m.group(2))
                else:
                    val = {
                        "metadata.name": md.get("name"), "metadata.namespace": ns,
                        "metadata.uid": md.get("uid"), "status.podIP": pod_ip,
                        "status.podIPs": pod_ip,
                        "status.hostIP": self.host_ip((pod.get("spec") or {}).get("nodeName")),
                        "status.hostIPs": self.host_ip((pod.get("spec") or {}).get("nodeName")),
                        "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
                        "spec.serviceAccountName":
                            (pod.get("spec") or {}).get("serviceAccountName"),
                    }.get(path)
            elif "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                cm = self.store.try_get(self.t_cm, ns, ref.get("name", ""))
                val = ((cm or {}).get("data") or {}).get(ref.get("key", ""))
            elif "secretKeyRef" in vf:
                ref = vf["secretKeyRef"]
                sec = self.store.try_get(self.t_secret, ns, ref.get("name", ""))
                val = self._secret_data(sec).get(ref.get("key", ""))
            if val is not None:
                env[name] = str(val)
        return env

    @staticmethod
    def _secret_data(sec: Obj | None) -> dict[str, str]:
        if not sec:
            return {}
        out: dict[str, str] = {}
        for k, v in (sec.get("data") or {}).items():
            try:
                out[k] = base64.b64decode(v).decode("utf-8", "replace")
            except (ValueError, TypeError):
                continue
        for k, v in (sec.get("stringData") or {}).items():
            out[k] = str(v)
        return out

    def _pod_dir(self, rec: PodRecord) -> Path:
        return self.config.state_dir / "pods" / f"{rec.namespace}_{rec.name}_{rec.uid[:8]}"

    def provision_volumes(self, pod: Obj, rec: PodRecord, shm_dir: Path) -> dict[str, Path]:
        """Host directories backing the pod's volumes: a PVC is one directory per
        namespace/claim shared by all pods (the claim object is created, Bound, on first use);
        an emptyDir is per pod (the one mounted at ``/dev/shm`` is the pod's shm dir); a hostPath
        lives under the simulator's hostpath dir; a configMap or secret volume is a per-pod
        directory of its keys. A claim bound (``spec.volumeName``) to a PersistentVolume with an
        ``nfs`` or ``hostPath``/``local`` source, or a ``csi`` source of csi-driver-nfs
        (``server``/``share``/``subDir``), smb.csi.k8s.io (``source``/``subDir``) or
        efs.csi.aws.com (``fs-ID[:path]`` handle), and an inline ``nfs`` volume, use the directory
        of that storage (``nfs/<server>/<path>`` with the server's cluster DNS suffix dropped,
        ``smb/<host>/<share>``, ``efs/<id>/<path>``, the hostpath dir), so two claims on one
        share see the same files. Other volume kinds are absent."""
        spec = pod.get("spec") or {}
        shm_volumes = {m.get("name") for c in (spec.get("containers") or []) +
                       (spec.get("initContainers") or [])
                       for m in c.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"}
        out: dict[str, Path] = {}
        for v in spec.get("volumes") or []:
            name = v.get("name")
            if not name:
                continue
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"].get("claimName", name)
                self._ensure_pvc(rec.namespace, claim)
                d = self._pv_dir(rec.namespace, claim) or self.config.state_dir / "pvc" / rec.namespace / claim
            elif "nfs" in v:
                nfs = v["nfs"] or {}
                d = self._nfs_dir(str(nfs.get("server", "")), str(nfs.get("path", "")))
            elif "emptyDir" in v:
                d = shm_dir if name in shm_volumes else self._pod_dir(rec) / "volumes" / name
            elif "hostPath" in v:
                d = self.config.state_dir / "hostpath" / str(
                    v["hostPath"].get("path", name)).lstrip("/")
            elif "configMap" in v or "secret" in v:
                d = self._pod_dir(rec) / "volumes" / name
                self._project_keys(rec.namespace, v, d)
            elif "projected" in v:
                d = self._pod_dir(rec) / "volumes" / name
                for source in (v["projected"] or {}).get("sources") or []:
                    if "configMap" in source:
                        self._project_keys(rec.namespace, {"configMap": source["configMap"]}, d)
                    elif "secret" in source:
                        sec = dict(source["secret"] or {})
                        sec["secretName"] = sec.get("name", "")
                        self._project_keys(rec.namespace, {"secret": sec}, d)
                    elif "serviceAccountToken" in source and self.api_server is not None:
                        rel = str((source["serviceAccountToken"] or {}).get("path") or "token")
                        sa = str(spec.get("serviceAccountName") or "default")
                        d.mkdir(parents=True, exist_ok=True)
                        (d / rel).write_text(self.api_server.mint_token(
                            service_account_user(rec.namespace, sa)))
                    elif "downwardAPI" in source:
                        md = pod.get("metadata") or {}
                        for item in (source["downwardAPI"] or {}).get("items") or []:
                            field_path = str((item.get("fieldRef") or {}).get("fieldPath") or "")
                            value = {"metadata.namespace": rec.namespace, "metadata.name": rec.name,
                                     "metadata.uid": rec.uid}.get(field_path, md.get(field_path))
                            rel = str(item.get("path") or "")
                            if value is not None and rel and ".." not in Path(rel).parts:
                                d.mkdir(parents=True, exist_ok=True)
                                (d / rel).write_text(str(value))
            else:
                continue
            d.mkdir(parents=True, exist_ok=True)
            out[name] = d
        return out

    def _project_keys(self, ns: str, volume: dict[str, Any], d: Path) -> None:
        """A ``configMap`` / ``secret`` volume as the kubelet lays it: one file per key (or per
        ``items`` entry at its ``path``), Secret values decoded; a missing source leaves the
        directory empty (the kubelet would keep the pod waiting unless ``optional``)."""
        if "configMap" in volume:
            src = volume["configMap"] or {}
            obj = self.store.try_get(self.t_cm, ns, str(src.get("name", "")))
            data = {k: str(v) for k, v in ((obj or {}).get("data") or {}).items()}
        else:
            src = volume["secret"] or {}
            data = self._secret_data(self.store.try_get(self.t_secret, ns,
                                                        str(src.get("secretName", ""))))
        items = src.get("items")
        chosen = [(str(i.get("key")), str(i.get("path") or i.get("key"))) for i in items
                  if isinstance(i, dict)] if isinstance(items, list) else [(k, k) for k in data]
        d.mkdir(parents=True, exist_ok=True)
        for key, rel in chosen:
            if key not in data or ".." in Path(rel).parts or rel.startswith("/"):
                continue
            target = d / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data[key])

    def _nfs_dir(self, server: str, path: str) -> Path:
        """The directory of NFS export ``server:path``: a Service's ``name.ns``, ``name.ns.svc``,
        ``name.ns.svc.cluster.local`` and a trailing dot name one server (cluster DNS)."""
        host = server.strip().rstrip(".").lower()
        for suffix in (".cluster.local", ".svc"):
            host = host.removesuffix(suffix)
        return self.config.state_dir / "nfs" / host / path.strip("/")

    def _pv_dir(self, ns: str, claim: str) -> Path | None:
        """The directory of the storage the claim's bound PersistentVolume names, or None."""
        pvc = self.store.try_get(self.t_pvc, ns, claim) or {}
        name = (pvc.get("spec") or {}).get("volumeName")
        pv = self.store.try_get(self.t_pv, None, str(name)) if name else None
        spec = (pv or {}).get("spec") or {}
        if isinstance(spec.get("nfs"), dict):
            return self._nfs_dir(str(spec["nfs"].get("server", "")), str(spec["nfs"].get("path", "")))
        csi = spec.get("csi") if isinstance(spec.get("csi"), dict) else {}
        attrs = {str(k).lower(): str(v) for k, v in (csi.get("volumeAttributes") or {}).items()}
        driver, handle = str(csi.get("driver", "")), str(csi.get("volumeHandle", ""))
        if driver == "nfs.csi.k8s.io" and attrs.get("server"):
            return self._nfs_dir(attrs["server"], attrs.get("share", "/") + "/" + attrs.get("subdir", ""))
        if driver == "smb.csi.k8s.io" and attrs.get("source"):
            host, _, share = attrs["source"].replace("\\", "/").lstrip("/").partition("/")
            return (self.config.state_dir / "smb" / host.lower()
                    / share.strip("/") / attrs.get("subdir", "").strip("/"))
        if driver == "efs.csi.aws.com" and handle.startswith("fs-"):
            fsid, _, rest = handle.partition(":")
            return self.config.state_dir / "efs" / fsid / rest.partition(":")[0].strip("/")
        for kind in ("hostPath", "local"):
            if isinstance(spec.get(kind), dict):
                return self.config.state_dir / "hostpath" / str(spec[kind].get("path", "")).lstrip("/")
        return None

    def _ensure_pvc(self, ns: str, claim: str) -> None:
        if self.store.try_get(self.t_pvc, ns, claim) is not None:
            return
        try:
            self.store.create(self.t_pvc, {
                "metadata": {"name": claim, "namespace": ns},
                "spec": {"accessModes": ["ReadWriteMany"],
                         "resources": {"requests": {"storage": "1Ti"}},
                         "volumeMode": "Filesystem"},
                "status": {"phase": "Bound", "accessModes": ["ReadWriteMany"],
                           "capacity": {"storage": "1Ti"}}}, ns)
        except ApiError:
            pass

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
