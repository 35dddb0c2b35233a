"""shiv preamble of the kubectl-kvreset zipapp: removes this app's stale extractions.

shiv runs this file after extracting ``site-packages`` and before the entry point
(``shiv --preamble``; linkedin/shiv ``bootstrap/__init__.py``), with ``site_packages`` (a
``Path``: ``<root>/<archive name>_<build id>/site-packages``) among its globals. Every build
extracts into a new directory and shiv never deletes the old ones (linkedin/shiv#88, #188), so
this removes the siblings that belong to other builds of the same archive name: directories
``<name>_<64 hex>`` and their ``.<name>_<64 hex>_lock`` files, plus ``<name>_<64 hex>.tmp``
leftovers of an interrupted extraction older than an hour. Other apps' directories are left
alone. Errors are ignored: cleaning must never stop the command.

An extraction in use is never removed: each run holds a shared ``flock`` on
``<extraction>/.in-use`` for its whole life (the package imports modules lazily, so deleting a
running build's files would crash it mid-operation); the cleaner removes a sibling only when it
can take that lock exclusively, and a sibling without the file (a build older than this rule)
only when it is older than a day.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

#: an interrupted extraction's ``.tmp`` directory younger than this may still be in progress
TMP_GRACE_S = 3600.0
#: a sibling extraction without an ``.in-use`` file younger than this may still be running
UNMARKED_GRACE_S = 86400.0
IN_USE = ".in-use"


def hold_in_use(current: Path) -> int | None:
    """Take a shared lock on ``current/.in-use`` for the life of this process (the descriptor
    is never closed). Returns the descriptor, or None where locking is not possible."""
    try:
        import fcntl

        fd = os.open(current / IN_USE, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd
    except (OSError, ImportError):
        return None


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


def remove_stale(current: Path, *, now: float | None = None) -> list[Path]:
    """Delete the other builds' extractions beside ``current`` (``<root>/<name>_<build id>``).

    Returns the paths removed. Never raises ``OSError``.
    """
    now = time.time() if now is None else now
    root = current.parent
    name, sep, build_id = current.name.rpartition("_")
    if not sep or not re.fullmatch(r"[0-9a-f]{64}", build_id):
        return []
    stale = re.compile(re.escape(name) + r"_([0-9a-f]{64})(\.tmp)?")
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    for entry in entries:
        match = stale.fullmatch(entry.name)
        if match is None or entry.name == current.name or not entry.is_dir() or entry.is_symlink():
            continue
        try:
            if match.group(2) and now - entry.stat().st_mtime < TMP_GRACE_S:
                continue
            if not match.group(2) and in_use(entry, now):
                continue
            shutil.rmtree(entry)
            removed.append(entry)
            if not match.group(2):
                (root / f".{entry.name}_lock").unlink(missing_ok=True)
        except OSError:
            continue
    return removed


if __name__ == "__main__" and "site_packages" in globals():
    hold_in_use(Path(globals()["site_packages"]).parent)
    remove_stale(Path(globals()["site_packages"]).parent)
