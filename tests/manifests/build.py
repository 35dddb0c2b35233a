"""Builders of the small manifests the tests write: a Deployment as a dict (:func:`deployment`) or
as YAML text with the container given as YAML (:func:`deployment_yaml`), and the pieces they
share. Each is the shape ``kubectl create deployment`` gives (``app: <name>`` selecting the pods
of ``spec.template``), with what a test adds."""

from __future__ import annotations

import textwrap
from typing import Any


def deployment(name: str, containers: list[dict[str, Any]], *, namespace: str | None = None,
               replicas: int = 1, labels: dict[str, str] | None = None,
               pod_labels: dict[str, str] | None = None,
               volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An ``apps/v1`` Deployment ``name`` (in ``namespace`` when given) of ``replicas`` pods running
    ``containers``. ``labels`` (default ``{"app": name}``) select the pods and label them;
    ``pod_labels`` replace the pods' labels (a superset of ``labels``); ``volumes``, when given,
    are the pod's volumes (an empty list is kept)."""
    selector = labels if labels is not None else {"app": name}
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    pod: dict[str, Any] = {"containers": containers}
    if volumes is not None:
        pod["volumes"] = volumes
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": replicas, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": pod_labels if pod_labels is not None else selector},
                                  "spec": pod}}}


def pvc_volume(name: str, claim: str) -> dict[str, Any]:
    """A pod volume ``name`` backed by the PersistentVolumeClaim ``claim``."""
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def deployment_yaml(name: str, container: str, namespace: str, replicas: int = 1) -> str:
    """The YAML text of a Deployment ``name`` in ``namespace`` whose one pod template runs the
    containers of ``container`` (YAML list items, ``- name: ...``, dedented here), ended by
    ``---``."""
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}, namespace: {namespace}}}
        spec:
          replicas: {replicas}
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}}}}}
            spec:
              containers:
        """) + textwrap.indent(textwrap.dedent(container), " " * 8) + "---\n"
