"""End-to-end fixtures: the built CLI against the simulated cluster."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.beside import llm_d_fixture
from tests.simctl import SimCluster, sandbox_available, zipapp_path


def fixture_file(prefix: str) -> Path:
    """The llm-d fixture whose name starts with ``prefix`` (e.g. ``"02"``); skips when the
    fixtures are absent (they are kept beside the repository, ``tests/beside.py``)."""
    return llm_d_fixture(prefix)


def require_sandbox() -> None:
    """Skip (or fail under CI, where KVRESET_REQUIRE_SANDBOX=1) when bubblewrap is missing:
    without it the simulator never runs a container's command."""
    if not sandbox_available():
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail("bubblewrap is required here (KVRESET_REQUIRE_SANDBOX=1) but cannot run")
        pytest.skip("bubblewrap (bwrap) is missing or cannot create namespaces: "
                    "the simulator cannot run container commands")


@pytest.fixture(scope="session", autouse=True)
def built_cli() -> Path:
    """The zipapp must exist: ``make test`` builds it first."""
    app = zipapp_path()
    if not app.exists():
        pytest.fail(f"{app} is missing: run 'make build' (make test does it)")
    return app


@pytest.fixture
def sim() -> Iterator[Callable[..., SimCluster]]:
    """Factory: ``sim([manifest...], namespace=..., dev_mode=..., scenario=...)``; every cluster
    started is stopped at the end of the test, and waited on until its pods are ready."""
    started: list[SimCluster] = []

    def start(manifests: list[Path], **kwargs: Any) -> SimCluster:
        require_sandbox()
        kwargs.setdefault("ready_delay", 0.05)
        cluster = SimCluster(manifests, **kwargs)
        started.append(cluster)
        cluster.wait_ready()
        return cluster

    yield start
    for cluster in started:
        cluster.stop()
