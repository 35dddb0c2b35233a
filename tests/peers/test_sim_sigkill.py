"""The simulator's real servers leave nothing behind, also when the simulator itself is killed
with SIGKILL (marker ``peers``): a real vLLM pod is started, every process of its sandbox and
every shared-memory segment, temporary file and socket file they hold is recorded, then the
simulator gets SIGKILL. bubblewrap's ``--die-with-parent`` and the sandbox's own pid namespace
end every process; the segments live in the pod's /dev/shm directory under the simulator's state
dir (never in the machine's /dev/shm) and the sockets in the sandbox's own /tmp tmpfs, so once
the launcher removes the state dir nothing of them is reachable any more."""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import pytest

import tests.peers as peers
from tests.simctl import ROOT, SimCluster, sandbox_available, zipapp_path

pytestmark = pytest.mark.peers

MANIFEST = ROOT / "tests" / "manifests" / "real-vllm-one.yaml"
NS = "rv1"
READY_TIMEOUT = 480.0

Inode = tuple[int, int]


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (by parent pid, read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper does not count)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def held(pids: set[int]) -> dict[Inode, str]:
    """The files under /dev/shm and /tmp (as the processes see them) that ``pids`` hold open or
    mapped, and the unix socket files they bound there: ``(st_dev, st_ino)`` -> the path as seen
    inside. ``os.stat`` through /proc follows the link to the file itself, whatever mount
    namespace it lives in."""
    found: dict[Inode, str] = {}
    socket_inodes: set[str] = set()
    for pid in pids:
        for sub in ("fd", "map_files"):
            try:
                names = os.listdir(f"/proc/{pid}/{sub}")
            except OSError:
                continue
            for name in names:
                link = f"/proc/{pid}/{sub}/{name}"
                try:
                    target = os.readlink(link)
                    if target.startswith("socket:["):
                        socket_inodes.add(target[8:-1])
                        continue
                    if not target.startswith(("/dev/shm/", "/tmp/")):
                        continue
                    st = os.stat(link)
                except OSError:
                    continue
                found[(st.st_dev, st.st_ino)] = target
    # /proc/PID/net/unix: the sockets of the process's network namespace, with the path each is bound to
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) >= 8 and parts[6] in socket_inodes and parts[7].startswith("/"):
                try:
                    st = os.stat(f"/proc/{pid}/root{parts[7]}")
                except OSError:
                    continue
                found[(st.st_dev, st.st_ino)] = parts[7]
        break
    return found


def reachable(inodes: dict[Inode, str], roots: list[Path], depth: int = 64) -> list[str]:
    """The paths under ``roots`` (walked without following links, ``depth`` levels at most)
    that are one of ``inodes``."""
    out: list[str] = []
    for root in roots:
        base = len(root.parts)
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            if len(Path(dirpath).parts) - base >= depth:
                dirnames[:] = []
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) in inodes and not stat.S_ISDIR(st.st_mode):
                    out.append(f"{path} ({inodes[(st.st_dev, st.st_ino)]})")
    return out


def shm_names() -> set[str]:
    return set(os.listdir("/dev/shm"))


def test_sigkill_of_the_simulator_leaves_no_process_segment_or_socket() -> None:
    peers.require("vllm")
    if not sandbox_available():
        msg = "bubblewrap cannot run here (apt-get install bubblewrap)"
        if os.environ.get("KVRESET_REQUIRE_SANDBOX"):
            pytest.fail(msg + " [KVRESET_REQUIRE_SANDBOX=1]")
        pytest.skip(msg)
    if not zipapp_path().exists():
        pytest.fail(f"{zipapp_path()} is missing: run 'make build' (make test does it)")
    before = shm_names()
    sim = SimCluster([MANIFEST], namespace=NS, real_servers=["vllm"])
    try:
        sim.wait_ready(READY_TIMEOUT)
        (pod,) = sim.live_pods()
        (server,) = pod["real_servers"]
        assert server["running"] and server["kind"] == "vllm", server
        # the real server answers through the pod proxy
        code, rows, err = sim.run_json("clear", "-n", NS, "--all", "--yes")
        assert code == 0 and [r["result"] for r in rows] == ["emptied"], (rows, err)
        pids = descendants(sim.proc.pid)
        assert server["pid"] in pids
        files = held(pids)
        # vLLM's engine and API processes share segments through the pod's /dev/shm
        # (multiprocessing's psm_*, torch's, semaphores) and sockets in /tmp
        assert any(p.startswith("/dev/shm/") for p in files.values()), files
        state = sim.tmp / "state"
        assert reachable({k: v for k, v in files.items() if v.startswith("/dev/shm/")}, [state]), \
            "the segments are in the pod's shm dir under the simulator's state dir"
        assert not reachable(files, [Path("/dev/shm")]), "nothing of the pod in the machine's /dev/shm"

        os.kill(sim.proc.pid, signal.SIGKILL)
        sim.proc.wait(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)
        left = sorted(p for p in pids if alive(p))
        assert left == [], [Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in left if alive(p)]
        # nothing but the state dir (the launcher's to remove) holds any of their files: not the
        # machine's /dev/shm, not /tmp (vLLM's ZMQ sockets were in the sandbox's own tmpfs)
        assert reachable(files, [Path("/dev/shm")]) == []
        outside = [p for p in reachable(files, [Path("/tmp")], depth=2) if not p.startswith(str(sim.tmp) + "/")]
        assert outside == [], outside
    finally:
        sim.stop()
    assert not sim.tmp.exists()
    assert reachable(files, [Path("/dev/shm")]) == [] and reachable(files, [Path("/tmp")], depth=2) == []
    # what /dev/shm gained meanwhile, if anything, is no file of this run (another run's at most)
    assert not [n for n in shm_names() - before if n in {Path(p).name for p in files.values()}]
