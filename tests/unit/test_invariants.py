"""The invariants checker of the end-to-end suite finds what it is there to find."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import invariants


def write(where: Path, args: list[str], stdout: str, stderr: str = "") -> None:
    with open(where / "1.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"args": args, "rc": 0, "stdout": stdout, "stderr": stderr}) + "\n")


def row(result: str, **extra: object) -> dict[str, object]:
    return {"kind": "CacheReset", "pod": "p", "result": result, "message": None, "left": [], "unconfirmed": [],
            **extra}


def test_clean_runs_pass(tmp_path: Path) -> None:
    write(tmp_path, ["clear", "-o", "json"], json.dumps([row("emptied"), row("busy", message="held")]))
    write(tmp_path, ["clear"], "POD  RESULT\np    emptied\n", "note: dev mode is on\n")
    problems, count, seen = invariants.check(tmp_path)
    assert problems == [] and count == 2
    assert seen == {("CacheReset", "emptied"), ("CacheReset", "busy")}


@pytest.mark.parametrize("bad", [
    row("emptied", left=[{"tier": "fs:/c", "reason": "r", "remedy": "x"}]),
    row("emptied", unconfirmed=[{"tier": "gpu", "reason": "r"}]),
    row("failed", message="exec exited ?: no output"),
    row("failed", message="got None"),
    row("failed", message="<Foo object at 0x7f>"),
    row("failed", message="{'a': 1}"),
])
def test_each_violation_is_found(tmp_path: Path, bad: dict[str, object]) -> None:
    write(tmp_path, ["clear", "-o", "json"], json.dumps([bad]))
    problems, _, _ = invariants.check(tmp_path)
    assert len(problems) >= 1


def test_text_output_is_checked(tmp_path: Path) -> None:
    write(tmp_path, ["clear"], "POD  RESULT\n", "warning: value None\n")
    problems, count, _ = invariants.check(tmp_path)
    assert count == 0 and len(problems) == 1 and "stderr" in problems[0]


def test_record_writes_only_when_enabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(invariants.ENV, raising=False)
    invariants.record(["x"], 0, "", "")
    monkeypatch.setenv(invariants.ENV, str(tmp_path))
    invariants.record(["clear", "-o", "json"], 0, json.dumps([row("emptied")]), "")
    assert [r["args"] for r in invariants.runs(tmp_path)] == [["clear", "-o", "json"]]
