"""A pytest plugin (``-p tests.shmcheck``, in setup.cfg's ``addopts``): the run leaves nothing in
the machine's /dev/shm.

The controlling process lists /dev/shm when the session starts and again when it ends (after
every xdist worker and every simulator it started has stopped). An entry that appeared meanwhile
and that no live process holds open or mapped is a leftover: a segment of a server that was
killed without its shutdown (vLLM's ``psm_*`` and semaphores, LMCache's ``lmcache_kv_*``), which
no one will ever remove. Leftovers fail the session, named with their sizes. An entry a live
process holds belongs to a server still running (another run on the same machine) and is not
counted.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHM = Path("/dev/shm")
_START: dict[str, int] = {}


def _listing() -> dict[str, int]:
    """Name -> inode of each entry of /dev/shm (empty when there is none)."""
    out: dict[str, int] = {}
    try:
        with os.scandir(SHM) as entries:
            for e in entries:
                try:
                    out[e.name] = e.inode()
                except OSError:
                    continue
    except OSError:
        pass
    return out


def held_inodes(device: int) -> set[int]:
    """The inodes on ``device`` that some live process holds open or mapped (its
    /proc/PID/fd and /proc/PID/map_files links, followed with ``os.stat``)."""
    found: set[int] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for sub in ("fd", "map_files"):
            try:
                names = os.listdir(f"/proc/{pid}/{sub}")
            except OSError:
                continue
            for name in names:
                try:
                    st = os.stat(f"/proc/{pid}/{sub}/{name}")
                except OSError:
                    continue
                if st.st_dev == device:
                    found.add(st.st_ino)
    return found


def leftovers(before: dict[str, int]) -> list[str]:
    """The entries of /dev/shm that are not in ``before`` (by name and inode) and that no live
    process holds: ``name (N bytes)``, sorted."""
    now = _listing()
    new = {n: ino for n, ino in now.items() if before.get(n) != ino}
    if not new:
        return []
    try:
        device = SHM.stat().st_dev
    except OSError:
        return []
    held = held_inodes(device)
    out = []
    for name, ino in sorted(new.items()):
        if ino in held:
            continue
        try:
            size = (SHM / name).lstat().st_size
        except OSError:
            continue  # removed meanwhile
        out.append(f"{name} ({size} bytes)")
    return out


def pytest_configure(config: pytest.Config) -> None:
    """The controlling process lists /dev/shm before any test runs."""
    if hasattr(config, "workerinput"):
        return
    _START.clear()
    _START.update(_listing())
    _START["\0taken"] = 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when it left entries in /dev/shm (module docstring)."""
    config = session.config
    if hasattr(config, "workerinput") or "\0taken" not in _START:
        return
    before = {k: v for k, v in _START.items() if k != "\0taken"}
    left = leftovers(before)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"/dev/shm: {len(left)} entries left by this run"
                            + (": " + ", ".join(left[:20]) if left else ""))
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
