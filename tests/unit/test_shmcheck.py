"""The session check of tests/shmcheck.py: a /dev/shm entry that appeared during the run and that
no live process holds is a leftover; one a live process maps is a running server's."""

from __future__ import annotations

import mmap
import os
import uuid
from pathlib import Path

import pytest

from tests import shmcheck


@pytest.fixture
def name() -> object:
    n = f"kvreset-shmcheck-{uuid.uuid4().hex[:12]}"
    yield n
    try:
        (shmcheck.SHM / n).unlink()
    except OSError:
        pass


def test_an_unheld_new_entry_is_a_leftover_and_a_mapped_one_is_not(name: str) -> None:
    if not shmcheck.SHM.is_dir():
        pytest.skip("no /dev/shm on this machine")
    before = shmcheck._listing()
    path = Path(shmcheck.SHM / name)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, 4096)
        with mmap.mmap(fd, 4096) as mapped:
            mapped[0:1] = b"x"
            assert not [x for x in shmcheck.leftovers(before) if x.startswith(name)]  # held: a live server's
    finally:
        os.close(fd)
    assert f"{name} (4096 bytes)" in shmcheck.leftovers(before)
    path.unlink()
    assert not [x for x in shmcheck.leftovers(before) if x.startswith(name)]
