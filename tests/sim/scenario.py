"""Scenario file of the simulator (YAML; format documented in tests/sim/README.md).

```yaml
replicas: {"deployment/NAME": 3, "leaderworkerset/NAME": 2}
pods:
  - match: {owner: "deployment/NAME", ordinal: 0, namespace: NS}   # every key optional
    vllm_version: "0.25.0"        # any other key goes to PodContext.overrides
    busy: 2
    network: unreachable           # simulator-level fault, not passed to the pod
    delete_on_first_reset: true    # per-pod faults (faults.POD_FAULT_KEYS), not passed either
users:
  - name: alice
    token_ttl: 20                  # optional: her token answers 401 after 20 requests
rbac:                              # extra objects (Role, RoleBinding...) loaded with the manifests
  - {kind: RoleBinding, apiVersion: rbac.authorization.k8s.io/v1, ...}
faults:                            # API and vLLM faults (tests/sim/faults.py)
  seed: 1
  api: [{verb: list, resource: pods, first: 2, status: 500}]
  vllm: {fraction: 0.1, mode: error}
drop_fields:                       # fault: served objects of a resource lose these fields
  deployments: [status.updatedReplicas, spec.selector.matchLabels]   # dotted; "\\." escapes
gpus_per_node: 1                   # nvidia.com/gpu each node offers (unset: unlimited)
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .faults import POD_FAULT_KEYS, FaultError, Faults, check_pod_faults, parse_faults

# Keys of a pod rule that the simulator itself consumes (not passed to PodContext.overrides).
SIM_POD_KEYS = {"match", "network"} | POD_FAULT_KEYS
NETWORK_FAULTS = {"unreachable"}


class ScenarioError(ValueError):
    """The scenario file is malformed (message names the offending key)."""


def _owner_key(text: str) -> tuple[str, str]:
    """``"deployment/NAME"`` -> ``("deployment", "NAME")``; kinds are lower-cased and the short
    forms ``deploy``/``lws`` accepted; a bare name means a Deployment (kubectl's rule)."""
    kind, sep, name = text.partition("/")
    if not sep:
        return ("deployment", text)
    kind = kind.lower().split(".")[0]
    kind = {"deploy": "deployment", "deployments": "deployment", "lws": "leaderworkerset",
            "leaderworkersets": "leaderworkerset", "pods": "pod", "po": "pod",
            "rs": "replicaset", "replicasets": "replicaset"}.get(kind, kind)
    return (kind, name)


@dataclass(frozen=True)
class PodMatch:
    """Which pods a rule applies to; None fields match anything. ``owner`` is ``(kind, name)``
    with kind lower-case (``deployment``, ``leaderworkerset``, ``pod`` for bare pods);
    ``ordinal`` is the pod's 0-based creation order within its owner."""

    owner: tuple[str, str] | None = None
    ordinal: int | None = None
    namespace: str | None = None
    name: str | None = None

    def matches(self, owner: tuple[str, str] | None, ordinal: int, namespace: str,
                name: str) -> bool:
        """True when a pod with these facts is selected."""
        if self.owner is not None and owner != self.owner:
            return False
        if self.ordinal is not None and ordinal != self.ordinal:
            return False
        if self.namespace is not None and namespace != self.namespace:
            return False
        if self.name is not None and name != self.name:
            return False
        return True


@dataclass(frozen=True)
class PodRule:
    """A ``pods:`` entry: a match, the overrides it passes to the pod runtime, an optional
    simulator ``network`` fault (``unreachable``) and the per-pod ``faults`` the simulator
    applies itself (keys of ``tests.sim.faults.POD_FAULT_KEYS``)."""

    match: PodMatch
    overrides: dict[str, Any]
    network: str | None = None
    faults: dict[str, Any] = field(default_factory=dict)


@dataclass
class Scenario:
    """Parsed scenario: per-owner replica overrides keyed ``(kind, name)``, pod rules in file
    order (later rules override earlier keys), extra users, reserved faults, and ``rbac``:
    extra Kubernetes objects (meant for Role, ClusterRole, RoleBinding, ClusterRoleBinding)
    loaded with the manifests, so a test can give its users permissions. ``drop_fields`` maps
    a resource plural (``deployments``) to field paths (tuples of keys) removed from every
    object of it the API serves: a deliberately broken server, for the kubectl conformance
    suite's negative checks (the stored objects and the controllers are untouched).
    ``faults`` is the raw ``faults:`` mapping and ``fault_state`` its parsed, live form
    (tests/sim/faults.py); ``token_ttl`` maps a scenario user to the number of requests her
    token serves before it answers 401. ``gpus_per_node``: the ``nvidia.com/gpu`` capacity of
    every node (None: unlimited); a pod that fits on no node stays Pending, Unschedulable."""

    replicas: dict[tuple[str, str], int] = field(default_factory=dict)
    pods: list[PodRule] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    faults: dict[str, Any] = field(default_factory=dict)
    rbac: list[dict[str, Any]] = field(default_factory=list)
    drop_fields: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    token_ttl: dict[str, int] = field(default_factory=dict)
    fault_state: Faults = field(default_factory=Faults)
    gpus_per_node: int | None = None

    def replicas_for(self, kind: str, name: str) -> int | None:
        """Replica override for owner ``kind``/``name`` (kind lower-case), or None."""
        return self.replicas.get((kind.lower(), name))

    def pod_settings(self, owner: tuple[str, str] | None, ordinal: int, namespace: str,
                     name: str) -> tuple[dict[str, Any], str | None]:
        """Merged overrides and network fault of every rule matching this pod."""
        overrides: dict[str, Any] = {}
        network: str | None = None
        for rule in self.pods:
            if rule.match.matches(owner, ordinal, namespace, name):
                per_container = {**overrides.get("containers", {})}
                for cname, cov in (rule.overrides.get("containers") or {}).items():
                    per_container[cname] = {**per_container.get(cname, {}), **cov}
                overrides.update(rule.overrides)
                if per_container:
                    overrides["containers"] = per_container
                if rule.network is not None:
                    network = rule.network
        return overrides, network

    def pod_faults(self, owner: tuple[str, str] | None, ordinal: int, namespace: str,
                   name: str) -> dict[str, Any]:
        """Merged per-pod fault keys (``delete_on_first_reset``, ``down_for``, ``down_at``,
        ``hang``, ``exec_cut``, ``portforward_cut``) of every rule matching this pod; later rules win."""
        out: dict[str, Any] = {}
        for rule in self.pods:
            if rule.faults and rule.match.matches(owner, ordinal, namespace, name):
                out.update(rule.faults)
        return out


def parse_scenario(data: Any) -> Scenario:
    """Build a ``Scenario`` from the loaded YAML (None or {} = empty scenario).

    Raises ``ScenarioError`` for wrong shapes, unknown top-level keys or unknown network faults.
    """
    if data is None:
        return Scenario()
    if not isinstance(data, dict):
        raise ScenarioError("scenario must be a mapping")
    unknown = set(data) - {"replicas", "pods", "users", "faults", "rbac", "drop_fields",
                           "gpus_per_node"}
    if unknown:
        raise ScenarioError(f"unknown scenario keys: {sorted(unknown)}")
    sc = Scenario()
    gpus = data.get("gpus_per_node")
    if gpus is not None:
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
            raise ScenarioError("gpus_per_node must be a non-negative integer")
        sc.gpus_per_node = gpus
    for owner, n in (data.get("replicas") or {}).items():
        if not isinstance(n, int) or n < 0:
            raise ScenarioError(f"replicas[{owner!r}] must be a non-negative integer")
        sc.replicas[_owner_key(str(owner))] = n
    for i, rule in enumerate(data.get("pods") or []):
        if not isinstance(rule, dict):
            raise ScenarioError(f"pods[{i}] must be a mapping")
        m = rule.get("match") or {}
        if not isinstance(m, dict):
            raise ScenarioError(f"pods[{i}].match must be a mapping")
        bad = set(m) - {"owner", "ordinal", "namespace", "name", "container"}
        if bad:
            raise ScenarioError(f"pods[{i}].match: unknown keys {sorted(bad)}")
        match = PodMatch(
            owner=_owner_key(str(m["owner"])) if m.get("owner") else None,
            ordinal=int(m["ordinal"]) if m.get("ordinal") is not None else None,
            namespace=m.get("namespace"),
            name=m.get("name"),
        )
        network = rule.get("network")
        if network is not None and network not in NETWORK_FAULTS:
            raise ScenarioError(f"pods[{i}].network: unknown fault {network!r}")
        overrides = {k: v for k, v in rule.items() if k not in SIM_POD_KEYS}
        if m.get("container"):
            # the rule's overrides reach only the fake vLLMs of that container of the matched pods
            overrides = {"containers": {str(m["container"]): overrides}}
        try:
            pod_faults = check_pod_faults(f"pods[{i}]", rule)
        except FaultError as e:
            raise ScenarioError(str(e)) from e
        sc.pods.append(PodRule(match, overrides, network, pod_faults))
    for i, u in enumerate(data.get("users") or []):
        name = u.get("name") if isinstance(u, dict) else u
        if not isinstance(name, str) or not name:
            raise ScenarioError(f"users[{i}] needs a name")
        sc.users.append(name)
        if isinstance(u, dict) and u.get("token_ttl") is not None:
            ttl = u["token_ttl"]
            if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
                raise ScenarioError(f"users[{i}].token_ttl must be a non-negative integer")
            sc.token_ttl[name] = ttl
    faults = data.get("faults") or {}
    if not isinstance(faults, dict):
        raise ScenarioError("faults must be a mapping")
    sc.faults = faults
    try:
        sc.fault_state = parse_faults(faults)
    except FaultError as e:
        raise ScenarioError(str(e)) from e
    rbac = data.get("rbac") or []
    if not isinstance(rbac, list):
        raise ScenarioError("rbac must be a list of Kubernetes objects")
    for i, obj in enumerate(rbac):
        if not isinstance(obj, dict) or not obj.get("kind") or not obj.get("apiVersion"):
            raise ScenarioError(f"rbac[{i}] must be a Kubernetes object with apiVersion and kind")
        sc.rbac.append(obj)
    drop = data.get("drop_fields") or {}
    if not isinstance(drop, dict):
        raise ScenarioError("drop_fields must map a resource plural to a list of field paths")
    for plural, paths in drop.items():
        if not isinstance(paths, list) or not all(isinstance(x, str) and x for x in paths):
            raise ScenarioError(f"drop_fields[{plural!r}] must be a list of dotted field paths")
        sc.drop_fields[str(plural)] = [split_field_path(x) for x in paths]
    return sc


def split_field_path(path: str) -> tuple[str, ...]:
    """``"metadata.labels.app\\.kubernetes\\.io/name"`` -> ``("metadata", "labels",
    "app.kubernetes.io/name")``: dots separate keys, ``\\.`` is a literal dot (the escape
    kubectl's JSONPath uses for label keys)."""
    parts: list[str] = []
    cur = ""
    i = 0
    while i < len(path):
        if path.startswith("\\.", i):
            cur += "."
            i += 2
        elif path[i] == ".":
            parts.append(cur)
            cur = ""
            i += 1
        else:
            cur += path[i]
            i += 1
    parts.append(cur)
    if any(not p for p in parts):
        raise ScenarioError(f"bad field path {path!r}")
    return tuple(parts)


def load_scenario(path: str | Path | None) -> Scenario:
    """Read and parse a scenario file; None -> empty scenario."""
    if path is None:
        return Scenario()
    with open(path, encoding="utf-8") as f:
        return parse_scenario(yaml.safe_load(f))
