"""Run a container's command under bubblewrap with recorders standing in for vLLM.

The simulator finds what a pod serves by running the container's real command (often a
``/bin/bash -c`` script) with the pod's environment, in a filesystem view like the pod's, where
``vllm`` and ``python3 -m vllm.entrypoints...`` are recorders that write the argv they receive and
exit 0, so what a pod serves is found independently of the plugin (tests/sim/README.md
"Running it").

Isolation (bubblewrap): ``--unshare-all`` (no network, own pid/ipc/uts namespaces),
``--die-with-parent``, ``--new-session``, ``--clearenv`` + the container env; read-only binds of
/usr /bin /lib /lib64 /etc (as present), a tmpfs /tmp, /proc, /dev, the pod's shm dir at /dev/shm,
each volumeMount bound at its mountPath (subPath, readOnly honoured; missing host dirs created).
The only writable host directories are the pod's own volume, shm and recorder directories. Every
run is bounded by a timeout.

Recorder format: each invocation takes the next sequence number (an atomic ``mkdir seq.<n>``) and
writes its argv (program name first) NUL-separated to ``/.sim/out/argv.<n>`` inside the sandbox
(a bind of a per-run host directory); the host reads them back in invocation order. NUL separation
keeps every byte of every argument exact.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "Bind",
    "SandboxResult",
    "bwrap_available",
    "container_host_path",
    "pod_view_argv",
    "run_recorded",
    "volume_binds",
]

BWRAP = "/usr/bin/bwrap"
SANDBOX_BIN = "/.sim/bin"
SANDBOX_OUT = "/.sim/out"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", "/sys", "/sbin")
_PY_MODULES = (
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.api_server",
    "vllm.entrypoints.cli.main",
)


@lru_cache(maxsize=1)
def bwrap_available() -> bool:
    """True when bubblewrap exists and can create the namespaces used here (probed once)."""
    exe = shutil.which("bwrap") or (BWRAP if os.path.exists(BWRAP) else None)
    if exe is None:
        return False
    try:
        proc = subprocess.run(
            [exe, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
            capture_output=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


@dataclass(frozen=True)
class Bind:
    """One bind mount: host directory (or file) ``host`` at ``dest`` inside the pod."""

    host: Path
    dest: str
    readonly: bool = False


def volume_binds(container: dict[str, Any], volume_dirs: dict[str, Path]) -> list[Bind]:
    """The binds of a container's ``volumeMounts``, parents before children.

    ``subPath`` selects (and creates) a sub-directory of the volume; a mount of a volume not in
    ``volume_dirs`` (a kind the server does not provision) is skipped; ``readOnly`` gives a
    read-only bind. Host directories are created when missing. Never raises for odd specs.
    """
    binds: list[Bind] = []
    for mount in container.get("volumeMounts") or []:
        if not isinstance(mount, dict):
            continue
        name, dest = mount.get("name"), mount.get("mountPath")
        if not name or not dest or name not in volume_dirs:
            continue
        host = Path(volume_dirs[name])
        sub = str(mount.get("subPath") or "").strip("/")
        if sub and ".." not in PurePosixPath(sub).parts:
            host = host / sub
        try:
            if not host.is_file():  # a subPath naming one key's file binds that file
                host.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        binds.append(Bind(host, str(PurePosixPath("/") / str(dest).lstrip("/")), bool(mount.get("readOnly"))))
    binds.sort(key=lambda b: len(PurePosixPath(b.dest).parts))
    return binds


def container_host_path(path: str, binds: list[Bind], shm_dir: Path | None = None) -> Path | None:
    """The host path backing ``path`` as the container sees it: the deepest bind containing it
    (volume binds override ``/dev/shm`` -> ``shm_dir``, as they are mounted after it); None when
    no bind holds the path (the container's own root filesystem)."""
    p = PurePosixPath("/") / path.lstrip("/")
    best: tuple[int, Path] | None = None
    candidates = list(binds)
    if shm_dir is not None:
        candidates.insert(0, Bind(shm_dir, "/dev/shm"))
    for b in candidates:
        d = PurePosixPath(b.dest)
        if p == d or d in p.parents:
            depth = len(d.parts)
            if best is None or depth >= best[0]:
                best = (depth, b.host / p.relative_to(d))
    return None if best is None else best[1]


@dataclass
class SandboxResult:
    """Outcome of one sandboxed run: the argvs the recorders got, in invocation order
    (``recordings``), the exit code (None when killed on timeout), ``timed_out``, the tail of
    stderr, and ``error`` when the sandbox itself could not start."""

    recordings: list[list[str]] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    stderr: str = ""
    error: str | None = None


def _real_python() -> str | None:
    for cand in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.path.exists(cand):
            return cand
    return None


def _write_recorders(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    record = (
        'sim_record() {\n'
        '  _n=0\n'
        f'  while ! mkdir "{SANDBOX_OUT}/seq.$_n" 2>/dev/null; do _n=$((_n + 1)); done\n'
        f'  _f="{SANDBOX_OUT}/argv.$_n"\n'
        '  printf \'%s\\0\' "${0##*/}" "$@" > "$_f.tmp" && mv "$_f.tmp" "$_f"\n'
        '}\n'
    )
    vllm = ("#!/bin/sh\n# simulator recorder standing in for vllm: keep the argv, exit 0\n" + record
            + 'sim_record "$@"\nexit 0\n')
    real = _real_python()
    cases = "|".join(f'"-m {m}"' for m in _PY_MODULES)
    missing = 'echo "python3: not available in the simulator sandbox" >&2\nexit 127\n'
    fallback = f'exec {real} "$@"\n' if real else missing
    python = (
        "#!/bin/sh\n# simulator wrapper: record vLLM server entrypoints, run anything else for real\n"
        + record
        + f'case "$1 $2" in\n  {cases})\n    sim_record "$@"\n    exit 0;;\nesac\n'
        + fallback
    )
    for name, text in (("vllm", vllm), ("python3", python), ("python", python)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)


def _under_system_dir(dest: str) -> bool:
    return any(dest == d or dest.startswith(d + "/") for d in _SYSTEM_DIRS) and not dest.startswith("/dev/shm")


def pod_view_argv(binds: list[Bind], shm_dir: Path) -> list[str]:
    """The bubblewrap argv (up to, not including, the command) of a pod's filesystem view:
    ``--unshare-all`` (own network with loopback only, pid, ipc, uts namespaces),
    ``--die-with-parent``, ``--new-session``; read-only /usr /bin /lib /lib64 /sbin /etc (as
    present), a tmpfs /tmp, /proc, /dev, ``shm_dir`` at /dev/shm and every bind (binds into
    read-only system directories, /, /tmp and /.sim are skipped; a mountpoint nested in another
    volume is created on the host side first, as the kubelet does). Creates ``shm_dir``."""
    exe = shutil.which("bwrap") or BWRAP
    cmd: list[str] = [exe, "--unshare-all", "--die-with-parent", "--new-session"]
    for d in ("/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc"):
        if os.path.lexists(d):
            if os.path.islink(d):
                cmd += ["--symlink", os.readlink(d), d]
            else:
                cmd += ["--ro-bind", d, d]
    cmd += ["--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
    shm_dir.mkdir(parents=True, exist_ok=True)
    cmd += ["--bind", str(shm_dir), "/dev/shm"]
    for b in binds:
        # A mount nested in another volume needs its mountpoint in that volume (kubelet creates
        # it on the host side, so this works under a read-only parent too).
        parent = container_host_path(b.dest, [p for p in binds if p.dest != b.dest])
        if parent is not None:
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError:
                pass
        if _under_system_dir(b.dest) or b.dest in ("/", "/tmp", "/.sim") or b.dest.startswith("/.sim/"):
            continue
        cmd += ["--ro-bind" if b.readonly else "--bind", str(b.host), b.dest]
    return cmd


def run_recorded(
    argv: list[str],
    env: dict[str, str],
    binds: list[Bind],
    shm_dir: Path,
    work_dir: Path,
    *,
    timeout: float = 10.0,
    chdir: str = "/",
) -> SandboxResult:
    """Run ``argv`` under bubblewrap in the pod's view and return what the recorders saw.

    Args:
        argv: what the container execs (command + args, ``$(VAR)`` already expanded). An absolute
            argv[0] naming ``vllm``/``python``/``python3`` is replaced by its basename so the
            recorder on PATH answers.
        env: the container's resolved env; ``PATH`` gets the recorder directory first
            (default PATH when the env has none).
        binds: from :func:`volume_binds`; binds into read-only system directories are skipped.
        shm_dir: host directory bound at /dev/shm (a volume mounted at /dev/shm overrides it).
        work_dir: per-pod scratch; recorder scripts and outputs live in a fresh sub-directory.
        timeout: seconds before the whole sandbox is killed.

    Never raises for a failing command; ``error`` is set when bubblewrap cannot run at all.
    """
    result = SandboxResult()
    if not argv:
        result.error = "empty argv"
        return result
    work_dir.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="sandbox-", dir=work_dir))
    bin_dir, out_dir = run_dir / "bin", run_dir / "out"
    out_dir.mkdir()
    _write_recorders(bin_dir)

    cmd = pod_view_argv(binds, shm_dir)
    cmd += ["--ro-bind", str(bin_dir), SANDBOX_BIN, "--bind", str(out_dir), SANDBOX_OUT]
    cmd += ["--chdir", chdir, "--clearenv"]
    full_env = dict(env)
    full_env["PATH"] = SANDBOX_BIN + ":" + (env.get("PATH") or DEFAULT_PATH)
    for key, value in full_env.items():
        if key and "=" not in key:
            cmd += ["--setenv", key, value]
    prog = argv[0]
    base = prog.rsplit("/", 1)[-1]
    if prog.startswith("/") and (base == "vllm" or base.startswith("python")):
        prog = base
    cmd += ["--", prog, *argv[1:]]

    try:
        # A recorder script written just now can still be open for writing in a child another
        # thread forked meanwhile (until that child execs): exec then fails with ETXTBSY
        # ("Text file busy", seen with 256 pods starting at once). The container's command
        # is then run again, as the kubelet restarts a container that failed to start.
        for attempt in range(5):
            proc = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                timeout=timeout, start_new_session=True,
            )
            if proc.returncode == 0 or b"Text file busy" not in proc.stderr:
                break
            time.sleep(0.05 * (attempt + 1))
        result.returncode = proc.returncode
        result.stderr = proc.stderr.decode("utf-8", "replace")[-4000:]
    except subprocess.TimeoutExpired as exc:
        result.timed_out = True
        result.stderr = (exc.stderr or b"").decode("utf-8", "replace")[-4000:]
    except OSError as exc:
        result.error = f"cannot run bubblewrap: {exc}"
        return result

    files = []
    for f in out_dir.iterdir():
        if f.name.startswith("argv.") and not f.name.endswith(".tmp"):
            try:
                files.append((int(f.name.split(".", 1)[1]), f))
            except ValueError:
                continue
    for _pid, f in sorted(files):
        data = f.read_bytes()
        parts = data.split(b"\0")
        if parts and parts[-1] == b"":
            parts.pop()
        result.recordings.append([p.decode("utf-8", "surrogateescape") for p in parts])
    shutil.rmtree(run_dir, ignore_errors=True)
    return result
