"""RBAC authorisation of the simulated API server, from the RBAC objects it holds.

Evaluates Role, ClusterRole, RoleBinding and ClusterRoleBinding (``rbac.authorization.k8s.io/v1``)
the way the RBAC authorizer of a v1.32 API server does (k8s.io/kubernetes
``plugin/pkg/auth/authorizer/rbac/rbac.go`` and ``pkg/apis/rbac/v1/evaluation_helpers.go``):

- a ClusterRoleBinding grants its ClusterRole's rules everywhere (every namespace and the cluster
  scope); a RoleBinding grants its Role's (same namespace) or ClusterRole's rules in its own
  namespace only;
- a rule matches when ``apiGroups`` holds the group or ``*``, ``resources`` holds the resource
  (``pods``, ``pods/exec``...), ``*``, ``<resource>/*`` or ``*/<subresource>``, ``verbs`` holds the
  verb or ``*``, and ``resourceNames`` is empty or holds the object's name (a request without a
  name, a list or a create, never matches a rule with resourceNames);
- subjects: ``User`` by name; ``ServiceAccount`` (``name``, ``namespace``: the binding's own when
  empty, as ``appliesToUser`` defaults it) for the user ``system:serviceaccount:<ns>:<name>`` that
  a pod's mounted token authenticates as; ``Group`` ``system:authenticated`` (every user holding a
  token), and ``system:serviceaccounts`` / ``system:serviceaccounts:<ns>`` for service accounts;
  other groups are not modelled (scenario users belong to no other group).

Aggregated ClusterRoles (``aggregationRule``) and ``nonResourceURLs`` rules are not evaluated.
Verbs are the request-info verbs (``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``,
``delete``, ``deletecollection``); the server derives them (tests/sim/server.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .resourcetypes import Obj, ResourceType
from .store import Store

__all__ = ["RBACAuthorizer", "rule_allows", "service_account_user"]

RBAC_GROUP = "rbac.authorization.k8s.io"
AUTHENTICATED_GROUP = "system:authenticated"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def service_account_user(namespace: str, name: str) -> str:
    """The user name a service account's token authenticates as
    (``system:serviceaccount:<namespace>:<name>``, k8s.io/apiserver ``serviceaccount.MakeUsername``)."""
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def _groups_of(user: str) -> set[str]:
    groups = {AUTHENTICATED_GROUP}
    if user.startswith(SERVICE_ACCOUNT_PREFIX):
        ns = user[len(SERVICE_ACCOUNT_PREFIX):].split(":", 1)[0]
        groups |= {"system:serviceaccounts", f"system:serviceaccounts:{ns}"}
    return groups


def _strs(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _resource_matches(wanted: str, allowed: list[str]) -> bool:
    base, _, sub = wanted.partition("/")
    for r in allowed:
        if r == "*" or r == wanted:
            return True
        if sub and (r == f"{base}/*" or r == f"*/{sub}"):
            return True
    return False


def rule_allows(rule: dict[str, Any], verb: str, resource: str, group: str, name: str) -> bool:
    """True when one PolicyRule (a dict as in a Role's ``rules``) grants ``verb`` on
    ``resource`` (``plural`` or ``plural/subresource``) of API ``group`` ("" for core) named
    ``name`` ("" when the request has no name). Rules from ``evaluation_helpers.go``
    (``RuleAllows``: VerbMatches, APIGroupMatches, ResourceMatches, ResourceNameMatches)."""
    verbs = _strs(rule.get("verbs"))
    if "*" not in verbs and verb not in verbs:
        return False
    groups = _strs(rule.get("apiGroups"))
    if "*" not in groups and group not in groups:
        return False
    if not _resource_matches(resource, _strs(rule.get("resources"))):
        return False
    names = _strs(rule.get("resourceNames"))
    if names and name not in names:
        return False
    return True


class RBACAuthorizer:
    """Callable ``(user, verb, resource, group, namespace, name) -> bool`` over ``store``.

    ``namespace`` is None for cluster-scoped requests (and lists across all namespaces), where
    only ClusterRoleBindings count. Reads the store on every call (objects created through the
    API take effect at once). Thread-safe (the store is)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _type(self, plural: str) -> ResourceType | None:
        return self.store.types.lookup(RBAC_GROUP, "v1", plural)

    def _list(self, plural: str, namespace: str | None) -> list[Obj]:
        t = self._type(plural)
        if t is None:
            return []
        return self.store.list(t, namespace, [], [])

    def _role_rules(self, ref: dict[str, Any], namespace: str | None) -> list[dict[str, Any]]:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "ClusterRole":
            t = self._type("clusterroles")
            obj = self.store.try_get(t, None, name) if t else None
        elif kind == "Role" and namespace is not None:
            t = self._type("roles")
            obj = self.store.try_get(t, namespace, name) if t else None
        else:
            obj = None
        rules = (obj or {}).get("rules")
        return [r for r in rules if isinstance(r, dict)] if isinstance(rules, list) else []

    @staticmethod
    def _subject_matches(subjects: Iterable[Any], user: str, binding_ns: str | None = None) -> bool:
        groups = _groups_of(user)
        for s in subjects:
            if not isinstance(s, dict):
                continue
            kind, name = s.get("kind"), s.get("name")
            if kind == "User" and name == user:
                return True
            if kind == "Group" and name in groups:
                return True
            if kind == "ServiceAccount" and name:
                sa_ns = str(s.get("namespace") or binding_ns or "")
                if sa_ns and user == service_account_user(sa_ns, str(name)):
                    return True
        return False

    def rules_for(self, user: str, namespace: str | None) -> list[dict[str, Any]]:
        """Every PolicyRule that applies to ``user`` in ``namespace`` (None: cluster scope)."""
        rules: list[dict[str, Any]] = []
        for b in self._list("clusterrolebindings", None):
            if self._subject_matches(b.get("subjects") or [], user):
                rules += self._role_rules(b.get("roleRef") or {}, None)
        if namespace is not None:
            for b in self._list("rolebindings", namespace):
                if self._subject_matches(b.get("subjects") or [], user, namespace):
                    rules += self._role_rules(b.get("roleRef") or {}, namespace)
        return rules

    def __call__(self, user: str, verb: str, resource: str, group: str,
                 namespace: str | None, name: str) -> bool:
        """True when some binding of ``user`` grants the request."""
        return any(rule_allows(r, verb, resource, group, name)
                   for r in self.rules_for(user, namespace))
