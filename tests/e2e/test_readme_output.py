"""Every command in the README's code blocks runs against the simulator as written, or is listed
in ``NOT_RUNNABLE`` with the reason, so the examples cannot go stale: the Quick start and Output
examples (namespace ``llm-d``) each by their own test, every other ``kubectl kvreset`` command
by ``test_every_other_kvreset_command_runs``; a new command that is neither fails
``test_every_readme_command_is_run_or_listed``."""

from __future__ import annotations

import json
import re
import shlex

from tests.simctl import DEMO_MANIFEST, ROOT

from .conftest import fixture_file

NS = "llm-d"
#: the README's sections whose kubectl kvreset commands have a test of their own (below)
OWN_TESTS = ("Quick start", "Output")
#: commands in the README's code blocks that the tests do not run, and why
NOT_RUNNABLE = {
    "kubectl krew install --manifest=plugin.yaml --archive=kubectl-kvreset.tar.gz":
        "installs into the user's krew root; tests/unit/test_krew.py checks the archive and manifest it names",
    'ln -sf "$(dirname "$(readlink -f "$(command -v kubectl-kvreset)")")/kubectl_complete-kvreset" '
    '"${KREW_ROOT:-$HOME/.krew}/bin/kubectl_complete-kvreset"':
        "writes into the user's krew bin directory; the completion helper is run in tests/e2e/test_packaging.py",
}


def readme_commands() -> list[tuple[str, str]]:
    """``(section title, command)`` for every command in the README's code blocks: in a block
    with ``$ `` prompts only the prompted lines (the rest is output), in any other block every
    line; comments (`` # ...``) dropped, backslash continuations joined. Blocks tagged as data
    (``json``, ``yaml``, ``text``) hold output or documents, not commands."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out: list[tuple[str, str]] = []
    section = ""
    for chunk in re.split(r"(?m)^(## .*)$", text):
        if chunk.startswith("## "):
            section = chunk[3:].strip()
            continue
        for lang, block in re.findall(r"```([a-z]*)\n(.*?)```", chunk, re.S):
            if lang in ("json", "yaml", "text"):
                continue
            lines = block.replace("\\\n", " ").splitlines()
            prompted = [ln[2:] for ln in lines if ln.startswith("$ ")]
            for line in prompted or lines:
                line = line.split(" # ", 1)[0].strip()
                if line:
                    out.append((section, re.sub(r"\s+", " ", line)))
    return out


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


def test_every_readme_command_is_run_or_listed() -> None:
    commands = readme_commands()
    assert len(commands) >= 14, commands
    unknown = [c for _, c in commands if not c.startswith("kubectl kvreset ") and c not in NOT_RUNNABLE]
    assert not unknown, f"README commands neither run by a test nor listed in NOT_RUNNABLE: {unknown}"
    stale = set(NOT_RUNNABLE) - {c for _, c in commands}
    assert not stale, f"NOT_RUNNABLE names commands the README no longer has: {stale}"
    assert len(_examples("Quick start")) == sum(1 for s, c in commands if s == "Quick start" and "kvreset" in c)
    assert len(_examples("Output")) == sum(1 for s, c in commands if s == "Output" and "kvreset" in c)


def test_every_other_kvreset_command_runs(sim) -> None:
    """The kubectl kvreset commands outside the Quick start and Output sections (the opening
    example on the demo deployment, `--version` under Install...), on a cluster holding both
    namespaces the README names."""
    others = [shlex.split(c)[2:] for s, c in readme_commands()
              if c.startswith("kubectl kvreset ") and s not in OWN_TESTS]
    assert ["clear", "-n", "llm-d-demo", "--all"] in others and ["--version"] in others, others
    cluster = sim([fixture_file("01"), DEMO_MANIFEST], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    for args in others:
        done = cluster.run(*args, timeout=300)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert done.stdout.strip() and "Traceback" not in done.stderr, (args, done.stderr)
        if args[0] == "clear" and "--dry-run" not in args:
            rows = done.stdout.splitlines()
            assert rows[0].split()[:2] == ["POD", "PORT"] and len(rows) > 1, done.stdout
            assert all(" emptied " in r for r in rows[1:] if r and not r.startswith("[")), done.stdout


def test_the_readme_stays_short() -> None:
    """The README is for users: design, tests and performance live in docs/ (under 300 lines)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n") + 1
    assert lines < 300, f"README.md has {lines} lines: move detail to docs/"
