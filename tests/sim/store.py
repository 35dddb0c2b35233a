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
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .apierrors import ApiError, already_exists, bad_request, conflict, invalid, not_found, unsupported_media_type
from .patches import json_patch, merge_patch, strategic_merge_patch
from .resourcetypes import Obj, ResourceType
from .selectors import Requirement, fields_match, labels_match
from .typeregistry import TypeRegistry


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
