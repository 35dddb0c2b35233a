"""Tests of kubectl_kvreset.engines.vllm.servecmd: every command-line form, the fixtures, and a property."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_kvreset.engines.vllm.servecmd import (
    ServeCommandError,
    ServeConfig,
    expand_human_readable_json,
    human_readable_int,
    image_entrypoint,
    kubernetes_expand,
    parse_argv,
    parse_container,
)

from .llmd_fixtures import container_env, pod_templates, vllm_container


def bash(script: str, env: dict[str, str] | None = None) -> ServeConfig:
    """Parse ``/bin/bash -c script``; the result must be a vLLM server."""
    cfg = parse_argv(["/bin/bash", "-c", script], env or {})
    assert cfg is not None
    return cfg


def argv(*words: str, env: dict[str, str] | None = None) -> ServeConfig:
    cfg = parse_argv(list(words), env or {})
    assert cfg is not None
    return cfg


# ---------------------------------------------------------------------------- fixtures


def test_fixture_01_aggregated() -> None:
    container, env = vllm_container("01-", "-decode")
    cfg = parse_container(container, env)
    assert cfg is not None
    assert cfg.entrypoint == "vllm serve"
    assert cfg.model == "Qwen/Qwen3-32B"
    assert cfg.api_ports == (8000,)
    assert cfg.scheme == "http"
    assert cfg.kv_transfer_config is None
    assert cfg.unresolved_vars == ()


@pytest.mark.parametrize("suffix,port", [("-decode", 8200), ("-prefill", 8000)])
def test_fixture_02_pd_nixl(suffix: str, port: int) -> None:
    container, env = vllm_container("02-", suffix)
    cfg = parse_container(container, env)
    assert cfg is not None
    assert cfg.model == "openai/gpt-oss-120b"
    assert cfg.api_ports == (port,)
    assert dict(cfg.kv_transfer_config or {}) == {"kv_connector": "NixlConnector",
                                                   "kv_role": "kv_both"}


@pytest.mark.parametrize("suffix,port", [("-decode", 8200), ("-prefill", 8000)])
def test_fixture_03_modelservice(suffix: str, port: int) -> None:
    container, env = vllm_container("03-", suffix)
    cfg = parse_container(container, env)
    assert cfg is not None
    assert cfg.model == "facebook/opt-125m"
    assert cfg.served_model_name == "facebook/opt-125m"
    assert cfg.api_ports == (port,)
    assert (cfg.kv_transfer_config or {})["kv_connector"] == "NixlConnector"


def test_fixture_03_epp_is_not_vllm() -> None:
    for name, spec in pod_templates("03-"):
        if name.endswith("-epp"):
            container = spec["containers"][0]
            assert parse_container(container, container_env(container)) is None
            return
    raise AssertionError("no EPP deployment in fixture 03")


def test_fixture_03_sidecar_image_is_not_vllm() -> None:
    for name, spec in pod_templates("02-"):
        if name.endswith("-decode"):
            sidecar = spec["initContainers"][0]
            assert "command" not in sidecar
            assert parse_container(sidecar, {}) is None
            return
    raise AssertionError("no decode deployment in fixture 02")


def test_fixture_05_tiered_bash_script() -> None:
    container, env = vllm_container("05-", "-decode")
    cfg = parse_container(container, env)
    assert cfg is not None
    assert cfg.argv[:3] == ("vllm", "serve", "Qwen/Qwen3-32B")
    assert cfg.model == "Qwen/Qwen3-32B"
    assert cfg.api_ports == (8000,)
    ktc = cfg.kv_transfer_config
    assert ktc is not None
    assert ktc["kv_connector"] == "OffloadingConnector"
    extra = ktc["kv_connector_extra_config"]
    assert extra["spec_name"] == "TieringOffloadingSpec"
    assert extra["cpu_bytes_to_use"] == 107374182400
    assert extra["secondary_tiers"][0]["root_dir"] == "/mnt/files-storage"
    assert cfg.env["PYTHONHASHSEED"] == "42"


LWS_ENV = {"LWS_GROUP_SIZE": "2", "LWS_LEADER_ADDRESS": "leader.ns.svc", "LWS_WORKER_INDEX": "1"}


@pytest.mark.parametrize("suffix,first", [("-decode", 8200), ("-prefill", 8000)])
def test_fixture_06_wide_ep_dp_multiport(suffix: str, first: int) -> None:
    container, env = vllm_container("06-", suffix)
    assert env["DP_SIZE_LOCAL"] == "8"
    env.update(LWS_ENV)
    cfg = parse_container(container, env)
    assert cfg is not None
    assert cfg.model == "deepseek-ai/DeepSeek-R1-0528"
    assert cfg.api_ports == tuple(range(first, first + 8))
    assert cfg.data_parallel_size_local == 8
    assert dict(cfg.kv_transfer_config or {}) == {
        "kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_load_failure_policy": "fail"}
    words = list(cfg.argv)
    # $((LWS_GROUP_SIZE * DP_SIZE_LOCAL)) and START_RANK=$(( ${LWS_WORKER_INDEX:-0} * DP ))
    assert words[words.index("--data-parallel-size") + 1] == "16"
    assert words[words.index("--data-parallel-start-rank") + 1] == "8"
    assert words[words.index("--data-parallel-address") + 1] == "leader.ns.svc"
    assert cfg.unresolved_vars == ()
    # the comment lines after the last flag are not arguments
    assert not any(w.startswith("#") or "otlp" in w for w in words)


def test_fixture_06_without_lws_env_reports_unresolved() -> None:
    container, env = vllm_container("06-", "-decode")
    cfg = parse_container(container, env)
    assert cfg is not None
    assert "LWS_GROUP_SIZE" in cfg.unresolved_vars
    assert "LWS_LEADER_ADDRESS" in cfg.unresolved_vars
    assert "LWS_WORKER_INDEX" not in cfg.unresolved_vars  # has a :-0 default
    assert cfg.api_ports == tuple(range(8200, 8208))


# ---------------------------------------------------------------------------- image entrypoints


@pytest.mark.parametrize("image,expected", [
    ("vllm/vllm-openai:v0.23.0", ("vllm", "serve")),
    ("docker.io/vllm/vllm-openai:latest", ("vllm", "serve")),
    ("vllm/vllm-openai:v0.20.0-cu130", ("vllm", "serve")),
    ("vllm/vllm-openai@sha256:abcd", ("vllm", "serve")),
    ("ghcr.io/llm-d/llm-d-cuda:v0.8.0", ("python3", "-m", "vllm.entrypoints.openai.api_server")),
    ("ghcr.io/llm-d/llm-d:v0.2.0", ("python3", "-m", "vllm.entrypoints.openai.api_server")),
    ("ghcr.io/llm-d/llm-d-cuda-dev:sha-a1bcf21",
     ("python3", "-m", "vllm.entrypoints.openai.api_server")),
    ("ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0", None),
    ("ghcr.io/llm-d/llm-d-routing-sidecar:v0.2.0", None),
    ("ghcr.io/llm-d/llm-d-inference-scheduler:v0.2.1", None),
    ("nginx:1.27", None),
    ("", None),
])
def test_image_entrypoint(image: str, expected: tuple[str, ...] | None) -> None:
    assert image_entrypoint(image) == expected


def test_no_command_vllm_image_args_start_with_model() -> None:
    cfg = parse_container({"image": "vllm/vllm-openai:v0.26.0",
                           "args": ["Qwen/Qwen3-8B", "--port", "9000"]}, {})
    assert cfg is not None
    assert cfg.argv[:3] == ("vllm", "serve", "Qwen/Qwen3-8B")
    assert cfg.model == "Qwen/Qwen3-8B"
    assert cfg.api_ports == (9000,)
    assert any("entrypoint" in n for n in cfg.notes)


def test_no_command_llmd_image_runs_api_server() -> None:
    cfg = parse_container({"image": "ghcr.io/llm-d/llm-d-cuda:v0.9.0",
                           "args": ["--model", "m/x", "--port=8200"]}, {})
    assert cfg is not None
    assert cfg.entrypoint == "api_server"
    assert cfg.model == "m/x"
    assert cfg.api_ports == (8200,)


def test_no_command_unknown_image_is_none() -> None:
    assert parse_container({"image": "busybox", "args": ["sleep", "1"]}, {}) is None


def test_custom_entrypoint_table() -> None:
    table = (("my/vllm", ("vllm", "serve")),)
    cfg = parse_container({"image": "my/vllm:1", "args": ["m"]}, {}, image_entrypoints=table)
    assert cfg is not None and cfg.model == "m"


# ---------------------------------------------------------------------------- Kubernetes $(VAR)


@pytest.mark.parametrize("text,expected", [
    ("--port=$(PORT)", "--port=8200"),
    ("$$(PORT)", "$(PORT)"),
    ("$(MISSING)", "$(MISSING)"),
    ("a$$b", "a$b"),
    ("$PORT", "$PORT"),
    ("$((A * B))", "$((A * B))"),
])
def test_kubernetes_expand(text: str, expected: str) -> None:
    assert kubernetes_expand(text, {"PORT": "8200"}) == expected


def test_container_kubernetes_expansion_and_unresolved() -> None:
    cfg = parse_container({"command": ["vllm", "serve"],
                           "args": ["$(MODEL)", "--port", "$(PORT)", "--x", "$(NOPE)"]},
                          {"MODEL": "a/b", "PORT": "8100"})
    assert cfg is not None
    assert cfg.model == "a/b"
    assert cfg.api_ports == (8100,)
    assert cfg.unresolved_vars == ("NOPE",)


# ---------------------------------------------------------------------------- shell scripts


def test_script_comments_continuations_and_several_commands() -> None:
    script = """
    # a comment with 'quotes' and $(( 1 / 0 ))
    set -e; mkdir -p /tmp/x && cd /tmp/x
    find /dev/shm -type f -delete   # trailing comment
    exec vllm serve \\
      my/model \\
      --port 8300 # comment after the last flag
    echo never
    """
    cfg = bash(script)
    assert cfg.argv == ("vllm", "serve", "my/model", "--port", "8300")
    assert cfg.api_ports == (8300,)


@pytest.mark.parametrize("shell", [["/bin/sh", "-c"], ["bash", "-lc"], ["/bin/bash", "-ec"],
                                   ["bash", "-o", "pipefail", "-c"]])
def test_shell_forms(shell: list[str]) -> None:
    cfg = parse_argv([*shell, "vllm serve m --port 8001"], {})
    assert cfg is not None and cfg.api_ports == (8001,)


def test_shell_command_and_args_split() -> None:
    cfg = parse_container({"command": ["/bin/bash", "-c"],
                           "args": ["exec python3 -m vllm.entrypoints.openai.api_server --model q"]},
                          {})
    assert cfg is not None
    assert cfg.entrypoint == "api_server"
    assert cfg.argv[0] == "python3"


@pytest.mark.parametrize("script,env,expected_port", [
    ("vllm serve m --port $P", {"P": "8201"}, (8201,)),
    ("vllm serve m --port ${P}", {"P": "8202"}, (8202,)),
    ("vllm serve m --port ${P:-8203}", {}, (8203,)),
    ("vllm serve m --port ${P:-8203}", {"P": ""}, (8203,)),
    ("vllm serve m --port ${P-8203}", {"P": "8204"}, (8204,)),
    ("vllm serve m --port \"$P\"", {"P": "8205"}, (8205,)),
    ("vllm serve m --port $((8000 + 2 * 3))", {}, (8006,)),
    ("vllm serve m --port $(( BASE + OFF ))", {"BASE": "8100", "OFF": "7"}, (8107,)),
    ("vllm serve m --port $(( $BASE + ${OFF:-1} ))", {"BASE": "8100"}, (8101,)),
    ("P=8400; vllm serve m --port $P", {}, (8400,)),
    ("export P=8401\nvllm serve m --port $P", {}, (8401,)),
    ("X=3\nP=$(( 8400 + X * 2 ))\nexec vllm serve m --port $P", {}, (8406,)),
    ("eval \"exec vllm serve m --port 8501\"", {}, (8501,)),
    ("true && vllm serve m --port 8502 2>&1 | tee /tmp/log", {}, (8502,)),
    ("vllm serve m --port 8503 > /tmp/log 2>&1 &\nwait", {}, (8503,)),
    ("if true; then exec vllm serve m --port 8504; fi", {}, (8504,)),
])
def test_script_expansions(script: str, env: dict[str, str], expected_port: tuple[int, ...]
                           ) -> None:
    assert bash(script, env).api_ports == expected_port


@pytest.mark.parametrize("expr,value", [
    ("7 / 2", "3"), ("-7 / 2", "-3"), ("7 % 3", "1"), ("-7 % 3", "-1"), ("(1 + 2) * 3", "9"),
    ("-(2 - 5)", "3"), ("+4", "4"), ("2*3+4*5", "26"), ("10 - 2 - 3", "5"),
])
def test_arithmetic(expr: str, value: str) -> None:
    cfg = bash(f"vllm serve m --x $(( {expr} ))")
    assert cfg.argv[-1] == value


def test_arithmetic_division_by_zero_kept_literal() -> None:
    cfg = bash("vllm serve m --x $(( 1 / 0 ))")
    assert cfg.argv[-1] == "$(( 1 / 0 ))"
    assert any("division by 0" in n for n in cfg.notes)


def test_single_quotes_do_not_expand() -> None:
    cfg = bash("vllm serve m --kv-transfer-config '{\"kv_connector\":\"$NOT_A_VAR\"}'")
    assert (cfg.kv_transfer_config or {})["kv_connector"] == "$NOT_A_VAR"
    assert cfg.unresolved_vars == ()


def test_unquoted_expansion_is_word_split_and_quotes_in_values_are_literal() -> None:
    cfg = bash("vllm serve m $EXTRA", {"EXTRA": "--port 8600 --served-model-name it's"})
    assert cfg.api_ports == (8600,)
    assert cfg.served_model_name == "it's"


def test_unresolved_script_var_kept_literal_and_port_noted() -> None:
    cfg = bash("vllm serve m --port $VLLM_PORT")
    assert cfg.unresolved_vars == ("VLLM_PORT",)
    assert cfg.api_ports == ()
    assert any("--port" in n for n in cfg.notes)


def test_prefix_assignment_and_env_command_reach_vllm_env() -> None:
    cfg = bash("VLLM_USE_SIMPLE_KV_OFFLOAD=1 exec env A=b vllm serve m", {"C": "d"})
    assert cfg.env["VLLM_USE_SIMPLE_KV_OFFLOAD"] == "1"
    assert cfg.env["A"] == "b"
    assert cfg.env["C"] == "d"


def test_unexported_shell_var_not_in_env() -> None:
    cfg = bash("LOCAL=1\nexport EXP=2\nvllm serve m")
    assert "LOCAL" not in cfg.env
    assert cfg.env["EXP"] == "2"


def test_kserve_style_eval_with_positional_dashdash() -> None:
    script = ('if [ -f /x ]; then echo; fi\n'
              'eval "exec vllm serve /mnt/models --served-model-name ${NAME} --port 8001 '
              '--ssl-certfile /c.pem --ssl-keyfile /k.pem"')
    cfg = parse_argv(["/bin/bash", "-c", script, "--"], {"NAME": "llama"})
    assert cfg is not None
    assert cfg.model == "/mnt/models"
    assert cfg.served_model_name == "llama"
    assert cfg.api_ports == (8001,)
    assert cfg.scheme == "https"


def test_script_without_vllm_is_none() -> None:
    assert parse_argv(["/bin/sh", "-c", "sleep infinity"], {}) is None
    assert parse_argv(["vllm", "launch", "render", "m"], {}) is None
    assert parse_argv(["python3", "-m", "http.server"], {}) is None
    assert parse_argv(["/app/pd-sidecar", "--port=8000"], {}) is None
    assert parse_argv([], {}) is None


def test_unbalanced_quote_raises() -> None:
    with pytest.raises(ServeCommandError, match="quote"):
        parse_argv(["bash", "-c", "vllm serve m --x 'oops"], {})


# ---------------------------------------------------------------------------- entrypoints & flags


@pytest.mark.parametrize("words,entrypoint,model", [
    (["vllm", "serve", "m/a"], "vllm serve", "m/a"),
    (["/usr/local/bin/vllm", "serve", "m/a"], "vllm serve", "m/a"),
    (["vllm", "serve", "--model", "m/b"], "vllm serve", "m/b"),
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m/c"], "api_server",
     "m/c"),
    (["python3.12", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model=m/d"],
     "api_server", "m/d"),
    (["python", "-m", "vllm.entrypoints.cli.main", "serve", "m/e"], "vllm serve", "m/e"),
    (["python3", "-m", "vllm.entrypoints.openai.api_server"], "api_server", None),
])
def test_entrypoints(words: list[str], entrypoint: str, model: str | None) -> None:
    cfg = argv(*words)
    assert cfg.entrypoint == entrypoint
    assert cfg.model == model
    assert cfg.argv == tuple(words)


@pytest.mark.parametrize("words,ports", [
    (["vllm", "serve", "m"], (8000,)),
    (["vllm", "serve", "m", "--port=8100"], (8100,)),
    (["vllm", "serve", "m", "--port", "8100", "--port", "8101"], (8101,)),
    (["vllm", "serve", "m", "--data-parallel-size-local", "4"], (8000,)),
    (["vllm", "serve", "m", "--data-parallel-multi-port-external-lb", "--data_parallel_size_local",
      "4", "--data-parallel-supervisor-port", "8004"], (8000, 8001, 8002, 8003)),
    (["vllm", "serve", "m", "--data-parallel-multi-port-external-lb", "-dpl", "2", "--port",
      "9000"], (9000, 9001)),
    (["vllm", "serve", "--data-parallel-multi-port-external-lb", "m", "--data-parallel-size",
      "3"], (8000, 8001, 8002)),
])
def test_ports(words: list[str], ports: tuple[int, ...]) -> None:
    cfg = argv(*words)
    assert cfg.api_ports == ports
    assert cfg.model == "m"


def test_boolean_flags_do_not_eat_the_model() -> None:
    cfg = argv("vllm", "serve", "--enable-expert-parallel", "--enforce-eager",
               "--no-enable-prefix-caching", "--enable-dbo", "-ep", "m/x", "--port", "8001")
    assert cfg.model == "m/x"
    assert cfg.api_ports == (8001,)


def test_unknown_flag_takes_following_value() -> None:
    cfg = argv("vllm", "serve", "--some-new-flag", "value", "m/x")
    assert cfg.model == "m/x"
    cfg2 = argv("vllm", "serve", "--some-new-flag", "--port", "8002", "m/y")
    assert cfg2.model == "m/y"
    assert cfg2.api_ports == (8002,)


def test_negative_number_is_a_value() -> None:
    cfg = argv("vllm", "serve", "--max-model-len", "-1", "m")
    assert cfg.model == "m"


def test_served_model_name_takes_several_values() -> None:
    cfg = argv("vllm", "serve", "m", "--served-model-name", "a", "b", "--port", "8001")
    assert cfg.served_model_name == "a"
    assert cfg.api_ports == (8001,)


@pytest.mark.parametrize("flag", ["--ssl-certfile", "--ssl_keyfile"])
def test_https(flag: str) -> None:
    assert argv("vllm", "serve", "m", flag, "/tls/x.pem").scheme == "https"


def test_kv_offloading_flags() -> None:
    cfg = argv("vllm", "serve", "m", "--kv-offloading-size", "80")
    assert cfg.kv_offloading_size_gib == 80.0
    assert cfg.kv_offloading_backend == "native"
    cfg2 = argv("vllm", "serve", "m", "--kv_offloading_size=1.5", "--kv-offloading-backend",
                "lmcache")
    assert cfg2.kv_offloading_size_gib == 1.5
    assert cfg2.kv_offloading_backend == "lmcache"
    assert argv("vllm", "serve", "m").kv_offloading_backend is None


def test_config_file_noted() -> None:
    cfg = argv("vllm", "serve", "m", "--config", "/etc/vllm/c.yaml")
    assert cfg.config_file == "/etc/vllm/c.yaml"
    assert any("not read" in n for n in cfg.notes)


# ---------------------------------------------------------------------------- kv-transfer-config


KTC = '{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}'


@pytest.mark.parametrize("words", [
    ["--kv-transfer-config", KTC],
    [f"--kv-transfer-config={KTC}"],
    ["--kv_transfer_config", KTC],
    [f"--kv_transfer_config={KTC}"],
    ["--kv-transfer-config", '{"kv_connector":"NixlConnector"}', "--kv-transfer-config", KTC],
])
def test_kv_transfer_config_spellings(words: list[str]) -> None:
    cfg = argv("vllm", "serve", "m", *words)
    assert dict(cfg.kv_transfer_config or {}) == {"kv_connector": "OffloadingConnector",
                                                   "kv_role": "kv_both"}


def test_kv_transfer_config_multiline_json_in_script() -> None:
    cfg = bash("""vllm serve m --kv-transfer-config '{
        "kv_connector": "NixlConnector",
        "kv_role": "kv_both"
    }' --port 8001""")
    assert (cfg.kv_transfer_config or {})["kv_connector"] == "NixlConnector"
    assert cfg.api_ports == (8001,)


def test_dotted_keys_merge_and_win_over_full_json() -> None:
    cfg = argv("vllm", "serve", "m",
               "--kv-transfer-config.kv_connector", "OffloadingConnector",
               "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
               "--kv_transfer_config.kv_connector_extra_config.cpu_bytes_to_use", "1e10",
               "--kv-transfer-config.kv_connector_extra_config.block_size=64",
               "--kv-transfer-config.kv_connector_extra_config.spec_name", "CPUOffloadingSpec",
               "--kv-transfer-config.kv_connector_extra_config.n", "10g",
               "--kv-transfer-config.kv_role", "kv_both",
               "--kv-transfer-config.kv_connector_extra_config.tags+", "a",
               "--kv-transfer-config.kv_connector_extra_config.tags+", "b")
    assert dict(cfg.kv_transfer_config or {}) == {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 1e10, "block_size": 64,
                                      "spec_name": "CPUOffloadingSpec", "n": 10**10,
                                      "tags": ["a", "b"]},
    }
    assert any("dotted" in n for n in cfg.notes)


@pytest.mark.parametrize("text,expected", [
    ('{"a": 80g}', '{"a": 80000000000}'),
    ('{"a": 2G}', '{"a": 2147483648}'),
    ('{"a": 25.6k, "b": 1K}', '{"a": 25600, "b": 1024}'),
    ('{"s": "80g", "t": "x 1k y"}', '{"s": "80g", "t": "x 1k y"}'),
    ('{"s": "a\\"1k", "n": 1m}', '{"s": "a\\"1k", "n": 1000000}'),
    ('{"a": 3T, "b": 1t}', '{"a": 3298534883328, "b": 1000000000000}'),
])
def test_human_readable_json(text: str, expected: str) -> None:
    assert expand_human_readable_json(text) == expected


def test_human_readable_in_kv_transfer_config() -> None:
    cfg = argv("vllm", "serve", "m", "--kv-transfer-config",
               '{"kv_connector":"OffloadingConnector","kv_role":"kv_both",'
               '"kv_connector_extra_config":{"cpu_bytes_to_use":80G}}')
    assert (cfg.kv_transfer_config or {})["kv_connector_extra_config"]["cpu_bytes_to_use"] \
        == 80 * 2**30


@pytest.mark.parametrize("value,expected", [
    ("1000", 1000), ("25.6k", 25600), ("2M", 2 * 2**20), ("3g", 3 * 10**9), ("1T", 2**40)])
def test_human_readable_int(value: str, expected: int) -> None:
    assert human_readable_int(value) == expected


def test_human_readable_binary_decimal_rejected() -> None:
    with pytest.raises(ValueError):
        human_readable_int("1.5G")
    with pytest.raises(ServeCommandError, match="--kv-transfer-config"):
        argv("vllm", "serve", "m", "--kv-transfer-config", '{"a": 1.5G}')


@pytest.mark.parametrize("bad", ['{"kv_connector": ', "[1, 2]", "not json", '{"a": 1,}'])
def test_invalid_kv_transfer_config_names_the_flag(bad: str) -> None:
    with pytest.raises(ServeCommandError, match="--kv-transfer-config"):
        argv("vllm", "serve", "m", "--kv-transfer-config", bad)


def test_invalid_port_raises() -> None:
    with pytest.raises(ServeCommandError, match="--port"):
        argv("vllm", "serve", "m", "--port", "http")


# ---------------------------------------------------------------------------- properties


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_script_parser_only_raises_serve_command_error(script: str) -> None:
    try:
        parse_argv(["/bin/bash", "-c", script], {"A": "1"})
        parse_argv(["/bin/bash", "-c", "vllm serve m " + script], {"A": "1"})
    except ServeCommandError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=12))
def test_argv_parser_only_raises_serve_command_error(words: list[str]) -> None:
    try:
        parse_argv(["vllm", "serve", *words], {})
        parse_container({"command": ["vllm", "serve"], "args": words}, {"X": "y"})
    except ServeCommandError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["$", "$(", "$((", "${", "'", '"', "\\", "#", ";", "&", "|", " ", "\n",
                        "A", "=", "1", "+", "*", "/", "%", ")", "}", ":-", "vllm serve m"]),
       st.data())
def test_shell_metachar_soup(first: str, data: Any) -> None:
    pieces = data.draw(st.lists(st.sampled_from(
        ["$", "$(", "$((", "${", "'", '"', "\\", "#", ";", "&", "|", " ", "\n", "A", "=", "1",
         "+", "*", "/", "%", ")", "}", ":-", "vllm serve m", "))", "B"]), max_size=25))
    script = first + "".join(pieces)
    try:
        parse_argv(["sh", "-c", script], {"A": "2"})
    except ServeCommandError:
        pass


@pytest.mark.parametrize(("flags", "engines"), [
    ([], 1),
    (["--data-parallel-size", "4"], 4),                       # internal LB: one server, every rank
    (["-dp", "4", "-dpl", "2"], 4),                           # still internal: the head balances over all
    (["-dp", "4", "-dpl", "2", "--data-parallel-hybrid-lb"], 2),  # the node's local ranks
    (["-dp", "4", "--data-parallel-external-lb"], 1),         # a server per rank
    (["-dp", "4", "--data-parallel-multi-port-external-lb", "-dpl", "4"], 1),
])
def test_engines_behind_each_port(flags: list[str], engines: int) -> None:
    cfg = parse_argv(["vllm", "serve", "org/model", *flags], {})
    assert cfg is not None and cfg.engines_per_port == engines


def test_python_module_finds_the_module_after_interpreter_options() -> None:
    from kubectl_kvreset.engines.vllm.servecmd import python_module

    assert python_module(["/usr/bin/python3", "-u", "-X", "utf8", "-m", "sglang.launch_server", "--port", "1"]) == (
        "sglang.launch_server", 6)
    assert python_module(["python3.12", "-m", "vllm.entrypoints.openai.api_server"]) == (
        "vllm.entrypoints.openai.api_server", 3)
    assert python_module(["python", "-c", "import x"]) is None
    assert python_module(["python", "serve.py", "-m", "x"]) is None
    assert python_module(["python", "-m"]) is None
    assert python_module(["pythonista", "-m", "x"]) is None
