"""The fake SGLang (tests/sim/fakesglang.py) against answers of a real SGLang: every exchange of each
answer set in ``tests/referee/data/*sglang*.json`` made with ``"target": "server"`` is replayed
through :func:`tests.sim.fakesglang.answer` and must give the same status, content type and body
(JSON bodies compared parsed). A set holds ``{"server", "argv"?, "exchanges": [{"name", "target",
"owner", "argv", "overrides", "method", "path", "query", "auth", "request"?, "status",
"content_type", "body", "summarised"?}]}``: ``argv`` is the command line of the pod the exchange
was made with (default the set's, then :data:`DEFAULT_ARGV`), ``overrides`` the fake's state then
(a generation running: ``busy_seconds``; a ``/generate`` repeat: ``prompt_seen``), ``request``
the request's JSON body. Summarised bodies are compared on what they hold: ``/server_info`` on
:data:`SERVER_INFO_KEYS` (the rest of its 37 KB being the server's arguments), ``/generate`` on
``meta_info``'s :data:`GENERATE_KEYS`, ``/metrics`` on the family names.

Router exchanges (``"target": "router"``, sglang-router's answers) are not replayed: tests/sim has
no fake router; :func:`test_what_the_plugin_relies_on_from_the_router` states what the plugin
relies on from them instead. A difference injected into the fake is caught."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.sim import fakesglang

pytestmark = pytest.mark.referee  # no real server: it runs in the parallel phase too

DATA = Path(__file__).with_name("data")
SETS = sorted(DATA.glob("*sglang*.json"))
DEFAULT_ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "tiny", "--port", "30000",
                "--admin-api-key", "k-admin", "--enable-metrics", "--enable-cache-report"]
SERVER_INFO_KEYS = ("version", "dp_size")
GENERATE_KEYS = ("prompt_tokens", "cached_tokens", "cached_tokens_details")


def _exchanges(target: str = "server") -> list[tuple[str, list[str], dict[str, Any]]]:
    out = []
    for path in SETS:
        doc = json.loads(path.read_text())
        for ex in doc["exchanges"]:
            if ex.get("target", "server") == target:
                out.append((f"{path.stem}:{ex['name']}", list(ex.get("argv") or doc.get("argv") or DEFAULT_ARGV), ex))
    return out


def _parsed(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def differences(ex: dict[str, Any], got: tuple[int, str | None, bytes]) -> list[str]:
    """What the fake's ``got`` answer does differently from the recorded exchange ``ex``."""
    status, content_type, body = got
    text = body.decode("utf-8", "replace")
    diffs = []
    if status != ex["status"]:
        diffs.append(f"status {status} != {ex['status']}")
    want_type = ex.get("content_type")
    if (content_type or None) != (want_type or None):
        diffs.append(f"content type {content_type!r} != {want_type!r}")
    want, mine = _parsed(ex["body"]), _parsed(text)
    if ex["path"] in ("/server_info", "/get_server_info") and isinstance(want, dict) and isinstance(mine, dict):
        for key in SERVER_INFO_KEYS:
            if key in want and want[key] != mine.get(key):
                diffs.append(f"server_info {key} {mine.get(key)!r} != {want[key]!r}")
    elif ex["path"] == "/generate" and ex.get("summarised") and isinstance(want, dict):
        meta = (mine or {}).get("meta_info") if isinstance(mine, dict) else None
        got_meta = {k: (meta or {}).get(k) for k in GENERATE_KEYS}
        if got_meta != {k: want.get(k) for k in GENERATE_KEYS}:
            diffs.append(f"generate meta_info {got_meta!r} != {want!r}")
    elif ex["path"] == "/metrics":
        names = {line.split("{")[0].split(" ")[0] for line in ex["body"].splitlines() if line and line[0] != "#"}
        wanted = {n for n in names if n.startswith(("sglang:cached_tokens_total", "sglang:num_running_reqs",
                                                      "sglang:num_queue_reqs"))}
        missing = wanted - {line.split("{")[0] for line in text.splitlines()}
        if missing:
            diffs.append(f"metrics families missing: {sorted(missing)}")
        for family in sorted(wanted - missing):   # the label names too (the plugin groups by them)
            want_labels, got_labels = _label_names(ex["body"], family), _label_names(text, family)
            if want_labels != got_labels:
                diffs.append(f"{family} labels {sorted(got_labels)} != {sorted(want_labels)}")
    elif want is not None and isinstance(want, (dict, list)):
        if mine != want:
            diffs.append(f"JSON body {text[:200]!r} != {ex['body'][:200]!r}")
    elif text != ex["body"]:
        diffs.append(f"body {text[:200]!r} != {ex['body'][:200]!r}")
    return diffs


def _label_names(text: str, family: str) -> set[frozenset[str]]:
    """The label-name sets of ``family``'s lines in a metrics text."""
    out: set[frozenset[str]] = set()
    for line in text.splitlines():
        if line.startswith(family + "{"):
            inner = line[len(family) + 1:line.index("}")]
            out.add(frozenset(part.split("=", 1)[0] for part in inner.split(",") if part))
    return out


def test_there_is_an_answer_set() -> None:
    assert SETS, "no tests/referee/data/*sglang*.json"


@pytest.mark.parametrize("name,argv,ex", _exchanges(), ids=[n for n, _, _ in _exchanges()])
def test_fake_answers_as_recorded(name: str, argv: list[str], ex: dict[str, Any]) -> None:
    got = fakesglang.answer(argv, ex["method"], ex["path"], ex.get("query") or "", ex.get("auth") or "none",
                            ex.get("overrides"), ex.get("request"))
    assert differences(ex, got) == [], name


def test_what_the_plugin_relies_on_from_the_router() -> None:
    """sglang-router 0.3.2's ``/flush_cache`` as recorded: 200 ``success`` when every worker
    flushed, **206** ``partial_success`` when one failed and also when every one failed (nothing in
    ``successful``), so a 2xx status alone does not mean emptied; ``GET`` -> 405. The router's
    ``?timeout`` is not recorded: it calls its workers' ``/flush_cache`` without one (sglang-router
    ``src/routers/http/router.rs``)."""
    routed = {ex["name"]: ex for _, _, ex in _exchanges("router")}
    assert routed, "no router exchange recorded"
    ok, one, every = (json.loads(routed[n]["body"]) for n in
                      ("router-flush-all-ok", "router-flush-one-failed", "router-flush-all-failed"))
    assert routed["router-flush-all-ok"]["status"] == 200 and ok["status"] == "success"
    assert routed["router-flush-one-failed"]["status"] == 206 and len(one["failed"]) == 1 and one["successful"]
    assert routed["router-flush-all-failed"]["status"] == 206 and every["successful"] == []
    assert every["workers_flushed"] == 0 and every["status"] == "partial_success"
    assert routed["router-flush-get"]["status"] == 405


def test_an_injected_difference_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    flush = next(ex for _, _, ex in _exchanges() if ex["path"] == "/flush_cache" and ex["status"] == 200)
    got = fakesglang.answer(DEFAULT_ARGV, "POST", "/flush_cache", flush.get("query") or "", "admin")
    assert differences(flush, got) == []
    monkeypatch.setattr(fakesglang, "FLUSHED", b"Cache flushed.\n")
    changed = fakesglang.answer(DEFAULT_ARGV, "POST", "/flush_cache", flush.get("query") or "", "admin")
    assert any(d.startswith("body") for d in differences(flush, changed))
    assert differences(flush, (200, "application/json", got[2])) == ["content type 'application/json' != None"]
    unauthorized = {"path": "/flush_cache", "status": 401, "content_type": "application/json",
                    "body": '{"error":"Unauthorized"}'}
    assert differences(unauthorized, (401, "application/json", b'{"error": "Unauthorized"}')) == []
    assert differences(unauthorized, (401, "application/json", b'{"detail":"Unauthorized"}'))
    assert differences(unauthorized, (403, "application/json", b'{"error":"Unauthorized"}'))
