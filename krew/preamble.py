"""shiv preamble of the kubectl-kvreset zipapp: removes this app's stale extractions.

shiv runs this file after extracting ``site-packages`` and before the entry point
(``shiv --preamble``; linkedin/shiv ``bootstrap/__init__.py``), with ``site_packages`` (a
``Path``: ``<root>/<archive name>_<build id>/site-packages``) among its globals. Every build
extracts into a new directory and shiv never deletes the old ones (linkedin/shiv#88, #188), so
this removes the siblings that belong to other builds of the same archive name: directories
``<name>_<64 hex>`` and their ``.<name>_<64 hex>_lock`` files, plus ``<name>_<64 hex>.tmp``
leftovers of an interrupted extraction older than an hour. Other apps' directories are left
alone. Errors are ignored: cleaning must never stop the command.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

#: an interrupted extraction's ``.tmp`` directory younger than this may still be in progress
TMP_GRACE_S = 3600.0


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
            shutil.rmtree(entry)
            removed.append(entry)
            if not match.group(2):
                (root / f".{entry.name}_lock").unlink(missing_ok=True)
        except OSError:
            continue
    return removed


if __name__ == "__main__" and "site_packages" in globals():
    remove_stale(Path(globals()["site_packages"]).parent)
