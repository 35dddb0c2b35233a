"""Server-side Table output (``Accept: application/json;as=Table``) for ``kubectl get``: the columns
and cells kubectl prints per resource type."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .apibase import (
    _parse_time,
)
from .clusterbase import human_age
from .resourcetypes import Obj, ResourceType


def _col(name: str, ctype: str = "string", desc: str = "", priority: int = 0,
         fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": ctype, "format": fmt, "description": desc, "priority": priority}


def _pod_cells(p: Obj) -> list[Any]:
    spec = p.get("spec") or {}
    st = p.get("status") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    total = len(spec.get("containers") or []) + len(sidecars)
    statuses = list(st.get("containerStatuses") or [])
    side_names = {c.get("name") for c in sidecars}
    statuses += [s for s in st.get("initContainerStatuses") or [] if s.get("name") in side_names]
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    reason = st.get("phase", "Pending")
    for s in statuses:
        w = (s.get("state") or {}).get("waiting")
        if w and w.get("reason"):
            reason = w["reason"]
    if p["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    age = human_age(time.time() - _parse_time(p["metadata"].get("creationTimestamp")))
    return [p["metadata"]["name"], f"{ready}/{total}", reason, restarts, age,
            st.get("podIP", "<none>"), spec.get("nodeName", "<none>")]


def _deploy_cells(d: Obj) -> list[Any]:
    st = d.get("status") or {}
    want = (d.get("spec") or {}).get("replicas", 1)
    age = human_age(time.time() - _parse_time(d["metadata"].get("creationTimestamp")))
    return [d["metadata"]["name"], f"{st.get('readyReplicas', 0)}/{want}",
            st.get("updatedReplicas", 0), st.get("availableReplicas", 0), age]


def _service_cells(o: Obj) -> list[Any]:
    spec = o.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [])
    age = human_age(time.time() - _parse_time(o["metadata"].get("creationTimestamp")))
    sel = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [o["metadata"]["name"], spec.get("type", "ClusterIP"), spec.get("clusterIP", "<none>"),
            "<none>", ports or "<none>", age, sel or "<none>"]


def _slice_cells(o: Obj) -> list[Any]:
    ports = ",".join(str(p.get("port")) for p in o.get("ports") or [] if p.get("port") is not None)
    addrs = [a for e in o.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addrs[:3]) + (f" + {len(addrs) - 3} more..." if len(addrs) > 3 else "")
    age = human_age(time.time() - _parse_time(o["metadata"].get("creationTimestamp")))
    return [o["metadata"]["name"], o.get("addressType", "IPv4"), ports or "<unset>",
            shown or "<unset>", age]


def _daemonset_cells(o: Obj) -> list[Any]:
    st = o.get("status") or {}
    age = human_age(time.time() - _parse_time(o["metadata"].get("creationTimestamp")))
    return [o["metadata"]["name"], st.get("desiredNumberScheduled", 0),
            st.get("currentNumberScheduled", 0), st.get("numberReady", 0),
            st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0), "<none>", age]


def _default_cells(o: Obj) -> list[Any]:
    age = human_age(time.time() - _parse_time(o["metadata"].get("creationTimestamp")))
    return [o["metadata"]["name"], age]


def table_for(rtype: ResourceType, items: list[Obj], rv: str, include: str) -> Obj:
    """A ``meta.k8s.io/v1`` Table: pods (NAME READY STATUS RESTARTS AGE, wide: IP NODE),
    deployments (NAME READY UP-TO-DATE AVAILABLE AGE), others (NAME AGE). ``include`` is the
    ``includeObject`` policy: ``Metadata`` (default), ``Object`` or ``None``."""
    cells: Callable[[Obj], list[Any]]
    if rtype.kind == "Pod":
        cols = [_col("Name", desc="Name"), _col("Ready"), _col("Status"),
                _col("Restarts", "string"), _col("Age"), _col("IP", priority=1),
                _col("Node", priority=1)]
        cells = _pod_cells
    elif rtype.kind == "Deployment":
        cols = [_col("Name", desc="Name"), _col("Ready"), _col("Up-to-date", "integer"),
                _col("Available", "integer"), _col("Age")]
        cells = _deploy_cells
    elif rtype.kind == "Service":
        cols = [_col("Name", desc="Name"), _col("Type"), _col("Cluster-IP"),
                _col("External-IP"), _col("Port(s)"), _col("Age"), _col("Selector", priority=1)]
        cells = _service_cells
    elif rtype.kind == "EndpointSlice":
        cols = [_col("Name", desc="Name"), _col("AddressType"), _col("Ports"),
                _col("Endpoints"), _col("Age")]
        cells = _slice_cells
    elif rtype.kind == "DaemonSet":
        cols = [_col("Name", desc="Name"), _col("Desired", "integer"), _col("Current", "integer"),
                _col("Ready", "integer"), _col("Up-to-date", "integer"),
                _col("Available", "integer"), _col("Node Selector"), _col("Age")]
        cells = _daemonset_cells
    else:
        cols = [_col("Name", desc="Name"), _col("Age")]
        cells = _default_cells
    cols[0]["format"] = "name"
    rows = []
    for o in items:
        row: dict[str, Any] = {"cells": cells(o)}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": o["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": rv}, "columnDefinitions": cols, "rows": rows}
