"""Reading ``VLLM_SERVER_DEV_MODE`` over the API: an owner's templates, or a pod's containers,
with the ConfigMaps and Secrets they name read once per namespace and name; the sentences
saying what a ``devmode`` patch would replace; the :class:`DevModeResult` of a read or a patch.

How a value resolves (``env``, ``valueFrom``, ``envFrom``) is :mod:`kubectl_kvreset.devmode`'s;
this module only feeds it what the API holds."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..devmode import (
    DEV_MODE_ENV,
    DevModeReading,
    Manager,
    SourceLookup,
    describe_replacements,
    managing_controllers,
    owner_templates,
    pod_as_owner,
    read_template_dev_mode,
    read_template_dev_modes,
)
from ..kube import Kube, KubeApiError, KubeError
from ..pods import Owner
from .owners import OWNER_RESOURCES, get_owner

__all__ = ["DevModeResult", "dev_mode_changes", "owner_readings", "pod_dev_modes", "read_dev_mode", "source_lookup"]


@dataclass(frozen=True)
class DevModeResult:
    """The dev-mode state of one owner, after :func:`~kubectl_kvreset.rollout.set_dev_mode` or
    as read by :func:`read_dev_mode`.

    ``result``: ``enabled``, ``disabled``, ``unchanged`` (the templates already held what was
    asked: nothing sent), ``refused`` (managed by a controller, paused, unsupported kind),
    ``failed``, ``timeout``, ``skipped``, ``interrupted`` (the run was cancelled: before the
    patch nothing was sent; after it, ``requested`` is True and the rollout was not waited for);
    for a status read: ``read`` or ``failed``.
    ``state``: ``on``, ``off``, ``invalid``, ``unknown``, ``mixed`` (templates differ) or
    ``none`` (no vLLM container). ``readings`` has one entry per vLLM container of each template.
    """

    namespace: str
    owner: Owner
    role: str | None
    action: str
    result: str
    readings: tuple[DevModeReading, ...] = ()
    managers: tuple[Manager, ...] = ()
    message: str = ""
    seconds: float = 0.0
    requested: bool = False

    @property
    def ok(self) -> bool:
        """True unless the result is ``failed``, ``timeout``, ``refused`` or ``skipped``."""
        return self.result in ("enabled", "disabled", "unchanged", "read")

    @property
    def state(self) -> str:
        """The combined state of the templates (see the class docstring)."""
        states = {r.state for r in self.readings if r.state != "none"}
        if not states:
            return "none" if self.readings else "unknown"
        return states.pop() if len(states) == 1 else "mixed"

    def _key(self, reading: DevModeReading) -> str:
        # the template label; ``label/container`` when the template runs several vLLM containers
        several = sum(1 for r in self.readings if r.template == reading.template) > 1
        return f"{reading.template}/{reading.container}" if several else reading.template

    def row(self) -> dict[str, Any]:
        """The ``DevMode`` row: namespace, owner, role, action, result, dev_mode, value, source,
        templates (label, or ``label/container`` when a template runs several vLLM
        containers -> description), managed_by, seconds, message."""
        values = {r.value for r in self.readings if r.container is not None}
        sources = {r.source for r in self.readings if r.container is not None and r.source}
        return {
            "namespace": self.namespace, "owner": self.owner.ref(), "role": self.role, "action": self.action,
            "result": self.result, "dev_mode": self.state,
            "value": values.pop() if len(values) == 1 else None,
            "source": sources.pop() if len(sources) == 1 else (sorted(sources) or None),
            "accepted": all(r.accepted is not False for r in self.readings),
            "templates": {self._key(r): r.describe() for r in self.readings},
            "containers": {self._key(r): r.container for r in self.readings},
            "managed_by": [m.describe() for m in self.managers],
            "seconds": round(self.seconds, 1), "message": self.message,
        }


def source_lookup(kube: Kube, namespace: str) -> Callable[[str, str], Mapping[str, str] | None]:
    """A :data:`kubectl_kvreset.devmode.SourceLookup` over the API: ConfigMap ``data`` (and
    ``binaryData`` skipped), Secret ``data`` base64-decoded and ``stringData``; None on 404,
    ``PermissionError`` on 403. Answers are cached per (kind, name)."""
    cache: dict[tuple[str, str], Mapping[str, str] | None] = {}

    def lookup(kind: str, name: str) -> Mapping[str, str] | None:
        key = (kind, name)
        if key in cache:
            return cache[key]
        plural = "configmaps" if kind == "ConfigMap" else "secrets"
        try:
            obj = kube.get_object("v1", plural, namespace, name)
        except KubeApiError as exc:
            if exc.status == 404:
                cache[key] = None
                return None
            if exc.status in (401, 403):
                raise PermissionError(str(exc)) from exc
            raise
        data: dict[str, str] = {}
        if kind == "Secret":
            for k, v in (obj.get("data") or {}).items():
                try:
                    data[k] = base64.b64decode(str(v)).decode("utf-8", "replace")
                except (binascii.Error, ValueError):
                    continue
            data.update({k: str(v) for k, v in (obj.get("stringData") or {}).items()})
        else:
            data = {k: str(v) for k, v in (obj.get("data") or {}).items()}
        cache[key] = data
        return data

    return lookup


def _guarded(lookup: SourceLookup) -> SourceLookup:
    """``lookup`` with an API failure (a 5xx, no answer) raised as ``PermissionError``, which the
    readers of :mod:`kubectl_kvreset.devmode` report as an unknown value with its reason."""

    def safe(kind: str, name: str) -> Mapping[str, str] | None:
        try:
            return lookup(kind, name)
        except KubeError as exc:
            raise PermissionError(str(exc)) from exc

    return safe


def owner_readings(kube: Kube, namespace: str, obj: Mapping[str, Any],
                   lookup: Callable[[str, str], Mapping[str, str] | None] | None = None
                   ) -> tuple[DevModeReading, ...]:
    """The readings of every vLLM container of every template of ``obj`` (an owner as the API
    returned it), in template order. ``lookup``: a :func:`source_lookup` of ``namespace`` to
    share; default a new one."""
    lookup = lookup or source_lookup(kube, namespace)
    return tuple(r for ref in owner_templates(obj) for r in read_template_dev_modes(ref, _guarded(lookup)))


def read_dev_mode(kube: Kube, namespace: str, owner: Owner, role: str | None = None,
                  pod: Mapping[str, Any] | None = None) -> DevModeResult:
    """Read the dev mode of an owner's templates (``result`` ``read``), ConfigMaps and Secrets
    included where readable. For a kind other than Deployment/LeaderWorkerSet, ``pod`` (one of
    its pods, as the API returned it) is read instead. API failures give ``failed``."""
    try:
        if owner.kind not in OWNER_RESOURCES:
            if pod is None:
                return DevModeResult(namespace, owner, role, "status", "failed",
                                     message=f"cannot read a {owner.kind}")
            readings = owner_readings(kube, namespace, pod_as_owner(pod))
            return DevModeResult(namespace, owner, role, "status", "read", readings,
                                 message=f"read from pod {(pod.get('metadata') or {}).get('name', '')}")
        obj = get_owner(kube, namespace, owner)
        readings = owner_readings(kube, namespace, obj)
        managers = tuple(managing_controllers(obj))
    except KubeError as exc:
        return DevModeResult(namespace, owner, role, "status", "failed", message=str(exc))
    message = ""
    if any(r.accepted is False for r in readings):
        message = (f"{DEV_MODE_ENV} must be an integer: vLLM crashes at start with this value; "
                   f"fix it with: kubectl kvreset devmode --enable {owner.ref()} -n {namespace}")
    return DevModeResult(namespace, owner, role, "status", "read", readings, managers, message)


def dev_mode_changes(kube: Kube, namespace: str, owner: Owner, *, enable: bool,
                     lookup: Callable[[str, str], Mapping[str, str] | None] | None = None) -> list[str]:
    """The sentences of :func:`kubectl_kvreset.devmode.describe_replacements` for an owner
    (Deployment or LeaderWorkerSet) as it is now: which ``valueFrom`` entry ``devmode``
    replaces or removes and which ``envFrom`` value a literal overrides. Shown in the plan and
    the prompt before the patch; empty for other kinds or when the owner cannot be read (the
    patch then reports that failure itself). ``lookup``: a :func:`source_lookup` of
    ``namespace`` shared with other reads of the run (what it already read is not read again)."""
    if owner.kind not in OWNER_RESOURCES:
        return []
    try:
        obj = get_owner(kube, namespace, owner)
        return describe_replacements(obj, owner_readings(kube, namespace, obj, lookup), enable=enable)
    except KubeError:
        return []


def pod_dev_modes(kube: Kube, pods: Sequence[Mapping[str, Any]],
                  lookups: dict[str, Callable[[str, str], Mapping[str, str] | None]] | None = None,
                  containers: Sequence[str | None] | None = None) -> list[DevModeReading]:
    """``VLLM_SERVER_DEV_MODE`` of each pod's vLLM container (the pods as the API returned
    them; ``containers``: the container of each, by name, default the pod's first vLLM
    container), resolved exactly as :func:`read_dev_mode` resolves an owner's templates:
    literal ``env``, ``valueFrom`` ConfigMap/Secret keys and ``envFrom`` sources (read once per
    namespace and name), so ``detect`` and ``devmode`` report the same value for the same pod.
    ``lookups``: namespace -> :func:`source_lookup`, shared with the run's other reads (filled
    in here for a namespace it lacks). A source that cannot be read gives a reading whose
    ``detail`` says why; never raises."""
    lookups = {} if lookups is None else lookups
    names = list(containers) if containers is not None else [None] * len(pods)
    out: list[DevModeReading] = []
    for pod, container in zip(pods, names, strict=True):
        ns = str((pod.get("metadata") or {}).get("namespace", ""))
        if ns not in lookups:
            lookups[ns] = source_lookup(kube, ns)
        out.append(read_template_dev_mode(owner_templates(pod_as_owner(pod))[0], _guarded(lookups[ns]), container))
    return out
