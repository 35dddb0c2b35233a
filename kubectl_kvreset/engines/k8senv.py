"""What the kubelet does to a container's command before a server reads it, and what the spec does not hold.

Kubernetes' ``$(VAR)`` expansion of ``command``/``args`` (:func:`kubernetes_expand`); where the
kubelet takes the variables the spec does not write literally (``valueFrom``, ``envFrom``:
:func:`env_sources`), and a reason for an unevaluated reference that names that source
(:func:`sourced_reason`). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["env_sources", "kubernetes_expand", "sourced_reason"]

# --------------------------------------------------------------------------------------------
# Kubernetes $(VAR) expansion
# --------------------------------------------------------------------------------------------


def kubernetes_expand(text: str, env: Mapping[str, str], unresolved: list[str] | None = None,
                      unevaluated: list[tuple[str, str]] | None = None) -> str:
    """Expand ``$(VAR)`` references in one ``command``/``args`` item as the kubelet does.

    ``$$`` becomes ``$``; ``$(NAME)`` becomes ``env[NAME]`` when defined and stays literal
    otherwise (its name is appended to ``unresolved`` when NAME looks like a variable name, and
    ``("$(NAME)", reason)`` to ``unevaluated``: the kubelet expands it from the container's
    whole environment, ``envFrom`` and ``valueFrom`` sources and service variables included,
    which ``env`` may not hold); any other ``$`` is kept. Rule from Kubernetes
    ``third_party/forked/golang/expansion``.
    """
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2:close]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i:close + 1])
                        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
                            if unresolved is not None:
                                unresolved.append(name)
                            if unevaluated is not None:
                                unevaluated.append((text[i:close + 1], (
                                    f"$({name}) is not resolved: {name} is not a literal env entry of the "
                                    "container (a valueFrom or envFrom source, or none, which the kubelet "
                                    "then leaves as written)")))
                    i = close + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)

def env_sources(container: Mapping[str, Any]) -> dict[str, str]:
    """Where the kubelet takes the variables of ``container`` that the spec does not hold
    literally: name -> ``ConfigMap NAME key K`` / ``Secret NAME key K`` for ``valueFrom``
    entries, and ``*`` -> the ``envFrom`` sources (which may set any name)."""
    out: dict[str, str] = {}
    literal: set[str] = set()
    env_from = bool(container.get("envFrom"))
    for entry in container.get("env") or []:
        vf = entry.get("valueFrom") if isinstance(entry, Mapping) else None
        if not isinstance(vf, Mapping):
            # a later literal entry replaces an earlier valueFrom one (the last entry wins)
            if isinstance(entry, Mapping):
                name = str(entry.get("name"))
                out.pop(name, None)
                literal.discard(name)
                # a value referring to a variable not read here is expanded by the kubelet
                # with that variable's real value (k8s.io/kubernetes/third_party/forked/golang/
                # expansion, earlier entries only), so it is not known either
                # (the value itself is not shown: it may hold a secret)
                for used in _k8s_refs(str(entry.get("value") or "")):
                    if used in out or (env_from and used not in literal):
                        out[name] = (f"its env value, which refers to $({used}), and {used} comes from "
                                     f"{out.get(used) or 'envFrom'}")
                        break
                else:
                    literal.add(name)
            continue
        literal.discard(str(entry.get("name")))
        for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = vf.get(key)
            if isinstance(ref, Mapping):
                out[str(entry.get("name"))] = f"{kind} {ref.get('name')} key {ref.get('key')}"
    froms = [f"{kind} {(src.get(key) or {}).get('name')}" for src in container.get("envFrom") or []
             if isinstance(src, Mapping)
             for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")) if key in src]
    if froms:
        out["*"] = "envFrom " + ", ".join(froms)
    return out


def _k8s_refs(text: str) -> list[str]:
    """The names of the ``$(NAME)`` references of one env value (``$$`` escapes ``$``)."""
    return [m.group(1) for m in re.finditer(r"\$\$|\$\(([^)]*)\)", text) if m.group(1) is not None]


#: ``$NAME``, ``${NAME...}`` or ``$(NAME)``, NAME in group 1, 2 or 3.
_REF_NAME_RE = re.compile(r"^\$(?:([A-Za-z_][A-Za-z0-9_]*)"
                          r"|\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}"
                          r"|\(([A-Za-z_][A-Za-z0-9_]*)\))$")


def sourced_reason(literal: str, reason: str, sources: Mapping[str, str]) -> str:
    """``reason`` for an unevaluated ``$NAME``/``${NAME}``/``$(NAME)``, naming the ConfigMap or
    Secret the kubelet takes NAME from when the spec says (the command is read from the pod
    spec alone, so such a value is not known here)."""
    m = _REF_NAME_RE.match(literal)
    if m is None:
        return reason
    name = m.group(1) or m.group(2) or m.group(3)
    if name in sources:
        return (f"{literal}: {name} comes from {sources[name]}, which is not read with the pod spec (write the "
                "value literally in the command or the container's env so the plugin can read it)")
    if "*" in sources:
        return f"{reason}; {sources['*']} may set {name}"
    return reason
