"""The registry of resource types: the built-in ones and those CustomResourceDefinitions add."""

from __future__ import annotations

import threading

from .apierrors import (
    bad_request,
)
from .resourcetypes import (
    BUILTIN_TYPES,
    CLUSTER_SCOPED_KINDS,
    ResourceType,
    plural_of,
)


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
