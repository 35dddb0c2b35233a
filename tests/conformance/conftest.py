"""Fixtures of the kubectl conformance suite: simulated clusters loaded with the llm-d fixtures,
each seen by real kubectl and by the built plugin."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.beside import llm_d_fixture
from tests.simctl import SimCluster, sandbox_available, zipapp_path

from .checks import Ground, Kubectl, kubectl_path

NS = "llm"


def fixture_file(prefix: str) -> Path:
    """The llm-d fixture whose name starts with ``prefix``; skips when the fixtures (kept beside
    the repository, ``tests/beside.py``) are absent."""
    return llm_d_fixture(prefix)


def require_tools() -> str:
    """kubectl's path; skips when kubectl is absent or bubblewrap cannot run (exec needs the
    pod sandbox; under KVRESET_REQUIRE_SANDBOX=1, as in CI, a missing sandbox fails), fails
    when the zipapp is not built (``make test`` builds it)."""
    exe = kubectl_path()
    if exe is None:
        pytest.skip("kubectl is not installed: the conformance suite needs real kubectl")
    if not sandbox_available():
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail("bubblewrap is required here (KVRESET_REQUIRE_SANDBOX=1) but cannot run")
        pytest.skip("bubblewrap (bwrap) cannot run: the simulator cannot run container commands")
    if not zipapp_path().exists():
        pytest.fail(f"{zipapp_path()} is missing: run 'make build' (make test does it)")
    return exe


@pytest.fixture(scope="module")
def ground_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Ground]]:
    """Factory ``(manifests, scenario=None, namespace=NS) -> Ground``: a running simulator
    (dev mode on, pods ready) with kubectl bound to it; all are stopped at module end."""
    started: list[SimCluster] = []

    def start(manifests: list[Path], *, scenario: dict[str, Any] | None = None,
              namespace: str = NS) -> Ground:
        exe = require_tools()
        cluster = SimCluster(manifests, namespace=namespace, dev_mode="on", scenario=scenario,
                             ready_delay=0.05)
        started.append(cluster)
        cluster.wait_ready()
        kubectl = Kubectl(exe, cluster.kubeconfig, namespace,
                          tmp_path_factory.mktemp("kubectl-cache"))
        return Ground(cluster, kubectl, list(manifests), namespace)

    yield start
    for cluster in started:
        cluster.stop()
