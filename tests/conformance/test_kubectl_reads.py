"""Real kubectl against the simulator loaded with the llm-d P/D fixture: the read commands of
the manual procedure, exec printenv, exec curl on the reset route (the decode pods' sidecar port
too) and the seed procedure, each agreeing with what the plugin reads."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.beside import require_beside

from . import checks
from .checks import Ground
from .conftest import fixture_file

GUIDE = "llm-d.ai/guide=pd-disaggregation"
DECODE = "deployment/pd-disaggregation-nvidia-gpu-vllm-decode"
PREFILL = "deployment/pd-disaggregation-nvidia-gpu-vllm-prefill"


@pytest.fixture(scope="module")
def pd(ground_factory: Callable[..., Ground]) -> Ground:
    return ground_factory([fixture_file("02")])


def test_get_deployments_custom_columns(pd: Ground) -> None:
    checks.check_deployments_custom_columns(pd, GUIDE)


@pytest.mark.parametrize("owner,role", [(PREFILL, "prefill"), (DECODE, "decode")])
def test_get_running_pods_jsonpath(pd: Ground, owner: str, role: str) -> None:
    checks.check_running_pods_jsonpath(pd, f"{GUIDE},llm-d.ai/role={role}", owner)


@pytest.mark.parametrize("owner", [PREFILL, DECODE])
def test_get_deployment_selector_jsonpath(pd: Ground, owner: str) -> None:
    checks.check_selector_jsonpath(pd, owner)


def test_exec_printenv(pd: Ground) -> None:
    pod = checks.running_pods(pd, f"{GUIDE},llm-d.ai/role=decode")[0]
    env = checks.check_exec_printenv(pd, pod, "modelserver")
    assert env["VLLM_SERVER_DEV_MODE"] == "1"


def test_exec_curl_reset_prefill(pd: Ground) -> None:
    pod = checks.running_pods(pd, f"{GUIDE},llm-d.ai/role=prefill")[0]
    checks.check_exec_curl_reset(pd, pod, 8000, 8000)


@pytest.mark.parametrize("port", [8200, 8000], ids=["vllm-port", "sidecar-port"])
def test_exec_curl_reset_decode(pd: Ground, port: int) -> None:
    pod = checks.running_pods(pd, f"{GUIDE},llm-d.ai/role=decode")[-1]
    checks.check_exec_curl_reset(pd, pod, port, 8200)


@pytest.mark.parametrize("role,port,vllm_port", [("prefill", 8000, 8000), ("decode", 8000, 8200)])
def test_seed_procedure(pd: Ground, role: str, port: int, vllm_port: int) -> None:
    require_beside(checks.SEED_PROCEDURE)
    pods = checks.check_seed_procedure(pd, f"{GUIDE},llm-d.ai/role={role}", port, vllm_port)
    assert len(pods) == (8 if role == "prefill" else 2)


@pytest.mark.parametrize("prefix", ["01", "03", "05", "06"])
def test_pods_by_role_label_are_the_detected_pods(ground_factory: Callable[..., Ground],
                                                  prefix: str) -> None:
    """For every other fixture (LeaderWorkerSets included): the running pods kubectl lists by
    the llm-d role label are exactly the vLLM server pods the plugin detects."""
    g = ground_factory([fixture_file(prefix)])
    listed = checks.running_pods(g, "llm-d.ai/role")
    assert listed and set(listed) == {r["pod"] for r in g.detect()}, listed
    g.cluster.stop()
