"""Label and field selectors as the API server evaluates them (k8s.io/apimachinery
``pkg/labels/selector.go``, ``pkg/fields/selector.go``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .apierrors import (
    bad_request,
)
from .resourcetypes import (
    Obj,
)


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
