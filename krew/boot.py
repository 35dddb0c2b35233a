"""Start of the kubectl-kvreset zipapp, before shiv's bootstrap (stored as ``_kvreset_boot.py``
at the zip's root; ``__main__.py`` imports it once the Python version is known to be new enough).

Two things shiv does not do:

* **Where to extract.** shiv extracts ``site-packages`` into ``$SHIV_ROOT`` or ``~/.shiv``
  (linkedin/shiv ``bootstrap/__init__.py`` ``cache_path``) and dies with a traceback when the
  home directory is read-only or missing (``HOME=/`` in a container). ``SHIV_ROOT`` always
  wins; otherwise, when ``~/.shiv`` cannot be used, a per-user directory under the temporary
  directory is used instead (created with mode 0700; refused when it is a symlink, is owned by
  another user or is open to others) and one line on stderr says so.
* **The extraction gate.** shiv checks that this build's extraction exists, then runs the
  preamble, which marks the extraction in use (``krew/preamble.py``). Between the two, another
  build's preamble could remove the extraction, and this run would die with
  ``ModuleNotFoundError``. So every run holds a *shared* lock on
  ``<root>/.<archive name>.gate`` from here until its extraction is marked in use; a cleaner
  removes extractions only while it holds that lock *exclusively*, i.e. when no run is between
  the check and the mark.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

#: the shared lock on the gate while this run goes from shiv's check to its in-use mark
GATE_FD: int | None = None
GATE_PATH: Path | None = None


def fallback_root() -> Path:
    """The per-user extraction root under the temporary directory: ``<tmp>/kubectl-kvreset-<uid>``."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"kubectl-kvreset-{uid}"


def usable_dir(path: Path) -> bool:
    """True when ``path`` is (or can be made, inside an existing parent: a missing home is not
    created) a directory this user can write into."""
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return False
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK) and _writable(path)


def _writable(path: Path) -> bool:
    # os.access says yes for root on a read-only file system: try it
    probe = path / f".probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return True
    except OSError:
        return False
    os.close(fd)
    try:
        probe.unlink()
    except OSError:
        pass
    return True


def secure_private_dir(path: Path) -> str | None:
    """Create ``path`` with mode 0700 or check the existing one: a real directory (not a
    symlink), owned by this user, closed to group and others. Returns None when it is fit,
    else the reason it is refused."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot create {path}: {exc.strerror}"
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o077:
        return f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):o}; it must be 700)"
    return None


def choose_root(environ: dict[str, str] | os._Environ[str] | None = None) -> tuple[Path, str | None]:
    """Where shiv will extract: ``(root, notice)``. ``SHIV_ROOT`` when set; ``~/.shiv`` when
    usable; else :func:`fallback_root`, with a one-line ``notice`` for stderr.

    Raises:
        SystemExit: 2, when the fallback directory is refused (the message says why).
    """
    env = os.environ if environ is None else environ
    if env.get("SHIV_ROOT"):
        return Path(env["SHIV_ROOT"]).expanduser(), None
    home = Path("~/.shiv").expanduser()
    if not str(home).startswith("~") and usable_dir(home):
        return home, None
    alt = fallback_root()
    problem = secure_private_dir(alt)
    if problem is not None:
        sys.stderr.write(f"error: {home} cannot be written and {problem}: set SHIV_ROOT to a directory of yours\n")
        raise SystemExit(2)
    return alt, (f"note: {home} cannot be written (read-only or missing home); "
                 f"unpacking into {alt} instead (set SHIV_ROOT to choose)")


def open_gate(root: Path, archive: Path) -> None:
    """Take the shared gate lock of ``archive``'s extractions under ``root`` (see the module
    docstring). Where locking is impossible the run goes on without it."""
    global GATE_FD, GATE_PATH
    try:
        import fcntl

        root.mkdir(parents=True, exist_ok=True)
        GATE_PATH = root / f".{archive.name}.gate"
        fd = os.open(GATE_PATH, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        GATE_FD = fd
    except (OSError, ImportError):
        GATE_FD = None


def close_gate() -> None:
    """Release the shared gate lock (the preamble calls this once the extraction is marked in use)."""
    global GATE_FD
    if GATE_FD is not None:
        try:
            os.close(GATE_FD)
        except OSError:
            pass
        GATE_FD = None


def start() -> None:
    """Choose the extraction root (exporting it as ``SHIV_ROOT`` for shiv when it is the
    fallback) and open the gate. Called by the zipapp's ``__main__.py`` before shiv's bootstrap."""
    root, notice = choose_root()
    if notice:
        os.environ["SHIV_ROOT"] = str(root)
        sys.stderr.write(notice + "\n")
    open_gate(root, Path(sys.argv[0]).resolve())
