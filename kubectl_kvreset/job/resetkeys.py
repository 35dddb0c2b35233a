"""The credentials a server's reset route asks for, read from the Secrets its pod spec names
(:meth:`~kubectl_kvreset.engines.base.Engine.secret_keys`: SGLang's ``--admin-api-key $(KEY)``
with ``KEY`` from ``valueFrom.secretKeyRef``), with the user's own rights (``get`` on that
Secret). The values are kept in memory only, sent as the engine's reset headers and never shown:
a note names the Secret and key, never the value."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from ..kube import Kube, KubeApiError, KubeConnectionError
from ..pods import VllmPod

__all__ = ["ContainerKey", "read_reset_keys"]

ContainerKey = tuple[str, str, str]


def read_reset_keys(kube: Kube, pods: Sequence[VllmPod]) -> tuple[dict[ContainerKey, dict[str, str]], list[str]]:
    """``(namespace, pod, container) -> {flag: value}`` for every reset credential of ``pods``
    taken from a Secret, and one note per Secret that could not be read (403, missing, key
    absent): that server's reset then answers 401, its row naming the key. One ``get`` per Secret."""
    keys: dict[ContainerKey, dict[str, str]] = {}
    notes: list[str] = []
    cache: dict[tuple[str, str], dict[str, str] | str] = {}
    for pod in pods:
        for flag, name, key in pod.engine.secret_keys(pod.serve):
            where = (pod.namespace, name)
            if where not in cache:
                cache[where] = _read(kube, pod.namespace, name)
            data = cache[where]
            if isinstance(data, str):
                notes.append(f"note: {pod.name}: the {flag} comes from Secret {name} key {key}, which {data}")
                continue
            if key not in data:
                notes.append(f"note: {pod.name}: Secret {name} has no key {key} (the {flag} of the pod spec)")
                continue
            keys.setdefault((pod.namespace, pod.name, pod.container), {})[flag] = data[key]
    return keys, notes


def _read(kube: Kube, namespace: str, name: str) -> dict[str, str] | str:
    """The Secret's decoded ``data``, or why it could not be read (a phrase)."""
    try:
        obj = kube.get_object("v1", "secrets", namespace, name)
    except KubeApiError as exc:
        if exc.status == 403:
            return f"could not be read (get on secrets/{name} in {namespace} was refused)"
        return f"could not be read ({exc.status})"
    except KubeConnectionError:
        return "could not be read (the API server did not answer)"
    out: dict[str, str] = {}
    for k, v in dict(obj.get("data") or {}).items():
        try:
            out[str(k)] = base64.b64decode(str(v)).decode("utf-8").strip()
        except (binascii.Error, UnicodeDecodeError):
            continue
    return out
