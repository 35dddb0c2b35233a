"""The resource handlers of the API server: get, list, create, replace, patch, delete of a stored
object and its status, scale and log subresources."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any
from urllib.parse import parse_qs, unquote

import yaml

from .apibase import (
    _METHOD_VERB,
    _Handler,
    _Hijacked,
    _Stream,
    _truthy,
)
from .apierrors import ApiError, bad_request, invalid, method_not_allowed
from .apitables import (
    table_for,
)
from .patches import json_patch, merge_patch, strategic_merge_patch
from .resourcetypes import Obj, ResourceType
from .selectors import parse_field_selector, parse_label_selector


class ResourceHandlers:
    """CRUD, PATCH and subresources of a stored resource (a mixin of :class:`tests.sim.server.SimServer`)."""

    # ---------------- resources ----------------
    def _resource(self, h: _Handler, user: str, method: str, group: str, version: str,
                  rest: list[str], raw_rest: list[str], query: dict[str, str], body: bytes,
                  raw_query: str) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request on ``/api[s]/<group>/<version>/[namespaces/<ns>/]<plural>[/<name>[/<sub>...]]``
        (``rest``: the path after the version, ``raw_rest`` still percent-encoded): resolved,
        counted, authorised, faulted, then served; ``(status, headers, body)`` or one of the
        internal exceptions of tests/sim/apibase.py."""
        ns, plural, rtype, name, sub, raw_tail = self._target(method, group, version, rest, raw_rest)
        resource = f"{plural}/{sub}" if sub else plural
        if sub == "proxy":
            verb = _METHOD_VERB.get(method, "get")
        elif method == "GET" and not name:
            verb = "watch" if _truthy(query.get("watch")) else "list"
        elif method == "DELETE" and not name:
            verb = "deletecollection"
        else:
            verb = _METHOD_VERB.get(method, method.lower())
        self._count(verb, resource)
        h.sim_call = f"{verb} {resource}"
        self._authorize(user, verb, resource, group, ns, name)
        self._api_fault(verb, resource, ns, name, user)
        dry = query.get("dryRun") == "All"
        accept = h.headers.get("Accept") or ""
        if sub in ("proxy", "exec", "portforward", "log"):
            return self._pod_subresource(h, rtype, ns, plural, name, sub, raw_tail, query, body,
                                         raw_query)
        if verb in ("watch", "list", "get"):
            return self._read(rtype, ns, name, sub, verb, query, accept)
        if verb in ("create", "update", "patch"):
            return self._write(h, rtype, ns, name, sub, verb, body, dry)
        if verb in ("delete", "deletecollection"):
            return self._delete(rtype, ns, group, plural, name, verb, query, dry)
        raise method_not_allowed("the server does not allow this method on the requested "
                                 "resource")

    def _target(self, method: str, group: str, version: str, rest: list[str], raw_rest: list[str]
                ) -> tuple[str | None, str, ResourceType, str, str, list[str]]:
        """``(namespace, plural, type, name, subresource, raw tail)`` of a resource path; 404 for
        an unknown type or subresource, a namespaced name without a namespace; 405 for a write
        other than POST and DELETE on a collection."""
        ns: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and \
                self.store.types.lookup(group, version, rest[2]) is not None:
            ns, plural, tail, raw_tail = rest[1], rest[2], rest[3:], raw_rest[3:]
        else:
            plural, tail, raw_tail = rest[0], rest[1:], raw_rest[1:]
        rtype = self.store.types.lookup(group, version, plural)
        if rtype is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if ns is not None and not rtype.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = tail[0] if tail else ""
        sub = tail[1] if len(tail) > 1 else ""
        if rtype.namespaced and name and ns is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub and sub not in rtype.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not name and method not in ("GET", "POST", "DELETE"):
            raise method_not_allowed("the server does not allow this method on the requested "
                                     "resource")
        return ns, plural, rtype, name, sub, raw_tail

    def _pod_subresource(self, h: _Handler, rtype: ResourceType, ns: str | None, plural: str,
                         name: str, sub: str, raw_tail: list[str], query: dict[str, str],
                         body: bytes, raw_query: str) -> tuple[int, list[tuple[str, str]], bytes]:
        """``proxy`` (pods and services), ``exec``, ``portforward`` (both hijack the connection)
        and ``log``."""
        if sub == "proxy":
            rest_path = "/" + "/".join(unquote(s) for s in raw_tail[2:]) if len(raw_tail) > 2 \
                else "/"
            if raw_tail[-1:] and h.path.split("?")[0].endswith("/") and rest_path != "/":
                rest_path += "/"
            if plural == "services":
                return self._service_proxy(h, ns or "", name, rest_path, raw_query, body)
            return self._proxy(h, ns or "", name, rest_path, raw_query, body)
        if sub in ("exec", "portforward"):
            pod = self.store.get(self.cluster.t_pod, ns, name)
            params = parse_qs(raw_query, keep_blank_values=True)
            if sub == "exec":
                self._exec(h, pod, params)
            else:
                self._portforward(h, pod, params)
            raise _Hijacked()
        if sub == "log":
            return self._log(self.store.get(rtype, ns, name), query)

        raise AssertionError(sub)

    def _read(self, rtype: ResourceType, ns: str | None, name: str, sub: str, verb: str,
              query: dict[str, str], accept: str) -> tuple[int, list[tuple[str, str]], bytes]:
        """``watch`` (streamed), ``list`` and ``get`` (Tables when ``accept`` asks)."""
        if verb == "watch":
            raise _Stream(self._watch(rtype, ns, query, "as=Table" in accept))
        if verb == "list":
            items = self.store.list(rtype, ns, parse_label_selector(query.get("labelSelector")),
                                    parse_field_selector(query.get("fieldSelector")))
            items = [self._served(rtype, o) for o in items]
            rv = self.store.resource_version
            if "as=Table" in accept:
                return self._json(200, table_for(rtype, items, rv,
                                                 query.get("includeObject", "Metadata")))
            return self._json(200, {"kind": f"{rtype.kind}List", "apiVersion": rtype.api_version,
                                    "metadata": {"resourceVersion": rv}, "items": items})
        if verb == "get":
            obj = self.store.get(rtype, ns, name)
            if sub == "scale":
                return self._json(200, self._scale(rtype, obj))
            obj = self._served(rtype, obj)
            if "as=Table" in accept:
                return self._json(200, table_for(rtype, [obj], self.store.resource_version,
                                                 query.get("includeObject", "Metadata")))
            return self._json(200, obj)
        raise AssertionError(verb)

    def _write(self, h: _Handler, rtype: ResourceType, ns: str | None, name: str, sub: str,
               verb: str, body: bytes, dry: bool) -> tuple[int, list[tuple[str, str]], bytes]:
        """``create``, ``update`` and ``patch`` (of the object, its status or its scale)."""
        if verb == "create":
            if name:
                raise method_not_allowed(
                    "the server does not allow this method on the requested resource")
            obj = self._decode(body)
            self._check_kind(rtype, obj)
            created = self.cluster.create_object(rtype, obj, ns, dry_run=dry)
            return self._json(201, self._served(rtype, created))
        if verb == "update":
            obj = self._decode(body)
            if sub == "scale":
                return self._json(200, self._set_scale(rtype, ns, name,
                                                       (obj.get("spec") or {}).get("replicas"),
                                                       dry))
            self._check_kind(rtype, obj)
            return self._json(200, self._served(rtype, self.store.replace(
                rtype, ns, name, obj, dry_run=dry, status_only=sub == "status")))
        if verb == "patch":
            try:
                patch = json.loads(body or b"null")
            except ValueError as e:
                raise bad_request(f"error decoding patch: {e}") from e
            ctype = h.headers.get("Content-Type") or ""
            if sub == "scale":
                cur = self._scale(rtype, self.store.get(rtype, ns, name))
                ct = ctype.split(";")[0].strip()
                new = (json_patch(cur, patch) if ct == "application/json-patch+json"
                       else merge_patch(cur, patch) if ct == "application/merge-patch+json"
                       else strategic_merge_patch(cur, patch))
                return self._json(200, self._set_scale(rtype, ns, name,
                                                       (new.get("spec") or {}).get("replicas"),
                                                       dry))
            return self._json(200, self._served(rtype, self.store.patch(rtype, ns, name, ctype,
                                                                        patch, dry_run=dry)))
        raise AssertionError(verb)

    def _delete(self, rtype: ResourceType, ns: str | None, group: str, plural: str, name: str,
                verb: str, query: dict[str, str], dry: bool) -> tuple[int, list[tuple[str, str]], bytes]:
        """``delete`` (a pod answers itself, marked deleted; others a Success ``Status``) and
        ``deletecollection``."""
        if verb == "delete":
            obj = self.store.delete(rtype, ns, name, dry_run=dry)
            if rtype.kind == "Pod":
                out = json.loads(json.dumps(obj))
                out["metadata"]["deletionTimestamp"] = out["metadata"].get(
                    "deletionTimestamp") or _dt.datetime.now(_dt.timezone.utc).strftime(
                    "%Y-%m-%dT%H:%M:%SZ")
                out["metadata"]["deletionGracePeriodSeconds"] = 30
                return self._json(200, out)
            details: dict[str, Any] = {"name": name, "kind": plural,
                                       "uid": obj["metadata"].get("uid")}
            if group:
                details["group"] = group
            return self._json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                    "status": "Success", "details": details})
        if verb == "deletecollection":
            items = self.store.list(rtype, ns, parse_label_selector(query.get("labelSelector")),
                                    parse_field_selector(query.get("fieldSelector")))
            for o in items:
                if not dry:
                    try:
                        self.store.delete(rtype, ns or o["metadata"].get("namespace"),
                                          o["metadata"]["name"])
                    except ApiError:
                        pass
            return self._json(200, {"kind": f"{rtype.kind}List",
                                    "apiVersion": rtype.api_version,
                                    "metadata": {"resourceVersion": self.store.resource_version},
                                    "items": items})
        raise AssertionError(verb)

    def _log(self, pod: Obj, query: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        """``pods/log``: a batch pod's container log (tests/sim/batchpods.py), empty for other
        pods. ``container`` may be left out when the pod has one container (else 400 as the
        API server words it); ``tailLines`` is honoured."""
        spec = pod.get("spec") or {}
        names = [str(c.get("name")) for c in spec.get("containers") or []]
        inits = [str(c.get("name")) for c in spec.get("initContainers") or []]
        pname = pod["metadata"]["name"]
        container = query.get("container") or ""
        if not container:
            if len(names) != 1:
                raise bad_request(f"a container name must be specified for pod {pname}, choose one "
                                  f"of: [{' '.join(names)}] or one of the init containers: "
                                  f"[{' '.join(inits)}]")
            container = names[0]
        elif container not in names + inits:
            raise bad_request(f"container {container} is not valid for pod {pname}")
        rec = self.cluster.record_for(pod["metadata"]["namespace"], pname)
        data = rec.batch.log(container) if rec is not None and rec.batch is not None else b""
        tail = query.get("tailLines")
        if tail and tail.isdigit():
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(tail):]) if int(tail) else b""
        return 200, [("Content-Type", "text/plain")], data

    @staticmethod
    def _decode(body: bytes) -> Obj:
        try:
            obj = json.loads(body) if body.strip()[:1] in (b"{", b"[") else yaml.safe_load(body)
        except (ValueError, yaml.YAMLError) as e:
            raise bad_request(f"error decoding body: {e}") from e
        if not isinstance(obj, dict):
            raise bad_request("the body of the request must be an object")
        return obj

    @staticmethod
    def _check_kind(rtype: ResourceType, obj: Obj) -> None:
        kind = obj.get("kind")
        if kind and kind != rtype.kind:
            raise bad_request(f"the kind of the object ({kind}) does not match the resource "
                              f"({rtype.plural})")

    def _scale(self, rtype: ResourceType, obj: Obj) -> Obj:
        st = obj.get("status") or {}
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: obj["metadata"][k] for k in
                             ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in obj["metadata"]},
                "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
                "status": {"replicas": st.get("replicas", 0)}}

    def _set_scale(self, rtype: ResourceType, ns: str | None, name: str, replicas: Any,
                   dry: bool) -> Obj:
        if not isinstance(replicas, int) or replicas < 0:
            raise invalid(rtype, name, [("spec.replicas", "FieldValueInvalid",
                                         f"Invalid value: {replicas!r}: must be greater than "
                                         "or equal to 0")])
        obj = self.store.patch(rtype, ns, name, "application/merge-patch+json",
                               {"spec": {"replicas": replicas}}, dry_run=dry)
        return self._scale(rtype, obj)
