"""The referee's probes and its comparison rules: the fake vLLM must answer as the real one does.

Both servers, the real vLLM and the fake one (``tests/sim/fakevllm.py`` served over loopback by
``tests/sim/podhttp.py``), are sent the same requests in the same order by :func:`run_dev_probes`
or :func:`run_nodev_probes`; each answer is reduced by :func:`shape` to what the comparison
looks at, and :func:`compare` lists every difference. The rules, exactly:

- the HTTP status; the ``content-type`` and ``allow`` headers; whether the body is empty;
- a JSON body: its keys and the JSON type of every value, recursively (a list by the set of its
  items' shapes), with exact values for the keys ``success``, ``version`` and ``detail`` and for
  ``error.type``, ``error.code`` and ``error.param``; ``error.message`` by its prefix (the text
  before the first ``:``);
- ``/metrics``: the ``vllm:`` families with their types and label names;
- ``/openapi.json``: the paths with their methods, and the reset routes' parameters (name,
  location, schema type, default);
- the prefix-cache counters: whether ``vllm:prefix_cache_queries`` and
  ``vllm:prefix_cache_hits`` rose after each step of a prompt sent twice, a reset and the prompt
  again (counts differ with the block size; the direction may not);
- a reset while a streamed completion runs: that reset's answer, whether the completion still ran
  to its end, and whether ``vllm:num_preemptions`` rose.

Environment maps (``/server_info``'s ``vllm_env`` and ``system_env``) are objects whose keys are
the server's environment, not a schema: their keys are compared only for the variables both
servers were started with (see :data:`ENV_MAPS`).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "Answer",
    "BOOL_PARAMS",
    "ENV_MAPS",
    "Probes",
    "RESET_ROUTES",
    "compare",
    "metric_families",
    "openapi_shape",
    "prompt_of",
    "request",
    "run_dev_probes",
    "run_nodev_probes",
    "shape",
]

RESET_ROUTES = ("/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache")
"""Every reset route of vLLM 0.32.0 (vllm/entrypoints/serve/dev/cache/api_router.py)."""

BOOL_PARAMS = ("reset_external", "reset_running_requests")
"""The boolean query parameters of ``/reset_prefix_cache`` (vllm/entrypoints/serve/dev/cache/api_router.py)."""

EXACT_KEYS = {"success", "version", "detail"}
ERROR_EXACT_KEYS = {"type", "code", "param"}
ENV_MAPS = {"vllm_env"}
"""Keys of ``/server_info`` whose value is an environment map (variable -> value)."""


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: status, the two compared headers (None when absent), the body."""

    status: int
    content_type: str | None
    allow: str | None
    body: bytes

    def json(self) -> Any:
        """The body as JSON, or None when it is empty or not JSON."""
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None


def request(base: str, method: str, path: str, body: Any = None, timeout: float = 60.0) -> Answer:
    """Send one request to ``base`` (``http://127.0.0.1:PORT``); ``body`` (if not None) is sent
    as JSON. Raises OSError / http.client.HTTPException on network failure."""
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        return Answer(r.status, r.getheader("content-type"), r.getheader("allow"), raw)
    finally:
        conn.close()


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _json_shape(v: Any, key: str | None, parent: str | None, env_keys: frozenset[str]) -> Any:
    if key in EXACT_KEYS or (parent == "error" and key in ERROR_EXACT_KEYS):
        return ["=", v]
    if parent == "error" and key == "message" and isinstance(v, str):
        return ["prefix", v.split(":", 1)[0]]
    if key in ENV_MAPS and isinstance(v, dict):
        return {"{env}": {k: _json_type(v[k]) for k in sorted(env_keys & set(v))}}
    if isinstance(v, dict):
        return {k: _json_shape(v[k], k, key, env_keys) for k in sorted(v)}
    if isinstance(v, list):
        items = {json.dumps(_json_shape(x, None, key, env_keys), sort_keys=True) for x in v}
        return ["[]", sorted(items)]
    return _json_type(v)


def shape(a: Answer, env_keys: Iterable[str] = ()) -> dict[str, Any]:
    """What the comparison sees of one answer (rules in the module docstring); ``env_keys``
    are the environment variables whose presence in an environment map is compared."""
    out: dict[str, Any] = {
        "status": a.status,
        "content-type": a.content_type,
        "allow": a.allow,
        "empty": not a.body,
    }
    doc = a.json()
    if doc is not None:
        out["json"] = _json_shape(doc, None, None, frozenset(env_keys))
    elif a.body:
        out["json"] = "not JSON"
    return out


def metric_families(text: str) -> dict[str, dict[str, Any]]:
    """The ``vllm:`` families of a Prometheus text exposition: name (as the parser names it,
    without ``_total``) -> ``{"type": ..., "labels": sorted label names of its samples}``."""
    out: dict[str, dict[str, Any]] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("vllm:"):
            continue
        labels: set[str] = set()
        for s in fam.samples:
            labels.update(s.labels)
        out[fam.name] = {"type": fam.type, "labels": sorted(labels)}
    return out


def _sums(text: str) -> dict[str, float]:
    """Family name -> the sum over label sets of its plain samples (``_total`` for counters)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in (fam.name, fam.name + "_total"):
                out[fam.name] = out.get(fam.name, 0.0) + s.value
    return out


def openapi_shape(doc: dict[str, Any]) -> dict[str, Any]:
    """``/openapi.json`` reduced to ``{"paths": {path: sorted methods}, "reset_params": {route:
    {name: [in, schema type, default]}}}``."""
    paths = {p: sorted(m.upper() for m in ops) for p, ops in sorted(doc.get("paths", {}).items())}
    params: dict[str, Any] = {}
    for route in RESET_ROUTES:
        op = doc.get("paths", {}).get(route, {}).get("post")
        if op is None:
            continue
        params[route] = {
            p["name"]: [p.get("in"), p.get("schema", {}).get("type"), p.get("schema", {}).get("default")]
            for p in op.get("parameters", [])
        }
    return {"paths": paths, "reset_params": params}


def prompt_of(n_tokens: int, start: int = 0) -> list[int]:
    """A prompt of exactly ``n_tokens`` token ids (``start`` ..., kept clear of the tiny
    model's four special tokens and inside its 1024-token vocabulary), so its length does not
    depend on the tokenizer."""
    return [4 + (start + i) % 1000 for i in range(n_tokens)]


Probes = dict[str, Any]
"""Probe name -> what the comparison sees of it."""


def _reset_queries() -> list[str]:
    """The query strings of the reset matrix: each parameter absent, true, false, and one bogus
    value for each."""
    values = [None, "true", "false"]
    out = []
    for ext in values:
        for run in values:
            parts = []
            if ext is not None:
                parts.append(f"reset_external={ext}")
            if run is not None:
                parts.append(f"reset_running_requests={run}")
            out.append("&".join(parts))
    out += [f"{p}=bogus" for p in BOOL_PARAMS]
    return out


def _metrics_text(base: str) -> str:
    return request(base, "GET", "/metrics").body.decode()


def _stream_with_reset(base: str, query: str, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    """Stream a completion (``ignore_eos``), send ``POST /reset_prefix_cache?query`` after the
    first chunk, read the stream to its end. Returns the reset's shape, ``completed`` (the stream
    ended with ``[DONE]`` after a choice with ``finish_reason`` ``length``) and ``preempted``
    (``vllm:num_preemptions`` rose)."""
    before = _sums(_metrics_text(base)).get("vllm:num_preemptions", 0.0)
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=120)
    try:
        body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                "stream": True, "temperature": 0}
        conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                     headers={"content-type": "application/json"})
        r = conn.getresponse()
        stream_type = r.getheader("content-type")
        first = r.readline()
        while first in (b"\r\n", b"\n"):
            first = r.readline()
        reset = request(base, "POST", "/reset_prefix_cache" + (f"?{query}" if query else ""))
        rest = r.read()
    finally:
        conn.close()
    lines = [ln for ln in (first + rest).decode(errors="replace").splitlines() if ln.startswith("data: ")]
    finish = None
    for ln in lines:
        if ln != "data: [DONE]":
            for ch in json.loads(ln[6:]).get("choices", []):
                finish = ch.get("finish_reason") or finish
    after = _sums(_metrics_text(base)).get("vllm:num_preemptions", 0.0)
    return {
        "stream content-type": stream_type,
        "reset": shape(reset),
        "completed": bool(lines) and lines[-1] == "data: [DONE]" and finish == "length",
        "preempted": after > before,
    }


def _prefix_steps(base: str, prompt: list[int]) -> list[dict[str, bool]]:
    """A prompt, the same prompt again, a reset, the prompt again: per step whether the
    prefix-cache query and hit counters rose."""
    out = []

    def complete() -> None:
        request(base, "POST", "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 1})

    def step(action: Callable[[], Any]) -> None:
        m0 = _sums(_metrics_text(base))
        action()
        m1 = _sums(_metrics_text(base))
        out.append({
            "queries rose": m1.get("vllm:prefix_cache_queries", 0.0) > m0.get("vllm:prefix_cache_queries", 0.0),
            "hits rose": m1.get("vllm:prefix_cache_hits", 0.0) > m0.get("vllm:prefix_cache_hits", 0.0),
        })

    step(complete)
    step(complete)
    step(lambda: request(base, "POST", "/reset_prefix_cache"))
    step(complete)
    return out


def run_dev_probes(base: str, env_keys: Iterable[str]) -> Probes:
    """Every probe of a server with dev mode on, in a fixed order (the running-request probes
    and the counter steps each start from an idle server)."""
    env_keys = list(env_keys)
    p: Probes = {}
    p["GET /version"] = shape(request(base, "GET", "/version"))
    p["GET /health"] = shape(request(base, "GET", "/health"))
    for route in RESET_ROUTES:
        for q in _reset_queries():
            p[f"POST {route}?{q}"] = shape(request(base, "POST", route + (f"?{q}" if q else "")))
        p[f"GET {route}"] = shape(request(base, "GET", route))
    p["reset while running"] = _stream_with_reset(base, "", prompt_of(300, 100), 180)
    p["reset while running, reset_running_requests=true"] = _stream_with_reset(
        base, "reset_running_requests=true", prompt_of(300, 400), 180)
    for q in ("", "?config_format=text", "?config_format=json", "?config_format=yaml"):
        p[f"GET /server_info{q}"] = shape(request(base, "GET", "/server_info" + q), env_keys)
    p["GET /openapi.json"] = openapi_shape(request(base, "GET", "/openapi.json").json() or {})
    m = request(base, "GET", "/metrics")
    p["GET /metrics"] = {"status": m.status, "content-type": m.content_type,
                         "families": metric_families(m.body.decode())}
    p["prefix-cache counters"] = _prefix_steps(base, prompt_of(300, 700))
    return p


def run_nodev_probes(base: str, dev_routes: Iterable[str]) -> Probes:
    """The probes of a server without dev mode: ``/version``, ``/health``, ``/openapi.json`` and
    every dev route (``dev_routes``: path -> its method, from the dev-mode server's openapi)
    with its own method and with GET."""
    p: Probes = {}
    p["GET /version"] = shape(request(base, "GET", "/version"))
    p["GET /health"] = shape(request(base, "GET", "/health"))
    for route in sorted(dev_routes):
        for method in ("GET", "POST"):
            p[f"{method} {route}"] = shape(request(base, method, route))
    p["POST /reset_prefix_cache?reset_external=true"] = shape(
        request(base, "POST", "/reset_prefix_cache?reset_external=true"))
    p["GET /openapi.json"] = openapi_shape(request(base, "GET", "/openapi.json").json() or {})
    return p


def compare(real: Probes, fake: Probes) -> list[str]:
    """Every difference between two probe sets, one line each (``probe: real=... fake=...``);
    a probe missing on one side is a difference too."""
    diffs = []
    for name in sorted(set(real) | set(fake)):
        r, f = real.get(name, "<missing>"), fake.get(name, "<missing>")
        if isinstance(r, dict) and isinstance(f, dict):
            for key in sorted(set(r) | set(f)):
                if r.get(key, "<missing>") != f.get(key, "<missing>"):
                    diffs.extend(_diff(f"{name} [{key}]", r.get(key, "<missing>"), f.get(key, "<missing>")))
        elif r != f:
            diffs.append(f"{name}: real={json.dumps(r, sort_keys=True)} fake={json.dumps(f, sort_keys=True)}")
    return diffs


def _diff(where: str, r: Any, f: Any) -> list[str]:
    if isinstance(r, dict) and isinstance(f, dict):
        out = []
        for k in sorted(set(r) | set(f)):
            if r.get(k, "<missing>") != f.get(k, "<missing>"):
                out.extend(_diff(f"{where}.{k}", r.get(k, "<missing>"), f.get(k, "<missing>")))
        return out
    return [f"{where}: real={json.dumps(r, sort_keys=True)} fake={json.dumps(f, sort_keys=True)}"]


def _cached(base: str, prompt: list[int], salt: Any = None) -> Any:
    body: dict[str, Any] = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0}
    if salt is not None:
        body["cache_salt"] = salt
    a = request(base, "POST", "/v1/completions", body)
    doc = a.json() or {}
    if a.status != 200:
        return shape(a)
    details = (doc.get("usage") or {}).get("prompt_tokens_details")
    return {"cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else details,
            "prompt_tokens": (doc.get("usage") or {}).get("prompt_tokens")}


def _labelled(text: str) -> dict[str, float]:
    """``family`` or ``family{source=...}`` -> the sum of its plain samples over engines."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in (fam.name, fam.name + "_total"):
                key = fam.name + (f"{{source={s.labels['source']}}}" if "source" in s.labels else "")
                out[key] = out.get(key, 0.0) + s.value
    return out


CANARY_COUNTERS = ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries", "vllm:prompt_tokens_cached",
                   "vllm:prompt_tokens_cached_by_source{source=device}", "vllm:external_prefix_cache_hits")
"""The counters whose exact rise around a canary repeat is compared."""


def run_canary_probes(base: str) -> Probes:
    """The salted canary (server started with ``--enable-prompt-tokens-details``): exact
    ``cached_tokens`` of seeds and repeats (block edges, salts, no salt, after a reset), the
    400s for refused salts, the exact rise of the hit counters around one repeat, and the
    ``block_size`` label of ``vllm:cache_config_info``. Exact values: the fake is given the
    real server's block size."""
    p: Probes = {}
    fams = list(text_string_to_metric_families(_metrics_text(base)))
    info = next((f for f in fams if f.name == "vllm:cache_config_info"), None)
    p["cache_config_info block_size"] = info.samples[0].labels.get("block_size") if info and info.samples else None
    for i, n in enumerate((128, 129, 256, 257)):
        prompt = prompt_of(n, 10 + 40 * i)
        p[f"canary {n} tokens"] = [_cached(base, prompt, "kvreset:edge"), _cached(base, prompt, "kvreset:edge")]
    canary = prompt_of(380, 500)
    p["canary seed"] = _cached(base, canary, "kvreset:run1-8000")
    p["canary repeat"] = _cached(base, canary, "kvreset:run1-8000")
    p["canary other salt"] = _cached(base, canary, "kvreset:run2-8000")
    p["canary no salt"] = _cached(base, canary)
    m0 = _labelled(_metrics_text(base))
    p["canary repeat again"] = _cached(base, canary, "kvreset:run1-8000")
    m1 = _labelled(_metrics_text(base))
    p["canary counters rose by"] = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in CANARY_COUNTERS}
    for salt in ("kvreset/x", "kvreset@x", "a\\b", "x" * 129, "", 7):
        p[f"canary salt {salt!r:.20}"] = _cached(base, prompt_of(300, 900), salt)
    p["canary reset"] = shape(request(base, "POST", "/reset_prefix_cache?reset_external=true"))
    p["canary after reset"] = [_cached(base, canary, "kvreset:run1-8000"), _cached(base, canary)]
    p["canary after the probe"] = _cached(base, canary, "kvreset:run1-8000")
    return p
