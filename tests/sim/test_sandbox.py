"""Tests of the bubblewrap runner and its recorders (tests/sim/sandbox.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.sim.sandbox import Bind, SandboxResult, bwrap_available, container_host_path, run_recorded, volume_binds

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) missing or cannot create namespaces")


def run(tmp: Path, argv: list[str], env: dict[str, str] | None = None, binds: list[Bind] | None = None,
        timeout: float = 10.0) -> SandboxResult:
    return run_recorded(argv, env or {}, binds or [], tmp / "shm", tmp / "work", timeout=timeout)


def test_records_vllm_and_python_entrypoints_exactly(tmp_path: Path) -> None:
    script = (
        "vllm --version; "
        "python3 -m vllm.entrypoints.openai.api_server --model 'a b' --x \"$HOME\"; "
        "exec vllm serve m --kv-transfer-config '{\"k\": \"v w\"}'"
    )
    res = run(tmp_path, ["/bin/bash", "-c", script], {"HOME": "/root"})
    assert res.error is None and res.returncode == 0
    assert res.recordings == [
        ["vllm", "--version"],
        ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "a b", "--x", "/root"],
        ["vllm", "serve", "m", "--kv-transfer-config", '{"k": "v w"}'],
    ]


def test_python_wrapper_runs_real_interpreter_and_env_is_clean(tmp_path: Path) -> None:
    out = tmp_path / "vol"
    out.mkdir()
    res = run(tmp_path, ["/bin/sh", "-c",
                         "python3 -c 'import os; open(\"/data/env\", \"w\").write(repr(sorted(os.environ)))'"],
              {"ONLY": "1"}, [Bind(out, "/data")])
    assert res.returncode == 0, res.stderr
    names = eval((out / "env").read_text())  # noqa: S307 - our own repr
    assert "ONLY" in names and "PATH" in names
    assert not any(n.startswith(("PYTEST", "VIRTUAL_ENV")) for n in names)


def test_isolation_no_host_writes_no_network(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    res = run(tmp_path, ["/bin/sh", "-c",
                         f"rm -f {victim}; echo x > /usr/evil; ls /sys/class/net | wc -l > /dev/shm/net; "
                         "echo ok > /tmp/scratch && cat /tmp/scratch > /dev/shm/tmp"])
    assert victim.read_text() == "keep"
    assert not Path("/usr/evil").exists()
    assert (tmp_path / "shm" / "tmp").read_text() == "ok\n"
    assert res.recordings == []


def test_timeout_is_bounded(tmp_path: Path) -> None:
    t0 = time.monotonic()
    res = run(tmp_path, ["/bin/sh", "-c", "sleep 30"], timeout=0.5)
    assert res.timed_out and res.returncode is None
    assert time.monotonic() - t0 < 5


def test_volume_binds_subpath_readonly_and_host_paths(tmp_path: Path) -> None:
    vols = {"data": tmp_path / "data", "cfg": tmp_path / "cfg", "dshm": tmp_path / "dshm"}
    container = {"volumeMounts": [
        {"name": "data", "mountPath": "/mnt/data/inner", "subPath": "sub"},
        {"name": "cfg", "mountPath": "/mnt/data", "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "secret-not-provisioned", "mountPath": "/s"},
    ]}
    binds = volume_binds(container, vols)
    assert [b.dest for b in binds] == ["/mnt/data", "/dev/shm", "/mnt/data/inner"]
    assert binds[0].readonly and (tmp_path / "data" / "sub").is_dir()
    assert container_host_path("/mnt/data/inner/x/y", binds) == tmp_path / "data" / "sub" / "x" / "y"
    assert container_host_path("/mnt/data/z", binds) == tmp_path / "cfg" / "z"
    assert container_host_path("/dev/shm/f", binds, tmp_path / "shm") == tmp_path / "dshm" / "f"
    assert container_host_path("/dev/shm/f", [], tmp_path / "shm") == tmp_path / "shm" / "f"
    assert container_host_path("/opt/x", binds) is None
    res = run(tmp_path, ["/bin/sh", "-c", "echo a > /mnt/data/inner/f; echo b > /mnt/data/g"], binds=binds)
    assert (tmp_path / "data" / "sub" / "f").read_text() == "a\n"
    assert not (tmp_path / "cfg" / "g").exists()  # read-only mount
    assert res.returncode != 0
