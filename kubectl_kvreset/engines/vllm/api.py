"""What vLLM's HTTP answers mean, per version. Pure: no I/O.

Sources (vLLM ``vllm/entrypoints/serve/dev/cache/api_router.py`` and its predecessors in
``vllm/entrypoints/openai/api_server.py``, read release by release): ``POST /reset_prefix_cache``
answers an empty 200 before 0.26 whatever happened, and ``{"success": bool}`` from 0.26 (vllm PR
#46893); ``success: false`` means blocks are still held (running requests, in-flight offload
transfers) and the caller may retry; the dev routes are absent (404) unless
``VLLM_SERVER_DEV_MODE`` is a non-zero integer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..base import EngineMetrics as EngineMetrics
from ..base import MetricsParseError as MetricsParseError
from ..base import ResetAnswer as ResetAnswer
from ..base import ResetOutcome as ResetOutcome

#: First vLLM release whose reset answer carries ``{"success": bool}`` (vllm PR #46893).
JSON_RESET_BODY_SINCE = Version("0.26.0")
#: ``POST /reset_mm_cache`` (absent in 0.11.0, present in 0.11.1).
RESET_MM_SINCE = Version("0.11.1")
#: ``POST /reset_encoder_cache`` (present from 0.16.0 among checked releases).
RESET_ENCODER_SINCE = Version("0.16.0")
#: First release whose reset answer is the AND over every data-parallel engine behind the port:
#: 0.32.0's ``vllm/v1/engine/core_client.py::AsyncMPClient.reset_prefix_cache_async`` returns
#: ``all(await self.call_utility_all_async(...))`` and ``DPLBAsyncMPClient`` does not override it
#: (read in the installed 0.32.0 sources; the 0.33.0 release wheel's ``core_client.py`` does the
#: same). Up to 0.28.0 (the 0.28.0 wheel's ``core_client.py``) the call went through
#: ``call_utility_async``, which under internal DP load balancing (``DPLBAsyncMPClient``) answers
#: engine 0's result only. 0.29-0.31 were not read, so they count as engine 0 only.
RESET_ALL_ENGINES_SINCE = Version("0.32.0")


def reset_answers_for_every_engine(version: Version | None) -> bool:
    """True when this version's reset answer speaks for every DP engine behind the API port
    (:data:`RESET_ALL_ENGINES_SINCE`); False for older or unknown versions, whose answer is
    engine 0's alone, so the other engines' reset is not confirmed."""
    return version is not None and version >= RESET_ALL_ENGINES_SINCE


def parse_version(text: str | None) -> Version | None:
    """Parse a vLLM version string (``"0.26.0"``, ``"0.23.1.dev42+gabc"``) with PEP 440 rules.

    Returns None for anything that does not parse (``"dev"``, a fork's name): callers treat
    None as the oldest behaviour.
    """
    if not text:
        return None
    try:
        return Version(text.strip().lstrip("v"))
    except InvalidVersion:
        return None


def version_from_body(body: bytes) -> str | None:
    """The ``version`` field of ``GET /version`` (``{"version": "0.33.0"}``), or None."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(doc, dict) and isinstance(doc.get("version"), str):
        return str(doc["version"])
    return None


def reset_query(version: Version | None, *, reset_external: bool = True,
                reset_running_requests: bool = False) -> list[tuple[str, str]]:
    """Query parameters of ``POST /reset_prefix_cache`` for this version.

    ``reset_external=true`` is always sent when asked (an older server ignores an unknown
    parameter, so a failed version probe costs nothing); ``reset_running_requests=true`` only
    when the user allowed preempting running requests.
    """
    query: list[tuple[str, str]] = []
    if reset_external:
        query.append(("reset_external", "true"))
    if reset_running_requests:
        query.append(("reset_running_requests", "true"))
    return query


def extra_reset_routes(version: Version | None) -> tuple[str, ...]:
    """The other cache-reset dev routes this version serves: ``/reset_mm_cache`` (>= 0.11.1),
    ``/reset_encoder_cache`` (>= 0.16.0). Unknown version: none."""
    if version is None:
        return ()
    routes: list[str] = []
    if version >= RESET_MM_SINCE:
        routes.append("/reset_mm_cache")
    if version >= RESET_ENCODER_SINCE:
        routes.append("/reset_encoder_cache")
    return tuple(routes)


def read_reset_answer(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> ResetAnswer:
    """Read vLLM's answer to ``POST /reset_prefix_cache`` (or another reset route).

    200 + ``{"success": true}`` -> CLEARED; ``{"success": false}`` -> BUSY (retryable);
    200 with an empty body -> UNCONFIRMED (vLLM < 0.26 answers so whatever happened);
    404 -> DEV_MODE_OFF; a 5xx saying requests wait for remote KV transfer -> BUSY (retried
    until the busy timeout, never forced further); other 5xx -> SERVER_ERROR (retryable: the
    reset is idempotent);
    400/405/422 -> BAD_REQUEST. The answer must be vLLM's own, not the API server's Status.
    """
    text = body.decode("utf-8", "replace").strip()
    if status == 200:
        if not text:
            return ResetAnswer(ResetOutcome.UNCONFIRMED, "empty 200: vLLM < 0.26 does not say whether the reset worked",
                               False)
        try:
            doc = json.loads(text)
        except ValueError:
            return ResetAnswer(ResetOutcome.UNEXPECTED, f"200 with a body that is not JSON: {text[:80]}", False)
        if isinstance(doc, dict) and doc.get("success") is True:
            return ResetAnswer(ResetOutcome.CLEARED, "success", False)
        if isinstance(doc, dict) and doc.get("success") is False:
            return ResetAnswer(ResetOutcome.BUSY, "vLLM answered success:false (blocks still held by running requests "
                               "or transfers)", True)
        return ResetAnswer(ResetOutcome.UNEXPECTED, f"200 with an unexpected body: {text[:80]}", False)
    if status == 404:
        return ResetAnswer(ResetOutcome.DEV_MODE_OFF,
                           "404: the dev routes are off (VLLM_SERVER_DEV_MODE is not set to 1)", False)
    if status >= 500 and REMOTE_KV_BUSY in text:
        # a forced reset while requests wait for remote KV (a P/D prefill pod): blocks are
        # still held, so it is busy, not an error (0.32.0 vllm/v1/core/sched/scheduler.py
        # ::reset_prefix_cache raises with this text; the API server answers 500)
        return ResetAnswer(ResetOutcome.BUSY, f"vLLM answered {status}: requests are waiting for remote KV transfer "
                           "(blocks still held)", True)
    if status >= 500:
        return ResetAnswer(ResetOutcome.SERVER_ERROR, f"vLLM answered {status}: {_error_text(text)}", True)
    if status in (400, 405, 422):
        return ResetAnswer(ResetOutcome.BAD_REQUEST, f"vLLM refused the request ({status}): {_error_text(text)}", False)
    return ResetAnswer(ResetOutcome.UNEXPECTED, f"vLLM answered {status}: {_error_text(text)}", False)


#: The text of vLLM's 500 for a forced reset while requests wait for remote KV transfer.
REMOTE_KV_BUSY = "waiting for remote KV transfer"


def _error_text(text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text[:120] or "(empty body)"
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:160]
        if doc.get("detail"):
            return str(doc["detail"])[:160]
    return text[:120]


_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_COUNTERS = {
    "prefix_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    "prefix_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "external_hits": ("vllm:external_prefix_cache_hits",),
    "external_queries": ("vllm:external_prefix_cache_queries",),
}


def parse_metrics(text: str) -> list[EngineMetrics]:
    """Parse a vLLM ``/metrics`` scrape into one :class:`EngineMetrics` per ``engine`` label.

    Uses prometheus_client's text parser (which strips ``_total`` from counter family names).
    The usage family is chosen by what the scrape holds, not by version: the newer name when
    present, else the older. Engines are ordered by label (numerically when numeric).

    Raises:
        MetricsParseError: the text cannot be parsed.
    """
    from ...lazyimport import prometheus_parser
    text_string_to_metric_families = prometheus_parser().text_string_to_metric_families

    values: dict[str, dict[str, float]] = {}
    models: dict[str, str] = {}
    try:
        for family in text_string_to_metric_families(text):
            name = family.name
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                engine = sample.labels.get("engine", "")
                if "model_name" in sample.labels:
                    models.setdefault(engine, sample.labels["model_name"])
                if (name in _USAGE or name == "vllm:kv_offload_cpu_cache_usage_perc"
                        or any(name in v for v in _COUNTERS.values())):
                    bucket = values.setdefault(engine, {})
                    bucket[name] = bucket.get(name, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"not Prometheus text format: {exc}") from exc

    def pick(bucket: Mapping[str, float], names: Sequence[str]) -> tuple[float | None, str | None]:
        for n in names:
            if n in bucket:
                return bucket[n], n
        return None, None

    out: list[EngineMetrics] = []
    for engine in sorted(values, key=lambda e: (not e.isdigit(), int(e) if e.isdigit() else 0, e)):
        bucket = values[engine]
        usage, usage_name = pick(bucket, _USAGE)
        counters = {k: pick(bucket, v)[0] for k, v in _COUNTERS.items()}
        out.append(EngineMetrics(
            engine=engine,
            model=models.get(engine),
            usage=usage,
            usage_metric=usage_name,
            cpu_offload_usage=bucket.get("vllm:kv_offload_cpu_cache_usage_perc"),
            prefix_hits=counters["prefix_hits"],
            prefix_queries=counters["prefix_queries"],
            external_hits=counters["external_hits"],
            external_queries=counters["external_queries"],
        ))
    return out


def engine_order(label: str) -> tuple[bool, int, str]:
    """The sort key of an ``engine`` label: numbered engines by number, then any other label."""
    return (not label.isdigit(), int(label) if label.isdigit() else 0, label)


def engine_labels(text: str) -> tuple[str, ...]:
    """The ``engine`` label values of one ``/metrics`` scrape: the data-parallel engines the
    API server behind that port reports, numerically ordered (``("0", "1", "2", "3")``).

    vLLM's ``PrometheusStatLogger`` (0.32.0 ``vllm/v1/metrics/loggers.py``) labels every
    ``vllm:`` family it registers with ``model_name`` and ``engine``, one child per index of
    ``engine_indexes`` with the value ``str(index)``; ``AsyncLLM`` passes the client's
    ``engine_ranks_managed`` (``vllm/v1/engine/core_client.py``: every DP rank under internal
    load balancing, the node's local ranks from ``--data-parallel-start-rank`` under hybrid
    load balancing, its own rank under external load balancing). So the number of values is the
    number of engines behind the port. Empty when no ``vllm:`` family carries the label (vLLM
    before 0.8, or a scrape of something else). Parsed with prometheus_client's text parser.

    Raises:
        MetricsParseError: the text is not Prometheus text exposition format.
    """
    from ...lazyimport import prometheus_parser
    text_string_to_metric_families = prometheus_parser().text_string_to_metric_families

    found: set[str] = set()
    try:
        for family in text_string_to_metric_families(text):
            if not family.name.startswith("vllm:"):
                continue
            for sample in family.samples:
                label = sample.labels.get("engine")
                if label is not None and label != "":
                    found.add(label)
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"not Prometheus text format: {exc}") from exc
    return tuple(sorted(found, key=engine_order))


@dataclass(frozen=True)
class EngineCount:
    """How many data-parallel engines answer behind one API port, and from which source.

    Attributes:
        count: the engines (>= 1).
        labels: their ``engine`` label values on ``/metrics`` (``()`` when the count comes from
            the flags alone).
        source: ``"metrics"`` (the ``engine`` labels of ``GET /metrics``) or ``"flags"``
            (the serve flags, ``kubectl_kvreset.engines.vllm.servecmd.engines_behind_port``).
        note: a disagreement between the two sources, or why ``/metrics`` could not say; None
            when they agree or the labels were not needed.
        unknown: why the count is not established (the flags do not give it and ``/metrics``
            did not either): more engines than ``count`` may answer behind the port; None when
            it is established.
    """

    count: int
    labels: tuple[str, ...] = ()
    source: str = "flags"
    note: str | None = None
    unknown: str | None = None


def engine_count(flag_engines: int, labels: Sequence[str] | None, *, unread: str | None = None,
                 port: int | None = None, flags_unknown: str | None = None,
                 flags_secret: bool = False) -> EngineCount:
    """Decide the engine count behind ``port`` from the serve flags (``flag_engines``) and the
    ``engine`` labels of one ``/metrics`` scrape of that server (``labels``; None when it was
    not read, then ``unread`` says why).

    ``flags_unknown``: why the flags do not establish their count (a ``$(VAR)`` not resolved,
    :attr:`kubectl_kvreset.engines.vllm.servecmd.ServeConfig.engines_unknown`); ``flags_secret``: their
    count was read from a Secret, so it is never written in a note.

    The labels win when there are any: they are what the running server reports, while the
    flags miss data parallelism set where the spec does not show it (a ``--config`` file in the
    image, ``$(VAR)`` from a ConfigMap not readable, a launcher script). A disagreement is
    noted. Without labels (not read, unreadable, or a scrape without the label) the flags
    decide; a ``/metrics`` that could not be read is noted, as the count may then be too low,
    and where the flags do not establish the count either, :attr:`EngineCount.unknown` says
    why (a reset answer of engine 0 alone then confirms nothing beyond it).
    """
    flags = max(int(flag_engines), 1)
    where = f" behind port {port}" if port is not None else ""
    given = ("do not establish the count" if flags_unknown is not None
             else "give a count read from a Secret (not shown)" if flags_secret else f"give {flags}")
    if labels:
        ordered = tuple(sorted(dict.fromkeys(str(x) for x in labels), key=engine_order))
        note = None
        if len(ordered) != flags or flags_unknown is not None:
            note = (f"data-parallel engines{where}: the serve flags {given}, the engine labels of GET /metrics "
                    f"show {len(ordered)} ({engine_list(ordered)}); the /metrics count is used")
        return EngineCount(len(ordered), ordered, "metrics", note)
    why = (f"GET /metrics not read ({unread})" if labels is None and unread is not None
           else "GET /metrics shows no engine label" if labels is not None else None)
    if flags_unknown is not None:
        text = f"{flags_unknown}; {why}" if why else flags_unknown
        return EngineCount(flags, (), "flags",
                           f"data-parallel engines{where} not known: {text}", text)
    if why is not None and labels is None:
        count = "read from a Secret, not shown" if flags_secret else str(flags)
        return EngineCount(flags, (), "flags",
                           f"data-parallel engines{where}: {why}; the serve flags' count ({count}) is used, and "
                           "engines set outside the flags are not known")
    return EngineCount(flags, (), "flags", None)


def engine_list(labels: Sequence[str]) -> str:
    """``"engine 1"``, ``"engines 1-3"``, ``"engines 1, 3, 5-6"``: engine labels with runs of
    consecutive numbers joined."""
    parts: list[str] = []
    numbers = [int(x) for x in labels if str(x).isdigit()]
    others = [str(x) for x in labels if not str(x).isdigit()]
    run: list[int] = []
    for n in sorted(set(numbers)):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [n]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    parts += others
    count = len(set(numbers)) + len(others)
    return ("engine " if count == 1 else "engines ") + ", ".join(parts)


#: Per-engine families that show the requests an engine holds now (gauges) and that move with
#: every request it schedules or ends (counters, ``_total`` stripped by the parser): vLLM 0.32.0
#: ``vllm/v1/metrics/loggers.py::PrometheusStatLogger``, one child per ``engine`` label.
ACTIVITY_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
ACTIVITY_COUNTERS = ("vllm:request_success", "vllm:prompt_tokens", "vllm:generation_tokens")


@dataclass(frozen=True)
class EngineActivity:
    """The requests of one engine in one ``/metrics`` scrape: ``running`` and ``waiting`` (the
    gauges, None when absent) and ``counted`` (:data:`ACTIVITY_COUNTERS` summed over their other
    labels, in that order; None when one is absent)."""

    running: float | None
    waiting: float | None
    counted: tuple[float, ...] | None


def engine_activity(text: str) -> dict[str, EngineActivity]:
    """``engine`` label -> :class:`EngineActivity` from one vLLM ``/metrics`` scrape.

    Raises:
        MetricsParseError: the text is not Prometheus text exposition format.
    """
    from ...lazyimport import prometheus_parser
    text_string_to_metric_families = prometheus_parser().text_string_to_metric_families

    wanted = (*ACTIVITY_GAUGES, *ACTIVITY_COUNTERS)
    values: dict[str, dict[str, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            if family.name not in wanted:
                continue
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                bucket = values.setdefault(sample.labels.get("engine", ""), {})
                bucket[family.name] = bucket.get(family.name, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"not Prometheus text format: {exc}") from exc
    out: dict[str, EngineActivity] = {}
    for engine, bucket in values.items():
        counted = tuple(bucket[n] for n in ACTIVITY_COUNTERS) if all(n in bucket for n in ACTIVITY_COUNTERS) else None
        out[engine] = EngineActivity(bucket.get(ACTIVITY_GAUGES[0]), bucket.get(ACTIVITY_GAUGES[1]), counted)
    return out


@dataclass(frozen=True)
class EngineSplit:
    """Which data-parallel engines behind one API port reset, when the port's answer was
    ``{"success": false}`` (vLLM >= 0.32: the AND over the engines, each of which resets on its
    own; :data:`RESET_ALL_ENGINES_SINCE`).

    Attributes:
        emptied: engines that held no request from the scrape before the last reset call to the
            scrape after it (both gauges 0 in both, the counters unchanged), so no block of theirs
            was in use and their reset succeeded (``vllm/v1/core/block_pool.py::
            reset_prefix_cache`` fails only while blocks are in use).
        warm: ``(engine, running requests)`` for engines with requests running in either scrape:
            running requests hold blocks, so that engine's reset failed and its cache is kept.
        unknown: the others (requests came and went between the scrapes, a gauge is missing, or a
            KV connector may hold blocks of finished requests).
    """

    emptied: tuple[str, ...]
    warm: tuple[tuple[str, int], ...]
    unknown: tuple[str, ...]

    def describe(self) -> str:
        """One sentence for the row: ``engine 0 emptied; engine 1 still warm (12 requests
        running)``, then the engines not established."""
        parts = []
        if self.emptied:
            parts.append(f"{engine_list(self.emptied)} emptied (no request on it around the last reset, GET /metrics)")
        for engine, running in self.warm:
            parts.append(f"engine {engine} still warm ({running} request{'s' if running != 1 else ''} running)")
        if self.unknown:
            parts.append(f"{engine_list(self.unknown)} not established")
        return "; ".join(parts)


def split_engines(before: str, after: str, *, blocks_outlive_requests: bool = False) -> EngineSplit:
    """:class:`EngineSplit` from the ``/metrics`` scrapes taken just ``before`` and ``after`` one
    reset call that answered ``{"success": false}``. ``blocks_outlive_requests``: the server has a
    KV connector, whose transfers may hold the blocks of finished requests; then an idle engine is
    ``unknown``, never ``emptied``.

    Raises:
        MetricsParseError: a scrape is not Prometheus text exposition format.
    """
    first, second = engine_activity(before), engine_activity(after)
    emptied: list[str] = []
    warm: list[tuple[str, int]] = []
    unknown: list[str] = []
    for engine in sorted(set(first) | set(second), key=engine_order):
        a, b = first.get(engine), second.get(engine)
        running = max((x.running or 0.0) for x in (a, b) if x is not None)
        if running > 0:
            warm.append((engine, int(running)))
        elif (a is None or b is None or blocks_outlive_requests
              or None in (a.running, a.waiting, b.running, b.waiting, a.counted, b.counted)
              or a.waiting or b.waiting or a.counted != b.counted):
            unknown.append(engine)
        else:
            emptied.append(engine)
    return EngineSplit(tuple(emptied), tuple(warm), tuple(unknown))
