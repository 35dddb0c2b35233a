"""Object store of the simulated Kubernetes API server.

Holds every object by resource type, namespace and name, hands out ``uid`` /
``resourceVersion`` / ``generation`` / ``creationTimestamp`` the way the real API server does
(k8s.io/apiserver ``registry/generic/registry/store.go``), evaluates label and field selectors
(k8s.io/apimachinery ``pkg/labels/selector.go``, ``pkg/fields/selector.go``) and applies the three
PATCH flavours (RFC 6902 JSON patch, RFC 7386 merge patch, Kubernetes strategic merge patch from
k8s.io/apimachinery ``pkg/util/strategicpatch``; only the directives this project needs).

Stored objects are never mutated in place: every write puts a fresh dict, so a reader may keep
and serialise the dict it got without copying. Callers that want to modify an object must
``copy.deepcopy`` it first (``Store.get_copy``).
"""

from __future__ import annotations

import copy
import datetime as _dt
import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


# --------------------------------------------------------------------------------------------
# Errors: Status objects as the real API server returns them
# (k8s.io/apimachinery pkg/api/errors/errors.go)
# --------------------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answered as a ``Status`` object.

    ``code`` is the HTTP status, ``reason`` the StatusReason (``NotFound``, ``AlreadyExists``...),
    ``details`` the optional ``details`` dict (``name``, ``group``, ``kind``, ``causes``).
    """

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> Obj:
        """Return the ``Status`` object (apiVersion v1) for this error."""
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def _details(name: str, rtype: ResourceType | None) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name}
    if rtype is not None:
        if rtype.group:
            d["group"] = rtype.group
        d["kind"] = rtype.plural
    return d


def _qualified(rtype: ResourceType) -> str:
    return rtype.plural if not rtype.group else f"{rtype.plural}.{rtype.group}"


def not_found(rtype: ResourceType, name: str) -> ApiError:
    """404 ``NotFound``: message ``pods "x" not found`` (``deployments.apps "x" not found``)."""
    return ApiError(
        404, "NotFound", f'{_qualified(rtype)} "{name}" not found', _details(name, rtype)
    )


def already_exists(rtype: ResourceType, name: str) -> ApiError:
    """409 ``AlreadyExists``: message ``pods "x" already exists``."""
    return ApiError(
        409, "AlreadyExists", f'{_qualified(rtype)} "{name}" already exists', _details(name, rtype)
    )


def conflict(rtype: ResourceType, name: str) -> ApiError:
    """409 ``Conflict`` for a stale ``metadata.resourceVersion`` on update."""
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(rtype)} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        _details(name, rtype),
    )


def invalid(rtype: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 ``Invalid``; ``causes`` are ``(field, reason type, message)`` triples, e.g.
    ``("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")``.
    """
    text = ", ".join(f"{f}: {m}" for f, _r, m in causes)
    d = _details(name, rtype)
    d["kind"] = rtype.kind
    d["causes"] = [{"reason": r, "message": m, "field": f} for f, r, m in causes]
    return ApiError(422, "Invalid", f'{rtype.kind} "{name}" is invalid: {text}', d)


def bad_request(message: str) -> ApiError:
    """400 ``BadRequest``."""
    return ApiError(400, "BadRequest", message)


def unsupported_media_type(message: str) -> ApiError:
    """415 ``UnsupportedMediaType``."""
    return ApiError(415, "UnsupportedMediaType", message)


def method_not_allowed(message: str) -> ApiError:
    """405 ``MethodNotAllowed``."""
    return ApiError(405, "MethodNotAllowed", message)


def forbidden(
    user: str, verb: str, resource: str, group: str, namespace: str | None, name: str = ""
) -> ApiError:
    """403 ``Forbidden`` worded as the RBAC authorizer words it, e.g.
    ``pods "x" is forbidden: User "u" cannot create resource "pods/proxy" in API group "" in the
    namespace "ns"`` (k8s.io/apiserver ``endpoints/handlers/responsewriters/errors.go``).
    """
    base = resource.split("/")[0]
    subject = f'{base}{"." + group if group else ""} "{name}"' if name else (
        f"{base}{'.' + group if group else ''}"
    )
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    msg = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}"{where}'
    )
    d: dict[str, Any] = {"kind": base}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    return ApiError(403, "Forbidden", msg, d)


# --------------------------------------------------------------------------------------------
# Resource types
# --------------------------------------------------------------------------------------------

VERBS_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: ``group`` ("" for core), ``version``, ``plural`` (URL segment), ``kind``,
    ``namespaced``, ``short_names`` (kubectl aliases), ``verbs``, ``subresources`` (names like
    ``proxy``, ``status``), ``strategic`` (False for custom resources: a strategic-merge patch is
    refused with 415, as for a CRD in k8s.io/apiextensions-apiserver).
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = tuple(VERBS_ALL)
    subresources: tuple[str, ...] = ()
    strategic: bool = True
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """``v1`` or ``group/version``."""
        return self.version if not self.group else f"{self.group}/{self.version}"

    @property
    def singular(self) -> str:
        """Lower-case kind, as the discovery document gives ``singularName``."""
        return self.kind.lower()

    @property
    def key(self) -> tuple[str, str]:
        """``(group, plural)``: how the store indexes this type."""
        return (self.group, self.plural)


BUILTIN_TYPES: list[ResourceType] = [
    ResourceType("", "v1", "pods", "Pod", True, ("po",),
                 subresources=("proxy", "exec", "portforward", "log", "status"),
                 categories=("all",)),
    ResourceType("", "v1", "namespaces", "Namespace", False, ("ns",),
                 verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
                 subresources=("status",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    ResourceType("", "v1", "secrets", "Secret", True),
    ResourceType("", "v1", "services", "Service", True, ("svc",), subresources=("proxy", "status"),
                 categories=("all",)),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",)),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",),
                 subresources=("status",)),
    ResourceType("", "v1", "persistentvolumes", "PersistentVolume", False, ("pv",),
                 subresources=("status",)),
    ResourceType("", "v1", "events", "Event", True, ("ev",)),
    ResourceType("apps", "v1", "deployments", "Deployment", True, ("deploy",),
                 subresources=("status", "scale"), categories=("all",)),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",),
                 subresources=("status", "scale"), categories=("all",)),
    ResourceType("apps", "v1", "statefulsets", "StatefulSet", True, ("sts",),
                 subresources=("status", "scale"), categories=("all",)),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",),
                 subresources=("status",), categories=("all",)),
    ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    ResourceType("batch", "v1", "jobs", "Job", True, (), subresources=("status",),
                 categories=("all",)),
    ResourceType("", "v1", "nodes", "Node", False, ("no",), subresources=("status",)),
    ResourceType("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", True,
                 ("lws",), subresources=("status", "scale"), strategic=False),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                 False),
]

CLUSTER_SCOPED_KINDS = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "Node", "PersistentVolume",
    "CustomResourceDefinition", "StorageClass", "PriorityClass", "GatewayClass",
    "IngressClass", "APIService", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}


def plural_of(kind: str) -> str:
    """Lower-case plural of a kind as CRDs conventionally name it (``Gateway`` -> ``gateways``,
    ``Policy`` -> ``policies``, ``Ingress`` -> ``ingresses``)."""
    k = kind.lower()
    if k.endswith("y") and len(k) > 1 and k[-2] not in "aeiou":
        return k[:-1] + "ies"
    if k.endswith(("s", "x", "z", "ch", "sh")):
        return k + "es"
    return k + "s"


class TypeRegistry:
    """Known resource types by group/version/plural and by apiVersion/kind.

    Built-ins come from ``BUILTIN_TYPES``; ``ensure(apiVersion, kind)`` registers any other kind
    met in a manifest as a generic namespaced custom resource (cluster-scoped for the kinds in
    ``CLUSTER_SCOPED_KINDS``) with no behaviour.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        self._by_gvk: dict[tuple[str, str, str], ResourceType] = {}
        for t in BUILTIN_TYPES:
            self._add(t)

    def _add(self, t: ResourceType) -> None:
        self._by_gvr[(t.group, t.version, t.plural)] = t
        self._by_gvk[(t.group, t.version, t.kind)] = t

    def all(self) -> list[ResourceType]:
        """Every registered type, in registration order."""
        with self._lock:
            return list(self._by_gvr.values())

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``/apis/{group}/{version}/{plural}`` (or ``/api/v1/{plural}``)."""
        with self._lock:
            return self._by_gvr.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        """The registered type for ``apiVersion``/``kind``, or None."""
        group, _, version = api_version.rpartition("/")
        with self._lock:
            return self._by_gvk.get((group, version, kind))

    def ensure(self, api_version: str, kind: str) -> ResourceType:
        """The type for ``apiVersion``/``kind``, registering a generic one when unknown.

        Raises ``ApiError`` 400 when ``apiVersion`` or ``kind`` is empty.
        """
        if not api_version or not kind:
            raise bad_request("Object 'Kind' is missing in object" if not kind
                              else "Object 'apiVersion' is missing in object")
        found = self.by_kind(api_version, kind)
        if found is not None:
            return found
        group, _, version = api_version.rpartition("/")
        t = ResourceType(group, version, plural_of(kind), kind,
                         namespaced=kind not in CLUSTER_SCOPED_KINDS, strategic=False)
        with self._lock:
            self._add(t)
        return t

    def groups(self) -> dict[str, list[str]]:
        """Group name -> versions served (core group "" included)."""
        out: dict[str, list[str]] = {}
        with self._lock:
            for t in self._by_gvr.values():
                vs = out.setdefault(t.group, [])
                if t.version not in vs:
                    vs.append(t.version)
        return out


# --------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One label requirement: ``op`` in ``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!``."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        """True when ``labels`` satisfies the requirement (apimachinery ``labels.Requirement``)."""
        has = self.key in labels
        v = labels.get(self.key)
        if self.op == "=":
            return has and v == self.values[0]
        if self.op == "!=":
            return not has or v != self.values[0]
        if self.op == "in":
            return has and v in self.values
        if self.op == "notin":
            return not has or v not in self.values
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        raise AssertionError(self.op)


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^([^\s!=()]+)\s+(in|notin)\s*\(([^)]*)\)$")
_EQ_RE = re.compile(r"^([^\s!=()]+)\s*(==|=|!=)\s*([^\s!=(),]*)$")
_KEY_RE = re.compile(r"^(!?)\s*([^\s!=(),]+)$")


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse a ``labelSelector`` query value (``a=b,c!=d,e in (x,y),f notin (z),g,!h``).

    Returns the list of requirements (empty selector: matches everything). Raises ``ApiError``
    400 on a syntax error, like the API server's "unable to parse requirement".
    """
    if not text:
        return []
    reqs: list[Requirement] = []
    for part in _split_top(text):
        m = _SET_RE.match(part)
        if m:
            vals = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(Requirement(m.group(1), m.group(2), vals))
            continue
        m = _EQ_RE.match(part)
        if m:
            op = "!=" if m.group(2) == "!=" else "="
            reqs.append(Requirement(m.group(1), op, (m.group(3),)))
            continue
        m = _KEY_RE.match(part)
        if m:
            reqs.append(Requirement(m.group(2), "!" if m.group(1) else "exists"))
            continue
        raise bad_request(f"unable to parse requirement: found '{part}', expected: valid selector")
    return reqs


def labels_match(reqs: Iterable[Requirement], labels: dict[str, str] | None) -> bool:
    """True when every requirement matches ``labels`` (None = no labels)."""
    lab = labels or {}
    return all(r.matches(lab) for r in reqs)


def match_labels_selector(selector: dict[str, Any] | None) -> list[Requirement]:
    """Turn a ``metav1.LabelSelector`` dict (``matchLabels`` / ``matchExpressions``) into
    requirements."""
    if not selector:
        return []
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for e in selector.get("matchExpressions") or []:
        reqs.append(Requirement(e["key"], ops[e["operator"]], tuple(e.get("values") or ())))
    return reqs


FIELD_PATHS: dict[str, Callable[[Obj], str]] = {
    "metadata.name": lambda o: o.get("metadata", {}).get("name", ""),
    "metadata.namespace": lambda o: o.get("metadata", {}).get("namespace", ""),
    "status.phase": lambda o: (o.get("status") or {}).get("phase", ""),
    "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName", ""),
}


def parse_field_selector(text: str | None) -> list[tuple[str, bool, str]]:
    """Parse a ``fieldSelector`` (``metadata.name=x,status.phase!=Running``) into
    ``(field, equal, value)`` triples. Supported fields: ``FIELD_PATHS``; others raise
    ``ApiError`` 400 ``field label not supported``.
    """
    out: list[tuple[str, bool, str]] = []
    if not text:
        return out
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.match(r"^([^=!]+)(==|=|!=)(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        fld = m.group(1).strip()
        if fld not in FIELD_PATHS:
            raise bad_request(f'field label not supported: {fld}')
        out.append((fld, m.group(2) != "!=", m.group(3).strip()))
    return out


def fields_match(sel: list[tuple[str, bool, str]], obj: Obj) -> bool:
    """True when ``obj`` satisfies every field requirement."""
    return all((FIELD_PATHS[f](obj) == v) == eq for f, eq, v in sel)


# --------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container_get(doc: Any, token: str) -> Any:
    if isinstance(doc, list):
        try:
            return doc[int(token)]
        except (ValueError, IndexError) as e:
            raise bad_request(f"index {token} out of bounds") from e
    if isinstance(doc, dict):
        if token not in doc:
            raise KeyError(token)
        return doc[token]
    raise bad_request(f"cannot index into {type(doc).__name__}")


def json_patch(doc: Obj, ops: Any) -> Obj:
    """Apply an RFC 6902 JSON patch (``add``, ``remove``, ``replace``, ``move``, ``copy``,
    ``test``) to a deep copy of ``doc``. Raises ``ApiError`` (400 for malformed patches, 422
    ``Invalid`` for a failed ``test`` or missing path, like the API server's json-patch errors).
    """
    if not isinstance(ops, list):
        raise bad_request("json patch must be a list of operations")
    out: Any = copy.deepcopy(doc)

    def parent(path: str) -> tuple[Any, str]:
        toks = _pointer(path)
        if not toks:
            raise bad_request("cannot operate on the document root")
        cur = out
        for t in toks[:-1]:
            try:
                cur = _container_get(cur, t)
            except KeyError as e:
                raise ApiError(422, "Invalid",
                               f"the server rejected our request due to an error in our request: "
                               f"doc is missing path: \"{path}\"") from e
        return cur, toks[-1]

    def get(path: str) -> Any:
        cur = out
        for t in _pointer(path):
            try:
                cur = _container_get(cur, t)
            except KeyError as e:
                raise ApiError(422, "Invalid",
                               f"doc is missing path: \"{path}\": missing value") from e
        return cur

    def add(path: str, value: Any) -> None:
        par, last = parent(path)
        if isinstance(par, list):
            if last == "-":
                par.append(value)
            else:
                i = int(last)
                if i > len(par):
                    raise ApiError(422, "Invalid", f"add operation does not apply: {path}")
                par.insert(i, value)
        elif isinstance(par, dict):
            par[last] = value
        else:
            raise bad_request(f"cannot add at {path}")

    def remove(path: str) -> Any:
        par, last = parent(path)
        try:
            if isinstance(par, list):
                return par.pop(int(last))
            return par.pop(last)
        except (KeyError, IndexError, ValueError) as e:
            raise ApiError(422, "Invalid", f"doc is missing path: \"{path}\"") from e

    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request("json patch operation must have 'op' and 'path'")
        kind, path = op["op"], op["path"]
        if kind == "add":
            add(path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            remove(path)
        elif kind == "replace":
            get(path)
            par, last = parent(path)
            if isinstance(par, list):
                par[int(last)] = copy.deepcopy(op.get("value"))
            else:
                par[last] = copy.deepcopy(op.get("value"))
        elif kind == "move":
            v = remove(op["from"])
            add(path, v)
        elif kind == "copy":
            add(path, copy.deepcopy(get(op["from"])))
        elif kind == "test":
            if get(path) != op.get("value"):
                # k8s.io/apiserver handlers/patch.go ``applyJSPatch``: the json-patch error
                # becomes a 422 through ``NewGenericServerResponse`` (reason Invalid, the
                # library's text as a cause)
                raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request",
                               {"causes": [{"reason": "UnexpectedServerResponse",
                                            "message": f"testing value {path} failed: test failed"}]})
        else:
            raise bad_request(f"unexpected json patch operation {kind!r}")
    if not isinstance(out, dict):
        raise bad_request("patch result is not an object")
    return out


def merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, ``null`` deletes, anything else
    (lists included) replaces. Returns a new value; inputs are not modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# Lists that merge by key in strategic merge patch, by field name (k8s.io/api core/v1 and
# apps/v1 `patchMergeKey` tags). The key is the field whose value identifies an item.
STRATEGIC_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "tolerations": "key",
    "topologySpreadConstraints": "topologyKey",
}
# Lists whose items are primitives merged as a set ($patch-free union) in k8s: finalizers.
STRATEGIC_SET_LISTS = {"finalizers"}


def strategic_merge_patch(doc: Any, patch: Any, field_name: str = "") -> Any:
    """Kubernetes strategic merge patch (subset of k8s.io/apimachinery
    ``pkg/util/strategicpatch/patch.go``).

    Dicts merge recursively; ``null`` deletes a key; a ``$patch: replace`` dict replaces the map,
    ``$patch: delete`` removes it; lists named in ``STRATEGIC_MERGE_KEYS`` merge item by item on
    their merge key (``name`` for containers/env/volumes, ``containerPort`` for ports,
    ``mountPath`` for volumeMounts); an item ``{"<key>": v, "$patch": "delete"}`` deletes the
    matching item; a ``{"$patch": "replace"}`` item replaces the whole list;
    ``$setElementOrder/<list>`` and ``$retainKeys`` directives are accepted and ignored except
    for ordering. Other lists are replaced. Returns a new value.
    """
    if isinstance(patch, dict):
        directive = patch.get("$patch")
        if directive == "delete":
            return None
        body = {k: v for k, v in patch.items()
                if k != "$patch" and not k.startswith("$setElementOrder/")
                and k != "$retainKeys" and not k.startswith("$deleteFromPrimitiveList/")}
        if directive == "replace":
            return copy.deepcopy(body)
        out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
        for k, v in body.items():
            if v is None:
                out.pop(k, None)
                continue
            merged = strategic_merge_patch(out.get(k), v, k)
            if merged is None and isinstance(v, dict) and v.get("$patch") == "delete":
                out.pop(k, None)
            else:
                out[k] = merged
        for k, v in patch.items():
            if k.startswith("$deleteFromPrimitiveList/") and isinstance(out.get(k.split("/", 1)[1]),
                                                                      list):
                lst = k.split("/", 1)[1]
                out[lst] = [x for x in out[lst] if x not in v]
        return out
    if isinstance(patch, list):
        key = STRATEGIC_MERGE_KEYS.get(field_name)
        if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
            return [copy.deepcopy({k: v for k, v in i.items() if k != "$patch"})
                    for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
        if field_name in STRATEGIC_SET_LISTS and isinstance(doc, list):
            out_list = list(doc)
            for i in patch:
                if i not in out_list:
                    out_list.append(i)
            return out_list
        if key is None or not isinstance(doc, list):
            return [copy.deepcopy({k: v for k, v in i.items() if k != "$patch"})
                    if isinstance(i, dict) else i
                    for i in patch if not (isinstance(i, dict) and i.get("$patch") == "delete")]
        result = [copy.deepcopy(i) for i in doc]
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                result.append(copy.deepcopy(item))
                continue
            idx = next((n for n, cur in enumerate(result)
                        if isinstance(cur, dict) and cur.get(key) == item[key]), None)
            if item.get("$patch") == "delete":
                if idx is not None:
                    result.pop(idx)
                continue
            if idx is None:
                result.append(strategic_merge_patch({}, item, ""))
            else:
                result[idx] = strategic_merge_patch(result[idx], item, "")
        return result
    return copy.deepcopy(patch)


# --------------------------------------------------------------------------------------------
# Store
# --------------------------------------------------------------------------------------------


def now_rfc3339() -> str:
    """Current UTC time as the API server writes timestamps (``2026-01-02T03:04:05Z``)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Event:
    """A change in the store: ``type`` ADDED / MODIFIED / DELETED, the resource type and the
    object as stored after the change (before deletion for DELETED)."""

    type: str
    rtype: ResourceType
    obj: Obj


Listener = Callable[[Event], None]

# Kinds whose objects carry metadata.generation (those with a spec the controllers observe).
_NO_GENERATION = {"Pod", "ConfigMap", "Secret", "ServiceAccount", "Event", "Namespace"}


@dataclass
class _Bucket:
    objects: dict[tuple[str, str], Obj] = field(default_factory=dict)


class Store:
    """Thread-safe object store with a global ``resourceVersion`` counter.

    Keys: ``(group, plural)`` then ``(namespace or "", name)``. Listeners registered with
    ``subscribe`` receive an ``Event`` after every committed change, outside the store lock
    (on the writing thread). All read methods return stored dicts that must not be mutated.
    """

    def __init__(self, types: TypeRegistry | None = None) -> None:
        self.types = types or TypeRegistry()
        self._lock = threading.RLock()
        self._rv = itertools.count(1000)
        self._last_rv = 1000
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._listeners: list[Listener] = []

    # ---- helpers ----
    def _bucket(self, rtype: ResourceType) -> _Bucket:
        b = self._buckets.get(rtype.key)
        if b is None:
            b = self._buckets[rtype.key] = _Bucket()
        return b

    def _next_rv(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    @property
    def resource_version(self) -> str:
        """The latest resourceVersion handed out (a list's ``metadata.resourceVersion``)."""
        with self._lock:
            return str(self._last_rv)

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(event)`` after every committed change."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        """Stop calling ``listener`` (no error when it was not subscribed)."""
        try:
            self._listeners.remove(listener)
        except ValueError:
            pass

    def _emit(self, events: list[Event]) -> None:
        for ev in events:
            for fn in list(self._listeners):
                fn(ev)

    @staticmethod
    def _ns(rtype: ResourceType, namespace: str | None) -> str:
        return (namespace or "") if rtype.namespaced else ""

    # ---- reads ----
    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        """The stored object; raises ``ApiError`` 404 ``NotFound``."""
        with self._lock:
            obj = self._bucket(rtype).objects.get((self._ns(rtype, namespace), name))
        if obj is None:
            raise not_found(rtype, name)
        return obj

    def try_get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj | None:
        """The stored object or None."""
        with self._lock:
            return self._bucket(rtype).objects.get((self._ns(rtype, namespace), name))

    def get_copy(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        """A deep copy of the stored object (safe to modify); 404 when absent."""
        return copy.deepcopy(self.get(rtype, namespace, name))

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_selector: list[Requirement] | None = None,
        field_selector: list[tuple[str, bool, str]] | None = None,
    ) -> list[Obj]:
        """Objects of ``rtype`` in ``namespace`` (None: all namespaces) matching the selectors,
        sorted by namespace then name (the API server's etcd key order)."""
        with self._lock:
            items = list(self._bucket(rtype).objects.items())
        out = []
        for (ns, _name), obj in sorted(items, key=lambda kv: kv[0]):
            if namespace is not None and rtype.namespaced and ns != namespace:
                continue
            if label_selector and not labels_match(label_selector,
                                                   obj.get("metadata", {}).get("labels")):
                continue
            if field_selector and not fields_match(field_selector, obj):
                continue
            out.append(obj)
        return out

    # ---- writes ----
    def _prepare_new(self, rtype: ResourceType, obj: Obj, namespace: str | None) -> Obj:
        obj = copy.deepcopy(obj)
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        md = obj.setdefault("metadata", {})
        if not md.get("name"):
            gen = md.get("generateName")
            if gen:
                md["name"] = gen + uuid.uuid4().hex[:5]
            else:
                raise invalid(rtype, "", [("metadata.name", "FieldValueRequired",
                                           "Required value: name or generateName is required")])
        if rtype.namespaced:
            body_ns = md.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            md["namespace"] = namespace or body_ns or "default"
        else:
            md.pop("namespace", None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now_rfc3339()
        if rtype.kind not in _NO_GENERATION:
            md["generation"] = 1
        for k in ("resourceVersion", "deletionTimestamp", "selfLink"):
            md.pop(k, None)
        return obj

    def create(self, rtype: ResourceType, obj: Obj, namespace: str | None = None,
               dry_run: bool = False) -> Obj:
        """Store a new object (uid, resourceVersion, creationTimestamp, generation 1 assigned).

        Raises 409 ``AlreadyExists``, 422 ``Invalid`` (missing name), 400 (namespace mismatch).
        With ``dry_run`` returns the would-be object without storing it.
        """
        new = self._prepare_new(rtype, obj, namespace)
        key = (self._ns(rtype, new["metadata"].get("namespace")), new["metadata"]["name"])
        with self._lock:
            b = self._bucket(rtype)
            if key in b.objects:
                raise already_exists(rtype, key[1])
            if dry_run:
                return new
            new["metadata"]["resourceVersion"] = self._next_rv()
            b.objects[key] = new
        self._emit([Event("ADDED", rtype, new)])
        return new

    def replace(self, rtype: ResourceType, namespace: str | None, name: str, obj: Obj,
                dry_run: bool = False, status_only: bool = False,
                check_rv: bool = True) -> Obj:
        """Replace an object (PUT). Keeps uid/creationTimestamp; bumps ``generation`` when
        ``spec`` changed; a non-empty stale ``metadata.resourceVersion`` raises 409 ``Conflict``.
        ``status_only`` keeps the stored spec/metadata and takes only ``status`` (controllers,
        ``/status`` subresource). Raises 404 when absent, 400 on a name mismatch.
        """
        new = copy.deepcopy(obj)
        md = new.setdefault("metadata", {})
        if md.get("name") and md["name"] != name:
            raise bad_request(
                f'the name of the object ({md["name"]}) does not match the name on the URL '
                f'({name})')
        key = (self._ns(rtype, namespace), name)
        with self._lock:
            b = self._bucket(rtype)
            cur = b.objects.get(key)
            if cur is None:
                raise not_found(rtype, name)
            if check_rv and md.get("resourceVersion") and \
                    md["resourceVersion"] != cur["metadata"]["resourceVersion"]:
                raise conflict(rtype, name)
            if status_only:
                merged = dict(cur)
                merged["metadata"] = dict(cur["metadata"])
                if "status" in new:
                    merged["status"] = new["status"]
                new = merged
            else:
                new["apiVersion"] = rtype.api_version
                new["kind"] = rtype.kind
                for k in ("uid", "creationTimestamp", "namespace", "deletionTimestamp"):
                    if k in cur["metadata"]:
                        md[k] = cur["metadata"][k]
                    else:
                        md.pop(k, None)
                md["name"] = name
                if "generation" in cur["metadata"]:
                    md["generation"] = cur["metadata"]["generation"] + (
                        1 if new.get("spec") != cur.get("spec") else 0)
                # status is owned by controllers for kinds with a status subresource
                if "status" in cur and rtype.kind in ("Deployment", "ReplicaSet", "Pod",
                                                      "LeaderWorkerSet", "StatefulSet"):
                    new["status"] = cur["status"]
            if dry_run:
                return new
            new["metadata"]["resourceVersion"] = self._next_rv()
            b.objects[key] = new
        self._emit([Event("MODIFIED", rtype, new)])
        return new

    def patch(self, rtype: ResourceType, namespace: str | None, name: str, content_type: str,
              patch_body: Any, dry_run: bool = False) -> Obj:
        """Apply a PATCH of ``content_type`` (json-patch, merge-patch, strategic-merge-patch;
        ``application/apply-patch+yaml`` is refused with 415 for now) and store the result via
        ``replace``. Strategic merge on a type with ``strategic=False`` (custom resources) raises
        415 ``UnsupportedMediaType`` with the API server's wording.
        """
        ct = content_type.split(";")[0].strip().lower()
        for attempt in range(8):
            cur = self.get(rtype, namespace, name)
            if ct == "application/json-patch+json":
                new = json_patch(cur, patch_body)
            elif ct == "application/merge-patch+json":
                if not isinstance(patch_body, dict):
                    raise bad_request("merge patch must be a JSON object")
                new = merge_patch(cur, patch_body)
            elif ct == "application/strategic-merge-patch+json" and rtype.strategic:
                if not isinstance(patch_body, dict):
                    raise bad_request("strategic merge patch must be a JSON object")
                new = strategic_merge_patch(cur, patch_body)
            else:
                accepted = ["application/json-patch+json", "application/merge-patch+json"]
                if rtype.strategic:
                    accepted.append("application/strategic-merge-patch+json")
                accepted.append("application/apply-patch+yaml")
                raise unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types "
                    "include: " + ", ".join(accepted))
            if not isinstance(new, dict):
                raise bad_request("patch result is not an object")
            asked = (new.get("metadata") or {}).get("resourceVersion")
            if asked and asked != cur["metadata"]["resourceVersion"]:
                # a resourceVersion the patch itself writes is the update's precondition: the
                # registry's Update refuses a stale one with 409 Conflict, never retried
                # (k8s.io/apiserver pkg/registry/generic/registry/store.go ``Update``)
                raise conflict(rtype, name)
            new.setdefault("metadata", {})["resourceVersion"] = cur["metadata"]["resourceVersion"]
            try:
                # the real server retries a patch internally on a concurrent update
                return self.replace(rtype, namespace, name, new, dry_run=dry_run)
            except ApiError as e:
                if e.reason != "Conflict" or attempt == 7:
                    raise
        raise AssertionError("unreachable")

    def delete(self, rtype: ResourceType, namespace: str | None, name: str,
               dry_run: bool = False) -> Obj:
        """Remove an object and return it as it was; 404 when absent."""
        key = (self._ns(rtype, namespace), name)
        with self._lock:
            b = self._bucket(rtype)
            cur = b.objects.get(key)
            if cur is None:
                raise not_found(rtype, name)
            if dry_run:
                return cur
            del b.objects[key]
            self._next_rv()
        self._emit([Event("DELETED", rtype, cur)])
        return cur

    def update_status(self, rtype: ResourceType, namespace: str | None, name: str,
                      status: Obj) -> Obj | None:
        """Set ``status`` (controllers). Returns the stored object, or None when it is gone or
        the status is unchanged (no resourceVersion bump then)."""
        with self._lock:
            cur = self.try_get(rtype, namespace, name)
            if cur is None:
                return None
            if cur.get("status") == status:
                return cur
            new = dict(cur)
            new["metadata"] = dict(cur["metadata"])
            new["status"] = status
            new["metadata"]["resourceVersion"] = self._next_rv()
            self._bucket(rtype).objects[(self._ns(rtype, namespace), name)] = new
        self._emit([Event("MODIFIED", rtype, new)])
        return new

    def dump_json(self, obj: Obj) -> bytes:
        """Compact JSON bytes of an object."""
        return json.dumps(obj, separators=(",", ":")).encode()
