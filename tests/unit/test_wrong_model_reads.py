"""Three ways the model name or FS root was read wrong: a model written after a multi-value
vLLM flag, env values that refer to a variable not read with the pod spec, and shell ``+=`` /
``$'...'``."""

from __future__ import annotations

from typing import Any

import pytest

from kubectl_kvreset.engines.vllm.servecmd import DEFAULT_MODEL, known_model, parse_argv, parse_container
from kubectl_kvreset.pods import pod_env
from kubectl_kvreset.shellscript import Shell, ansi_c_decode
from tests.sim.serveargs import parse_vllm_argv

KTC = ('{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": '
       '{"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1073741824, "block_size": 256, '
       '"secondary_tiers": [{"type": "fs", "root_dir": "ROOT"}]}}')


def container(command: list[str], env: list[dict[str, Any]] | None = None, image: str = "vllm/vllm-openai:v0.32.0",
              ) -> dict[str, Any]:
    return {"name": "vllm", "image": image, "command": command, "env": env or []}


def fs_root(cfg: Any) -> str:
    return str(cfg.kv_transfer_config["kv_connector_extra_config"]["secondary_tiers"][0]["root_dir"])


# ---- 1. multi-value flags (vLLM 0.32.0 serve parser: argparse nargs="+") -------------------

@pytest.mark.parametrize("flag", ["--api-key", "--served-model-name", "--allowed-media-domains", "--ignore-patterns",
                                  "--lora-modules", "--logits-processors", "--api_key",
                                  "--api-ke", "--served-model"])
def test_a_model_after_a_multi_value_flag_is_its_value_and_vllm_0_32_serves_its_default(flag: str) -> None:
    cfg = parse_container(container(["vllm", "serve", "--port", "8000", flag, "k1", "org/a"]), {})
    assert cfg is not None
    assert cfg.model == DEFAULT_MODEL == "Qwen/Qwen3-0.6B" and known_model(cfg) == DEFAULT_MODEL
    assert any("default model" in n for n in cfg.notes)
    # the simulator reads the argv the same way, as vLLM does
    sim = parse_vllm_argv(["vllm", "serve", "--port", "8000", flag.replace("_", "-"), "k1", "org/a"])
    assert sim is not None and sim.model == "Qwen/Qwen3-0.6B"


def test_a_flag_that_is_a_prefix_of_a_multi_value_one_is_not_its_abbreviation() -> None:
    cfg = parse_argv(["vllm", "serve", "--kv-cache-dtype", "fp8", "org/a"], {})
    assert cfg is not None and cfg.model == "org/a"


def test_the_next_flag_ends_a_multi_value_flag() -> None:
    cfg = parse_argv(["vllm", "serve", "--api-key", "k", "--port", "1", "org/a"], {})
    assert cfg is not None and cfg.model == "org/a"
    cfg = parse_argv(["vllm", "serve", "org/a", "--api-key", "k", "x"], {})
    assert cfg is not None and cfg.model == "org/a"
    sim = parse_vllm_argv(["vllm", "serve", "--api-key", "k", "--port", "1", "org/a"])
    assert sim is not None and sim.model == "org/a"


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.26.0", "ghcr.io/llm-d/llm-d-cuda:v0.4.0",
                                   "vllm/vllm-openai:latest"])
def test_no_model_on_another_release_is_unknown(image: str) -> None:
    argv = (["vllm", "serve"] if "vllm-openai" in image else ["python3", "-m", "vllm.entrypoints.openai.api_server"])
    cfg = parse_container(container([*argv, "--api-key", "k", "org/a"], image=image), {})
    assert cfg is not None and cfg.model is None and known_model(cfg) is None
    assert cfg.model_unknown and "2 value(s) to the api-key flag" in cfg.model_unknown


def test_no_default_is_assumed_when_an_unread_config_file_may_name_the_model() -> None:
    cfg = parse_container(container(["vllm", "serve", "--config", "/etc/v.yaml"]), {})
    assert cfg is not None and cfg.model is None and known_model(cfg) is None


# ---- 2. env values built from variables not read with the spec --------------------------

def _parse(c: dict[str, Any]) -> Any:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [c]}}
    cfg = parse_container(c, pod_env(pod, c))
    assert cfg is not None
    return cfg


def test_a_model_env_that_refers_to_a_configmap_variable_is_unevaluated() -> None:
    cfg = _parse(container(["vllm", "serve", "$(MODEL)", "--kv-transfer-config", KTC.replace("ROOT", "/mnt/kv")], [
        {"name": "ORG", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "ORG"}}},
        {"name": "MODEL", "value": "$(ORG)/a"},
    ]))
    assert known_model(cfg) is None
    assert cfg.model_unknown and "ConfigMap cfg key ORG" in cfg.model_unknown and "$(ORG)" in cfg.model_unknown


def test_a_root_env_that_refers_to_a_configmap_variable_is_unevaluated() -> None:
    cfg = _parse(container(["vllm", "serve", "org/a", "--kv-transfer-config", KTC.replace("ROOT", "$(ROOT)")], [
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "X"}}},
        {"name": "ROOT", "value": "/mnt/kv/$(X)"},
    ]))
    assert fs_root(cfg) == "$(ROOT)"
    reasons = [r for lit, r in cfg.unevaluated if lit == "$(ROOT)"]
    assert reasons and "ConfigMap cfg key X" in reasons[0]


def test_nested_literals_and_undefined_references_still_expand_as_the_kubelet_does() -> None:
    c = container(["vllm", "serve", "$(MODEL)"], [
        {"name": "ORG", "value": "org"}, {"name": "MODEL", "value": "$(ORG)/$(NOPE)"}])
    cfg = _parse(c)
    # ORG is literal; NOPE is defined nowhere, so the kubelet keeps it as written
    assert cfg.model == "org/$(NOPE)"
    # with envFrom, NOPE may come from there
    c["envFrom"] = [{"configMapRef": {"name": "bulk"}}]
    cfg = _parse(c)
    assert known_model(cfg) is None and cfg.model_unknown and "envFrom" in cfg.model_unknown


# ---- 3. shell += and $'...' -------------------------------------------------------------

def _shell_root(script: str, env: dict[str, str] | None = None, external: frozenset[str] = frozenset()) -> Any:
    cfg = parse_argv(["/bin/bash", "-c", script], env or {}, external=external)
    assert cfg is not None
    return cfg


def test_plus_equals_appends_as_bash_does() -> None:
    cfg = _shell_root("ROOT=/scratch; ROOT+=/mnt/kv; exec vllm serve org/a --kv-transfer-config "
                      "'" + KTC.replace('"ROOT"', '"\'"$ROOT"\'"') + "'")
    assert fs_root(cfg) == "/scratch/mnt/kv" and not cfg.unevaluated
    found = Shell({}, wanted=lambda w: w[:1] == ["server"]).run_script(
        "export A=x; export A+=y; B+=1 server $A")
    assert found is not None and found[0] == ["server", "xy"] and found[1]["B"] == "1" and found[1]["A"] == "xy"


def test_plus_equals_on_a_variable_from_a_source_not_read_is_unevaluated() -> None:
    cfg = _shell_root("ROOT+=/kv; exec vllm serve org/a --kv-transfer-config "
                      "'" + KTC.replace('"ROOT"', '"\'"$ROOT"\'"') + "'", external=frozenset({"ROOT"}))
    assert fs_root(cfg) == "${ROOT}/kv" and cfg.unevaluated


def test_ansi_c_quoting_is_decoded() -> None:
    assert ansi_c_decode(r"a\tb\n\x41\101\u00e9\'q\z\cA\\") == "a\tb\nAAé'q\\z\x01\\"
    cfg = _shell_root("exec vllm serve $'org/\\x61' --kv-transfer-config $'" + KTC.replace("ROOT", "/mnt/kv\\'s") + "'")
    assert cfg.model == "org/a" and fs_root(cfg) == "/mnt/kv's"
    found = Shell({}, wanted=lambda w: w[:1] == ["server"]).run_script("R=$'/mnt/it\\'s'; server \"$R\" \"$'x'\"")
    assert found is not None and found[0] == ["server", "/mnt/it's", "$'x'"]
