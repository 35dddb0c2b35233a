"""Where and how the zipapp extracts itself (krew/boot.py, krew/preamble.py), on the built
zipapp: an extraction a run may still use is never removed, recent builds are kept, and a
read-only or missing home falls back to a private directory under the temporary directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from tests.simctl import zipapp_path

from .test_startup import NS, start_bench

NAME = "kubectl-kvreset"


def variant(src: Path, dst: Path, build_id: str) -> Path:
    """A copy of the zipapp ``src`` at ``dst`` that shiv sees as another build (``build_id``
    in ``environment.json``): the same code, extracted into its own directory."""
    data = src.read_bytes()
    end = data.index(b"\n") + 1
    dst.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(src) as zin, open(dst, "wb") as out:
        out.write(data[:end])
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():
                content = zin.read(info)
                if info.filename == "environment.json":
                    env = json.loads(content)
                    env["build_id"] = build_id
                    content = json.dumps(env).encode()
                zout.writestr(info, content)
    dst.chmod(0o755)
    return dst


def extraction(root: Path, build_id: str) -> Path:
    return root / f"{NAME}_{build_id}"


def build_id_of(app: Path) -> str:
    with zipfile.ZipFile(app) as z:
        return str(json.loads(z.read("environment.json"))["build_id"])


def bare_python() -> list[str]:
    """The interpreter behind this virtual environment: it cannot import the package from the
    development install, so a zipapp whose extraction vanished fails as it would for a user."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    return [str(base)] if base.exists() else []


def run(app: Path, root: Path, *args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SHIV_ROOT=str(root), **env_extra)
    return subprocess.run([*bare_python(), str(app), *args], env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_an_extraction_a_run_may_use_is_never_removed(tmp_path: Path) -> None:
    # run A (build X) passes shiv's "already extracted" check, then waits before marking its
    # extraction in use (the test hook widens that window). Meanwhile build Y runs and cleans:
    # X is its least recently used sibling, beyond the builds kept. A must still finish.
    root = tmp_path / "root"
    app_x = variant(zipapp_path(), tmp_path / "x" / NAME, "1" * 64)
    app_y = variant(zipapp_path(), tmp_path / "y" / NAME, "2" * 64)
    assert run(app_x, root, "--version").returncode == 0
    dir_x = extraction(root, "1" * 64)
    # Y's extraction is ready too (same code: a copy), so Y starts as fast as a warm run
    shutil.copytree(dir_x, extraction(root, "2" * 64), symlinks=True)
    # two more recent builds (as if used since), and X last used an hour ago
    for fake in ("3" * 64, "4" * 64):
        (extraction(root, fake) / "site-packages").mkdir(parents=True)
        (extraction(root, fake) / ".in-use").touch()
    old = time.time() - 3600
    os.utime(dir_x / ".in-use", (old, old))
    env = dict(os.environ, SHIV_ROOT=str(root), KVRESET_TEST_PREAMBLE_DELAY_S="4")
    slow = subprocess.Popen([*bare_python(), str(app_x), "--version"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    time.sleep(1.5)  # A is now in its preamble's delay, past shiv's check
    assert run(app_y, root, "--version").returncode == 0
    out, err = slow.communicate(timeout=60)
    assert slow.returncode == 0, err
    assert "kubectl-kvreset" in out and "ModuleNotFoundError" not in err
    assert (dir_x / "site-packages" / "kubectl_kvreset").is_dir()
    # once nothing is starting or running (and X is again the least recently used), the next
    # clean removes what is beyond the kept builds
    time.sleep(0.05)
    for fake in ("5" * 64, "6" * 64):
        (extraction(root, fake) / "site-packages").mkdir(parents=True)
        (extraction(root, fake) / ".in-use").touch()
    os.utime(dir_x / ".in-use", (old, old))
    assert run(app_y, root, "--version").returncode == 0
    assert not dir_x.exists()
    assert extraction(root, "5" * 64).exists() and extraction(root, "6" * 64).exists()


def test_two_builds_used_in_turn_keep_their_extractions(tmp_path: Path) -> None:
    root = tmp_path / "root"
    app_x = variant(zipapp_path(), tmp_path / "x" / NAME, "5" * 64)
    app_y = variant(zipapp_path(), tmp_path / "y" / NAME, "6" * 64)
    assert run(app_x, root, "--version").returncode == 0
    marker = extraction(root, "5" * 64) / "site-packages" / "kubectl_kvreset" / "__init__.py"
    first = marker.stat().st_ino
    assert run(app_y, root, "--version").returncode == 0
    assert run(app_x, root, "--version").returncode == 0
    assert marker.stat().st_ino == first  # not extracted anew
    assert extraction(root, "6" * 64).is_dir()


def read_only_home() -> str:
    """A home this user cannot write into (root writes anywhere except a read-only file
    system, such as /proc)."""
    return "/proc" if os.geteuid() == 0 else "/"


def test_read_only_home_runs_detect_from_a_private_temporary_dir(sim, tmp_path: Path) -> None:
    cluster = start_bench(sim)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = cluster.env()
    env.pop("SHIV_ROOT", None)
    env.update(HOME=read_only_home(), TMPDIR=str(tmp))
    done = subprocess.run([str(zipapp_path()), "detect", "-n", NS], env=env, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 9
    private = tmp / f"kubectl-kvreset-{os.getuid()}"
    notes = [line for line in done.stderr.splitlines() if "cannot be written" in line]
    assert len(notes) == 1 and str(private) in notes[0] and "SHIV_ROOT" in notes[0], done.stderr
    assert private.is_dir() and (private.stat().st_mode & 0o777) == 0o700
    assert private.stat().st_uid == os.getuid()
    assert any(p.name.startswith(f"{NAME}_") for p in private.iterdir())
    # SHIV_ROOT always wins: no notice, nothing new in the fallback
    chosen = tmp_path / "chosen"
    env["SHIV_ROOT"] = str(chosen)
    done = subprocess.run([str(zipapp_path()), "--version"], env=env, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "cannot be written" not in done.stderr, done.stderr
    assert any(p.name.startswith(f"{NAME}_") for p in chosen.iterdir())


def test_a_symlinked_fallback_is_refused(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp / f"kubectl-kvreset-{os.getuid()}").symlink_to(elsewhere)
    env = dict(os.environ, HOME=read_only_home(), TMPDIR=str(tmp))
    env.pop("SHIV_ROOT", None)
    done = subprocess.run([str(zipapp_path()), "--version"], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "symlink" in done.stderr and "SHIV_ROOT" in done.stderr and "Traceback" not in done.stderr
    assert list(elsewhere.iterdir()) == []
    shutil.rmtree(tmp)
