"""A container's environment and the files its ConfigMap/Secret volumes hold, as the kubelet
builds them. Pure: no I/O (ConfigMaps and Secrets arrive through a :data:`SourceLookup`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..pods import expand_k8s_refs

__all__ = ["FileSource", "SourceLookup", "Unread", "file_source", "resolve_env", "wanted_files"]

#: ``lookup(kind, name)`` -> the decoded data of ConfigMap/Secret ``name`` in the pod's
#: namespace; raises ``PermissionError`` (not allowed) or ``KeyError`` (absent).
SourceLookup = Callable[[str, str], Mapping[str, str]]


def _lookup(lookup: SourceLookup | None, kind: str, name: str) -> tuple[Mapping[str, str] | None, str | None]:
    if lookup is None:
        return None, f"{kind}/{name} not read"
    try:
        return lookup(kind, name), None
    except PermissionError as exc:
        return None, f"not permitted to read {kind}/{name}" + (f" ({exc})" if str(exc) else "")
    except KeyError:
        return None, f"{kind}/{name} does not exist"


def resolve_env(pod: Mapping[str, Any], container: Mapping[str, Any],
                lookup: SourceLookup | None) -> tuple[dict[str, str], list[str]]:
    """The container's environment as the kubelet builds it: ``envFrom`` sources in order
    (with their ``prefix``), then ``env`` entries in order (a later one wins; ``$(VAR)``
    expanded against what came before; ``valueFrom`` ``configMapKeyRef``/``secretKeyRef`` read
    through ``lookup``, ``fieldRef`` from the pod object). As in
    ``pkg/kubelet/kubelet_pods.go::makeEnvironmentVariables``, an ``optional`` reference whose
    ConfigMap/Secret or key is absent keeps what came before; a ``valueFrom`` that cannot be
    read here (not permitted, a resource field) removes the earlier value, which the server
    does not see.

    Returns:
        ``(env, notes)``: the variables that could be resolved, and one note per variable or
        source that could not (naming the object and why).
    """
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    fields = {
        "metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""), "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""), "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
    }
    env: dict[str, str] = {}
    notes: list[str] = []
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix", "") or "")
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            if key in source:
                name = str((source[key] or {}).get("name", ""))
                data, why = _lookup(lookup, kind, name)
                if data is None:
                    if not (source[key] or {}).get("optional"):
                        notes.append(f"envFrom: {why}")
                    continue
                for var, value in data.items():
                    env[prefix + var] = str(value)
    for entry in container.get("env") or []:
        name = entry.get("name")
        if not name:
            continue
        if "valueFrom" not in entry:
            env[name] = expand_k8s_refs(str(entry.get("value") or ""), env)
            continue
        vf = entry.get("valueFrom") or {}
        earlier = env.pop(name, None)
        if "fieldRef" in vf:
            path = str((vf["fieldRef"] or {}).get("fieldPath", ""))
            m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
            if path in fields:
                env[name] = str(fields[path])
            elif m:
                env[name] = str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
            continue
        for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            if key in vf:
                ref = vf[key] or {}
                data, why = _lookup(lookup, kind, str(ref.get("name", "")))
                if data is None:
                    if ref.get("optional") and why is not None and why.endswith("does not exist"):
                        if earlier is not None:
                            env[name] = earlier
                        continue
                    notes.append(f"{name}: {why}")
                elif ref.get("key") in data:
                    env[name] = str(data[ref["key"]])
                elif ref.get("optional"):
                    if earlier is not None:
                        env[name] = earlier
                else:
                    notes.append(f"{name}: key {ref.get('key')!r} absent from {kind}/{ref.get('name')}")
    return env, notes


@dataclass(frozen=True)
class Unread:
    """A configuration file that could not be read, and why (``reason``)."""

    reason: str


@dataclass(frozen=True)
class FileSource:
    """Where a file in the container comes from: key ``key`` of ConfigMap/Secret ``name``."""

    kind: str
    name: str
    key: str


def _volume_items(vol: Mapping[str, Any]) -> Iterator[tuple[str, str, Sequence[Mapping[str, Any]]]]:
    """(kind, name, items) of a configMap/secret volume or of each projected source."""
    if "configMap" in vol:
        cm = vol["configMap"] or {}
        yield "ConfigMap", str(cm.get("name", "")), cm.get("items") or []
    elif "secret" in vol:
        sec = vol["secret"] or {}
        yield "Secret", str(sec.get("secretName", "")), sec.get("items") or []
    elif "projected" in vol:
        for src in (vol["projected"] or {}).get("sources") or []:
            if "configMap" in src:
                cm = src["configMap"] or {}
                yield "ConfigMap", str(cm.get("name", "")), cm.get("items") or []
            elif "secret" in src:
                sec = src["secret"] or {}
                yield "Secret", str(sec.get("name", "")), sec.get("items") or []


def file_source(pod: Mapping[str, Any], container: Mapping[str, Any], path: str) -> FileSource | str:
    """Which ConfigMap or Secret key a file of the container is (kubelet volume semantics:
    a ``subPath`` mount is that one key, a directory mount holds every key or the ``items``
    paths; a later mount of a deeper path wins).

    Returns:
        a :class:`FileSource`, or a string saying why the file cannot be read through the API
        (no volume holds it; it is on a PVC, emptyDir or hostPath; no item has that path).
    """
    spec = pod.get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    best: tuple[int, Mapping[str, Any]] | None = None
    for mount in container.get("volumeMounts") or []:
        mpath = str(mount.get("mountPath", "")).rstrip("/") or "/"
        if path == mpath or path.startswith(mpath.rstrip("/") + "/"):
            if best is None or len(mpath) >= best[0]:
                best = (len(mpath), mount)
    if best is None:
        return f"{path}: no volume of the pod holds it (a file of the image cannot be read)"
    mount = best[1]
    mpath = str(mount.get("mountPath", "")).rstrip("/")
    vol = volumes.get(mount.get("name"))
    if vol is None:
        return f"{path}: volume {mount.get('name')!r} is not in the pod"
    rel = path[len(mpath):].lstrip("/")
    sub = str(mount.get("subPath") or "")
    if sub:
        rel = sub + ("/" + rel if rel else "")
    kinds = [k for k in vol if k != "name"]
    for kind, name, items in _volume_items(vol):
        if items:
            for item in items:
                if item.get("path") == rel:
                    return FileSource(kind, name, str(item.get("key")))
            continue
        if rel and "/" not in rel:
            return FileSource(kind, name, rel)
    if not any(k in ("configMap", "secret", "projected") for k in kinds):
        return (f"{path}: on a {kinds[0] if kinds else 'unknown'} volume {mount.get('name')!r}, "
                "which the API cannot read")
    return f"{path}: no key of volume {mount.get('name')!r} is that file"


def wanted_files(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The configuration files to read: ``[(variable, path)]`` for ``LMCACHE_CONFIG_FILE`` and
    ``MOONCAKE_CONFIG_PATH`` when set."""
    return [(var, env[var]) for var in ("LMCACHE_CONFIG_FILE", "MOONCAKE_CONFIG_PATH") if env.get(var)]
