"""A refusal of the API server (403), named for what it is: the verb, the resource, the
namespace, and the Role rule that allows it. Pure: no I/O.

The RBAC authorizer words a refusal as ``User "U" cannot VERB resource "RES" in API group "G"
in the namespace "NS"`` (or ``at the cluster scope``): k8s.io/kubernetes
``plugin/pkg/auth/authorizer/rbac/rbac.go``, via ``staging/src/k8s.io/apiserver/pkg/endpoints/
handlers/responsewriters/errors.go::forbiddenMessage``. The rules quoted are those of the
project's Role, ``rbac/kubectl-kvreset-role.yaml``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ROLE_FILE", "Permission", "from_forbidden"]

#: The least-privilege Role of this project, whose rules the messages quote.
ROLE_FILE = "rbac/kubectl-kvreset-role.yaml"

_FORBIDDEN = re.compile(r'cannot (?P<verb>[a-z]+) resource "(?P<resource>[^"]+)" in API group "(?P<group>[^"]*)"'
                        r'(?: in the namespace "(?P<namespace>[^"]+)"| at the cluster scope)')


@dataclass(frozen=True)
class Permission:
    """One RBAC permission: ``verb`` on ``resource`` (``pods``, ``pods/proxy``) of API ``group``
    (``""`` for the core group) in ``namespace`` (None: at the cluster scope)."""

    verb: str
    resource: str
    group: str = ""
    namespace: str | None = None

    def describe(self) -> str:
        """``list on services in namespace NS`` (the group named unless it is the core group)."""
        resource = self.resource if not self.group else f"{self.resource}.{self.group}"
        where = f"in namespace {self.namespace}" if self.namespace else "at the cluster scope"
        return f"{self.verb} on {resource} {where}"

    def rule(self) -> str:
        """The Role rule that allows it, in the YAML flow style of ``rbac/``:
        ``{apiGroups: [""], resources: [services], verbs: [list]}``."""
        group = '""' if not self.group else self.group
        return f"{{apiGroups: [{group}], resources: [{self.resource}], verbs: [{self.verb}]}}"

    def advice(self) -> str:
        """Where the rule goes: a Role of the namespace (a ClusterRole at the cluster scope)."""
        holder = f"a Role in namespace {self.namespace}" if self.namespace else "a ClusterRole"
        return f"the rule {self.rule()} in {holder} bound to the user allows it ({ROLE_FILE} has it)"

    def refused(self, needed_for: str) -> str:
        """A sentence for a row or stderr: ``not permitted to VERB RESOURCE in namespace NS
        (needed to ...); the rule ... allows it``."""
        return f"not permitted: {self.describe()} (needed {needed_for}); {self.advice()}"


def from_forbidden(message: str) -> Permission | None:
    """The permission a Forbidden message names, or None when it is not the RBAC authorizer's."""
    m = _FORBIDDEN.search(message)
    if m is None:
        return None
    return Permission(m["verb"], m["resource"], m["group"], m["namespace"] or None)
