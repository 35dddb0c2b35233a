"""The parts of tests/sim/realservers.py that need no real server: recognising containers,
the CPU build's refusals (at load, naming the flag), ``--real-servers`` parsing, and the
network guard given to Python servers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.sim.realpeers import (
    _flag_value,
    _without_flags,
    check_manifest_object,
    cpu_refusals,
    parse_real_servers,
    real_kind,
)
from tests.sim.realsite import SITECUSTOMIZE

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("container", "kind"), [
    ({"image": "redis:7", "command": ["redis-server"], "args": ["--port", "6379"]}, "redis"),
    ({"image": "redis:7.0.15"}, "redis"),
    ({"image": "m", "command": ["mooncake_master"]}, "mooncake-master"),
    ({"image": "m", "command": ["/usr/local/bin/mooncake_client", "--port=1"]}, "mooncake-client"),
    ({"image": "l", "command": ["lmcache_controller", "--port", "9000"]}, "lmcache-controller"),
    ({"image": "l", "command": ["python", "-m", "lmcache.v1.standalone"]}, "lmcache-worker"),
    ({"image": "l", "command": ["lmcache", "server", "--port", "5555"]}, "lmcache-mp"),
    ({"image": "vllm/vllm-openai:v0.32.0", "command": ["vllm", "serve", "m"]}, "vllm"),
    ({"image": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.3"}, None),
    ({"image": "busybox", "command": ["sleep", "1"]}, None),
])
def test_real_kind(container: dict, kind: str | None) -> None:
    argv = (container.get("command") or []) + (container.get("args") or [])
    assert real_kind(container, argv or None) == kind


def test_flags_in_both_spellings() -> None:
    argv = ["--rpc_port=50051", "--metrics_port", "9003", "-host=a"]
    assert _flag_value(argv, "rpc_port") == "50051"
    assert _flag_value(argv, "metrics_port") == "9003"
    assert _flag_value(argv, "host") == "a"
    assert _without_flags(argv, "metrics_port", "host") == ["--rpc_port=50051"]


def test_cpu_refusals_name_the_flag() -> None:
    assert cpu_refusals(["vllm", "serve", "m", "--port", "8000"]) == []
    assert cpu_refusals(["vllm", "serve", "m", "--tensor-parallel-size", "1"]) == []
    why = cpu_refusals(["vllm", "serve", "m", "-tp", "2"])
    assert why and why[0].startswith("--tensor-parallel-size 2")
    assert "--kv-offloading-size" in cpu_refusals(["vllm", "serve", "--kv-offloading-size", "8"])[0]
    multi = ('{"kv_connector":"MultiConnector","kv_role":"kv_both","kv_connector_extra_config":'
             '{"connectors":[{"kv_connector":"NixlConnector"},{"kv_connector":"ExampleConnector"}]}}')
    assert "NixlConnector" in cpu_refusals(["vllm", "serve", "--kv-transfer-config", multi])[0]
    ok = '{"kv_connector":"ExampleConnector","kv_role":"kv_both"}'
    assert cpu_refusals(["vllm", "serve", f"--kv-transfer-config={ok}"]) == []


def test_manifest_refused_at_load_naming_object_container_and_flag(tmp_path: Path) -> None:
    dep = {"kind": "Deployment", "metadata": {"name": "big"}, "spec": {"template": {"spec": {
        "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.32.0",
                        "command": ["vllm", "serve", "m", "--tensor-parallel-size", "4"]}]}}}}
    check_manifest_object(dep, frozenset({"redis"}))   # vLLM not real: nothing refused
    with pytest.raises(ValueError, match=r"Deployment big container vllm: "
                                         r"--tensor-parallel-size 4"):
        check_manifest_object(dep, frozenset({"vllm"}))
    shell = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{
        "name": "vllm", "image": "vllm/vllm-openai:v0.32.0",
        "command": ["/bin/sh", "-c"], "args": ["exec vllm serve m --data-parallel-size 2 --data-parallel-rank 0"]}]}}
    with pytest.raises(ValueError, match="--data-parallel-size 2 with --data-parallel-rank: only internal"):
        check_manifest_object(shell, frozenset({"vllm"}))


def test_data_parallel_runs_only_behind_one_api_server() -> None:
    """``--data-parallel-size N`` alone (internal load balancing) runs on the CPU build; the forms
    that put a server per rank or split the ranks over hosts are refused, naming the flag."""
    assert cpu_refusals(["vllm", "serve", "m", "--data-parallel-size", "2"]) == []
    assert cpu_refusals(["vllm", "serve", "m", "-dp", "2", "--data-parallel-size-local", "2"]) == []
    [why] = cpu_refusals(["vllm", "serve", "m", "--data-parallel-size", "2", "--data-parallel-multi-port-external-lb"])
    assert why.startswith("--data-parallel-size 2 with --data-parallel-multi-port-external-lb: ")
    [why] = cpu_refusals(["vllm", "serve", "m", "--data-parallel-size=4", "--data-parallel-size-local", "2"])
    assert "--data-parallel-size-local" in why


def test_serve_refuses_the_manifest_and_exits_2(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.peers as peers
    if peers.missing("vllm"):
        pytest.skip("needs the vLLM peer to be installed (make peers): --real-servers vllm "
                    "checks that first")
    m = tmp_path / "m.yaml"
    m.write_text(textwrap.dedent("""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: big}
        spec:
          selector: {matchLabels: {a: b}}
          template:
            metadata: {labels: {a: b}}
            spec:
              containers:
              - {name: vllm, image: "vllm/vllm-openai:v0.32.0",
                 command: [vllm, serve, m, --kv-offloading-size, "8"]}
        """))
    done = subprocess.run([sys.executable, "-m", "tests.sim", "serve", "--manifest", str(m),
                           "--kubeconfig", str(tmp_path / "kc"), "--no-sandbox",
                           "--real-servers", "vllm"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "Deployment big container vllm: --kv-offloading-size" in done.stderr


def test_parse_real_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVRESET_PEERS_DIR", str(tmp_path))   # nothing installed there
    assert parse_real_servers("") == frozenset()
    with pytest.raises(ValueError, match="unknown server 'valkey'"):
        parse_real_servers("valkey")
    with pytest.raises(ValueError, match="vllm is not installed \\(run make peers\\)"):
        parse_real_servers("vllm")
    got = parse_real_servers("all")
    assert got <= {"redis"}     # only Debian's redis-server can be there


def test_network_guard_maps_wildcard_binds_and_refuses_other_addresses(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    probe = textwrap.dedent("""\
        import errno, socket
        s = socket.socket(); s.bind(("0.0.0.0", 0)); print(s.getsockname()[0]); s.close()
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.connect(("8.8.8.8", 80)); print(u.getsockname()[0]); u.close()
        t = socket.socket()
        try:
            t.connect(("192.0.2.1", 80))
        except OSError as e:
            print(e.errno == errno.ENETUNREACH)
        print(t.connect_ex(("198.51.100.7", 80)) == errno.ENETUNREACH)
        """)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), KVRESET_SIM_POD_IP="127.77.1.9")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["127.77.1.9", "127.77.1.9", "True", "True"]
