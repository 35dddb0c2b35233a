"""Real kubectl's writes against the simulator: a json patch adding an env entry, rollout
restart and rollout status, each agreeing with what the plugin then detects."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from . import checks
from .checks import Ground
from .conftest import fixture_file

DECODE = "deployment/pd-disaggregation-nvidia-gpu-vllm-decode"
PREFILL = "deployment/pd-disaggregation-nvidia-gpu-vllm-prefill"


@pytest.fixture(scope="module")
def pd(ground_factory: Callable[..., Ground]) -> Ground:
    return ground_factory([fixture_file("02")])


def test_rollout_status_of_a_settled_deployment(pd: Ground) -> None:
    checks.check_rollout_status(pd, PREFILL, "30s")


def test_patch_env_then_rollout_status(pd: Ground) -> None:
    checks.check_patch_env_rollout(pd, DECODE)


def test_rollout_restart_then_status(pd: Ground) -> None:
    checks.check_rollout_restart(pd, DECODE)
