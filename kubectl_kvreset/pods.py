"""What a pod object says about the inference server it runs: engine, owner, role, container, API
ports, dev mode and tiers; and which pods a target (owners, ``--all``, a selector) names. Pure:
pod dicts in, frozen dataclasses out; no I/O (:mod:`kubectl_kvreset.discovery` lists the pods).

A pod is a server when one of its containers runs an engine's API server (vLLM: ``vllm serve``
or the OpenAI API server module), read from the container's command, args and env by the
engines of :data:`kubectl_kvreset.engines.ENGINES` (:func:`~kubectl_kvreset.engines.engine_for`). Labels
only say which llm-d era and role a pod belongs to; they never decide on their own, because
the EPP scheduler, the tokenizer render pods (``vllm launch render``) and the requester pods
of the dual-pod mode carry llm-d labels or vLLM images too (llm-d
``guides/precise-prefix-cache-routing/render/deployment.yaml``, llm-d-modelservice
``examples/output-requester.yaml``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .engines import DEFAULT_ENGINE, Engine, engine_for, engine_named
from .engines.base import ConfigReader, ServeConfig, ServerCommandError
from .engines.vllm.engine import DEV_MODE_ENV as DEV_MODE_ENV  # vLLM's; callers of the dev-mode patch use it
from .tiers import KVLayout

#: Pod labels by which llm-d and its neighbours mark vLLM server pods, per era
#: (llm-d ``guides/**``, llm-d-modelservice ``_helpers.tpl``, KServe ``workload_single_node.go``).
SERVING_LABELS: tuple[tuple[str, str | None], ...] = (
    ("llm-d.ai/inferenceServing", "true"),
    ("llm-d.ai/inference-serving", "true"),
    ("llm-d.ai/engine-type", "vllm"),
    ("inference.networking.k8s.io/engine-type", "vllm"),
    ("llm-d.ai/role", None),
    ("app.kubernetes.io/part-of", "llminferenceservice"),
    ("kserve.io/component", "workload"),
    ("app.kubernetes.io/component", "vllm"),
)

#: Role labels, first match wins (llm-d ``llm-d.ai/role``; legacy ``llm-d.io/role``).
ROLE_LABELS = ("llm-d.ai/role", "llm-d.io/role")

#: Images of the llm-d routing sidecar that fronts decode pods (llm-d-inference-scheduler
#: ``pkg/sidecar/proxy/``, legacy llm-d/llm-d-routing-sidecar).
_SIDECAR_IMAGE = re.compile(r"(routing-sidecar|disagg-sidecar|pd-sidecar)", re.I)


@dataclass(frozen=True)
class Owner:
    """The workload that owns a pod, as kubectl names it: ``kind`` (``Deployment``,
    ``LeaderWorkerSet``, ``ReplicaSet``, ``StatefulSet``, ``Pod`` for a bare pod) and ``name``."""

    kind: str
    name: str

    def ref(self) -> str:
        """``deployment/NAME`` as kubectl writes it (kind lower-cased)."""
        return f"{self.kind.lower()}/{self.name}"


@dataclass(frozen=True)
class DevMode:
    """``VLLM_SERVER_DEV_MODE`` of the vLLM container as the pod spec sets it.

    ``value`` is the literal env value (None when unset or not a literal); ``source`` is
    ``env``, ``valueFrom`` or ``envFrom`` (None when unset); ``accepted`` says whether vLLM
    would start with it: vLLM evaluates ``bool(int(value))`` at start-up (``vllm/envs.py``), so
    ``"true"`` or ``""`` crash the server (None when unknown); ``enabled`` is True only for a
    literal that parses to a non-zero integer.
    """

    value: str | None
    source: str | None
    accepted: bool | None
    enabled: bool

    def describe(self) -> str:
        """Short text for a table cell: ``on``, ``off``, ``off (unset)`` (not in the spec: off
        unless the image sets it), ``invalid ("true": ...)``, ``unknown (valueFrom)``, ``not needed``
        (an engine whose reset routes need no dev mode)."""
        if self.source == NOT_NEEDED:
            return "not needed"
        if self.source is None:
            return "off (unset)"
        if self.source != "env":
            return f"unknown ({self.source})"
        if self.accepted is False:
            return f"invalid ({self.value!r}: vLLM will not start)"
        return "on" if self.enabled else "off"


#: :attr:`DevMode.source` of a server whose engine serves its reset routes without dev mode
#: (:attr:`kubectl_kvreset.engines.base.Engine.dev_mode_env` None): always enabled.
NOT_NEEDED = "not-needed"


def read_dev_mode(container: Mapping[str, Any], env_name: str | None = DEV_MODE_ENV) -> DevMode:
    """Read the dev-mode variable ``env_name`` (vLLM's ``VLLM_SERVER_DEV_MODE`` by default; an
    engine's :attr:`~kubectl_kvreset.engines.base.Engine.dev_mode_env`) from a container spec
    (last ``env`` entry wins, as the kubelet applies them in order; ``envFrom`` only when no
    ``env`` entry names it). ``env_name`` None: the engine needs none, so dev mode is on
    (source :data:`NOT_NEEDED`)."""
    if env_name is None:
        return DevMode(None, NOT_NEEDED, True, True)
    found: Mapping[str, Any] | None = None
    for entry in container.get("env") or []:
        if entry.get("name") == env_name:
            found = entry
    if found is None:
        if container.get("envFrom"):
            return DevMode(None, "envFrom", None, False)
        return DevMode(None, None, True, False)
    if "valueFrom" in found:
        return DevMode(None, "valueFrom", None, False)
    value = str(found.get("value", ""))
    try:
        number = int(value)
    except ValueError:
        return DevMode(value, "env", False, False)
    return DevMode(value, "env", True, number != 0)


@dataclass(frozen=True)
class ApiPort:
    """One vLLM API server port of a pod: ``port`` number, ``scheme`` (``http``/``https``)
    and ``front`` (the routing sidecar port that forwards to it, if any)."""

    port: int
    scheme: str = "http"
    front: int | None = None


@dataclass(frozen=True)
class ServerPod:
    """Everything discovery knows about one inference server container of a pod, from its spec
    alone; ``engine`` is the engine that claimed the container (vLLM unless told), which the plan
    and the job ask for the reset routes and what their answers mean."""

    namespace: str
    name: str
    uid: str
    owner: Owner
    role: str | None
    container: str
    image: str
    ports: tuple[ApiPort, ...]
    serve: ServeConfig
    layout: KVLayout
    dev_mode: DevMode
    phase: str
    ready: bool
    labels: Mapping[str, str]
    matched_by: str
    sidecar: str | None = None
    notes: tuple[str, ...] = ()
    version: str | None = field(default=None, compare=False)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The pod object as the API returned it (spec.volumes, volumeMounts, status)."""
    engine: Engine = field(default_factory=lambda: engine_named(DEFAULT_ENGINE), compare=False, repr=False)
    """The engine whose server runs in ``container`` (:data:`kubectl_kvreset.engines.ENGINES`)."""


#: The pod model's name from before the engine seam (every server was vLLM's); the same class.
VllmPod = ServerPod


def pod_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment as far as the pod spec tells it.

    Literal ``value`` entries (with Kubernetes' ``$(VAR)`` expansion of earlier entries) and
    ``fieldRef`` to the pod's name, namespace, uid, IP, node and service account. ConfigMap and
    Secret references are not read here (they need API calls and permissions).

    Entries are applied in order and a later entry of a name replaces an earlier one, as the
    kubelet does (``pkg/kubelet/kubelet_pods.go::makeEnvironmentVariables`` assigns
    ``tmpEnv[envVar.Name]`` for each ``env`` item in turn, after the ``envFrom`` sources): a
    name whose last entry is a ``valueFrom`` not read here (a ConfigMap or Secret key, a
    resource field, an unknown field) is absent from the result, never the earlier literal,
    so whatever uses it is unevaluated.
    """
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    fields = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
    }
    env: dict[str, str] = {}
    # names the kubelet sets from a source not read here: a later value that refers to one
    # (``MODEL="$(ORG)/a"`` with ORG from a ConfigMap) is expanded by the kubelet with the real
    # value, so it is not known here either and stays unset (its users are unevaluated)
    unread: set[str] = set()
    env_from = bool(container.get("envFrom"))
    for entry in container.get("env") or []:
        name = entry.get("name")
        if not name:
            continue
        if "valueFrom" not in entry:
            missing: list[str] = []
            value = expand_k8s_refs(str(entry.get("value") or ""), env, missing)
            if any(ref in unread or env_from for ref in missing):
                env.pop(name, None)
                unread.add(name)
            else:
                env[name] = value
                unread.discard(name)
            continue
        # the last entry of a name wins: one read here replaces, one not read unsets
        env.pop(name, None)
        unread.add(name)
        ref = (entry["valueFrom"] or {}).get("fieldRef") or {}
        path = ref.get("fieldPath", "")
        if path in fields:
            env[name] = str(fields[path])
            unread.discard(name)
        else:
            m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
            if m:
                env[name] = str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
                unread.discard(name)
    return env


def expand_k8s_refs(text: str, env: Mapping[str, str], missing: list[str] | None = None) -> str:
    """Kubernetes' ``$(VAR)`` expansion (``k8s.io/kubernetes/third_party/forked/golang/expansion``):
    a defined ``$(VAR)`` is replaced, an undefined one kept literally (its name appended to
    ``missing`` when given), ``$$`` escapes ``$``."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i):
            end = text.find(")", i + 2)
            if end == -1:
                out.append(text[i:])
                break
            name = text[i + 2:end]
            out.append(env[name] if name in env else text[i:end + 1])
            if name not in env and missing is not None:
                missing.append(name)
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def pod_role(labels: Mapping[str, str]) -> str | None:
    """The prefill/decode role from pod labels: ``llm-d.ai/role`` (llm-d), legacy
    ``llm-d.io/role``, else a KServe component suffix (``...-workload-prefill``)."""
    for key in ROLE_LABELS:
        if labels.get(key):
            return labels[key]
    component = labels.get("app.kubernetes.io/component", "")
    for role in ("prefill", "decode"):
        if component.endswith("-" + role) or f"-{role}-" in component:
            return role
    return None


def pod_owner(pod: Mapping[str, Any], rs_owners: Mapping[str, Owner] | None = None) -> Owner:
    """The workload owning a pod. A ReplicaSet owner is followed to its Deployment through
    ``rs_owners`` (ReplicaSet name -> owner); LeaderWorkerSet pods are recognised by the
    ``leaderworkerset.sigs.k8s.io/name`` label LWS puts on them (its StatefulSets sit between)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    lws = labels.get("leaderworkerset.sigs.k8s.io/name")
    if lws:
        return Owner("LeaderWorkerSet", lws)
    refs = meta.get("ownerReferences") or []
    ctrl = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if ctrl is None:
        return Owner("Pod", meta.get("name", ""))
    kind, name = str(ctrl.get("kind", "")), str(ctrl.get("name", ""))
    if kind == "ReplicaSet" and rs_owners and name in rs_owners:
        return rs_owners[name]
    return Owner(kind, name)


def matched_label(labels: Mapping[str, str]) -> str | None:
    """The first llm-d/KServe serving label the pod carries, as ``key=value``, or None."""
    for key, value in SERVING_LABELS:
        if key in labels and (value is None or labels[key] == value):
            return f"{key}={labels[key]}"
    return None


def _is_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _sidecar(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    candidates: list[Mapping[str, Any]] = [c for c in spec.get("initContainers") or []
                                           if c.get("restartPolicy") == "Always"]
    candidates += list(spec.get("containers") or [])
    for c in candidates:
        if (_SIDECAR_IMAGE.search(str(c.get("image", "")))
                or c.get("name") in ("routing-proxy", "llm-d-routing-sidecar")):
            return c
    return None


def _sidecar_ports(sidecar: Mapping[str, Any]) -> dict[int, int]:
    """vLLM port -> sidecar front port, from the sidecar's ``--port``/``--vllm-port``/
    ``--data-parallel-size`` flags (llm-d-router ``pkg/sidecar/proxy/options.go``; default
    vLLM port 8200 since llm-d-router PR #1723)."""
    opts: dict[str, str] = {}
    argv = [str(a) for a in (sidecar.get("command") or []) + (sidecar.get("args") or [])]
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            continue
        key, eq, value = arg.lstrip("-").partition("=")
        if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            value = argv[i + 1]
        opts[key.replace("_", "-")] = value
    try:
        front = int(opts.get("port", "8000"))
        back = int(opts.get("vllm-port", "8200"))
        n = int(opts.get("data-parallel-size", "1"))
    except ValueError:
        return {}
    return {back + i: front + i for i in range(max(n, 1))}


#: Reads a container's ``--config`` file: ``(pod, container, path) -> (yaml_text, where)``
#: (see :data:`kubectl_kvreset.engines.vllm.servecmd.ConfigReader`).
PodConfigReader = Callable[[Mapping[str, Any], Mapping[str, Any], str], "tuple[str, str]"]


def _bind_reader(reader: PodConfigReader | None, pod: Mapping[str, Any],
                 container: Mapping[str, Any]) -> ConfigReader | None:
    """``reader`` for one container of ``pod`` (``path -> (text, where)``), or None."""
    if reader is None:
        return None

    def read(path: str) -> tuple[str, str]:
        return reader(pod, container, path)
    return read


def describe_pod(pod: Mapping[str, Any], rs_owners: Mapping[str, Owner] | None = None,
                 config_reader: PodConfigReader | None = None) -> VllmPod | None:
    """Describe one pod if it runs a vLLM API server, else None: its first vLLM container
    (:func:`describe_pod_containers` gives every one)."""
    found = describe_pod_containers(pod, rs_owners, config_reader=config_reader)
    return found[0] if found else None


def describe_pod_containers(pod: Mapping[str, Any], rs_owners: Mapping[str, Owner] | None = None,
                            config_reader: PodConfigReader | None = None) -> list[VllmPod]:
    """One :class:`ServerPod` per server container of ``pod`` (spec order; empty when none).

    A server container is one an engine of :data:`kubectl_kvreset.engines.ENGINES` claims
    (:func:`~kubectl_kvreset.engines.engine_for`; vLLM's reads ``vllm serve`` or the OpenAI API
    server module), never assumed to be ``containers[0]``; a pod with two (two models side by side, a canary)
    gives two, each
    with its own ports and state. A container whose command cannot be parsed (bad JSON in a
    flag) is noted in ``notes``. ``config_reader`` reads a ``--config FILE`` the container names
    (the port and tiers set there then count); without one that file is not read.
    """
    notes: list[str] = []
    chosen: list[tuple[Mapping[str, Any], Engine, ServeConfig]] = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        env = pod_env(pod, container)
        try:
            found = engine_for(container, env, config_reader=_bind_reader(config_reader, pod, container))
        except ServerCommandError as exc:
            notes.append(f"container {container.get('name')}: {exc}")
            continue
        if found is not None:
            chosen.append((container, *found))
    others = [str(c.get("name", "")) for c, _, _ in chosen]
    return [_describe_container(pod, container, engine, cfg, rs_owners, notes + (
        [f"the pod runs {len(chosen)} vLLM containers ({', '.join(others)}): a row each"] if len(chosen) > 1 else []))
        for container, engine, cfg in chosen]


def _describe_container(pod: Mapping[str, Any], container: Mapping[str, Any], engine: Engine, cfg: ServeConfig,
                        rs_owners: Mapping[str, Owner] | None, notes: list[str]) -> VllmPod:
    """The :class:`VllmPod` of one vLLM container of ``pod``."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    notes = list(notes)
    env = pod_env(pod, container)
    layout = engine.kv_layout(cfg, env)
    sidecar = _sidecar(spec)
    fronts = _sidecar_ports(sidecar) if sidecar is not None else {}
    ports = tuple(ApiPort(p, cfg.scheme, fronts.get(p)) for p in cfg.api_ports)
    if cfg.unresolved_vars:
        notes.append("unresolved variables in the command: " + ", ".join(cfg.unresolved_vars))
    for tier in layout.tiers:
        if tier.unevaluated:
            notes.append(f"the FS tier root {tier.root_dir!r} cannot be evaluated from the pod spec "
                         f"({tier.unevaluated}): clear and clear-fs report it left")
    notes.extend(engine.spec_notes(container, layout))
    notes.extend(cfg.notes)
    status = pod.get("status") or {}
    return VllmPod(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        owner=pod_owner(pod, rs_owners),
        role=pod_role(labels),
        container=str(container.get("name", "")),
        image=str(container.get("image", "")),
        ports=ports,
        serve=cfg,
        layout=layout,
        dev_mode=read_dev_mode(container, engine.dev_mode_env),
        phase=str(status.get("phase", "Unknown")),
        ready=_is_ready(pod),
        labels=dict(labels),
        matched_by=matched_label(labels) or "command",
        sidecar=str(sidecar.get("name")) if sidecar is not None else None,
        notes=tuple(notes),
        raw=pod,
        engine=engine,
    )


@dataclass(frozen=True)
class Targets:
    """What the user asked to act on: every vLLM pod (``all``), a label ``selector``, and/or
    ``owners`` written as kubectl writes them (``deployment/NAME``, ``leaderworkerset/NAME``;
    a bare name means a Deployment)."""

    all: bool = False
    selector: str | None = None
    owners: tuple[str, ...] = ()

    def is_empty(self) -> bool:
        """True when nothing was named (the CLI then refuses with a usage error)."""
        return not (self.all or self.selector or self.owners)


_KIND_ALIASES = {
    "deployment": "Deployment", "deployments": "Deployment", "deploy": "Deployment",
    "leaderworkerset": "LeaderWorkerSet", "leaderworkersets": "LeaderWorkerSet", "lws": "LeaderWorkerSet",
    "statefulset": "StatefulSet", "statefulsets": "StatefulSet", "sts": "StatefulSet",
    "replicaset": "ReplicaSet", "replicasets": "ReplicaSet", "rs": "ReplicaSet",
    "pod": "Pod", "pods": "Pod", "po": "Pod",
}


class TargetError(ValueError):
    """An owner reference the user wrote cannot be read, or names nothing in the namespace."""


def parse_owner_ref(text: str) -> Owner:
    """Read ``deployment/NAME``, ``deploy/NAME``, ``lws/NAME``, ``pod/NAME`` or a bare NAME
    (a Deployment), as kubectl's resource/name arguments.

    Raises:
        TargetError: an unknown kind or an empty name; the message lists the kinds accepted.
    """
    kind, slash, name = text.partition("/")
    if not slash:
        kind, name = "deployment", text
    canonical = _KIND_ALIASES.get(kind.lower().split(".", 1)[0])
    if canonical is None or not name:
        raise TargetError(
            f"cannot read target {text!r}: write deployment/NAME, leaderworkerset/NAME, pod/NAME or a Deployment name"
        )
    return Owner(canonical, name)


def select(pods: Sequence[VllmPod], targets: Targets) -> list[VllmPod]:
    """The pods the targets name. ``all`` and ``selector`` (already applied server-side) keep
    every pod; owners keep pods whose owner (or own name, for ``pod/NAME``) matches.

    Raises:
        TargetError: an owner names no vLLM pod (the message names it and how to list them).
    """
    if targets.all or (targets.selector and not targets.owners):
        return list(pods)
    wanted = [parse_owner_ref(o) for o in targets.owners]
    chosen: list[VllmPod] = []
    for owner in wanted:
        hits = [p for p in pods if p.owner == owner or (owner.kind == "Pod" and p.name == owner.name)]
        if not hits:
            raise TargetError(
                f"{owner.ref()} has no vLLM server pods in scope: check the name and namespace "
                "(kubectl kvreset detect --all lists them)"
            )
        chosen.extend(p for p in hits if p not in chosen)
    return chosen


_PAIR_IGNORED = {"pod-template-hash", "llm-d.ai/role", "llm-d.io/role", "app.kubernetes.io/component"}


def missing_pair_roles(targeted: Sequence[VllmPod], universe: Sequence[VllmPod]) -> list[tuple[Owner, Owner]]:
    """Prefill/decode owners whose partner is not targeted.

    Two owners form a pair when their pods' labels are equal except the role labels and the
    controller's own labels, and their roles differ. Returns ``(targeted_owner, other_owner)``.
    Work is linear in pods: one pod per owner is compared, through a dictionary keyed by the
    namespace and label signature.
    """
    def signature(p: VllmPod) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in p.labels.items()
                            if k not in _PAIR_IGNORED and not k.startswith("leaderworkerset.sigs.k8s.io/")))

    targeted_owners = {(p.namespace, p.owner) for p in targeted}
    # the untargeted owners of the universe by (namespace, signature), one entry per owner and role
    others: dict[tuple[str, tuple[tuple[str, str], ...]], dict[tuple[Owner, str], None]] = {}
    seen_owner: set[tuple[str, Owner, tuple[tuple[str, str], ...]]] = set()
    for q in universe:
        if (q.namespace, q.owner) in targeted_owners or not q.role:
            continue
        sig = signature(q)
        if (q.namespace, q.owner, sig) in seen_owner:
            continue
        seen_owner.add((q.namespace, q.owner, sig))
        others.setdefault((q.namespace, sig), {})[(q.owner, q.role)] = None
    out: list[tuple[Owner, Owner]] = []
    seen: set[tuple[Owner, Owner]] = set()
    done: set[tuple[str, Owner, tuple[tuple[str, str], ...], str]] = set()
    for p in targeted:
        if not p.role:
            continue
        sig = signature(p)
        key = (p.namespace, p.owner, sig, p.role)
        if key in done:
            continue
        done.add(key)
        for other, role in others.get((p.namespace, sig), {}):
            pair = (p.owner, other)
            if role != p.role and pair not in seen:
                seen.add(pair)
                out.append(pair)
    return out


def replicaset_owners(replicasets: Iterable[Mapping[str, Any]]) -> dict[str, Owner]:
    """ReplicaSet name -> the controller that owns it (a Deployment), from a ReplicaSet list."""
    out: dict[str, Owner] = {}
    for rs in replicasets:
        meta = rs.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("controller"):
                out[meta.get("name", "")] = Owner(str(ref.get("kind")), str(ref.get("name")))
    return out


def deployment_from_replicaset_name(rs_name: str, labels: Mapping[str, str]) -> Owner | None:
    """The Deployment owning a ReplicaSet, read from names alone: the Deployment controller
    names a ReplicaSet ``<deployment>-<pod-template-hash>`` and labels its pods with that hash
    (``k8s.io/kubernetes/pkg/controller/deployment/sync.go``). None when the name does not
    have that shape (a bare ReplicaSet)."""
    template_hash = labels.get("pod-template-hash")
    if template_hash and rs_name.endswith("-" + template_hash):
        return Owner("Deployment", rs_name[: -len(template_hash) - 1])
    return None
