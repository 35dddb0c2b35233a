"""Faults the simulator can inject, switched on per test by the scenario file.

Three families (the scenario keys are documented in tests/sim/README.md, "Faults"):

- **API server faults** (``faults.api``): rules matched against every resource request after
  it is counted in ``api_requests`` (so a faulted request still counts), each answering a
  ``Status`` with a chosen code (429 ``TooManyRequests`` with ``Retry-After``, 500
  ``InternalError``...), delaying the answer, or closing the connection without an answer.
- **vLLM faults** (``faults.vllm``): a seeded share of the (pod, port, path) triples reached
  through the pod proxy fail their first call(s), with vLLM's own 500 or with the connection
  closed by vLLM (the API server then answers 503 ``error trying to reach service: EOF``).
- **Per-pod faults** (keys of a ``pods:`` rule the simulator consumes itself, see
  :data:`POD_FAULT_KEYS`): delete the pod on its first reset call, refuse connections for a
  while (Ready False meanwhile), never answer, cut exec streams short, cut port-forward
  streams after so many bytes.

Token expiry lives in the server (``SimServer.token_uses``); scenario users may carry a
``token_ttl``. Everything here is thread-safe and seeded (``faults.seed``), so a run is
repeatable for a given order of requests.
"""

from __future__ import annotations

import hashlib
import random
import threading
from dataclasses import dataclass, field
from typing import Any

#: Keys of a ``pods:`` rule that are simulator faults (not passed to the pod runtime).
POD_FAULT_KEYS = {"delete_on_first_reset", "down_for", "down_at", "hang", "exec_cut", "portforward_cut"}
#: Values of ``exec_cut``: ``before`` closes the stream right after the upgrade (nothing runs),
#: ``after`` runs the command and sends its output, then closes without the exit status.
EXEC_CUT_MODES = {"before", "after"}
DOWN_AT = {"first_call", "first_reset"}
VLLM_MODES = {"error", "drop"}


class FaultError(ValueError):
    """A ``faults`` section or a pod fault key is malformed (the message names the key)."""


def _reason(code: int) -> str:
    return {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
            409: "Conflict", 429: "TooManyRequests", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout"}.get(code, "Unknown")


def _message(code: int) -> str:
    # the texts a v1.32 API server sends for these (apiserver filters / apimachinery errors)
    if code == 429:
        return "Too many requests, please try again later."
    if code == 500:
        return "Internal error occurred: simulated fault"
    if code == 503:
        return "the server is currently unable to handle the request"
    if code == 504:
        return "Timeout: request did not complete within the allotted timeout"
    return f"simulated fault ({code})"


@dataclass
class ApiFaultRule:
    """One ``faults.api`` rule.

    Match (None = any): ``verb`` as ``api_requests`` names it (``get``, ``list``, ``create``,
    ``patch``...), ``resource`` (``pods``, ``pods/proxy``, ``deployments``...), ``namespace``,
    ``name``, ``user``. Selection among matching requests: the ``first`` N, else a seeded
    ``fraction`` (0..1), else every one. Action: ``delay_ms`` (sleep, then go on), then
    ``drop`` (close the connection, no answer) or ``status`` (a ``Status`` with that code,
    ``Retry-After: retry_after`` seconds when given; ``message`` overrides the text), else
    the request is served normally (a slow answer). ``fired`` counts the requests it hit.
    """

    verb: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None
    user: str | None = None
    first: int | None = None
    fraction: float | None = None
    status: int | None = None
    retry_after: float | None = None
    delay_ms: int = 0
    drop: bool = False
    message: str | None = None
    seen: int = 0
    fired: int = 0

    def matches(self, verb: str, resource: str, namespace: str | None, name: str, user: str) -> bool:
        """True when the request's facts fit every key this rule sets."""
        return all(want is None or want == got for want, got in (
            (self.verb, verb), (self.resource, resource), (self.namespace, namespace),
            (self.name, name), (self.user, user)))

    def status_body(self) -> dict[str, Any]:
        """The ``Status`` object the rule answers (``status`` must be set)."""
        assert self.status is not None
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "message": self.message or _message(self.status),
                                "reason": _reason(self.status), "code": self.status}
        if self.status == 429 and self.retry_after is not None:
            body["details"] = {"retryAfterSeconds": int(self.retry_after)}
        return body


@dataclass(frozen=True)
class ApiFaultAction:
    """What to do with one request: sleep ``delay_s``, then ``drop`` the connection, answer
    ``status`` (``body``, ``headers``), or serve it (both None/False)."""

    delay_s: float = 0.0
    drop: bool = False
    status: int | None = None
    body: dict[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class VllmFaults:
    """``faults.vllm``: each (namespace, pod, port, path) is picked with probability
    ``fraction`` (seeded hash, so the pick does not depend on request order) and its first
    ``times`` calls fail: ``mode`` ``error`` answers vLLM's own 500, ``drop`` closes the
    connection without an answer. ``paths`` limits it to those vLLM paths (None: every path)."""

    fraction: float = 0.0
    times: int = 1
    mode: str = "error"
    paths: tuple[str, ...] | None = None
    seed: int = 0
    calls: dict[tuple[str, str, int, str], int] = field(default_factory=dict)
    failed: int = 0

    def picked(self, namespace: str, pod: str, port: int, path: str) -> bool:
        """Whether this triple is one of the faulty ones (deterministic for a seed)."""
        if self.paths is not None and path.rstrip("/") not in self.paths:
            return False
        digest = hashlib.sha256(f"{self.seed}/{namespace}/{pod}/{port}/{path}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.fraction


class Faults:
    """The fault state of one simulator run (built by :func:`parse_faults`)."""

    def __init__(self, api: list[ApiFaultRule] | None = None, vllm: VllmFaults | None = None,
                 seed: int = 0) -> None:
        self.api = list(api or [])
        self.vllm = vllm
        self.seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def api_action(self, verb: str, resource: str, namespace: str | None, name: str,
                   user: str) -> ApiFaultAction | None:
        """The action of the first rule that fires for this request, or None. Admin requests
        to ``/sim/v1`` never reach here (the test harness must see the truth)."""
        with self._lock:
            for rule in self.api:
                if not rule.matches(verb, resource, namespace, name, user):
                    continue
                rule.seen += 1
                if rule.first is not None:
                    fire = rule.seen <= rule.first
                elif rule.fraction is not None:
                    fire = self._rng.random() < rule.fraction
                else:
                    fire = True
                if not fire:
                    continue
                rule.fired += 1
                headers: tuple[tuple[str, str], ...] = ()
                if rule.retry_after is not None:
                    headers = (("Retry-After", f"{rule.retry_after:g}"),)
                return ApiFaultAction(
                    delay_s=rule.delay_ms / 1000.0, drop=rule.drop, status=rule.status,
                    body=rule.status_body() if rule.status is not None and not rule.drop else None,
                    headers=headers)
        return None

    def vllm_action(self, namespace: str, pod: str, port: int, path: str) -> str | None:
        """``"error"``/``"drop"`` when this proxied vLLM call must fail, else None."""
        v = self.vllm
        if v is None or v.fraction <= 0 or not v.picked(namespace, pod, port, path):
            return None
        key = (namespace, pod, port, path.rstrip("/") or "/")
        with self._lock:
            n = v.calls.get(key, 0)
            v.calls[key] = n + 1
            if n >= v.times:
                return None
            v.failed += 1
        return v.mode

    def state(self) -> dict[str, Any]:
        """For ``/sim/v1/state``: ``api`` (per rule, in order: ``{"matched", "fired"}``) and
        ``vllm_failed`` (calls failed by ``faults.vllm``)."""
        with self._lock:
            return {"api": [{"matched": r.seen, "fired": r.fired} for r in self.api],
                    "vllm_failed": self.vllm.failed if self.vllm else 0}


_API_KEYS = {"verb", "resource", "namespace", "name", "user", "first", "fraction", "status",
             "retry_after", "delay_ms", "drop", "message"}


def _num(where: str, value: Any, *, lo: float = 0.0, hi: float | None = None,
         integer: bool = False) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or value < lo or (hi is not None and value > hi):
        kind = "an integer" if integer else "a number"
        raise FaultError(f"{where} must be {kind} >= {lo:g}" + (f" and <= {hi:g}" if hi is not None else ""))
    return value


def parse_faults(data: Any) -> Faults:
    """Build :class:`Faults` from the scenario's ``faults`` mapping (None/{} = no faults).

    Keys: ``seed`` (int), ``api`` (list of rules, :class:`ApiFaultRule`), ``vllm``
    (:class:`VllmFaults` keys ``fraction``, ``times``, ``mode``, ``paths``).
    Raises :class:`FaultError` naming the bad key.
    """
    if data is None:
        return Faults()
    if not isinstance(data, dict):
        raise FaultError("faults must be a mapping")
    unknown = set(data) - {"seed", "api", "vllm"}
    if unknown:
        raise FaultError(f"faults: unknown keys {sorted(unknown)}")
    seed = _num("faults.seed", data.get("seed", 0), integer=True)
    rules: list[ApiFaultRule] = []
    api = data.get("api") or []
    if not isinstance(api, list):
        raise FaultError("faults.api must be a list of rules")
    for i, r in enumerate(api):
        where = f"faults.api[{i}]"
        if not isinstance(r, dict):
            raise FaultError(f"{where} must be a mapping")
        bad = set(r) - _API_KEYS
        if bad:
            raise FaultError(f"{where}: unknown keys {sorted(bad)}")
        rule = ApiFaultRule(
            verb=r.get("verb"), resource=r.get("resource"), namespace=r.get("namespace"),
            name=r.get("name"), user=r.get("user"),
            first=_num(f"{where}.first", r["first"], integer=True) if "first" in r else None,
            fraction=_num(f"{where}.fraction", r["fraction"], hi=1.0) if "fraction" in r else None,
            status=_num(f"{where}.status", r["status"], lo=400, hi=599, integer=True) if "status" in r else None,
            retry_after=_num(f"{where}.retry_after", r["retry_after"]) if "retry_after" in r else None,
            delay_ms=_num(f"{where}.delay_ms", r.get("delay_ms", 0), integer=True),
            drop=bool(r.get("drop", False)), message=r.get("message"))
        if rule.status is None and not rule.drop and not rule.delay_ms:
            raise FaultError(f"{where} needs status, drop or delay_ms")
        rules.append(rule)
    vllm: VllmFaults | None = None
    v = data.get("vllm")
    if v is not None:
        if not isinstance(v, dict):
            raise FaultError("faults.vllm must be a mapping")
        bad = set(v) - {"fraction", "times", "mode", "paths"}
        if bad:
            raise FaultError(f"faults.vllm: unknown keys {sorted(bad)}")
        mode = v.get("mode", "error")
        if mode not in VLLM_MODES:
            raise FaultError(f"faults.vllm.mode must be one of {sorted(VLLM_MODES)}")
        paths = v.get("paths")
        if paths is not None and (not isinstance(paths, list) or not all(isinstance(p, str) for p in paths)):
            raise FaultError("faults.vllm.paths must be a list of paths")
        vllm = VllmFaults(fraction=_num("faults.vllm.fraction", v.get("fraction", 0.0), hi=1.0),
                          times=_num("faults.vllm.times", v.get("times", 1), lo=1, integer=True),
                          mode=mode, paths=tuple(p.rstrip("/") for p in paths) if paths else None,
                          seed=seed)
    return Faults(rules, vllm, seed)


def check_pod_faults(where: str, rule: dict[str, Any]) -> dict[str, Any]:
    """The per-pod fault keys of a ``pods:`` rule, checked. Raises :class:`FaultError`."""
    out = {k: rule[k] for k in POD_FAULT_KEYS if k in rule}
    if "down_for" in out:
        _num(f"{where}.down_for", out["down_for"])
    if "down_at" in out and out["down_at"] not in DOWN_AT:
        raise FaultError(f"{where}.down_at must be one of {sorted(DOWN_AT)}")
    if "exec_cut" in out and out["exec_cut"] not in EXEC_CUT_MODES:
        raise FaultError(f"{where}.exec_cut must be one of {sorted(EXEC_CUT_MODES)}")
    if "portforward_cut" in out:
        _num(f"{where}.portforward_cut", out["portforward_cut"], lo=1, integer=True)
    hang = out.get("hang")
    if hang is not None and not isinstance(hang, bool) and not (
            isinstance(hang, list) and all(isinstance(p, str) for p in hang)):
        raise FaultError(f"{where}.hang must be true or a list of vLLM paths")
    return out


def hangs(hang: Any, path: str) -> bool:
    """Whether a pod's ``hang`` setting (True or a list of paths) covers ``path``."""
    if hang is True:
        return True
    if isinstance(hang, list):
        return path.rstrip("/") in {p.rstrip("/") for p in hang}
    return False
