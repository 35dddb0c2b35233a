"""The data-parallel engine count of a vLLM container whose serve flags take it from its
environment (``--data-parallel-size $(DP)`` with ``DP`` from a ConfigMap or Secret key, or an
``envFrom`` source): the variables are read as the kubelet resolves them
(:func:`kubectl_kvreset.stores.config.resolve_env`) and the command is read again with them,
for the count alone. Everything else the pod spec says stays as discovery read it.

ConfigMaps are read first; a Secret only where the ConfigMaps do not settle the count and the
API lets the user read it (``get`` on ``secrets``, as the store step reads them). A count read
from a Secret is used but never written (:attr:`kubectl_kvreset.engines.vllm.servecmd.ServeConfig.engines_secret`);
the command read with the Secret's values is dropped at once. Where neither settles it, the
reason stays in :attr:`~kubectl_kvreset.engines.vllm.servecmd.ServeConfig.engines_unknown` with what could not
be read, and a reset answer of engine 0 alone is then ``unconfirmed`` (before vLLM 0.32.0).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..discovery import ConfigFiles
from ..engines.base import ServeConfig, ServerCommandError
from ..kube import Kube, KubeApiError, KubeConnectionError
from ..pods import VllmPod
from ..stores.config import SourceLookup, resolve_env

_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def _names(flags: Sequence[str]) -> set[str]:
    """The variable names the data-parallel flags' values refer to."""
    return {m.group(1) or m.group(2) for flag in flags for m in _REF.finditer(flag.partition(" ")[2])}


class _Sources:
    """ConfigMaps and Secrets of one run, each read once (``(namespace, kind, name)`` -> its
    decoded ``data``, or the exception the lookup raises for it)."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._cache: dict[tuple[str, str, str], Mapping[str, str] | Exception] = {}

    def lookup(self, namespace: str, *, secrets: bool) -> SourceLookup:
        """A :data:`kubectl_kvreset.stores.config.SourceLookup` of ``namespace``; without
        ``secrets`` a Secret counts as not read (nothing is requested)."""

        def get(kind: str, name: str) -> Mapping[str, str]:
            if kind == "Secret" and not secrets:
                raise PermissionError("a Secret, read only where the ConfigMaps do not give the count")
            key = (namespace, kind, name)
            if key not in self._cache:
                self._cache[key] = self._read(namespace, kind, name)
            got = self._cache[key]
            if isinstance(got, Exception):
                raise got
            return got

        return get

    def _read(self, namespace: str, kind: str, name: str) -> Mapping[str, str] | Exception:
        plural = "configmaps" if kind == "ConfigMap" else "secrets"
        try:
            obj = self._kube.get_object("v1", plural, namespace, name)
        except KubeApiError as exc:
            if exc.status == 404:
                return KeyError(name)
            return PermissionError(str(exc))
        except KubeConnectionError as exc:
            return PermissionError(f"reading {kind}/{name} failed: {exc}")
        data = {str(k): str(v) for k, v in (obj.get("data") or {}).items()}
        if kind == "Secret":
            decoded: dict[str, str] = {}
            for k, v in data.items():
                try:
                    decoded[k] = base64.b64decode(v).decode("utf-8", "replace")
                except (binascii.Error, ValueError):
                    continue
            data = decoded
        return data


def _reparse(pod: VllmPod, container: Mapping[str, Any], env: Mapping[str, str],
             reader: ConfigFiles) -> ServeConfig | None:
    try:
        return pod.engine.server_config(container, env, lambda path: reader(pod.raw, container, path))
    except ServerCommandError:
        return None


def resolve_engine_counts(kube: Kube, pods: Sequence[VllmPod]) -> list[VllmPod]:
    """``pods`` with the engine count of each whose data-parallel flags refer to variables from
    its ConfigMaps or Secrets settled where they can be read (module docstring); the others as
    they are. API requests: one GET per ConfigMap (and Secret, where needed) those flags use,
    each once per call; none for a pod whose flags need none."""
    sources = _Sources(kube)
    reader = ConfigFiles(kube)
    out: list[VllmPod] = []
    for pod in pods:
        serve = pod.serve
        names = _names(serve.engines_flags)
        container = next((c for c in (pod.raw.get("spec") or {}).get("containers") or []
                          if c.get("name") == pod.container), None)
        if serve.engines_unknown is None or serve.config_error is not None or not names or container is None:
            out.append(pod)
            continue
        notes: list[str] = []
        settled: ServeConfig | None = None
        secret = False
        for with_secrets in (False, True):
            env, notes = resolve_env(pod.raw, container, sources.lookup(pod.namespace, secrets=with_secrets))
            cfg = _reparse(pod, container, env, reader)
            if cfg is not None and cfg.engines_unknown is None:
                settled, secret = cfg, with_secrets
                break
        if settled is None:
            why = [n for n in notes if n.partition(":")[0] in names or n.startswith("envFrom:")]
            reason = "; ".join(serve.engines_flags) + ": " + "; ".join(why) if why else serve.engines_unknown
            out.append(replace(pod, serve=replace(serve, engines_unknown=reason)))
            continue
        shown = ("read from a Secret of the container's env (not shown)" if secret else
                 "read from the container's ConfigMap env: " + ", ".join(settled.engines_flags))
        note = f"data-parallel size {shown}"
        out.append(replace(pod, notes=(*pod.notes, note), serve=replace(
            serve, engines_per_port=settled.engines_per_port, engines_unknown=None, engines_secret=secret)))
    return out
