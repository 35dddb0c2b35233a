"""``clear --verify``: each server shows that what it held is gone, per API port and engine.

Before the job, every targeted API port's engines (the ``engine`` labels of ``GET /metrics``;
a data-parallel rank is pinned with vLLM's ``X-data-parallel-rank`` header) are sent a salted
**canary**: a completion of ``2 * block + 1`` token ids (the block size is the ``block_size``
label of ``vllm:cache_config_info``), ``max_tokens=1``, a ``cache_salt`` unique to the run, pod,
port, engine and probe point. The **positive control** sends it again: it must show a hit,
else that engine is ``not verifiable`` (prefix caching off, counters unreadable), never
``cold``. After each step of the job (the API resets, clear-fs, a restart or dev-mode rollout:
a replaced pod is probed in its successors, the store step) the canary of that point is sent
once more: the **probe**. A probe that misses caches the canary again, so each point has its
own canary, seeded before the job, and a last reset, sent right after the port's last probe,
removes the canaries' own blocks (its answer is kept; it is not itself probed). The scrape
before the seeds is the control's baseline: a seed's fresh salt adds no hit.

The measurement is ``usage.prompt_tokens_details.cached_tokens`` where the server returns it
(``--enable-prompt-tokens-details``), else the engine's deltas of ``vllm:prefix_cache_hits``
and ``vllm:external_prefix_cache_hits`` around the probe; ``vllm:prompt_tokens_cached_by_source``
splits them by source (:data:`~kubectl_kvreset.engines.vllm.canary.SOURCE_TIERS`). The counters rise by
exactly ``cached_tokens`` (seen on vLLM 0.32.0's CPU build); a queries delta larger than the
probe's prompt means other requests reached the engine and is noted.

Never writes to stderr; the HTTP goes through :mod:`kubectl_kvreset.podapi`.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from ..engines import DEFAULT_ENGINE, Engine, engine_named
from ..engines.vllm.api import MetricsParseError, read_reset_answer
from ..engines.vllm.canary import (
    SOURCE_TIERS,
    CacheCounters,
    cache_counters,
    cached_tokens,
    canary_body,
    canary_tokens,
    valid_salt,
)
from ..kube import HttpAnswer
from ..plan import STEP_API_RESET, STEP_CLEAR_FS, STEP_DEVMODE, STEP_RESTART
from ..podapi import PodCaller, PodRef, fetch_metrics, post_json, reset
from ..pods import ApiPort, VllmPod
from ..pool import Cancel, parallel

if TYPE_CHECKING:
    from .planning import Plan, PodPlan

__all__ = ["EngineProof", "Reading", "Verifier", "planned_steps", "probe_points", "verdict", "verifier_for",
           "verify_codes"]

#: What to do about a tier a probe found warm, by the tier the source names.
WARM_REMEDIES = {
    "gpu": "a busy engine kept its blocks: --preempt-running, --wait-idle, or --fallback=restart",
    "cpu": "this release's reset leaves the CPU offload tier: --fallback=restart",
    "fs": "kubectl kvreset clear-fs (--whole-tier where other pods share the volume)",
    "shared": "kubectl kvreset clear-store (--shared-stores where other pods use the store)",
    "unknown": "kubectl kvreset clear again, or --fallback=restart",
}


@dataclass(frozen=True)
class Reading:
    """One canary request and what it showed: the ``point`` (``seed``, ``control``,
    ``api-reset``, ``clear-fs``, ``rollout``, ``store``), the ``pod`` it was sent to,
    ``cached`` tokens (None: not measurable, ``error`` says why), ``sources`` (source ->
    tokens), ``method`` (``cached_tokens`` or ``counters``), the engine's counter deltas
    around it (``hits``, ``external_hits``, ``queries``; None where unread) and a ``note``."""

    point: str
    pod: str
    cached: int | None
    sources: Mapping[str, int] = field(default_factory=dict)
    method: str | None = None
    hits: float | None = None
    external_hits: float | None = None
    queries: float | None = None
    note: str | None = None
    error: str | None = None

    @property
    def found(self) -> str:
        """What this reading alone shows: ``cold``, ``warm: N cached tokens from SOURCE`` or
        ``not read: WHY``."""
        if self.cached is None:
            return f"not read: {self.error}"
        return "cold" if self.cached == 0 else f"warm: {self.cached} cached tokens from {source_text(self.sources)}"

    def as_dict(self) -> dict[str, object]:
        """The reading for the JSON row and the certificate (``found``: :attr:`found`)."""
        return {"point": self.point, "pod": self.pod, "found": self.found, "cached_tokens": self.cached,
                "sources": dict(self.sources),
                "method": self.method, "counters": {"prefix_cache_hits": self.hits,
                                                    "external_prefix_cache_hits": self.external_hits,
                                                    "prefix_cache_queries": self.queries},
                "note": self.note, "error": self.error}


@dataclass
class EngineProof:
    """The canary of one pod, container, API port and ``engine`` (its label; ``""`` for a
    server without engine labels): ``block_size``, ``model``, the ``salts`` per point, the
    ``control`` reading, the ``probes`` after the steps, the ``final_reset`` answer,
    ``unverifiable`` (why no proof is possible; None when it is) and ``busy`` (why this
    engine's reset did not succeed; None when it did or was not refused as busy)."""

    namespace: str
    pod: str
    container: str
    port: int
    engine: str
    block_size: int | None = None
    model: str | None = None
    salts: dict[str, str] = field(default_factory=dict)
    control: Reading | None = None
    probes: list[Reading] = field(default_factory=list)
    final_reset: str | None = None
    unverifiable: str | None = None
    busy: str | None = None

    @property
    def key(self) -> tuple[str, str, str, int]:
        """``(namespace, pod, container, port)``: the row it belongs to."""
        return (self.namespace, self.pod, self.container, self.port)

    def as_dict(self) -> dict[str, object]:
        """The proof for the JSON row and the certificate."""
        state, text = verdict(self)
        return {"engine": self.engine, "result": state, "verify": text, "block_size": self.block_size,
                "canary_tokens": 2 * self.block_size + 1 if self.block_size else None,
                "control": self.control.as_dict() if self.control else None,
                "probes": [r.as_dict() for r in self.probes], "final_reset": self.final_reset}


def verdict(proof: EngineProof) -> tuple[str, str]:
    """``(state, text)`` of one engine: ``cold``, ``warm`` (``warm: N cached tokens from
    SOURCE``, with the step it was found after), ``busy`` or ``not verifiable: WHY``. The last
    probe decides: it follows every step. An engine whose reset did not succeed (``busy``: its
    running requests held blocks) is never ``cold``: a canary that missed there may have been
    evicted, while what the running requests cached stays; a hit is still ``warm``."""
    if proof.unverifiable is not None:
        return "not verifiable", f"not verifiable: {proof.unverifiable}"
    if not proof.probes:
        return "not verifiable", "not verifiable: no probe ran"
    last = proof.probes[-1]
    if last.cached is None:
        return "not verifiable", f"not verifiable: the probe after {last.point} could not be read ({last.error})"
    if last.cached == 0:
        if proof.busy is not None:
            return "busy", f"busy: {proof.busy}"
        return "cold", "cold"
    return "warm", last.found


def source_text(sources: Mapping[str, int]) -> str:
    """``device``, ``host (128) and disk (128)``: where the cached tokens came from."""
    hit = {k: v for k, v in sources.items() if v > 0}
    if not hit:
        return "an unknown source"
    if len(hit) == 1:
        return next(iter(hit))
    return " and ".join(f"{k} ({v})" for k, v in hit.items())


def warm_tiers(proof: EngineProof, connector_tiers: Sequence[str] = ()) -> list[str]:
    """The tier kinds (``gpu``, ``cpu``, ``fs``, ``shared``; ``unknown``) the last probe found
    warm. A release without the split by source counts connector hits as ``external`` only:
    where the pod has one connector tier (``connector_tiers``: its kinds other than ``gpu``),
    that is the tier; with several, each is named."""
    if not proof.probes or not proof.probes[-1].cached:
        return []
    kinds: list[str] = []
    for src, n in proof.probes[-1].sources.items():
        if n <= 0:
            continue
        if src == "external" and connector_tiers:
            kinds += list(connector_tiers)
        else:
            kinds.append(SOURCE_TIERS.get(src, "unknown"))
    return list(dict.fromkeys(kinds)) or ["unknown"]


@dataclass(frozen=True)
class _Target:
    pod: VllmPod
    port: ApiPort
    query: tuple[tuple[str, str], ...]
    points: tuple[str, ...]


def probe_points(p: PodPlan, fallback: str, *, store: bool) -> tuple[str, ...]:
    """The probe points of one pod's plan, in order: ``api-reset``, ``clear-fs``, ``rollout``
    (where a restart or dev-mode rollout may replace it: its step, or ``fallback`` ``restart`` /
    ``devmode``, which a 404 may call for), ``store`` when ``store`` (the run has a store step)."""
    may_roll = fallback in ("restart", "devmode")
    return tuple(pt for pt, on in (("api-reset", p.has(STEP_API_RESET)), ("clear-fs", p.has(STEP_CLEAR_FS)),
                                   ("rollout", p.has(STEP_RESTART) or p.has(STEP_DEVMODE) or may_roll),
                                   ("store", store)) if on)


def planned_steps(p: PodPlan, fallback: str, *, store: bool) -> list[dict[str, object]]:
    """What ``--verify`` will do on each API port of one pod's plan, for ``--dry-run``: per port
    ``{"port": N, "steps": [...]}``, the steps ``seed ...``, ``control ...``, one ``probe after
    POINT`` per point (:func:`probe_points`) and ``final reset ...`` (the job's own query).
    Empty for a pod that does not run (nothing is sent to it)."""
    if p.not_running is not None:
        return []
    points = probe_points(p, fallback, store=store)
    query = "?" + urlencode(p.query) if p.query else ""
    steps = [f"seed: a salted canary of 2 x block + 1 tokens per engine for each probe point ({', '.join(points)})",
             f"control: the {points[0] if points else 'first'} canary again, must hit 2 blocks",
             *[f"probe after {pt}" for pt in points],
             f"final reset: POST {_engine(p.pod).reset_route}{query} (removes the canaries' blocks)"]
    return [{"port": port.port, "steps": steps} for port in p.pod.ports]


def verify_codes(value: object) -> object:
    """The table's short form of :func:`planned_steps`: ``8000: seed,control,probe:api-reset,
    final-reset`` per port (``;`` between ports); anything else unchanged."""
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        return value
    out = []
    for v in value:
        codes = []
        for step in v.get("steps") or []:
            text = str(step)
            codes.append("probe:" + text[len("probe after "):] if text.startswith("probe after ")
                         else text.split(":", 1)[0].replace(" ", "-"))
        out.append(f"{v.get('port')}: {','.join(codes)}")
    return "; ".join(out)


def _engine(pod: VllmPod) -> Engine:
    """The pod's engine (vLLM's for a pod model built without one)."""
    return getattr(pod, "engine", None) or engine_named(DEFAULT_ENGINE)


def verifier_for(plan: Plan, cancel: Cancel | None = None, *, store: bool = False) -> Verifier:
    """The :class:`Verifier` of a plan: every API port of every targeted pod that runs, with
    the probe points its steps give (:func:`probe_points`)."""
    targets = []
    for p in plan.pods:
        if p.not_running is not None:
            continue
        points = probe_points(p, plan.options.fallback, store=store)
        for port in p.pod.ports:
            targets.append((p.pod, port, p.query, points))
    return Verifier(plan.scope.caller, targets, max_concurrency=plan.options.max_concurrency, cancel=cancel)


class Verifier:
    """The canaries of one run (see the module docstring).

    Args:
        caller: reaches the pods (the scope's :class:`~kubectl_kvreset.podapi.PodCaller`).
        targets: ``(pod, port, reset query, points)`` per targeted API port: the query is the
            one the job's reset sends (so the last reset asks no more than the job did), the
            points are the probes after the seed, in order (``api-reset``, ``clear-fs``,
            ``rollout``, ``store``): one canary each.
        max_concurrency: ports worked on at once. ``cancel``: stops new work.
        run_id: makes the salts unique to the run (random when None).
    """

    def __init__(self, caller: PodCaller,
                 targets: Sequence[tuple[VllmPod, ApiPort, tuple[tuple[str, str], ...], tuple[str, ...]]], *,
                 max_concurrency: int = 16, cancel: Cancel | None = None, run_id: str | None = None) -> None:
        self.caller = caller
        self.targets = [_Target(p, port, tuple(q), tuple(dict.fromkeys(pts))) for p, port, q, pts in targets]
        self.max_concurrency = max(1, max_concurrency)
        self.cancel = cancel or Cancel()
        self.run_id = run_id or secrets.token_hex(4)
        self.proofs: dict[tuple[str, str, str, int, str], EngineProof] = {}
        self._lock = threading.Lock()  # the ports' threads add proofs while others read them
        self._finished: set[int] = set()  # the targets (id) whose last reset was sent
        #: (namespace, pod) of each replaced pod -> the successors its canaries were probed in
        self.successors: dict[tuple[str, str], tuple[str, ...]] = {}

    # ------------------------------------------------------------------ seed and control
    def seed(self) -> None:
        """Seed every engine's canaries and send each again (the positive control)."""
        parallel(self.targets, self._seed_port, self.max_concurrency, self.cancel)

    def _salt(self, t: _Target, engine: str, point: str) -> str:
        tag = hashlib.sha256(f"{t.pod.uid}/{t.pod.container}".encode()).hexdigest()[:8]
        salt = f"kvreset-{self.run_id}-{tag}-{t.port.port}-e{engine or 0}-{point}"
        assert valid_salt(salt), salt
        return salt

    def _seed_port(self, t: _Target) -> None:
        ref = PodRef(t.pod.namespace, t.pod.name, t.pod.container)
        if t.pod.engine.name != "vllm":   # the canaries and counters below are vLLM's
            self._proof(t, "").unverifiable = (f"--verify proves vLLM servers only in this version, not "
                                               f"{t.pod.engine.name}: the row stands on the reset's answer")
            return
        before = self._scrape(ref, t.port)
        if isinstance(before, str):
            proof = self._proof(t, "")
            proof.unverifiable = before
            return
        for engine, counters in before.items():
            proof = self._proof(t, engine)
            proof.model = counters.model
            proof.block_size = counters.block_size
            if counters.block_size is None:
                proof.unverifiable = "the block size is unknown (no block_size label on vllm:cache_config_info)"
            elif counters.model is None:
                proof.unverifiable = "the served model is unknown (no model_name label on GET /metrics)"
            else:
                proof.salts = {p: self._salt(t, engine, p) for p in t.points}
        live = [self.proofs[k] for k in self._keys(t) if self.proofs[k].unverifiable is None]
        for proof in live:  # the seeds
            for point, salt in proof.salts.items():
                got = self._send(ref, t.port, proof, salt)
                if isinstance(got, str):
                    proof.unverifiable = f"the canary for {point} was refused: {got}"
                    break
        for proof in [p for p in live if p.unverifiable is None]:  # the positive controls
            first = next(iter(proof.salts))
            proof.control = self._measure(ref, t.port, proof, proof.salts[first], "control", t.pod.name)
        after = self._scrape(ref, t.port)
        for proof in [p for p in live if p.unverifiable is None and p.control is not None]:
            # the scrape before the seeds is the control's baseline: a seed has a salt no block
            # was cached with, so it adds no hit, and its prompt's queries are taken off
            control = self._with_counters(proof.control, proof, before, after,  # type: ignore[arg-type]
                                          seeded=len(proof.salts))
            proof.control = control
            expected = 2 * (proof.block_size or 0)
            if control.cached is None:
                proof.unverifiable = f"the positive control could not be read ({control.error})"
            elif control.cached < expected:
                proof.unverifiable = (f"the repeated canary showed {control.cached} of {expected} cached tokens "
                                      "(prefix caching off, or a build that does not cache salted prompts)")

    # ------------------------------------------------------------------ probes
    def probe(self, point: str, pods: Sequence[tuple[str, str]] | None = None) -> None:
        """Probe every verifiable engine (of ``pods``, (namespace, name) pairs, when given) with
        the canary of ``point``; a pod in :attr:`successors` is probed in its successors."""
        chosen = [t for t in self.targets if point in t.points
                  and (pods is None or (t.pod.namespace, t.pod.name) in pods)]
        parallel(chosen, lambda t: self._probe_port(t, point), self.max_concurrency, self.cancel)

    def replaced(self, successors: Mapping[tuple[str, str], Sequence[str]]) -> None:
        """Record the pods a rollout replaced: later probes go to their successors."""
        for key, names in successors.items():
            self.successors[key] = tuple(names)

    def _probe_port(self, t: _Target, point: str) -> None:
        live = [self.proofs[k] for k in self._keys(t) if self.proofs[k].unverifiable is None
                and point in self.proofs[k].salts]
        if not live:
            return
        names = self.successors.get((t.pod.namespace, t.pod.name), (t.pod.name,))
        if not names:
            for proof in live:
                proof.probes.append(Reading(point, t.pod.name, None,
                                            error="the pod was replaced and no successor came up to probe"))
            return
        for name in names:
            ref = PodRef(t.pod.namespace, name, t.pod.container)
            before = self._scrape(ref, t.port)
            engines = before if isinstance(before, dict) else {}
            readings = []
            for proof in live:
                # a successor is probed on the engine of the same label, when it has one
                if name != t.pod.name and engines and proof.engine not in engines:
                    continue
                readings.append((proof, self._measure(ref, t.port, proof, proof.salts[point], point, name)))
            after = self._scrape(ref, t.port)
            for proof, reading in readings:
                proof.probes.append(self._with_counters(reading, proof, before, after))
        if point == t.points[-1]:  # no probe follows: the last reset now, not in a later round
            self._finish_port(t)

    # ------------------------------------------------------------------ the last reset
    def finish(self) -> None:
        """The last reset (the job's query) on every probed port, successors included, removing
        the canaries' own blocks; each proof keeps its answer. A port's last probe point
        already sends it (no later probe needs the canaries): this sends it where none did."""
        todo = [t for t in self.targets if id(t) not in self._finished]
        parallel(todo, self._finish_port, self.max_concurrency, self.cancel)

    def _finish_port(self, t: _Target) -> None:
        """The last reset of one port (once), on the pod or its successors."""
        with self._lock:
            if id(t) in self._finished:
                return
            self._finished.add(id(t))
        proofs = [self.proofs[k] for k in self._keys(t) if self.proofs[k].salts]
        if not proofs:
            return
        for name in self.successors.get((t.pod.namespace, t.pod.name), (t.pod.name,)):
            engine = _engine(t.pod)
            got = reset(self.caller, PodRef(t.pod.namespace, name, t.pod.container), t.port.port,
                        engine.reset_route, tuple(t.query) + tuple(engine.busy_query(10.0)), scheme=t.port.scheme,
                        busy_timeout_s=10.0, engine=engine, serve=t.pod.serve)
            text = got.answer.detail if got.answer else (got.failure.message if got.failure else "no answer")
            if got.answer is None or got.answer.outcome.value != "cleared":
                text += ("; the canaries' own blocks stay (salted: no request without their salt hits them)")
            for proof in proofs:
                proof.final_reset = text if name == t.pod.name else f"{name}: {text}"

    def for_port(self, namespace: str, pod: str, container: str, port: int | None) -> list[EngineProof]:
        """The proofs of one row (engine order)."""
        with self._lock:
            return [p for k, p in self.proofs.items() if k[:4] == (namespace, pod, container, port)]

    # ------------------------------------------------------------------ helpers
    def _keys(self, t: _Target) -> list[tuple[str, str, str, int, str]]:
        head = (t.pod.namespace, t.pod.name, t.pod.container, t.port.port)
        with self._lock:
            return [k for k in self.proofs if k[:4] == head]

    def _proof(self, t: _Target, engine: str) -> EngineProof:
        key = (t.pod.namespace, t.pod.name, t.pod.container, t.port.port, engine)
        with self._lock:
            return self.proofs.setdefault(key, EngineProof(*key))

    def _scrape(self, ref: PodRef, port: ApiPort) -> dict[str, CacheCounters] | str:
        got = fetch_metrics(self.caller, ref, port.port, scheme=port.scheme)
        if got.text is None:
            return f"GET /metrics: {got.error}"
        try:
            found = cache_counters(got.text)
        except MetricsParseError as exc:
            return f"GET /metrics: {exc}"
        return found or "GET /metrics holds no vLLM engine"

    def _send(self, ref: PodRef, port: ApiPort, proof: EngineProof, salt: str) -> HttpAnswer | str:
        tokens = canary_tokens(salt, proof.block_size or 0)
        headers = (("X-data-parallel-rank", proof.engine),) if proof.engine else ()
        got = post_json(self.caller, ref, port.port, "/v1/completions",
                        canary_body(proof.model or "", tokens, salt), headers=headers, scheme=port.scheme)
        if not isinstance(got, HttpAnswer):
            return got.message
        if got.status != 200:
            detail = read_reset_answer(got.status, got.body).detail
            return f"POST /v1/completions answered {got.status}: {detail.split(': ', 1)[-1]}"
        return got

    def _measure(self, ref: PodRef, port: ApiPort, proof: EngineProof, salt: str, point: str,
                 pod_name: str) -> Reading:
        got = self._send(ref, port, proof, salt)
        if isinstance(got, str):
            return Reading(point, pod_name, None, error=got)
        cached, _prompt = cached_tokens(got.body)
        return Reading(point, pod_name, cached, method="cached_tokens" if cached is not None else "counters")

    def _with_counters(self, reading: Reading, proof: EngineProof, before: dict[str, CacheCounters] | str,
                       after: dict[str, CacheCounters] | str, *, seeded: int = 0) -> Reading:
        """The reading completed with the engine's counter deltas (and, without
        ``cached_tokens``, measured by them); ``seeded``: that many seeds (fresh salts: no
        hit) ran between the two scrapes too, their prompts are taken off the queries."""
        if reading.error is not None:
            return reading
        b = before.get(proof.engine) if isinstance(before, dict) else None
        a = after.get(proof.engine) if isinstance(after, dict) else None
        if b is None or a is None or a.hits is None or b.hits is None:
            if reading.cached is not None:
                return reading
            why = before if isinstance(before, str) else after if isinstance(after, str) else \
                f"engine {proof.engine or 0}'s prefix-cache counters are not on GET /metrics"
            return Reading(reading.point, reading.pod, None, error=why)
        hits = a.hits - b.hits
        ext = (a.ext_hits - b.ext_hits) if a.ext_hits is not None and b.ext_hits is not None else 0.0
        prompt = 2 * (proof.block_size or 0) + 1
        queries = (a.queries - b.queries - seeded * prompt) if a.queries is not None and b.queries is not None \
            else None
        by_source = {k: int(a.by_source.get(k, 0.0) - b.by_source.get(k, 0.0)) for k in a.by_source}
        sources = {k: v for k, v in by_source.items() if v > 0} or \
            {k: int(v) for k, v in (("device", hits), ("external", ext)) if v > 0}
        note = None
        if queries is not None and queries > prompt:
            note = (f"other requests reached engine {proof.engine or 0} during this probe (queries +{int(queries)} "
                    f"for a {prompt}-token canary): the counters may include their hits")
        cached = reading.cached if reading.cached is not None else int(hits + ext)
        if reading.cached is not None and note is None and sum(sources.values()) != reading.cached:
            sources = {"unknown": reading.cached} if reading.cached else {}
        if cached == 0:
            sources = {}
        return Reading(reading.point, reading.pod, cached, sources, reading.method or "counters", hits, ext, queries,
                       note)
