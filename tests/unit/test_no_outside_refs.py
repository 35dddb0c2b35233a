"""The project explains itself: the package, the tests, README.md, docs/ and the build files cite
the repository's own files and public upstream sources (an upstream file path, pull request,
release or issue such as ``vLLM issue #49983``), never notes kept outside the repository (a
design document, research notes, section signs pointing into them), the directory beside the
repository (named only by ``tests/beside.py`` and ``docs/tests.md``), or this project's own
issue numbers.

The patterns are spelled so that this file does not match them itself, and it is scanned like
any other test."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What is scanned, relative to the repository root: directories are walked.
SCANNED = ("kubectl_kvreset", "tests", "docs", "README.md", "Makefile", ".ci", "krew", "rbac")
#: The only files that may name the directory beside the repository.
BESIDE_ALLOWED = frozenset({"tests/beside.py", "docs/tests.md"})
#: An issue number right after one of these names is that upstream project's, not this one's.
UPSTREAM = ("vllm", "lmcache", "sglang", "llm-d", "kubectl", "krew", "kubernetes", "mooncake")
SKIPPED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})

OUTSIDE = [
    ("design document", re.compile("DES" "IGN")),
    ("research notes", re.compile("research" "/")),
    ("research notes", re.compile(r"\bthe (?:project's )?re" r"search\b", re.IGNORECASE)),
    ("section sign", re.compile("\u00a7")),
]
BESIDE = [
    ("directory beside the repository", re.compile("shared" "/")),
    ("directory beside the repository", re.compile(r"""["']\.\.["']\s*/\s*["']shared["']""")),
]
ISSUE = re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE)


def files(root: Path, names: Iterable[str] = SCANNED) -> list[Path]:
    """The text files under ``names`` (files or directories relative to ``root``), sorted;
    caches and files that are not UTF-8 text are left out."""
    out: list[Path] = []
    for name in names:
        top = root / name
        candidates = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for path in candidates:
            if not path.is_file() or SKIPPED_DIRS.intersection(path.relative_to(root).parts):
                continue
            data = path.read_bytes()
            if b"\0" in data:
                continue
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            out.append(path)
    return out


def _own_issue(line: str) -> re.Match[str] | None:
    """The first issue number in ``line`` that no upstream project name precedes."""
    for m in ISSUE.finditer(line):
        before = line[:m.start()].rstrip().lower()
        before = before[:-2] if before.endswith("'s") else before
        if not before.endswith(UPSTREAM):
            return m
    return None


def scan(root: Path, names: Iterable[str] = SCANNED) -> list[str]:
    """Every offending line under ``names`` as ``path:line: what: text`` (path relative to ``root``)."""
    found: list[str] = []
    for path in files(root, names):
        rel = path.relative_to(root).as_posix()
        rules = OUTSIDE + ([] if rel in BESIDE_ALLOWED else BESIDE)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            hits = [what for what, pattern in rules if pattern.search(line)]
            if _own_issue(line):
                hits.append("this project's issue number")
            found += [f"{rel}:{number}: {what}: {line.strip()}" for what in hits]
    return found


def test_the_project_cites_only_itself_and_upstream() -> None:
    assert len(files(ROOT)) > 100  # the scan reaches the package and the tests
    assert scan(ROOT) == []


def test_the_scan_flags_an_injected_reference(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "tests").mkdir()
    bad = {
        "design": "# as in " + "DES" + "IGN.md, part 4",
        "research": "# see " + "research" + "/vllm.md",
        "notes": "# see the route history in the project's " + "re" + "search on vLLM",
        "section": "# the rule of \u00a73.2",
        "beside": "# load " + "../" + "shared" + "/fixtures",
        "join": "FIX = ROOT / " + '".."' + " / " + '"shared"',
        "issue": "# for " + "iss" + "ue 11 item 2",
        "hash": "# the goals of " + "Iss" + "ue #14",
        "possessive": "# " + "iss" + "ue 14's goals",
    }
    for name, text in bad.items():
        (tmp_path / "pkg" / f"{name}.py").write_text(f'"""A module."""\n\n{text}\n', encoding="utf-8")
    fine = ["# vLLM " + "iss" + "ue #49983", "# llm-d's " + "iss" + "ue 1934", "# vllm PR #42694, krew#812",
            "# vllm/v1/kv_offload/file_mapper.py", "SHARED = 'shared'", "# RFC 6455 section 5.2",
            "# vLLM's sources, read release by release"]
    (tmp_path / "pkg" / "fine.py").write_text("\n".join(fine) + "\n", encoding="utf-8")
    (tmp_path / "tests" / "beside.py").write_text("BESIDE = ROOT / " + '".."' + " / " + '"shared"\n', encoding="utf-8")
    (tmp_path / "pkg" / "blob.bin").write_bytes(b"\0" + ("DES" + "IGN").encode())

    found = scan(tmp_path, ("pkg", "tests"))

    flagged = {line.split(":")[0] for line in found}
    assert flagged == {f"pkg/{name}.py" for name in bad}, found
    assert all(":3: " in line for line in found), found
