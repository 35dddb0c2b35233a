"""The suite can fail: a simulator that drops a field kubectl needs (the scenario fault
``drop_fields``) makes the same conformance checks fail, for the reason kubectl gives."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from . import checks
from .checks import Ground
from .conftest import fixture_file

DECODE = "deployment/pd-disaggregation-nvidia-gpu-vllm-decode"


def test_without_matchlabels_the_selector_check_fails(ground_factory: Callable[..., Ground]) -> None:
    g = ground_factory([fixture_file("02")],
                       scenario={"drop_fields": {"deployments": ["spec.selector.matchLabels"]}})
    with pytest.raises(AssertionError, match="printed no .spec.selector.matchLabels"):
        checks.check_selector_jsonpath(g, DECODE)
    g.cluster.stop()


def test_without_updated_replicas_rollout_status_times_out(
        ground_factory: Callable[..., Ground]) -> None:
    """kubectl's rollout status waits while ``status.updatedReplicas`` < ``spec.replicas``
    (rollout_status.go); a server that never reports it keeps kubectl waiting until --timeout."""
    g = ground_factory([fixture_file("02")],
                       scenario={"drop_fields": {"deployments": ["status.updatedReplicas"]}})
    with pytest.raises(AssertionError, match="timed out waiting for the condition"):
        checks.check_rollout_status(g, DECODE, "3s")
    g.cluster.stop()
