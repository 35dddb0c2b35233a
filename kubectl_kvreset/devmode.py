"""``VLLM_SERVER_DEV_MODE`` in an owner's pod templates: find the vLLM container, read the
value as vLLM would, build the JSON patch that sets it to ``"1"`` or removes it, and name the
controllers that would revert such a patch.

Pure: plain dicts in (the owner object as the API returns it), frozen dataclasses and JSON
patch operations out. The I/O (GET, PATCH, wait) lives in :mod:`kubectl_kvreset.rollout`.

Facts used:

* vLLM reads the variable as ``bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0")))``
  (``vllm/envs.py``, every release 0.7.3 .. 0.33.0): ``"1"``, ``"2"``, ``" 1"`` enable it,
  ``"0"`` disables it, and ``"true"``, ``"yes"`` or ``""`` raise ``ValueError`` at start-up, so
  the server never listens (``vllm/entrypoints/openai/cli_args.py`` reads it at import).
* The kubelet builds a container's environment from ``envFrom`` sources in order (a later
  source wins), then ``env`` entries in order (the last entry naming a variable wins), so an
  ``env`` entry overrides any ``envFrom`` value (``k8s.io/kubernetes``
  ``pkg/kubelet/kubelet_pods.go`` ``makeEnvironmentVariables``).
* Owners: Deployment ``spec.template``; LeaderWorkerSet ``spec.leaderWorkerTemplate``
  ``leaderTemplate`` (optional: without it the leader uses the worker template) and
  ``workerTemplate`` (``sigs.k8s.io/lws`` ``api/leaderworkerset/v1``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .engines import engine_for
from .engines.base import ServerCommandError
from .pods import DEV_MODE_ENV, pod_env

__all__ = [
    "DEV_MODE_ENV",
    "ENABLED_VALUE",
    "DevModeReading",
    "Manager",
    "SourceLookup",
    "TemplateRef",
    "VllmContainer",
    "blocking",
    "dev_mode_patch",
    "describe_replacements",
    "find_vllm_container",
    "find_vllm_containers",
    "managing_controllers",
    "owner_templates",
    "pod_as_owner",
    "read_template_dev_mode",
    "read_template_dev_modes",
    "vllm_accepts",
]

#: The value ``devmode --enable`` writes: the one every vLLM release parses as on.
ENABLED_VALUE = "1"

#: ``(kind, name)`` of a ConfigMap or Secret -> its decoded data (name -> value), or None
#: when it does not exist. Raises ``PermissionError`` when reading it is not permitted.
SourceLookup = Callable[[str, str], "Mapping[str, str] | None"]


@dataclass(frozen=True)
class TemplateRef:
    """One pod template of an owner: ``label`` (``template``, ``leader``, ``worker``), the JSON
    pointer ``path`` of the template in the owner (``/spec/template``,
    ``/spec/leaderWorkerTemplate/workerTemplate``) and the ``template`` dict itself."""

    label: str
    path: str
    template: Mapping[str, Any]


@dataclass(frozen=True)
class VllmContainer:
    """The vLLM container of a template: its ``index`` in ``spec.containers``, ``name`` and the
    container dict (``spec``)."""

    index: int
    name: str
    spec: Mapping[str, Any]


@dataclass(frozen=True)
class DevModeReading:
    """``VLLM_SERVER_DEV_MODE`` of one template's vLLM container, as vLLM would see it.

    Attributes:
        template: the template label (``template``, ``leader``, ``worker``).
        container: the vLLM container's name, or None when the template has none.
        value: the resolved value, None when unset or not resolvable.
        source: where it comes from: ``env``, ``configMapKeyRef ConfigMap/NAME``,
            ``secretKeyRef Secret/NAME``, ``envFrom ConfigMap/NAME``, ``envFrom Secret/NAME``,
            ``fieldRef``; None when unset.
        accepted: whether vLLM starts with it (``int()`` parses it); None when unknown.
        enabled: True when vLLM's dev routes would be mounted (a non-zero integer).
        detail: why the value is unknown (``not permitted to read Secret/x``), else None.
        entries: how many ``env`` entries name the variable (a second run of ``--enable``
            leaves exactly one).
        key: the ConfigMap or Secret key the value is read from (the ``valueFrom`` key, or the
            key of the ``envFrom`` source that holds it); None for a literal or when unset.
    """

    template: str
    container: str | None
    value: str | None
    source: str | None
    accepted: bool | None
    enabled: bool
    detail: str | None = None
    entries: int = 0
    key: str | None = None

    def describe(self) -> str:
        """Short text for a table cell: ``on``, ``off``, ``invalid ("true": vLLM will not
        start)``, ``unknown (...)``, ``no vLLM container``."""
        if self.container is None:
            return "no vLLM container"
        if self.detail is not None and self.value is None:
            return f"unknown ({self.detail})"
        if self.source is None:
            return "off"
        if self.accepted is False:
            return f'invalid ("{self.value}": vLLM will not start)'
        return "on" if self.enabled else "off"

    @property
    def state(self) -> str:
        """One word: ``on``, ``off``, ``invalid``, ``unknown`` or ``none`` (no vLLM container)."""
        if self.container is None:
            return "none"
        if self.detail is not None and self.value is None:
            return "unknown"
        if self.source is None:
            return "off"
        if self.accepted is False:
            return "invalid"
        return "on" if self.enabled else "off"


@dataclass(frozen=True)
class Manager:
    """A controller or tool that manages an owner object.

    ``kind`` (``DisaggregatedSet``, ``LLMInferenceService``, ``Argo CD``, ``Flux Kustomization``,
    ``Helm``...), ``name`` (may be empty), ``via`` (the ownerReference, label or annotation
    that says so) and ``reverts``: True when it reconciles continuously and would undo a patch
    (a controller ownerReference, Argo CD, Flux); False for Helm, which only rewrites the
    object at the next ``helm upgrade``.
    """

    kind: str
    name: str
    via: str
    reverts: bool

    def describe(self) -> str:
        """``DisaggregatedSet/ds (ownerReference)``."""
        who = f"{self.kind}/{self.name}" if self.name else self.kind
        return f"{who} ({self.via})"


def vllm_accepts(value: str) -> bool:
    """Whether vLLM's ``int(value)`` parses ``value`` (``" 1"`` and ``"+2"`` do; ``"true"``,
    ``"yes"``, ``""`` do not). Source: ``vllm/envs.py`` ``VLLM_SERVER_DEV_MODE``."""
    try:
        int(value)
    except ValueError:
        return False
    return True


def owner_templates(obj: Mapping[str, Any]) -> list[TemplateRef]:
    """The pod templates of a Deployment or LeaderWorkerSet, in the order the controller starts
    them (leader before worker). Other kinds give an empty list."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        out: list[TemplateRef] = []
        for key, label in (("leaderTemplate", "leader"), ("workerTemplate", "worker")):
            if isinstance(lwt.get(key), Mapping):
                out.append(TemplateRef(label, f"/spec/leaderWorkerTemplate/{key}", lwt[key]))
        return out
    if kind in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet") and isinstance(spec.get("template"), Mapping):
        return [TemplateRef("template", "/spec/template", spec["template"])]
    return []


def pod_as_owner(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A pod (as the API returns it) shaped as a Deployment whose one template is the pod's
    ``metadata`` and ``spec``, so that :func:`owner_templates` and the readers read a pod's
    containers as they read an owner's template (label ``template``)."""
    return {"kind": "Deployment", "spec": {"template": {"metadata": pod.get("metadata") or {},
                                                        "spec": pod.get("spec") or {}}}}


def find_vllm_containers(template: Mapping[str, Any]) -> list[VllmContainer]:
    """Every container of a pod template that runs a vLLM API server, in spec order, by the
    rule discovery uses for pods (:func:`kubectl_kvreset.engines.engine_for` reads its command,
    args and literal env; kept when the engine's dev-mode variable is :data:`DEV_MODE_ENV`, the
    one this module patches); never assumed to be ``containers[0]``. A pod may run two
    (two models side by side): each reads its own ``VLLM_SERVER_DEV_MODE``, and one that vLLM
    refuses crash-loops on its own. Empty when there is none."""
    pod_like = {"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}}
    found: list[VllmContainer] = []
    for index, container in enumerate((template.get("spec") or {}).get("containers") or []):
        try:
            claimed = engine_for(container, pod_env(pod_like, container))
        except ServerCommandError:
            continue
        if claimed is not None and claimed[0].dev_mode_env == DEV_MODE_ENV:
            found.append(VllmContainer(index, str(container.get("name", "")), container))
    return found


def find_vllm_container(template: Mapping[str, Any]) -> VllmContainer | None:
    """The first of :func:`find_vllm_containers`, None when there is none."""
    found = find_vllm_containers(template)
    return found[0] if found else None


def _named(container: Mapping[str, Any]) -> list[int]:
    return [i for i, e in enumerate(container.get("env") or [])
            if isinstance(e, Mapping) and e.get("name") == DEV_MODE_ENV]


def _reading(label: str, container: str, value: str | None, source: str | None, *,
             detail: str | None = None, entries: int = 0, key: str | None = None) -> DevModeReading:
    if value is None:
        return DevModeReading(label, container, None, source, None if source else True, False, detail, entries, key)
    accepted = vllm_accepts(value)
    return DevModeReading(label, container, value, source, accepted, accepted and int(value) != 0, detail, entries,
                          key)


def read_template_dev_mode(ref: TemplateRef, lookup: SourceLookup | None = None,
                           container: str | None = None) -> DevModeReading:
    """Read ``VLLM_SERVER_DEV_MODE`` of one vLLM container of the template (``container`` by
    name; default the first) as the kubelet would resolve it: the last ``env`` entry naming it
    (a literal ``value``, or ``valueFrom`` a ConfigMap or Secret key), else the last
    ``envFrom`` source that holds it.

    ``lookup`` reads ConfigMaps and Secrets (see :data:`SourceLookup`); without it, or when it
    raises ``PermissionError``, a value held there is reported unknown with the reason in
    ``detail``. ``fieldRef``/``resourceFieldRef`` values are unknown from a template. A
    template without that vLLM container gives a reading whose ``container`` is None.
    """
    vc = next((v for v in find_vllm_containers(ref.template) if container is None or v.name == container), None)
    if vc is None:
        return DevModeReading(ref.label, None, None, None, None, False)
    return _read_container(ref.label, vc, lookup)


def read_template_dev_modes(ref: TemplateRef, lookup: SourceLookup | None = None) -> list[DevModeReading]:
    """:func:`read_template_dev_mode` of every vLLM container of the template, in spec order
    (one reading whose ``container`` is None when it has none)."""
    found = find_vllm_containers(ref.template)
    if not found:
        return [DevModeReading(ref.label, None, None, None, None, False)]
    return [_read_container(ref.label, vc, lookup) for vc in found]


def _read_container(label: str, vc: VllmContainer, lookup: SourceLookup | None) -> DevModeReading:
    env = list(vc.spec.get("env") or [])
    named = _named(vc.spec)
    if named:
        entry = env[named[-1]]
        if "valueFrom" not in entry:
            return _reading(label, vc.name, str(entry.get("value", "") or ""), "env", entries=len(named))
        vf = entry.get("valueFrom") or {}
        for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            if key in vf:
                src = vf[key] or {}
                source = f"{key} {kind}/{src.get('name', '')}"
                data_key = str(src.get("key", ""))
                data, why = _lookup(lookup, kind, str(src.get("name", "")))
                if data is None:
                    return _reading(label, vc.name, None, source, detail=why, entries=len(named), key=data_key)
                if src.get("key") not in data:
                    # the kubelet refuses to start the container when the key is absent
                    # (unless optional: then the variable is unset)
                    return _reading(label, vc.name, None, source,
                                    detail=f"key {src.get('key')!r} absent from {kind}/{src.get('name')}",
                                    entries=len(named), key=data_key)
                return _reading(label, vc.name, str(data[src["key"]]), source, entries=len(named), key=data_key)
        return _reading(label, vc.name, None, "fieldRef", detail="set from a field of the pod", entries=len(named))
    found: tuple[str, str, str] | None = None
    unknown: str | None = None
    for source in vc.spec.get("envFrom") or []:
        prefix = str(source.get("prefix", "") or "")
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            if key not in source:
                continue
            name = str((source[key] or {}).get("name", ""))
            data, why = _lookup(lookup, kind, name)
            if data is None:
                if why is not None and not why.startswith("no "):
                    unknown = why
                continue
            for var, value in data.items():
                if prefix + var == DEV_MODE_ENV:
                    found = (str(value), f"envFrom {kind}/{name}", str(var))
    if found is not None:
        return _reading(label, vc.name, found[0], found[1], key=found[2])
    if unknown is not None:
        return _reading(label, vc.name, None, None, detail=unknown)
    return _reading(label, vc.name, None, None)


def _lookup(lookup: SourceLookup | None, kind: str, name: str) -> tuple[Mapping[str, str] | None, str | None]:
    if lookup is None:
        return None, f"{kind}/{name} not read"
    try:
        data = lookup(kind, name)
    except PermissionError:
        return None, f"not permitted to read {kind}/{name}"
    if data is None:
        return None, f"no {kind}/{name}"
    return data, None


def dev_mode_patch(obj: Mapping[str, Any], *, enable: bool) -> list[dict[str, Any]]:
    """The JSON patch (RFC 6902, ``application/json-patch+json``) that leaves every vLLM
    container of every template of ``obj`` with ``VLLM_SERVER_DEV_MODE="1"`` exactly once
    (``enable``) or without any entry naming it (not ``enable``).

    Works whether ``env`` is absent (``add`` of the whole list), holds the variable with
    another value or through ``valueFrom`` (the first such entry is replaced, later ones are
    removed, highest index first), or lacks it (``add`` at ``/env/-``). Every index-based
    operation is preceded by a ``test`` of the container's and the entry's name, so a patch
    built from a stale read fails (422) instead of editing the wrong entry. When ``obj`` has a
    ``metadata.resourceVersion``, the patch first writes it back: the API server takes a
    resourceVersion in the patched object as the update's precondition and answers 409
    ``Conflict`` when the object changed since it was read (``k8s.io/apiserver``
    ``pkg/registry/generic/registry/store.go`` ``Update``), so two runs at once cannot both
    append an entry; the caller re-reads and decides again. An empty list means nothing would
    change (a second run).

    Raises:
        ValueError: no template of ``obj`` has a vLLM container (the message says so).
    """
    ops: list[dict[str, Any]] = []
    found = False
    for ref, vc in ((r, v) for r in owner_templates(obj) for v in find_vllm_containers(r.template)):
        found = True
        base = f"{ref.path}/spec/containers/{vc.index}"
        env = list(vc.spec.get("env") or [])
        named = _named(vc.spec)
        guard = {"op": "test", "path": f"{base}/name", "value": vc.name}
        wanted = {"name": DEV_MODE_ENV, "value": ENABLED_VALUE}
        if enable:
            if len(named) == 1 and "valueFrom" not in env[named[0]] and env[named[0]].get("value") == ENABLED_VALUE:
                continue
            ops.append(guard)
            if "env" not in vc.spec or vc.spec.get("env") is None:
                ops.append({"op": "add", "path": f"{base}/env", "value": [wanted]})
                continue
            if not named:
                ops.append({"op": "add", "path": f"{base}/env/-", "value": wanted})
                continue
            for i in reversed(named[1:]):
                ops.append({"op": "test", "path": f"{base}/env/{i}/name", "value": DEV_MODE_ENV})
                ops.append({"op": "remove", "path": f"{base}/env/{i}"})
            ops.append({"op": "test", "path": f"{base}/env/{named[0]}/name", "value": DEV_MODE_ENV})
            ops.append({"op": "replace", "path": f"{base}/env/{named[0]}", "value": wanted})
        else:
            if not named:
                continue
            ops.append(guard)
            for i in reversed(named):
                ops.append({"op": "test", "path": f"{base}/env/{i}/name", "value": DEV_MODE_ENV})
                ops.append({"op": "remove", "path": f"{base}/env/{i}"})
    if not found:
        kind = obj.get("kind", "object")
        name = (obj.get("metadata") or {}).get("name", "")
        raise ValueError(f"{kind}/{name} has no container that runs a vLLM API server in its pod template(s)")
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if ops and version:
        ops.insert(0, {"op": "replace", "path": "/metadata/resourceVersion", "value": str(version)})
    return ops


def describe_replacements(obj: Mapping[str, Any], readings: Sequence[DevModeReading], *, enable: bool) -> list[str]:
    """What :func:`dev_mode_patch` does to a value that does not come from a literal ``env``
    entry, one sentence per template, for the plan and the prompt (shown before anything
    changes): a ``valueFrom`` entry (ConfigMap or Secret key, field) replaced by the literal
    ``"1"`` or removed, and an ``envFrom`` source that a literal overrides (``enable``) or that
    keeps the variable set (not ``enable``: only ``env`` entries are removed). ``readings`` are
    the vLLM containers' resolved values (:func:`read_template_dev_modes` or
    :func:`read_template_dev_mode`), matched by template label and container name. Empty when
    every value is a literal or unset."""
    out: list[str] = []
    by_container = {(r.template, r.container): r for r in readings}
    for ref, vc in ((r, v) for r in owner_templates(obj) for v in find_vllm_containers(r.template)):
        reading = by_container.get((ref.label, vc.name))
        if reading is None:
            continue
        env = list(vc.spec.get("env") or [])
        where = f"{ref.label} container {vc.name}"
        shown = f' (now "{reading.value}")' if reading.value is not None else (
            f" ({reading.detail})" if reading.detail else "")
        for i in _named(vc.spec):
            vf = env[i].get("valueFrom")
            if not isinstance(vf, Mapping):
                continue
            src = next((f"{key} {kind}/{(vf.get(key) or {}).get('name', '')} key {(vf.get(key) or {}).get('key', '')!r}"
                        for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")) if key in vf),
                       "a field of the pod")
            effective = reading.source is not None and reading.source != "env"
            value = shown if effective else ""
            if enable:
                out.append(f"{where}: {DEV_MODE_ENV} is read from {src}{value}; --enable replaces that "
                           f'entry with the literal "{ENABLED_VALUE}" (the source itself is not changed)')
            else:
                out.append(f"{where}: the {DEV_MODE_ENV} entry that reads {src}{value} is removed "
                           "(the source itself is not changed)")
        if reading.source and reading.source.startswith("envFrom"):
            if enable:
                out.append(f"{where}: {DEV_MODE_ENV} comes from {reading.source}{shown}; --enable adds the "
                           f'literal "{ENABLED_VALUE}", which overrides it (the source itself is not changed)')
            else:
                out.append(f"{where}: {DEV_MODE_ENV} stays set through {reading.source}{shown}: --disable "
                           "removes only env entries; edit that source")
    return out


#: Labels and annotations by which GitOps tools mark the objects they sync. Key prefix ->
#: (tool, reverts). Argo CD: ``argocd.argoproj.io/tracking-id`` annotation or
#: ``argocd.argoproj.io/instance`` label; Flux: ``kustomize.toolkit.fluxcd.io/name`` and
#: ``helm.toolkit.fluxcd.io/name`` labels.
_GITOPS_MARKERS: tuple[tuple[str, str], ...] = (
    ("kustomize.toolkit.fluxcd.io/", "Flux Kustomization"),
    ("helm.toolkit.fluxcd.io/", "Flux HelmRelease"),
    ("fluxcd.io/", "Flux"),
    ("argocd.argoproj.io/", "Argo CD"),
)

#: ``app.kubernetes.io/managed-by`` values of tools that write an object once per command and
#: do not reconcile it afterwards: a patch lasts until their next upgrade or apply.
_ONE_SHOT_TOOLS = {"helm": "Helm", "tiller": "Helm", "kubectl": "kubectl", "kustomize": "kustomize"}


def managing_controllers(obj: Mapping[str, Any]) -> list[Manager]:
    """Who manages ``obj`` besides the user: every ownerReference (KServe's
    ``LLMInferenceService`` and llm-d's ``DisaggregatedSet`` own the Deployments or
    LeaderWorkerSets they create and rewrite their templates on every reconcile), Argo CD and
    Flux markers, and ``app.kubernetes.io/managed-by``.

    ``Manager.reverts`` is False only for one-shot tools (Helm, kubectl): they overwrite a patch
    at their next run, not continuously. An unknown ``managed-by`` value is taken to revert.
    """
    meta = obj.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    out: list[Manager] = []
    for ref in meta.get("ownerReferences") or []:
        kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
        how = "controller ownerReference" if ref.get("controller") else "ownerReference"
        out.append(Manager(kind, name, how, True))
    seen_tools: set[str] = set()
    for where, marks in (("label", labels), ("annotation", annotations)):
        named_first = sorted(marks.items(), key=lambda kv: not kv[0].endswith(("/name", "/tracking-id", "/instance")))
        for key, value in named_first:
            tool = next((t for prefix, t in _GITOPS_MARKERS if key.startswith(prefix) or f".{prefix}" in key), None)
            if tool is None or tool in seen_tools:
                continue
            seen_tools.add(tool)
            out.append(Manager(tool, _marker_name(key, str(value), marks), f"{where} {key}", True))
    managed_by = labels.get("app.kubernetes.io/managed-by")
    if managed_by:
        one_shot = _ONE_SHOT_TOOLS.get(managed_by.lower())
        if one_shot is None or not seen_tools:
            out.append(Manager(one_shot or managed_by, labels.get("app.kubernetes.io/instance", "") if one_shot else "",
                               "label app.kubernetes.io/managed-by", one_shot is None))
    return out


def _marker_name(key: str, value: str, marks: Mapping[str, str]) -> str:
    if key == "argocd.argoproj.io/tracking-id":
        return value.split(":", 1)[0]
    if key.endswith("/name"):
        ns = marks.get(key[: -len("name")] + "namespace")
        return f"{ns}/{value}" if ns else value
    if key == "argocd.argoproj.io/instance":
        return value
    return ""


def blocking(managers: Sequence[Manager]) -> list[Manager]:
    """The managers that would revert a patch (``reverts`` True)."""
    return [m for m in managers if m.reverts]
