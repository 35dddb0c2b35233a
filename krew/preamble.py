"""shiv preamble of the kubectl-kvreset zipapp: marks this run's extraction in use and removes
other builds' extractions that no run can still use, keeping the few most recent.

shiv runs this file after extracting ``site-packages`` and before the entry point
(``shiv --preamble``; linkedin/shiv ``bootstrap/__init__.py``), with ``site_packages`` (a
``Path``: ``<root>/<archive name>_<build id>/site-packages``) among its globals. Every build
extracts into a new directory and shiv never deletes the old ones (linkedin/shiv#88, #188).

Rules:

* In use: each run holds a shared ``flock`` on ``<extraction>/.in-use`` for its whole life
  (the package imports modules lazily, so deleting a running build's files would crash it
  mid-operation) and touches the file, whose mtime is the extraction's last use.
* No removal while a run is between shiv's "is it extracted?" check and that lock: each run
  holds the shared gate lock from ``krew/boot.py`` until it holds its in-use lock; the cleaner
  works only with the gate held exclusively (taken without waiting: if a run is starting, it
  cleans another time).
* Kept: this build's extraction and the :data:`KEEP` - 1 most recently used others, so two
  builds used in turn (an upgrade while a run goes on, two checkouts) do not force each other
  to extract anew (about 3 s). A sibling without an ``.in-use`` file (a build older than this
  rule) counts by its directory's mtime and is removed only when older than a day.
* Removed: directories ``<name>_<64 hex>`` (renamed aside first, so a half-removed one is never
  taken for an extraction) and their ``.<name>_<64 hex>_lock`` files, plus ``.tmp`` leftovers
  of an interrupted extraction older than an hour. Other apps' directories are left alone.
  Errors are ignored: cleaning never stops the command.

Test hook: ``KVRESET_TEST_PREAMBLE_DELAY_S`` (seconds) sleeps before the in-use lock is taken,
to widen the window the gate closes (tests/e2e/test_extraction.py).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

#: an interrupted extraction's ``.tmp`` directory younger than this may still be in progress
TMP_GRACE_S = 3600.0
#: a sibling extraction without an ``.in-use`` file younger than this may still be running
UNMARKED_GRACE_S = 86400.0
#: how many builds' extractions are kept, this run's included
KEEP = 3
IN_USE = ".in-use"
#: name prefix of an extraction renamed aside while it is removed
TRASH = ".trash-"


def hold_in_use(current: Path) -> int | None:
    """Take a shared lock on ``current/.in-use`` for the life of this process (the descriptor
    is never closed) and record this use (the file's mtime). Returns the descriptor, or None
    where locking is not possible."""
    try:
        import fcntl

        fd = os.open(current / IN_USE, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            os.utime(fd)
        except OSError:
            pass
        return fd
    except (OSError, ImportError):
        return None


def last_use(entry: Path) -> float:
    """When the extraction ``entry`` was last used: its ``.in-use`` file's mtime, else the
    directory's (0 when neither can be read)."""
    for path in (entry / IN_USE, entry):
        try:
            return path.stat().st_mtime
        except OSError:
            continue
    return 0.0


def in_use(entry: Path, now: float) -> bool:
    """True when another process may be running from the extraction ``entry``."""
    marker = entry / IN_USE
    try:
        import fcntl

        fd = os.open(marker, os.O_RDWR)
    except FileNotFoundError:
        try:
            return now - entry.stat().st_mtime < UNMARKED_GRACE_S
        except OSError:
            return True
    except (OSError, ImportError):
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def exclusive_gate(gate: Path | None) -> int | None:
    """Take the gate exclusively without waiting (None: a run is starting, or no gate file)."""
    if gate is None:
        return None
    try:
        import fcntl

        fd = os.open(gate, os.O_CREAT | os.O_RDWR, 0o600)
    except (OSError, ImportError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_stale(current: Path, *, now: float | None = None, keep: int = KEEP) -> list[Path]:
    """Delete the other builds' extractions beside ``current`` (``<root>/<name>_<build id>``)
    that are not in use and not among the ``keep`` - 1 most recently used. The caller holds the
    gate exclusively (see the module docstring).

    Returns the paths removed. Never raises ``OSError``.
    """
    now = time.time() if now is None else now
    root = current.parent
    name, sep, build_id = current.name.rpartition("_")
    if not sep or not re.fullmatch(r"[0-9a-f]{64}", build_id):
        return []
    stale = re.compile(re.escape(name) + r"_([0-9a-f]{64})(\.tmp)?")
    trash = re.compile(re.escape(TRASH) + re.escape(name) + r"_[0-9a-f]{64}\.[0-9]+")
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    builds: list[Path] = []
    for entry in entries:
        if trash.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)  # a removal that was interrupted
            continue
        match = stale.fullmatch(entry.name)
        if match is None or entry.name == current.name or not entry.is_dir() or entry.is_symlink():
            continue
        if match.group(2):
            try:
                if now - entry.stat().st_mtime >= TMP_GRACE_S:
                    shutil.rmtree(entry)
                    removed.append(entry)
            except OSError:
                pass
            continue
        builds.append(entry)
    builds.sort(key=last_use, reverse=True)
    for entry in builds[max(keep - 1, 0):]:
        try:
            if in_use(entry, now):
                continue
            aside = root / f"{TRASH}{entry.name}.{os.getpid()}"
            entry.rename(aside)
            shutil.rmtree(aside, ignore_errors=True)
            removed.append(entry)
            (root / f".{entry.name}_lock").unlink(missing_ok=True)
        except OSError:
            continue
    return removed


def main(site_packages: Path) -> None:
    """The preamble's work for the extraction holding ``site_packages``."""
    current = site_packages.parent
    delay = os.environ.get("KVRESET_TEST_PREAMBLE_DELAY_S")
    if delay:
        time.sleep(float(delay))
    hold_in_use(current)
    boot = sys.modules.get("_kvreset_boot")
    gate = getattr(boot, "GATE_PATH", None)
    if boot is not None:
        boot.close_gate()
    fd = exclusive_gate(gate)
    if fd is None:
        return
    try:
        remove_stale(current)
    finally:
        os.close(fd)


if __name__ == "__main__" and "site_packages" in globals():
    main(Path(globals()["site_packages"]))
