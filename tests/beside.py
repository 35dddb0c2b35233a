"""The material some tests use that is kept beside the repository, not in it.

This is the one module that names where that material lives (docs/tests.md says it in prose):
every test, conftest, the bench driver and ``tests/sim/README.md`` take the paths from here, and
a test that needs one skips with :func:`absent_reason`'s reason where it is absent.

- :data:`LLM_D_FIXTURES`: real llm-d manifests (the guides' Deployments, LeaderWorkerSets and
  Services), one YAML file per guide, named ``NN-<guide>_...yaml``;
- :data:`SEED_PROCEDURE`: the manual reset procedure the plugin is measured and checked against
  (``seed-procedure.sh NAMESPACE SELECTOR PORT``: ``kubectl get pods``, then one
  ``kubectl exec ... curl`` per pod).

Nothing here imports pytest at import time, so ``tests/simctl.py`` and the bench driver can use
the paths outside a test run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The directory beside the repository that holds the material.
BESIDE = (ROOT / ".." / "shared").resolve()
LLM_D_FIXTURES = BESIDE / "fixtures" / "llm-d"
SEED_PROCEDURE = BESIDE / "bench" / "seed-procedure.sh"

_WHAT = {
    LLM_D_FIXTURES: "the llm-d fixture manifests",
    SEED_PROCEDURE: "the manual reset procedure",
}


def absent_reason(path: Path) -> str:
    """The skip reason for ``path`` (one of this module's paths) when it is absent."""
    what = _WHAT.get(path, path.name)
    return f"{what} ({path}) is absent: it is kept beside the repository, not in it (docs/tests.md)"


def require_beside(path: Path) -> Path:
    """``path`` when it exists; otherwise skips the calling test with :func:`absent_reason`."""
    if not path.exists():
        import pytest

        pytest.skip(absent_reason(path))
    return path


def needs_beside(path: Path) -> Any:
    """A ``pytest.mark.skipif`` that skips a test with :func:`absent_reason` while ``path`` is absent."""
    import pytest

    return pytest.mark.skipif(not path.exists(), reason=absent_reason(path))


def llm_d_fixture(prefix: str) -> Path:
    """The first llm-d fixture (sorted by name) whose name starts with ``prefix`` (``"02"``,
    ``"02-"``) and ends in ``.yaml``; skips the calling test when the fixtures or that file are
    absent."""
    require_beside(LLM_D_FIXTURES)
    found = sorted(LLM_D_FIXTURES.glob(f"{prefix}*.yaml"))
    if not found:
        import pytest

        pytest.skip(f"no llm-d fixture {prefix}*.yaml in {LLM_D_FIXTURES}")
    return found[0]


def llm_d_fixtures() -> list[Path]:
    """Every llm-d fixture, sorted by name; empty when they are absent."""
    return sorted(LLM_D_FIXTURES.glob("*.yaml"))
