"""vLLM --config files: where Kubernetes mounts them from, the flags vLLM reads out of them, and
their place in the command line (vLLM 0.32.0 vllm/utils/argparse_utils.py)."""

from __future__ import annotations

import base64
import json

import pytest

from kubectl_kvreset.engines.vllm.configfile import (
    ConfigFileError,
    ConfigSource,
    config_args,
    decode_key,
    locate,
)
from kubectl_kvreset.engines.vllm.kvconfig import layout_from_serve
from kubectl_kvreset.engines.vllm.servecmd import parse_container

KTC = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
       "kv_connector_extra_config": {"cpu_bytes_to_use": 1000000000, "block_size": 64}}


def pod_with(volume: dict, mount: dict) -> tuple[dict, dict]:
    container = {"name": "vllm", "volumeMounts": [mount]}
    return {"metadata": {"namespace": "ns"}, "spec": {"volumes": [volume], "containers": [container]}}, container


@pytest.mark.parametrize("volume,mount,path,want", [
    ({"name": "v", "configMap": {"name": "cm"}}, {"name": "v", "mountPath": "/etc/vllm"},
     "/etc/vllm/config.yaml", ConfigSource("ConfigMap", "cm", "config.yaml", "v")),
    ({"name": "v", "configMap": {"name": "cm", "items": [{"key": "k1", "path": "sub/serve.yaml"}]}},
     {"name": "v", "mountPath": "/etc/vllm/"}, "/etc/vllm/sub/serve.yaml", ConfigSource("ConfigMap", "cm", "k1", "v")),
    ({"name": "v", "secret": {"secretName": "s"}}, {"name": "v", "mountPath": "/c/x.yaml", "subPath": "x.yaml"},
     "/c/x.yaml", ConfigSource("Secret", "s", "x.yaml", "v")),
    ({"name": "v", "configMap": {"name": "cm", "items": [{"key": "k", "path": "a/b.yaml"}]}},
     {"name": "v", "mountPath": "/cfg", "subPath": "a"}, "/cfg/b.yaml", ConfigSource("ConfigMap", "cm", "k", "v")),
    ({"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}},
                                             {"configMap": {"name": "other"}},
                                             {"secret": {"name": "s",
                                                         "items": [{"key": "k", "path": "vllm/c.yml"}]}}]}},
     {"name": "v", "mountPath": "/p"}, "/p/vllm/c.yml", ConfigSource("Secret", "s", "k", "v")),
])
def test_locate_follows_every_configmap_and_secret_form(volume, mount, path, want) -> None:
    pod, container = pod_with(volume, mount)
    assert locate(pod, container, path) == want


def test_locate_relative_path_uses_working_dir() -> None:
    pod, container = pod_with({"name": "v", "configMap": {"name": "cm"}}, {"name": "v", "mountPath": "/w"})
    container["workingDir"] = "/w"
    assert locate(pod, container, "c.yaml").key == "c.yaml"
    del container["workingDir"]
    with pytest.raises(ConfigFileError, match="relative path"):
        locate(pod, container, "c.yaml")


@pytest.mark.parametrize("volume,mount,path,words", [
    ({"name": "v", "persistentVolumeClaim": {"claimName": "pvc"}}, {"name": "v", "mountPath": "/d"},
     "/d/c.yaml", "PersistentVolumeClaim"),
    ({"name": "v", "emptyDir": {}}, {"name": "v", "mountPath": "/d"}, "/d/c.yaml", "emptyDir"),
    ({"name": "v", "configMap": {"name": "cm"}}, {"name": "v", "mountPath": "/d"}, "/etc/c.yaml", "container image"),
    ({"name": "v", "configMap": {"name": "cm", "items": [{"key": "k", "path": "x.yaml"}]}},
     {"name": "v", "mountPath": "/d"}, "/d/c.yaml", "no key"),
    ({"name": "v", "configMap": {"name": "cm"}}, {"name": "v", "mountPath": "/d", "subPathExpr": "$(POD)"},
     "/d/c.yaml", "subPathExpr"),
])
def test_locate_says_why_a_file_cannot_be_read(volume, mount, path, words) -> None:
    pod, container = pod_with(volume, mount)
    with pytest.raises(ConfigFileError, match=words):
        locate(pod, container, path)


def test_decode_key_reads_configmap_data_binary_data_and_secrets() -> None:
    src = ConfigSource("ConfigMap", "cm", "c.yaml", "v")
    assert decode_key({"data": {"c.yaml": "port: 1"}}, src) == "port: 1"
    assert decode_key({"binaryData": {"c.yaml": base64.b64encode(b"port: 2").decode()}}, src) == "port: 2"
    sec = ConfigSource("Secret", "s", "c.yaml", "v")
    assert decode_key({"data": {"c.yaml": base64.b64encode(b"port: 3").decode()}}, sec) == "port: 3"
    with pytest.raises(ConfigFileError, match="has no key"):
        decode_key({"data": {}}, sec)


def test_config_args_follow_vllm_load_config_file() -> None:
    text = ("port: 8123\nenforce_eager: true\nenable-prefix-caching: false\n"
            "served-model-name: [a, b]\nempty: []\nkv-transfer-config:\n  kv_connector: X\n  kv_role: kv_both\n")
    args, notes = config_args(text, "/c/v.yaml")
    assert args == ["--port", "8123", "--enforce_eager", "--no-enable-prefix-caching",
                    "--served-model-name", "a", "b", "--kv-transfer-config",
                    json.dumps({"kv_connector": "X", "kv_role": "kv_both"})]
    assert notes == []


def test_nested_mapping_per_version() -> None:
    text = "kv-transfer-config:\n  kv_connector: X\n"
    assert config_args(text, "c.yaml", version=(0, 16, 0))[0][1] == '{"kv_connector": "X"}'
    assert config_args(text, "c.yaml", version=(0, 14, 0))[0][1] == "{'kv_connector': 'X'}"
    args, notes = config_args(text, "c.yaml", version=(0, 15, 1))
    assert args[1] == '{"kv_connector": "X"}' and "0.15" in notes[0]


@pytest.mark.parametrize("text,path,words", [
    ("port: 1", "/c/v.json", "only .yaml/.yml"),
    ("port: [1", "/c/v.yaml", "not valid YAML"),
    ("- a\n- b\n", "/c/v.yml", "not a mapping"),
])
def test_config_args_refuse_what_vllm_refuses(text, path, words) -> None:
    with pytest.raises(ConfigFileError, match=words):
        config_args(text, path)


def reader_of(text: str, calls: list[str] | None = None):
    def read(path: str) -> tuple[str, str]:
        if calls is not None:
            calls.append(path)
        return text, "ConfigMap cm key c.yaml"
    return read


def serve(command: list[str], text: str, calls: list[str] | None = None):
    return parse_container({"name": "vllm", "command": command}, {}, config_reader=reader_of(text, calls))


def test_file_sets_port_and_tiers_and_the_command_line_wins() -> None:
    text = "port: 8123\nkv_transfer_config: '" + json.dumps(KTC) + "'\n"
    cfg = serve(["vllm", "serve", "m", "--config", "/c/c.yaml"], text)
    assert cfg.api_ports == (8123,) and cfg.kv_transfer_config == KTC and cfg.model == "m"
    assert cfg.config_source == "ConfigMap cm key c.yaml" and cfg.config_error is None
    assert {t.kind.value for t in layout_from_serve(cfg).tiers} == {"gpu", "cpu"}
    over = serve(["vllm", "serve", "m", "--port", "9000", "--config", "/c/c.yaml"], text)
    assert over.api_ports == (9000,)
    api = serve(["python3", "-m", "vllm.entrypoints.openai.api_server", "--config", "/c/c.yaml",
                 "--model", "m", "--port", "9001"], text)
    assert api.api_ports == (9001,) and api.kv_transfer_config == KTC


def test_model_may_come_from_the_file() -> None:
    cfg = serve(["vllm", "serve", "--config", "/c/c.yaml"], "model: from-file\nport: 8124\n")
    assert cfg.model == "from-file" and cfg.api_ports == (8124,)


def test_config_equals_form_is_not_expanded_as_in_vllm() -> None:
    calls: list[str] = []
    cfg = serve(["vllm", "serve", "m", "--config=/c/c.yaml"], "port: 8123\n", calls)
    assert calls == [] and cfg.api_ports == (8000,) and cfg.config_error is None
    assert any("not expanded" in n for n in cfg.notes)


def test_unreadable_file_leaves_the_port_unknown() -> None:
    def refuse(path: str) -> tuple[str, str]:
        raise ConfigFileError("no permission to get configmaps in namespace ns")
    cfg = parse_container({"name": "vllm", "command": ["vllm", "serve", "m", "--config", "/c/c.yaml"]}, {},
                          config_reader=refuse)
    assert cfg.api_ports == () and "no permission" in (cfg.config_error or "")
    assert any("not read" in n for n in layout_from_serve(cfg).notes)
    kept = parse_container({"name": "vllm", "command": ["vllm", "serve", "m", "--config", "/c/c.yaml",
                                                        "--port", "7000"]}, {}, config_reader=refuse)
    assert kept.api_ports == (7000,) and kept.config_error is not None


def test_image_tag_decides_the_nested_form_before_any_call() -> None:
    from kubectl_kvreset.engines.vllm.servecmd import image_vllm_release
    assert image_vllm_release("vllm/vllm-openai:v0.14.0") == (0, 14, 0)
    assert image_vllm_release("docker.io/vllm/vllm-openai:v0.32.0-cu130") == (0, 32, 0)
    assert image_vllm_release("ghcr.io/llm-d/llm-d-cuda:v0.9.0") is None
    assert image_vllm_release("vllm/vllm-openai:latest") is None
    text = "port: 8123\nkv-transfer-config:\n  kv_connector: X\n  kv_role: kv_both\n"
    container = {"name": "vllm", "command": ["vllm", "serve", "m", "--config", "/c/c.yaml"]}
    new = parse_container({**container, "image": "vllm/vllm-openai:v0.32.0"}, {}, config_reader=reader_of(text))
    assert new.kv_transfer_config == {"kv_connector": "X", "kv_role": "kv_both"}
    from kubectl_kvreset.engines.vllm.servecmd import ServeCommandError
    with pytest.raises(ServeCommandError, match="invalid JSON"):  # vLLM <= 0.14 fails to start the same way
        parse_container({**container, "image": "vllm/vllm-openai:v0.14.0"}, {}, config_reader=reader_of(text))
