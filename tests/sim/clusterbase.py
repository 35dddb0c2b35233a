"""Parts of the simulated cluster below its controllers: the pod backend protocol, naming and
owner-reference helpers, the record of a started pod, the timer scheduler and ClusterConfig."""

from __future__ import annotations

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .resourcetypes import Obj

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
