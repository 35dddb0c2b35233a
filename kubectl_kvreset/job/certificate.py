"""``clear --certificate FILE``: one JSON document of a clear run for a benchmark's records.

It says when the run ended (UTC), where (context, cluster, API server without credentials,
namespace), the plugin version and options, and per pod, container and API port: the steps
run, each tier's state, the row's result and the proof: ``canary`` (per engine the positive
control and every probe with its counters, from ``--verify``) or only the server's ``answer``
(the row's message). The store step's rows follow. The shape is
``kubectl_kvreset/schemas/certificate.schema.json`` (JSON Schema 2020-12), shipped in the
package; :func:`schema` reads it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from .. import __version__
from ..redact import redact_url, redact_value
from .planning import ClearOptions
from .scope import Scope

__all__ = ["build_certificate", "schema", "write_certificate"]

_TIERS = ("gpu", "cpu", "fs", "shared")
_STORE_KEYS = ("namespace", "store", "address", "resolved", "scope", "model", "method", "before", "after", "unit",
               "result", "message")


def schema() -> dict[str, Any]:
    """The certificate's JSON Schema (the file shipped in the package)."""
    text = resources.files("kubectl_kvreset").joinpath("schemas/certificate.schema.json").read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def _target(row: Mapping[str, Any], verified: bool) -> dict[str, Any]:
    tiers = []
    for kind in _TIERS:
        cell = row.get(kind)
        if cell:
            tiers += [{"tier": kind, "state": st} for st in str(cell).split(",")]
    proof: dict[str, Any] = ({"method": "canary", "engines": list(row.get("proof") or [])} if verified
                             else {"method": "answer", "answer": row.get("message")})
    return {"namespace": row.get("namespace") or "", "pod": row["pod"], "container": row.get("container") or "",
            "engine": row.get("engine") or "vllm", "port": row.get("port"), "owner": row.get("owner") or "",
            "role": row.get("role"),
            "version": row.get("version"), "steps": list(row.get("steps") or []), "tiers": tiers,
            "result": row.get("result") or "", "verify": row.get("verify"), "message": row.get("message"),
            "proof": proof}


def _overall(rows: Sequence[Mapping[str, Any]], verified: bool) -> str:
    if not verified:
        return "unverified"
    states = [str(e.get("result")) for r in rows for e in r.get("proof") or []]
    for state in ("warm", "busy", "not verifiable"):
        if state in states:
            return state
    return "cold" if states else "not verifiable"


def build_certificate(scope: Scope, options: ClearOptions, reset_rows: Sequence[Mapping[str, Any]],
                      store_rows: Sequence[Mapping[str, Any]], exit_code: int,
                      now: _dt.datetime | None = None) -> dict[str, Any]:
    """The certificate of one run (module docstring) from its ``CacheReset`` rows (skipped
    containers left out) and ``StoreClear`` rows; secrets are masked as in every output."""
    verified = options.verify
    rows = [r for r in reset_rows if r.get("result") != "skipped"]
    kube = scope.kube
    when = (now or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
    doc = {
        "kind": "KvResetCertificate", "version": 1,
        "created": when.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "plugin": {"name": "kubectl-kvreset", "version": __version__},
        "where": {"context": getattr(kube, "context", None), "cluster": getattr(kube, "cluster", None),
                  "server": redact_url(str(kube.host)) if getattr(kube, "host", None) else None,
                  "namespace": scope.namespace},
        "options": {"verify": verified, "preempt_running": options.preempt_running, "fallback": options.fallback,
                    "wait_idle_s": float(options.wait_idle_s), "shared_stores": options.shared_stores},
        "result": _overall(rows, verified), "exit_code": int(exit_code),
        "targets": [_target(r, verified) for r in rows],
        "stores": [{k: r.get(k) for k in _STORE_KEYS} for r in store_rows if r.get("kind") == "StoreClear"],
    }
    masked: dict[str, Any] = redact_value(doc)
    return masked


def write_certificate(path: str, doc: Mapping[str, Any]) -> None:
    """Write ``doc`` to ``path`` as indented JSON, atomically (a temporary file in the same
    directory, then renamed). Raises OSError when the directory cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".kvreset-certificate-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
