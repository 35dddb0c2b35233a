"""Locations the plugin cannot evaluate from the pod spec, at the pure core: what the shell
reader leaves as written, how an FS root holding it is planned (left, never deleted), a root
that does not exist (unconfirmed), ConfigMap ``binaryData``, and table cells with control
characters."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kubectl_kvreset.discovery import VllmPod, describe_pod
from kubectl_kvreset.engines.vllm.configfile import ConfigFileError, ConfigSource, decode_key
from kubectl_kvreset.engines.vllm.kvconfig import layout_from_serve
from kubectl_kvreset.engines.vllm.servecmd import parse_container, unevaluated_in
from kubectl_kvreset.fs import ExecChoice, FsVolumeTarget, plan_fs_clear, run_fs_clear
from kubectl_kvreset.job.fsclear import fs_row, row_code
from kubectl_kvreset.kube import ExecResult
from kubectl_kvreset.plan import api_reset_effects, plan_pod_steps
from kubectl_kvreset.report import Column, ExitCode, Report, cell, escaped
from kubectl_kvreset.shellscript import Shell
from kubectl_kvreset.tiers import TierKind

MODEL = "Qwen/Qwen3-0.6B"


def _ktc(root: str) -> str:
    return json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
                                                     "secondary_tiers": [{"type": "fs", "root_dir": root}]}})


def _script(root: str) -> str:
    return f'exec vllm serve {MODEL} --kv-transfer-config "{_ktc(root).replace(chr(34), chr(92) + chr(34))}"'


def _container(command: Sequence[str], env: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    return {"name": "vllm", "image": "vllm/vllm-openai:v0.26.0", "command": list(command), "env": list(env),
            "volumeMounts": [{"name": "kv", "mountPath": "/mnt/kv"}]}


def _pod(container: dict[str, Any], name: str = "p0") -> VllmPod:
    obj = {"kind": "Pod",
           "metadata": {"name": name, "namespace": "llm", "uid": "uid-" + name},
           "spec": {"nodeName": "n", "containers": [container],
                    "volumes": [{"name": "kv", "persistentVolumeClaim": {"claimName": "kv"}}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    found = describe_pod(obj)
    assert found is not None
    return found


def _fs_tier(pod: VllmPod) -> Any:
    (tier,) = [t for t in pod.layout.tiers if t.kind is TierKind.FS]
    return tier


# ------------------------------------------------------------------ what the shell reader leaves as written

def _left(script: str, env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    shell = Shell(env or {}, wanted=lambda words: bool(words) and words[0] == "server")
    shell.run_script(script)
    return shell.unevaluated


def test_command_substitution_backticks_and_unset_variables_are_recorded() -> None:
    left = dict(_left('server --root "/kv/$(hostname)" --b /kv/`uname -n` --c "$NOPE" --d ${ALSO_NOPE}'))
    assert set(left) == {"$(hostname)", "`uname -n`", "$NOPE", "${ALSO_NOPE}"}
    assert "command substitution" in left["$(hostname)"] and "command substitution" in left["`uname -n`"]
    assert "variable NOPE is not set" in left["$NOPE"] and "variable ALSO_NOPE" in left["${ALSO_NOPE}"]


def test_what_the_shell_evaluates_or_quotes_is_not_recorded() -> None:
    # single quotes keep $(...) literal in bash too; a set variable and a default are evaluated
    assert _left("server --root '/kv/$(hostname)' --x \"$SET\" --y ${UNSET:-/kv/a} --n $((2 * 3))",
                 {"SET": "/kv/s"}) == []


def test_a_nested_script_records_into_the_outer_reader() -> None:
    assert [lit for lit, _ in _left("""bash -c 'server --root "/kv/$(id -u)"'""")] == ["$(id -u)"]


def test_failed_arithmetic_is_recorded() -> None:
    assert [lit for lit, _ in _left("server --n $((N + 1))")] == ["$((N + 1))"]


def test_unevaluated_in_matches_only_values_holding_the_literal() -> None:
    left = (("$(hostname)", "why"), ("$X", "why x"))
    assert unevaluated_in("/kv/$(hostname)/a", left) == ["why"]
    assert unevaluated_in("/kv/plain", left) == [] and unevaluated_in(None, left) == []


# ------------------------------------------------------------------ servecmd and tiers

def test_hostname_in_a_script_marks_the_fs_tier_unevaluated() -> None:
    pod = _pod(_container(["bash", "-c", _script("/mnt/kv/$(hostname)")]))
    tier = _fs_tier(pod)
    assert tier.root_dir == "/mnt/kv/$(hostname)" and "$(hostname) is not evaluated" in (tier.unevaluated or "")
    # the kubelet's $(hostname) (no such env name) is named by the shell's reason alone
    assert [lit for lit, _ in pod.serve.unevaluated] == ["$(hostname)"]


def test_a_kubernetes_reference_from_a_valuefrom_source_marks_the_tier() -> None:
    env = [{"name": "SHARD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    cfg = parse_container(_container(["vllm", "serve", MODEL, "--kv-transfer-config", _ktc("/mnt/kv/$(SHARD)")],
                                     env), {})
    assert cfg is not None
    (literal, reason), = cfg.unevaluated
    assert literal == "$(SHARD)" and "SHARD comes from Secret s key k" in reason
    assert layout_from_serve(cfg).tiers[-1].unevaluated == reason


def test_an_unset_shell_variable_names_envfrom_sources_that_may_set_it() -> None:
    container = _container(["bash", "-c", _script("/mnt/kv/$SHARD")])
    container["envFrom"] = [{"configMapRef": {"name": "shards"}}]
    (literal, reason), = parse_container(container, {}).unevaluated  # type: ignore[union-attr]
    assert literal == "$SHARD" and "variable SHARD is not set" in reason and "envFrom ConfigMap shards" in reason


def test_a_default_is_not_taken_for_a_variable_a_valuefrom_source_sets() -> None:
    env = [{"name": "KV_ROOT", "valueFrom": {"configMapKeyRef": {"name": "roots", "key": "root"}}}]
    pod = _pod(_container(["bash", "-c", _script("${KV_ROOT:-/mnt/kv/default}")], env))
    tier = _fs_tier(pod)
    assert tier.root_dir == "${KV_ROOT:-/mnt/kv/default}" and "ConfigMap roots key root" in (tier.unevaluated or "")
    # without such a source the default is what bash gives
    pod = _pod(_container(["bash", "-c", _script("${KV_ROOT:-/mnt/kv/default}")]))
    assert _fs_tier(pod).root_dir == "/mnt/kv/default" and _fs_tier(pod).unevaluated is None


def test_an_argv_root_with_literal_dollar_text_is_evaluated() -> None:
    # no shell and no variable name: Kubernetes and vLLM keep it as written, so it is the real root
    pod = _pod(_container(["vllm", "serve", MODEL, "--kv-transfer-config", _ktc("/mnt/kv/$(touch x)")]))
    assert _fs_tier(pod).unevaluated is None


def test_lmcache_local_disk_from_a_script_export_is_unevaluated() -> None:
    ktc = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    script = f"export LMCACHE_LOCAL_DISK=/mnt/kv/$HOSTNAME_SUFFIX; exec vllm serve {MODEL} --kv-transfer-config '{ktc}'"
    pod = _pod(_container(["bash", "-c", script]))
    tier = _fs_tier(pod)
    assert tier.tier_type == "lmcache_local_disk" and "HOSTNAME_SUFFIX" in (tier.unevaluated or "")
    steps = plan_pod_steps(api_reset_effects(pod.layout, None), dev_mode_on=True, fallback="none")
    (disk_left,) = [lt for lt in steps.left if lt.tier.kind is TierKind.FS]
    assert "HOSTNAME_SUFFIX" in disk_left.reason and "local_disk to a literal path" in (disk_left.flag or "")


# ------------------------------------------------------------------ plans

def test_plan_leaves_an_unevaluated_fs_tier_with_the_reason_and_remedy() -> None:
    pod = _pod(_container(["bash", "-c", _script("/mnt/kv/$(hostname)")]))
    effects = api_reset_effects(pod.layout, None)
    for dev_mode_on in (True, False):
        steps = plan_pod_steps(effects, dev_mode_on=dev_mode_on, fallback="none")
        assert "clear-fs" not in steps.actions()
        (fs_left,) = [lt for lt in steps.left if lt.tier.kind is TierKind.FS]
        assert "$(hostname)" in fs_left.reason and "literal path" in (fs_left.flag or "")


def test_fs_plan_never_deletes_at_an_unevaluated_root() -> None:
    pod = _pod(_container(["bash", "-c", _script("/mnt/kv/$(hostname)")]))
    (target,) = plan_fs_clear([pod], [pod])
    assert target.unevaluated and target.choices == () and target.root == "/mnt/kv/$(hostname)"
    row = fs_row(target)
    assert row["result"] == "left" and "nothing was deleted" in row["message"]

    class NoExec:
        def exec_command(self, *args: Any, **kwargs: Any) -> ExecResult:
            raise AssertionError("no exec for a root that cannot be evaluated")

    outcome = run_fs_clear(NoExec(), target)  # type: ignore[arg-type]
    assert outcome.result == "left" and row_code(outcome) is ExitCode.FAILED


# ------------------------------------------------------------------ a root that does not exist

class _LocalKube:
    def __init__(self, no_python: bool = False) -> None:
        self.no_python = no_python

    def exec_command(self, namespace: str, pod: str, container: str, argv: Sequence[str],
                     *, timeout_s: float = 60.0) -> ExecResult:
        import subprocess

        if argv[0] == "python3":
            if self.no_python:
                return ExecResult(None, b"", b"", 'exec: "python3": executable file not found in $PATH')
            argv = [sys.executable, *argv[1:]]
        done = subprocess.run(list(argv), capture_output=True, timeout=60)
        return ExecResult(done.returncode, done.stdout, done.stderr, None)


@pytest.mark.parametrize("no_python", [False, True])
def test_a_root_that_does_not_exist_is_unconfirmed(tmp_path: Path, no_python: bool) -> None:
    root = str(tmp_path / "absent" / "kv")
    target = FsVolumeTarget(key="k", namespace="llm", volume="pvc/kv", root=root, volume_path="/kv",
                            exec_pod="p0", container="vllm", choices=(ExecChoice("p0", "vllm", root),), pods=("p0",))
    outcome = run_fs_clear(_LocalKube(no_python), target)  # type: ignore[arg-type]
    assert outcome.result == "unconfirmed" and row_code(outcome) is ExitCode.UNCONFIRMED, outcome
    assert "does not exist" in (outcome.message or "") and "not confirmed empty" in (outcome.message or "")


# ------------------------------------------------------------------ ConfigMap binaryData

def test_configmap_binary_data_is_decoded_as_the_kubelet_mounts_it() -> None:
    text = "local_disk: file:///cache/lmc\nmax_local_disk_size: 2\n"
    obj = {"binaryData": {"lmcache.yaml": base64.b64encode(text.encode()).decode()}}
    assert decode_key(obj, ConfigSource("ConfigMap", "c", "lmcache.yaml", "v")) == text
    with pytest.raises(ConfigFileError, match="no key"):
        decode_key(obj, ConfigSource("ConfigMap", "c", "other.yaml", "v"))


def test_pod_config_reads_a_binary_data_file_and_keeps_env_to_data() -> None:
    from kubectl_kvreset.stores.find import pod_config

    text = "local_disk: file:///cache/lmc\n"
    cm = {"data": {"LMCACHE_CHUNK_SIZE": "256"},
          "binaryData": {"lmcache.yaml": base64.b64encode(text.encode()).decode(),
                         "LMCACHE_REMOTE_URL": base64.b64encode(b"redis://x:6379").decode()}}

    class Kube:
        def get_object(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any]:
            assert (plural, name) == ("configmaps", "lmc")
            return cm

    container = _container(["vllm", "serve", MODEL, "--kv-transfer-config",
                            json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})],
                           [{"name": "LMCACHE_CONFIG_FILE", "value": "/etc/lmc/lmcache.yaml"}])
    container["envFrom"] = [{"configMapRef": {"name": "lmc"}}]
    container["volumeMounts"].append({"name": "cfg", "mountPath": "/etc/lmc"})
    pod = _pod(container)
    pod.raw["spec"]["volumes"].append({"name": "cfg", "configMap": {"name": "lmc"}})  # type: ignore[index]
    env, files, notes = pod_config(Kube(), pod, {})  # type: ignore[arg-type]
    assert files["/etc/lmc/lmcache.yaml"] == text
    # envFrom takes data only (kubelet makeEnvironmentVariables): binaryData never becomes a variable
    assert env["LMCACHE_CHUNK_SIZE"] == "256" and "LMCACHE_REMOTE_URL" not in env


# ------------------------------------------------------------------ table cells

def test_table_cells_escape_control_characters_and_json_keeps_them() -> None:
    assert escaped("/kv/plain ü") == "/kv/plain ü"
    for raw in ("/kv/new\nline", "a\rb", "tab\there", "\x1b[31mred", "sep\u2028x", "bidi\u202eevil", 'q"\\\n'):
        shown = escaped(raw)
        assert shown.startswith('"') and json.loads(shown) == raw, raw
        assert not any(ch in shown for ch in "\n\r\x1b\u2028\u202e")
    assert cell(["/a\nb", "/c"]) == '"/a\\nb",/c'
    report = Report("X", [Column("ROOT", "root"), Column("N", "n")])
    report.add({"root": "/kv/new\nline", "n": 1})
    assert len(report.render("table").splitlines()) == 2
    assert json.loads(report.render("json"))[0]["root"] == "/kv/new\nline"
