"""Pieces of the fake vLLM server (tests/sim/fakevllm.py) below it: the response shape, version
and dev-mode parsing, vLLM's error bodies, the streamed completion body, its counters."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from .connectorinfo import ConnectorInfo

Response = tuple[int, list[tuple[str, str]], bytes]


_JSON = [("content-type", "application/json")]


_SSE = [("content-type", "text/event-stream; charset=utf-8")]


_TRUE = {"true", "1", "yes", "on", "t", "y"}


BLOCK_SIZE = 16


_FALSE = {"false", "0", "no", "off", "f", "n"}


def parse_version(text: str | None) -> Version:
    """``packaging`` Version of a vLLM version string; an unparseable one (``dev``, a fork name)
    counts as the oldest behaviour, 0.0.0 (as the plugin treats an unknown build, docs/clear.md)."""
    try:
        return Version(text or "0")
    except InvalidVersion:
        return Version("0")


def dev_mode_state(value: str | None) -> str:
    """``"on"``, ``"off"`` or ``"invalid"`` for a ``VLLM_SERVER_DEV_MODE`` value (None = unset).

    vLLM: ``bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0")))`` in ``vllm/envs.py`` (0.7.3 ->
    0.33.0): ``"1"``, ``"2"``, ``" 1"`` on; ``"0"``/unset off; ``"true"``, ``""`` raise
    ValueError at startup, before the server listens (``vllm/entrypoints/openai/cli_args.py``
    reads it at import), reported here as ``"invalid"``.
    """
    if value is None:
        return "off"
    try:
        return "on" if int(value) else "off"
    except ValueError:
        return "invalid"


def reset_clears_cpu_tier(connector: ConnectorInfo, version: Version) -> bool:
    """Whether ``reset_external=true`` empties this connector's CPU tier on ``version``.

    Each connector's ``reset_cache`` hook (docs/reset-rules.md gives the release and file of each
    rule): OffloadingConnector + CPUOffloadingSpec from 0.22.0 (no-op 0.14-0.21);
    TieringOffloadingSpec from 0.24.0 (CPU tier only, never the FS tier);
    SimpleCPUOffloadConnector from 0.20.0; LMCache, Nixl, Mooncake P2P never. The hook itself
    exists from 0.13.0 (vLLM PR #27170).
    """
    if version < Version("0.13.0") or not connector.cpu_tier:
        return False
    if connector.name == "OffloadingConnector":
        if connector.spec_name == "TieringOffloadingSpec":
            return version >= Version("0.24.0")
        return version >= Version("0.22.0")
    if connector.name == "SimpleCPUOffloadConnector":
        return version >= Version("0.20.0")
    return False


def _json(status: int, obj: Any, extra: list[tuple[str, str]] | None = None) -> Response:
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    return status, list(_JSON) + (extra or []), body


def _not_found() -> Response:
    return _json(404, {"detail": "Not Found"})


def _validation_error(param: str, value: str) -> Response:
    """vLLM's 400 for a query value pydantic cannot parse as a boolean. The message text is
    the one 0.32.0 sends (``vllm/entrypoints/serve/exception_handling``: the errors joined
    after ``1 validation error:``, ``loc`` dotted), checked by the referee suite."""
    detail = (
        f"1 validation error:\n  {{'type': 'bool_parsing', 'loc': 'query.{param}', "
        f"'msg': 'Input should be a valid boolean, unable to interpret input', 'input': {value!r}}}"
    )
    return _json(400, {"error": {"message": detail, "type": "Bad Request", "param": f"query.{param}", "code": 400}})


def _literal_error(param: str, value: str, expected: tuple[str, ...]) -> Response:
    """The same 400 for a ``Literal`` query parameter given another value (``/server_info``'s
    ``config_format`` in 0.32.0)."""
    want = " or ".join(repr(e) for e in expected)
    detail = (
        f"1 validation error:\n  {{'type': 'literal_error', 'loc': 'query.{param}', "
        f"'msg': \"Input should be {want}\", 'input': {value!r}, 'ctx': {{'expected': \"{want}\"}}}}"
    )
    return _json(400, {"error": {"message": detail, "type": "Bad Request", "param": f"query.{param}", "code": 400}})


class StreamBody(bytes):
    """A streamed answer (``text/event-stream``). As ``bytes`` it is the whole body, so every
    caller that reads answers whole keeps working; :meth:`chunks` yields the same bytes chunk by
    chunk, ``pace`` seconds apart, as the server produces them, and calls ``on_start`` before the
    first and ``on_end`` after the last (or when the reader stops early). The fake vLLM counts a
    request as running between the two: a reset then finds its blocks held
    (``vllm/v1/core/block_pool.py::reset_prefix_cache``)."""

    _parts: list[bytes]
    _pace: float
    _on_start: Callable[[], None]
    _on_end: Callable[[], None]

    def __new__(cls, parts: list[bytes], pace: float, on_start: Callable[[], None],
                on_end: Callable[[], None]) -> StreamBody:
        obj = super().__new__(cls, b"".join(parts))
        obj._parts, obj._pace, obj._on_start, obj._on_end = list(parts), pace, on_start, on_end
        return obj

    def chunks(self) -> Iterator[bytes]:
        """The body's chunks, paced (see the class docstring)."""
        self._on_start()
        try:
            for i, part in enumerate(self._parts):
                if i and self._pace > 0:
                    time.sleep(self._pace)
                yield part
        finally:
            self._on_end()


def _prompt_tokens(body: bytes, chat: bool) -> list[str]:
    """The prompt of a completion request as tokens: a string prompt split on whitespace (the
    test tokenizer's words are one token each), a list of token ids as given; eight canned
    tokens when the body names no prompt."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    if chat:
        msgs = doc.get("messages") or []
        text = " ".join(str(m.get("content") or "") for m in msgs if isinstance(m, dict))
        toks = text.split()
    else:
        prompt = doc.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            prompt = prompt[0]
        if isinstance(prompt, list):
            toks = [str(t) for t in prompt]
        else:
            toks = str(prompt or "").split()
    return toks or ["<canned>"] * 8


#: Connectors whose blocks the fake keeps in an ``external`` tier: vLLM's example disk
#: connector, which has no ``reset_cache``, so ``reset_external=true`` answers success while its
#: hits continue (seen on the 0.32.0 CPU build). LMCache's and Mooncake's stores are not kept
#: here: the simulator clears them at the stores' own fakes, which these hits would not follow.
EXTERNAL_STORES = frozenset({"ExampleConnector", "SharedStorageConnector"})


@dataclass
class _Counters:
    reset_calls: int = 0
    last_reset_query: str | None = None
    last_transport: str | None = None
    prefix_cache_blocks: int = 0
    offload_cpu_blocks: int = 0
    reset_mm_calls: int = 0
    reset_encoder_calls: int = 0
    metrics_calls: int = 0
    completion_calls: int = 0
    busy_left: int = 0
    preemptions: int = 0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    finished_length: int = 0
    finished_stop: int = 0
    extra: dict[str, int] = field(default_factory=dict)
