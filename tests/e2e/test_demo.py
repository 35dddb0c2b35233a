"""``make demo`` from a clean clone on a machine without a working bubblewrap: it says so, runs
in the simulator's no-sandbox mode, ends with every tier emptied and exit 0, and installs nothing."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.simctl import ROOT

from .test_packaging import clone

SHIM = """#!/bin/sh
echo "$(basename "$0") $*" >> {log}
{body}
"""


def shim(bindir: Path, name: str, body: str, log: Path) -> None:
    path = bindir / name
    path.write_text(SHIM.format(log=log, body=body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_make_demo_without_bubblewrap_from_a_clean_clone(tmp_path: Path) -> None:
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    venv_ready = ROOT / ".venv" / "bin" / ".ready"
    if not venv_ready.exists():
        pytest.skip("the development venv is not built (make test builds it)")
    checkout = clone(tmp_path / "fresh-clone")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls.log"
    shim(bindir, "bwrap", 'echo "bwrap: No permissions to creating new namespace" >&2; exit 1', calls)
    for name in ("sudo", "apt-get", "apt", "dnf", "yum", "brew", "apk"):  # nothing may install anything
        shim(bindir, name, "exit 1", calls)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k != "MFLAGS"}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["SHIV_ROOT"] = str(tmp_path / "shiv")
    done = subprocess.run(["make", "-C", str(checkout), "-o", str(venv_ready), f"VENV={ROOT / '.venv'}", "demo"],
                          env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "mode: no sandbox" in out and "nothing is installed" in out
    clear = out.split("clear -n llm-d-demo --all --yes", 1)[1].split("(exit", 1)[0]
    rows = [line for line in clear.strip().splitlines()[1:] if line.strip()]
    assert len(rows) == 3, clear
    for row in rows:
        cells = re.split(r"\s{3,}", row.strip())
        assert cells[-2] == "emptied" and "not emptied" not in row and "left" not in row, row
    assert out.count("(exit 0)") == 3
    # bubblewrap was only probed; no package manager or sudo was called
    lines = calls.read_text().splitlines() if calls.exists() else []
    assert lines and all(line.startswith("bwrap ") for line in lines), lines
