"""Unit tests for the simulator's own argv reading (tests/sim/serveargs.py, images.py)."""

from __future__ import annotations

import pytest

from tests.sim.connectorinfo import ConnectorInfo, read_connectors
from tests.sim.images import image_entrypoint, image_vllm_version, is_sidecar_image
from tests.sim.serveargs import (
    container_argv,
    expand_human_numbers,
    expand_k8s_vars,
    human_readable_int,
    parse_vllm_argv,
)
from tests.sim.sidecarargs import parse_sidecar_args


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("--port=$(PORT)", {"PORT": "8200"}, "--port=8200"),
        ("$(MISSING)", {}, "$(MISSING)"),
        ("$$(PORT)", {"PORT": "1"}, "$(PORT)"),
        ("$$$(PORT)", {"PORT": "1"}, "$1"),
        ("$PORT ${PORT}", {"PORT": "1"}, "$PORT ${PORT}"),
        ("tail $", {}, "tail $"),
        ("$(A)$(B)", {"A": "x", "B": "y"}, "xy"),
        ("$(UNCLOSED", {"UNCLOSED": "z"}, "$(UNCLOSED"),
    ],
)
def test_expand_k8s_vars(text: str, env: dict[str, str], expected: str) -> None:
    assert expand_k8s_vars(text, env) == expected


def test_container_argv_uses_image_entrypoint() -> None:
    c = {"image": "vllm/vllm-openai:v0.26.0", "args": ["m", "--port", "$(P)"]}
    assert container_argv(c, {"P": "9"}) == ["vllm", "serve", "m", "--port", "9"]
    llmd = {"image": "ghcr.io/llm-d/llm-d:v0.2.0", "args": ["--model", "m"]}
    assert container_argv(llmd, {}) == ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert container_argv({"image": "busybox", "args": ["x"]}, {}) is None
    assert container_argv({"image": "busybox", "command": ["sh"], "args": ["-c", "x"]}, {}) == ["sh", "-c", "x"]


def test_images() -> None:
    assert image_vllm_version("vllm/vllm-openai:v0.20.0-cu130") == "0.20.0"
    assert image_vllm_version("docker.io/vllm/vllm-openai:v0.27.1") == "0.27.1"
    assert image_vllm_version("vllm/vllm-openai:latest") is None
    assert image_vllm_version("ghcr.io/llm-d/llm-d-cuda:v0.9.0") == "0.26.0"
    assert image_vllm_version("ghcr.io/llm-d/llm-d-cuda:v0.8.1") == "0.23.0"
    assert image_vllm_version("ghcr.io/llm-d/llm-d-cuda:v0.7.0") == "0.19.1"
    assert image_vllm_version("ghcr.io/llm-d/llm-d-cuda-dev:sha-a1bcf21") is None
    assert image_vllm_version("ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0") is None
    assert is_sidecar_image("ghcr.io/llm-d/llm-d-routing-sidecar:v0.2.0")
    assert is_sidecar_image("ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0")
    assert not is_sidecar_image("vllm/vllm-openai:v0.26.0")
    assert image_entrypoint("ghcr.io/llm-d/llm-d-inference-scheduler:v0.2.1") is None
    assert image_entrypoint("ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0") is None
    assert image_entrypoint("vllm/vllm-openai-cpu:v0.23.0") == ["vllm", "serve"]


def test_vllm_serve_basic_and_defaults() -> None:
    a = parse_vllm_argv(["vllm", "serve", "Qwen/Qwen3-32B", "--tensor-parallel-size=2"])
    assert a is not None
    assert a.api_ports == (8000,)
    assert a.model == "Qwen/Qwen3-32B"
    assert a.served_model_name == "Qwen/Qwen3-32B"
    assert a.kv_transfer_config is None
    assert parse_vllm_argv(["vllm", "--version"]) is None
    assert parse_vllm_argv(["bash", "-c", "vllm serve x"]) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["vllm", "serve", "m", "--port", "8200"],
        ["vllm", "serve", "m", "--port=8200"],
        ["/usr/local/bin/vllm", "serve", "m", "--port=8200"],
        ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "8200"],
        ["python", "-m", "vllm.entrypoints.cli.main", "serve", "m", "--port", "8200"],
    ],
)
def test_port_spellings(argv: list[str]) -> None:
    a = parse_vllm_argv(argv)
    assert a is not None and a.api_ports == (8200,) and a.model == "m"


def test_dp_multi_port_external_lb_ignores_supervisor_port() -> None:
    a = parse_vllm_argv([
        "vllm", "serve", "deepseek-ai/DeepSeek-R1-0528", "--port", "8200",
        "--data-parallel-multi-port-external-lb", "--data-parallel-supervisor-port=8208",
        "--data-parallel-size", "16", "--data-parallel-size-local", "8", "--data-parallel-start-rank", "8",
    ])
    assert a is not None
    assert a.api_ports == tuple(range(8200, 8208))
    assert a.dp_ranks == tuple(range(8, 16))
    plain = parse_vllm_argv(["vllm", "serve", "m", "--data-parallel-size", "8"])
    assert plain is not None and plain.api_ports == (8000,)


def test_kv_transfer_config_forms() -> None:
    js = '{"kv_connector":"NixlConnector",\n   "kv_role":"kv_both"}'
    for argv in (
        ["vllm", "serve", "m", "--kv-transfer-config", js],
        ["vllm", "serve", "m", f"--kv-transfer-config={js}"],
        ["vllm", "serve", "m", "--kv_transfer_config", js],
    ):
        a = parse_vllm_argv(argv)
        assert a is not None and a.kv_transfer_config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    bad = parse_vllm_argv(["vllm", "serve", "m", "--kv-transfer-config", "{nope"])
    assert bad is not None and bad.kv_transfer_config is None and bad.kv_config_error


def test_kv_transfer_config_dotted_and_human_numbers() -> None:
    a = parse_vllm_argv([
        "vllm", "serve", "m",
        "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
        "--kv-transfer-config.kv_connector", "OffloadingConnector",
        "--kv-transfer-config.kv_role=kv_both",
        "--kv-transfer-config.kv_connector_extra_config.cpu_bytes_to_use", "10G",
    ])
    assert a is not None
    assert a.kv_transfer_config == {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 10 * 1024**3},
    }
    h = parse_vllm_argv(["vllm", "serve", "m", "--kv-transfer-config",
                         '{"kv_connector":"OffloadingConnector","kv_role":"kv_both",'
                         '"kv_connector_extra_config":{"cpu_bytes_to_use":80g,"note":"80g"}}'])
    assert h is not None and h.kv_transfer_config is not None
    assert h.kv_transfer_config["kv_connector_extra_config"] == {"cpu_bytes_to_use": 80_000_000_000, "note": "80g"}


def test_human_readable_int() -> None:
    assert human_readable_int("25.6k") == 25600
    assert human_readable_int("1K") == 1024
    assert human_readable_int("1.5G") is None
    assert human_readable_int("42") == 42
    assert expand_human_numbers('{"a":"1k","b":1k}') == '{"a":"1k","b":1000}'


def test_connectors_tiering_multi_and_shortcut() -> None:
    tiering = {
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1,
            "secondary_tiers": [{"type": "fs", "root_dir": "/mnt/files-storage"}, {"type": "obj", "root_dir": "/x"}],
        },
    }
    assert read_connectors(tiering) == [
        ConnectorInfo("OffloadingConnector", "TieringOffloadingSpec", True, ("/mnt/files-storage",))
    ]
    multi = {"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {
        "connectors": [{"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                       {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}]}}
    got = read_connectors(multi)
    assert [(c.name, c.spec_name, c.cpu_tier, c.in_multi) for c in got] == [
        ("NixlConnector", None, False, True), ("OffloadingConnector", "CPUOffloadingSpec", True, True)]
    legacy = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": {
        "spec_name": "SharedStorageOffloadingSpec", "shared_storage_path": "/mnt/files-storage/kv-cache/"}}
    assert read_connectors(legacy)[0].fs_roots == ("/mnt/files-storage/kv-cache/",)
    assert read_connectors(legacy)[0].cpu_tier is False
    a = parse_vllm_argv(["vllm", "serve", "m", "--kv-offloading-size", "8"])
    assert a is not None and a.kv_offloading_size == 8.0
    assert a.connectors() == [ConnectorInfo("OffloadingConnector", "CPUOffloadingSpec", True)]
    simple = a.connectors({"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"}, "0.33.0")
    assert simple[0].name == "SimpleCPUOffloadConnector"
    lm = parse_vllm_argv(["vllm", "serve", "m", "--kv-offloading-size", "8", "--kv-offloading-backend", "lmcache"])
    assert lm is not None and lm.connectors()[0].name == "LMCacheConnectorV1"


def test_sidecar_args() -> None:
    s = parse_sidecar_args(["--port=8000", "--vllm-port=8200", "--data-parallel-size=8", "--secure-proxy=false"])
    assert s.ports == tuple(range(8000, 8008))
    assert s.vllm_ports == tuple(range(8200, 8208))
    assert s.secure is False
    d = parse_sidecar_args([], "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0")
    assert (d.port, d.vllm_port, d.secure) == (8000, 8200, True)
    legacy = parse_sidecar_args(["-port", "9000"], "ghcr.io/llm-d/llm-d-routing-sidecar:v0.2.0")
    assert (legacy.port, legacy.vllm_port) == (9000, 8001)
    assert parse_sidecar_args(["--secure-proxy"]).secure is True


def _reader(files: dict[str, str]):
    def read(path: str) -> str:
        if path not in files:
            raise OSError(f"{path}: no such file")
        return files[path]
    return read


def test_config_file_flags_go_after_the_model_and_the_command_line_wins() -> None:
    files = {"/c/v.yaml": "port: 8123\nserved_model_name: tiny\nkv-transfer-config:\n"
                          "  kv_connector: OffloadingConnector\n  kv_role: kv_both\n"}
    got = parse_vllm_argv(["vllm", "serve", "m", "--config", "/c/v.yaml"], read_file=_reader(files))
    assert got is not None and got.api_ports == (8123,) and got.model == "m" and got.served_model_name == "tiny"
    assert got.kv_transfer_config == {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}
    over = parse_vllm_argv(["python3", "-m", "vllm.entrypoints.openai.api_server", "--config", "/c/v.yaml",
                            "--port", "9000"], read_file=_reader(files))
    assert over is not None and over.api_ports == (9000,) and over.config_error is None


def test_config_equals_form_and_a_missing_file() -> None:
    eq = parse_vllm_argv(["vllm", "serve", "m", "--config=/c/v.yaml"], read_file=_reader({"/c/v.yaml": "port: 1"}))
    assert eq is not None and eq.api_ports == (8000,) and eq.config_file is None
    missing = parse_vllm_argv(["vllm", "serve", "m", "--config", "/c/v.yaml"], read_file=_reader({}))
    assert missing is not None and missing.api_ports == (8000,) and "no such file" in (missing.config_error or "")
    not_yaml = parse_vllm_argv(["vllm", "serve", "m", "--config", "/c/v.json"],
                               read_file=_reader({"/c/v.json": "port: 1"}))
    assert not_yaml is not None and "yaml" in (not_yaml.config_error or "")


def test_data_parallel_ranks_and_api_servers() -> None:
    """vLLM 0.32.0 ``vllm/entrypoints/cli/serve.py`` defaults ``--api-server-count`` to the
    engines behind the port (internal LB: the DP size; hybrid: the local size; external: 1), and
    the first engine's ``/metrics`` label is the client's first DP rank."""
    from tests.sim.serveargs import parse_vllm_argv

    def args(*flags: str) -> tuple[int, int, int]:
        got = parse_vllm_argv(["vllm", "serve", "m", *flags])
        assert got is not None
        return got.engines, got.first_engine, got.api_servers

    assert args() == (1, 0, 1)
    assert args("--data-parallel-size", "4") == (4, 0, 4)
    assert args("--data-parallel-size", "4", "--api-server-count", "1") == (4, 0, 1)
    assert args("--data-parallel-size", "4", "--data-parallel-size-local", "2", "--data-parallel-start-rank", "2",
                "--data-parallel-hybrid-lb") == (2, 2, 2)
    assert args("--data-parallel-size", "4", "--data-parallel-rank", "3", "--data-parallel-external-lb") == (1, 3, 1)
    module = parse_vllm_argv(["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m",
                              "--data-parallel-size", "2"])
    assert module is not None and (module.engines, module.api_servers) == (2, 1)
