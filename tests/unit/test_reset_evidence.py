"""Every reset rule carries its evidence, and docs/reset-rules.md's table of them is the table's own.

A ``real`` rule names a test of the ``peers`` phase (``tests/peers/test_x.py::test_name``) that
exists as a function of that module (read with :mod:`ast`, so nothing is imported or run); a
``source`` rule names the release and file read. The block of docs/reset-rules.md between the
``reset-rules`` markers is rendered from :data:`kubectl_kvreset.plan.RESET_RULES` and
:data:`~kubectl_kvreset.plan.STORE_WIDE_HOOKS`: ``KVRESET_WRITE_README=1`` rewrites it.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from kubectl_kvreset.plan import EVIDENCE_KINDS, RESET_RULES, STORE_WIDE_HOOKS, Evidence, ResetRule, StoreWideHook
from kubectl_kvreset.tiers import TierKind

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "docs" / "reset-rules.md"
BEGIN, END = "<!-- reset-rules:begin -->", "<!-- reset-rules:end -->"
ROWS: list[ResetRule | StoreWideHook] = [*RESET_RULES, *STORE_WIDE_HOOKS]


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("test")}


def _missing_real_test(evidence: Evidence) -> str | None:
    """Why a ``real`` evidence's test does not exist, or None when it does."""
    module, sep, name = evidence.ref.partition("::")
    if not sep or not re.fullmatch(r"tests/peers/test_\w+\.py", module) or not name:
        return f"{evidence.ref!r} is not tests/peers/test_x.py::test_name"
    path = ROOT / module
    if not path.is_file():
        return f"{module} does not exist"
    if name not in _test_functions(path):
        return f"{module} has no test function {name}"
    return None


def _label(row: ResetRule | StoreWideHook) -> str:
    if isinstance(row, StoreWideHook):
        return f"hook {row.connector} -> {row.store}"
    return f"{row.kind.value} {row.connector or '*'} {row.spec or '*'} {row.min_version or '-'}"


@pytest.mark.parametrize("row", ROWS, ids=_label)
def test_every_rule_has_evidence_and_a_real_one_names_an_existing_peers_test(row: ResetRule | StoreWideHook) -> None:
    assert row.evidence is not None, f"{_label(row)} has no evidence"
    assert row.evidence.kind in EVIDENCE_KINDS, row.evidence
    assert row.evidence.ref.strip(), row.evidence
    if row.evidence.kind == "real":
        assert _missing_real_test(row.evidence) is None, (_label(row), _missing_real_test(row.evidence))
    else:
        # a release and a file: "vllm 0.22.0 vllm/v1/...py" (or a package/repository at a commit)
        assert re.search(r"\d+\.\d+|[0-9a-f]{7}", row.evidence.ref), row.evidence
        assert "/" in row.evidence.ref, row.evidence


def test_the_check_fails_for_a_missing_test_a_missing_module_and_a_bad_reference() -> None:
    assert _missing_real_test(Evidence("real", "tests/peers/test_real_vllm_pod.py::test_no_such_test"))
    assert _missing_real_test(Evidence("real", "tests/peers/test_nowhere.py::test_x"))
    assert _missing_real_test(Evidence("real", "tests/unit/test_plan.py::test_x"))
    assert _missing_real_test(Evidence("real", "tests/peers/test_real_vllm_pod.py"))
    # a helper of the module is not a test
    assert _missing_real_test(Evidence("real", "tests/peers/test_real_vllm_pod.py::_counters"))


def test_the_real_rules_are_the_ones_a_real_server_runs() -> None:
    """The GPU prefix-cache reset on the real vLLM pod, LMCache's MP connector's store-wide
    reset on a real lmcache server, and in-process LMCache's CPU tier surviving the real reset;
    Mooncake's hook runs in the simulator's vLLM (only the master is real) and LMCache's local
    disk is not on the real pod, so they stay ``source``."""
    real = sorted(_label(r) for r in ROWS if r.evidence is not None and r.evidence.kind == "real")
    assert real == ["cpu LMCacheConnectorV1 * -", "gpu * * -", "hook LMCacheMPConnector -> lmcache-mp",
                    "shared LMCacheMPConnector * -"]
    for row in ROWS:
        if getattr(row, "connector", None) == "MooncakeStoreConnector" or (
                getattr(row, "connector", None) == "LMCacheConnectorV1" and getattr(row, "kind", None) is TierKind.FS):
            assert row.evidence is not None and row.evidence.kind == "source", _label(row)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The README block: one line per rule, then per store-wide hook."""
    lines = ["| tier | connector | spec | from vLLM | the reset (`reset_external=true`) | evidence |",
             "|---|---|---|---|---|---|"]
    for rule in RESET_RULES:
        assert rule.evidence is not None
        hooked = any(h.connector == rule.connector and rule.spec != h.exempt_spec for h in STORE_WIDE_HOOKS)
        effect = ("empties it" if rule.emptied else
                  "not counted as emptied: the store-wide hook below empties it, the store step's count confirms it"
                  if hooked and rule.kind.value == "shared" else "leaves it")
        lines.append(f"| {rule.kind.value} | {rule.connector or 'any'} | {rule.spec or 'any'} | "
                     f"{rule.min_version or 'any'} | {effect} | {_cell(rule.evidence.kind)}: "
                     f"`{_cell(rule.evidence.ref)}` |")
    for hook in STORE_WIDE_HOOKS:
        assert hook.evidence is not None
        lines.append(f"| shared ({hook.store}) | {hook.connector} | "
                     f"{'any but ' + hook.exempt_spec if hook.exempt_spec else 'any'} | {hook.min_version} | "
                     f"empties the whole store (store-wide hook: needs consent) | {_cell(hook.evidence.kind)}: "
                     f"`{_cell(hook.evidence.ref)}` |")
    real = sum(1 for r in ROWS if r.evidence is not None and r.evidence.kind == "real")
    lines.append("")
    lines.append(f"{real} of the {len(ROWS)} rows are `real`: run on a real server by the named test of the "
                 "`peers` phase, which checks the server's own counters; the others are `source`: read in the "
                 "named release's file, not run here (the CPU build of vLLM runs no native CPU or FS offloading).")
    return "\n".join(lines)


def test_readme_table_is_rendered_from_the_rules() -> None:
    text = README.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "the README has no reset-rules block"
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    wanted = f"{head}{BEGIN}\n{render()}\n{END}{tail}"
    if os.environ.get("KVRESET_WRITE_README") == "1":
        README.write_text(wanted)
    assert text == wanted, "README reset-rules table is stale: run with KVRESET_WRITE_README=1"
