"""Fuzzing the parts the existing property tests do not reach (test_servecmd.py covers the
shell-string and argv parsers, test_fstier.py the FS path check): the kv-transfer-config JSON
(as a flag value and decoded into tiers) and the command line of every sub-command. Bounded
example counts, so CI runs them."""

from __future__ import annotations

import json
from typing import Any

import click
from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_kvreset.cli import COMMANDS, cli
from kubectl_kvreset.engines.vllm.kvconfig import layout_from_config, layout_from_serve
from kubectl_kvreset.engines.vllm.servecmd import ServeCommandError, parse_argv

_KEYS = st.sampled_from(["kv_connector", "kv_role", "kv_connector_extra_config", "connectors", "spec_name",
                         "shared_storage_path", "root_dir", "cpu_bytes_to_use", "num_cpu_blocks", "engine_id",
                         "local_cpu", "local_disk", "max_local_disk_size", "remote_url", "block_size", "x"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                     st.text(max_size=20),
                     st.sampled_from(["OffloadingConnector", "LMCacheConnectorV1", "MultiConnector",
                                      "NixlConnector", "SharedStorageConnector", "MooncakeConnectorV1",
                                      "CPUOffloadingSpec", "TieringOffloadingSpec", "/mnt/kv", "../../etc",
                                      "1Gi", "2.5G", "kv_both"]))
_JSON = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(_KEYS, inner, max_size=5)),
                     max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _JSON, max_size=6), st.one_of(st.none(), st.floats(-1e6, 1e6)),
       st.one_of(st.none(), st.text(max_size=10)),
       st.dictionaries(st.sampled_from(["VLLM_USE_SIMPLE_KV_OFFLOAD", "LMCACHE_LOCAL_DISK",
                                        "LMCACHE_LOCAL_CPU", "MOONCAKE_CONFIG_PATH", "X"]),
                       st.text(max_size=12), max_size=3))
def test_layout_from_any_decoded_config_never_raises(cfg: dict[str, Any], size: float | None,
                                                     backend: str | None, env: dict[str, str]) -> None:
    layout = layout_from_config(cfg, kv_offloading_size_gib=size, kv_offloading_backend=backend, env=env)
    assert layout.tiers and layout.tiers[0].kind.value == "gpu"


def test_offloading_size_with_a_non_mapping_extra_config() -> None:
    # reachable from a pod spec: the plugin would die with a traceback while reading the pod
    cfg = parse_argv(["vllm", "serve", "m", "--kv-transfer-config",
                      '{"kv_connector": "OffloadingConnector", "kv_connector_extra_config": [1]}',
                      "--kv-offloading-size", "4"], {})
    layout = layout_from_serve(cfg)
    assert layout.tiers[0].kind.value == "gpu"


@settings(max_examples=300, deadline=None)
@given(st.one_of(_JSON.map(lambda v: json.dumps(v, allow_nan=True)), st.text(max_size=80)),
       st.sampled_from(["--kv-transfer-config", "--kv_transfer_config", "--kv-transfer-config.kv_connector"]),
       st.booleans())
def test_kv_transfer_config_flag_only_raises_serve_command_error(text: str, flag: str, joined: bool) -> None:
    words = [f"{flag}={text}"] if joined else [flag, text]
    try:
        parse_argv(["vllm", "serve", "m", *words], {})
        parse_argv(["/bin/sh", "-c", "vllm serve m " + flag + " '" + text.replace("'", "") + "'"], {})
    except ServeCommandError:
        pass


_WORDS = st.sampled_from(["--all", "-A", "-n", "ns", "-l", "a=b,c!=d", "-o", "json", "yaml", "wide", "table", "bogus",
                          "--max-concurrency", "0", "64", "100000", "--transport", "exec", "proxy", "--timeout",
                          "5m", "-5s", "--busy-timeout", "--request-timeout", "1x", "--fallback", "restart",
                          "devmode", "--dry-run", "--yes", "--enable", "--disable", "deployment/x", "lws/y",
                          "pod/z", "x/y/z", "--context", "--kubeconfig", "--as-group", "--model-only", "-v", "9",
                          "--", "=", "--all=true", "\x00", "é"])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(COMMANDS)), st.lists(st.one_of(_WORDS, st.text(max_size=8)), max_size=10))
def test_command_line_parsing_raises_only_click_errors(name: str, words: list[str]) -> None:
    # parse only (make_context): nothing is sent to a cluster
    group_ctx = click.Context(cli, info_name="kubectl-kvreset")
    command = cli.get_command(group_ctx, name)
    assert command is not None
    try:
        with command.make_context(name, list(words), parent=group_ctx) as ctx:
            assert isinstance(ctx.params, dict)
    except click.exceptions.Exit:
        pass  # --help and friends
    except click.ClickException:
        pass
