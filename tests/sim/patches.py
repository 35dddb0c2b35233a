"""The three PATCH flavours: RFC 6902 JSON patch, RFC 7386 merge patch, Kubernetes strategic merge
patch (k8s.io/apimachinery ``pkg/util/strategicpatch``; only the directives this project needs)."""

from __future__ import annotations

import copy
from typing import Any

from .apierrors import (
    ApiError,
    bad_request,
)
from .resourcetypes import (
    Obj,
)


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
    patcher = _JsonPatcher(copy.deepcopy(doc))
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request("json patch operation must have 'op' and 'path'")
        patcher.apply(op["op"], op["path"], op)
    if not isinstance(patcher.out, dict):
        raise bad_request("patch result is not an object")
    return patcher.out


class _JsonPatcher:
    """The document a JSON patch is being applied to (``out``) and its operations."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def parent(self, path: str) -> tuple[Any, str]:
        toks = _pointer(path)
        if not toks:
            raise bad_request("cannot operate on the document root")
        cur = self.out
        for t in toks[:-1]:
            try:
                cur = _container_get(cur, t)
            except KeyError as e:
                raise ApiError(422, "Invalid",
                               f"the server rejected our request due to an error in our request: "
                               f"doc is missing path: \"{path}\"") from e
        return cur, toks[-1]

    def get(self, path: str) -> Any:
        cur = self.out
        for t in _pointer(path):
            try:
                cur = _container_get(cur, t)
            except KeyError as e:
                raise ApiError(422, "Invalid",
                               f"doc is missing path: \"{path}\": missing value") from e
        return cur

    def add(self, path: str, value: Any) -> None:
        par, last = self.parent(path)
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

    def remove(self, path: str) -> Any:
        par, last = self.parent(path)
        try:
            if isinstance(par, list):
                return par.pop(int(last))
            return par.pop(last)
        except (KeyError, IndexError, ValueError) as e:
            raise ApiError(422, "Invalid", f"doc is missing path: \"{path}\"") from e

    def apply(self, kind: str, path: str, op: dict[str, Any]) -> None:
        """One operation ``op`` (``kind`` at ``path``)."""
        if kind == "add":
            self.add(path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            self.remove(path)
        elif kind == "replace":
            self.get(path)
            par, last = self.parent(path)
            if isinstance(par, list):
                par[int(last)] = copy.deepcopy(op.get("value"))
            else:
                par[last] = copy.deepcopy(op.get("value"))
        elif kind == "move":
            v = self.remove(op["from"])
            self.add(path, v)
        elif kind == "copy":
            self.add(path, copy.deepcopy(self.get(op["from"])))
        elif kind == "test":
            if self.get(path) != op.get("value"):
                # k8s.io/apiserver handlers/patch.go ``applyJSPatch``: the json-patch error
                # becomes a 422 through ``NewGenericServerResponse`` (reason Invalid, the
                # library's text as a cause)
                raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request",
                               {"causes": [{"reason": "UnexpectedServerResponse",
                                            "message": f"testing value {path} failed: test failed"}]})
        else:
            raise bad_request(f"unexpected json patch operation {kind!r}")


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
