"""The peer locator: a peer counts only when its install finished; require() skips or fails."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import tests.peers as peers


def _fake_venv(root: Path, venv: str, exe: str, stamp: bool) -> Path:
    bindir = root / venv / "bin"
    bindir.mkdir(parents=True)
    path = bindir / exe
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    if stamp:
        (root / venv / peers.STAMP).write_text("spec\n")
    return path


def test_peer_needs_finished_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVRESET_PEERS_DIR", str(tmp_path))
    _fake_venv(tmp_path, "vllm", "vllm", stamp=False)
    master = _fake_venv(tmp_path, "mooncake", "mooncake_master", stamp=True)
    assert peers.vllm() is None
    assert peers.mooncake_master() == str(master)
    assert peers.lmcache_controller() is None
    assert "vllm" in peers.missing("vllm", "mooncake")
    assert "mooncake" not in peers.missing("all")


def test_require_skips_naming_the_peer_and_make_peers(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVRESET_PEERS_DIR", str(tmp_path))
    monkeypatch.delenv("KVRESET_REQUIRE_PEERS", raising=False)
    with pytest.raises(pytest.skip.Exception) as info:
        peers.require("vllm", "lmcache")
    assert "vllm, lmcache" in str(info.value) and "make peers" in str(info.value)


def test_require_fails_in_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVRESET_PEERS_DIR", str(tmp_path))
    monkeypatch.setenv("KVRESET_REQUIRE_PEERS", "1")
    with pytest.raises(pytest.fail.Exception) as info:
        peers.require("lmcache")
    assert "lmcache" in str(info.value) and "make peers" in str(info.value)


def test_unknown_peer_is_an_error() -> None:
    with pytest.raises(KeyError):
        peers.missing("valkey")


def test_default_dir_is_in_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVRESET_PEERS_DIR", raising=False)
    assert peers.peers_dir() == Path(peers.__file__).resolve().parents[2] / ".peers"
    assert os.path.basename(peers.peers_dir()) == ".peers"
