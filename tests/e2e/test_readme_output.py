"""The README's examples (its Quick start and Output sections) run against the simulator as
written (namespace ``llm-d``), so they cannot go stale."""

from __future__ import annotations

import json
import re
import shlex

from tests.simctl import ROOT

from .conftest import fixture_file

NS = "llm-d"


def _examples(title: str) -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    commands: list[list[str]] = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.splitlines():
            line = line.split(" # ", 1)[0].strip()
            if line.startswith("kubectl kvreset "):
                commands.append(shlex.split(line)[2:])
    return commands


def test_the_quick_start_runs_on_stock_llm_d(sim) -> None:
    examples = _examples("Quick start")
    assert [a[0] for a in examples] == ["detect", "devmode", "clear", "clear", "metrics", "devmode"], examples
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="off", vllm_version="0.26.0")
    rows = json.loads(cluster.run("detect", "-n", NS, "-o", "json").stdout)
    assert rows and all(r["dev_mode"] == "off" for r in rows), rows
    for args in examples:
        done = cluster.run(*args, timeout=300)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        if args[:2] == ["clear", "-n"] and "--yes" in args:
            assert all(line.split()[-2] == "emptied" for line in done.stdout.splitlines()[1:]
                       if line and not line.startswith("[")), done.stdout
    rows = json.loads(cluster.run("detect", "-n", NS, "-o", "json").stdout)
    assert all(r["dev_mode"] == "off" for r in rows), rows  # turned off again


def test_every_output_example_runs(sim) -> None:
    examples = _examples("Output")
    assert len(examples) >= 4, examples
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    pods = {r["pod"] for r in json.loads(cluster.run("detect", "-n", NS, "-o", "json").stdout)}
    for args in examples:
        done = cluster.run(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert done.stdout.strip() and "Traceback" not in done.stderr, (args, done.stderr)
        if "-o" in args and args[args.index("-o") + 1] == "name":
            assert set(done.stdout.split()) == {f"pod/{p}" for p in pods}
        if any(a.startswith("-o=jsonpath") or a.startswith("jsonpath=") for a in args):
            assert set(done.stdout.split()) == pods
