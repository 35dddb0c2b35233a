"""What a running vLLM says about itself: its build (``GET /version``, ``GET /openapi.json``) and
its live KV configuration (``GET /server_info?config_format=json``), read against the pod spec.
Pure: no I/O.

Sources: ``/server_info`` (a dev-mode route) takes ``config_format=text|json`` from vLLM 0.11.0;
in JSON form ``vllm_config`` is an object whose ``kv_transfer_config`` is the connector object
the server really runs with (null without one); ``vllm_env`` and ``system_env`` come from 0.14.0
(``vllm/entrypoints/serve/dev/server_info/api_router.py``, checked on the 0.32.0 CPU build by
``tests/referee/test_referee.py``). Only ``vllm_config.kv_transfer_config`` is read
here; ``vllm_env`` and ``system_env`` are never kept, and anything in the connector object
named like a secret is replaced by ``<redacted>`` before it can reach a row, a note or a log.

A build is *unknown* when its version does not parse, is ``dev`` (``vllm/version.py``'s fallback),
is a release below 0.7 (before ``/version`` existed in the checked releases), or ``/version``
did not answer; its reset routes and parameters are then read from ``/openapi.json``. A version
with a dev or local suffix (``0.23.1.dev42+gabc``) is compared by its release (``0.23.1``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from ...tiers import KVLayout, Tier
from ..base import LiveConfig as LiveConfig
from .kvconfig import layout_from_config, mark_unevaluated

#: The first release whose ``/version`` answer was checked in vLLM's sources; below it a build counts as unknown.
KNOWN_SINCE = Version("0.7.0")
#: ``/server_info`` takes ``config_format`` from this release
#: (``vllm/entrypoints/serve/dev/server_info/api_router.py``).
CONFIG_FORMAT_SINCE = Version("0.11.0")
#: The reset routes this tool may call, in the order it calls them.
RESET_ROUTES = ("/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache")
#: Names that may hold a secret (``VLLM_API_KEY``, ``HF_TOKEN``, ``password``, ``aws_secret``...).
SECRET_NAME = re.compile(r"key|token|secret|passw|credential|auth|cookie|signature", re.I)
_URL_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]*@", re.I)
REDACTED = "<redacted>"


def release_version(text: str | None) -> Version | None:
    """The release a version string names, for comparison (``"0.23.1.dev42+gabc"`` ->
    ``0.23.1``; ``"v0.26.0"`` -> ``0.26.0``), or None for an unknown build (does not parse,
    ``dev``, below :data:`KNOWN_SINCE`, no text)."""
    if not text:
        return None
    try:
        parsed = Version(text.strip().lstrip("v"))
    except InvalidVersion:
        return None
    release = Version(".".join(str(n) for n in parsed.release))
    return release if release >= KNOWN_SINCE else None


def redact(value: Any) -> Any:
    """A copy of a JSON value with every mapping entry whose key looks like a secret
    (:data:`SECRET_NAME`) replaced by ``<redacted>``, and the user and password of any URL in a
    string removed (``redis://:pw@host`` -> ``redis://<redacted>@host``)."""
    if isinstance(value, Mapping):
        return {k: (REDACTED if SECRET_NAME.search(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return _URL_USERINFO.sub(lambda m: m.group("scheme") + REDACTED + "@", value)
    return value


def read_server_info(body: bytes) -> LiveConfig:
    """Read the body of ``GET /server_info?config_format=json``. Never raises: a body that is
    not JSON, or whose ``vllm_config`` is not an object, gives ``readable=False``.
    ``vllm_env`` and ``system_env`` are not looked at."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return LiveConfig(False, None)
    cfg = doc.get("vllm_config") if isinstance(doc, dict) else None
    if not isinstance(cfg, dict):
        return LiveConfig(False, None)
    ktc = cfg.get("kv_transfer_config")
    model_cfg = cfg.get("model_config")
    model = model_cfg.get("model") if isinstance(model_cfg, dict) else None
    return LiveConfig(True, redact(ktc) if isinstance(ktc, dict) and ktc.get("kv_connector") else None,
                      model if isinstance(model, str) and model else None)


def _tier_text(t: Tier) -> str:
    where = t.root_dir or t.store or t.spec
    return f"{t.kind.value}({t.connector}{', ' + where if where else ''})" if t.connector else t.kind.value


def describe_layout(layout: KVLayout) -> str:
    """``connectors A, B; tiers gpu, cpu(OffloadingConnector, CPUOffloadingSpec)`` for a note."""
    conns = ", ".join(layout.connectors) or "none"
    return f"connectors {conns}; tiers {', '.join(_tier_text(t) for t in layout.tiers)}"


def reconcile(spec: KVLayout, live: LiveConfig, env: Mapping[str, str] | None = None,
              unevaluated: Sequence[tuple[str, str]] = ()) -> tuple[KVLayout, str | None]:
    """The layout to act on and a note when the running server disagrees with the spec.

    The live answer wins: its ``kv_transfer_config`` already includes what
    ``--kv-offloading-size``, a ``--config`` file or an image default set. ``env`` is the pod's
    environment (LMCache reads ``LMCACHE_*`` from it); ``unevaluated`` the constructs the
    command line's reader left as written (``ServeConfig.unevaluated``): an FS root still
    holding one, e.g. an LMCache ``local_disk`` from the spec's env, is marked
    (:func:`~kubectl_kvreset.engines.vllm.kvconfig.mark_unevaluated`). An unreadable answer keeps the spec's
    layout with no note.
    """
    if not live.readable:
        return spec, None
    found = mark_unevaluated(layout_from_config(live.kv_transfer_config, env=env or {}), unevaluated, env)
    # a tier read from a file in the pod (LMCACHE_CONFIG_FILE) is not in /server_info's config:
    # the running LMCache still reads that file, unless the live config names its own disk
    kept = [t for t in spec.tiers if t.from_file is not None and t.connector in found.connectors
            and not any(f.tier_type == t.tier_type for f in found.tiers)]
    if kept:
        found = KVLayout(connectors=found.connectors, tiers=(*found.tiers, *kept), kv_role=found.kv_role,
                         notes=tuple(n for n in found.notes if "were not read" not in n))
    if found.connectors == spec.connectors and set(found.tiers) == set(spec.tiers):
        return spec, None
    note = (f"the running server reports {describe_layout(found)}, the pod spec shows "
            f"{describe_layout(spec)}: the server's configuration is used")
    return found, note


@dataclass(frozen=True)
class RouteSet:
    """What ``/openapi.json`` says about the reset routes of a server.

    Attributes:
        routes: the reset routes it serves (a POST operation), in :data:`RESET_ROUTES` order.
        params: the query parameters of ``/reset_prefix_cache`` (``reset_external``,
            ``reset_running_requests``).
    """

    routes: tuple[str, ...]
    params: frozenset[str]


def read_openapi(body: bytes) -> RouteSet | None:
    """The reset routes and ``/reset_prefix_cache`` parameters of an ``/openapi.json`` body
    (FastAPI's document: ``paths`` -> ``{path: {"post": {"parameters": [{"name": ...}]}}}``),
    or None when the body is not such a document."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    paths = doc.get("paths") if isinstance(doc, dict) else None
    if not isinstance(paths, dict):
        return None
    routes = tuple(r for r in RESET_ROUTES if isinstance(paths.get(r), dict) and "post" in paths[r])
    post = (paths.get("/reset_prefix_cache") or {}).get("post") or {}
    params = frozenset(str(p.get("name")) for p in post.get("parameters") or []
                       if isinstance(p, dict) and p.get("in", "query") == "query")
    return RouteSet(routes, params)
