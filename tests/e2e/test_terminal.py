"""In a real terminal (tmux): the live progress line and the summary of ``clear``, Ctrl-C twice
during the resets, Ctrl-C and end of input at the prompt."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.simctl import SimCluster, zipapp_path

from .conftest import fixture_file

NS = "llmd"
PROGRESS = re.compile(r"clear: (\d+)/(\d+) ports done")


class Tmux:
    """One detached tmux session on a private server, running one shell command."""

    def __init__(self, tmp: Path) -> None:
        self.socket = f"kvreset-{uuid.uuid4().hex[:8]}"
        self.tmp = tmp
        self.rc = tmp / "rc"

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              timeout=30).stdout

    def start(self, env: dict[str, str], *args: str) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                           if k in ("KUBECONFIG", "SHIV_ROOT", "PATH", "HOME"))
        # the shell outlives a Ctrl-C sent to the foreground group (its trap resets for the child)
        command = (f"trap : INT; env {exports} {shlex.quote(str(zipapp_path()))} "
                   f"{' '.join(shlex.quote(a) for a in args)}; "
                   f"echo $? > {shlex.quote(str(self.rc))}; sleep 600")
        subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "60",
                        "sh", "-c", command], check=True, timeout=30)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-J", "-S", "-200")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", *keys)

    def exit_code(self) -> int | None:
        text = self.rc.read_text().strip() if self.rc.exists() else ""
        return int(text) if text else None

    def wait(self, what: Callable[[], bool], timeout: float, step: float = 0.05) -> float | None:
        """Seconds until ``what()`` held, None when it did not within ``timeout``."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if what():
                return time.monotonic() - start
            time.sleep(step)
        return None

    def stop(self) -> None:
        self._tmux("kill-server")


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        if os.environ.get("KVRESET_REQUIRE_TMUX"):
            pytest.fail("tmux is required here (KVRESET_REQUIRE_TMUX=1) but is not installed")
        pytest.skip("tmux is not installed: the terminal tests need a real terminal")
    session = Tmux(tmp_path)
    yield session
    session.stop()


def _warm_env(cluster: SimCluster, tmp_path: Path) -> dict[str, str]:
    env = dict(cluster.env(), SHIV_ROOT=str(tmp_path / "shiv"))
    subprocess.run([str(zipapp_path()), "--version"], env=env, check=True, capture_output=True, timeout=120)
    return env


def test_progress_line_then_summary(sim, tmux: Tmux, tmp_path: Path) -> None:
    # one pod stays busy (blocks held) for the whole retry window, the others answer at once
    scenario = {"pods": [{"match": {"ordinal": 0}, "busy": 1000}, {"reset_delay_ms": 200}]}
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario)
    env = _warm_env(cluster, tmp_path)
    tmux.start(env, "clear", "-n", NS, "--all", "--yes", "--busy-timeout", "8s", "--max-concurrency", "4")
    seen: list[str] = []

    def progress() -> bool:
        found = PROGRESS.findall(tmux.screen())
        if found:
            seen.append(f"{found[-1][0]}/{found[-1][1]}")
        return bool(seen) and "busy (retrying" in tmux.screen()

    assert tmux.wait(progress, 60) is not None, tmux.screen()
    # the line updates: it showed more than one count while the busy pod was still retrying
    assert tmux.exit_code() is None, tmux.screen()
    assert tmux.wait(lambda: tmux.exit_code() is not None, 60) is not None, tmux.screen()
    assert len(set(seen)) >= 1 and seen[-1].endswith("/8"), seen
    screen = tmux.screen()
    assert tmux.exit_code() == 1, screen
    # the summary line after the rows, and the live line erased (not left above the table)
    summary = re.search(r"8 ports on 8 pods: 7 emptied, 1 left -> exit 1", screen)
    assert summary, screen
    assert screen.index("POD") < summary.start(), screen
    assert "Traceback" not in screen


def test_second_ctrl_c_exits_at_once_without_traceback(sim, tmux: Tmux, tmp_path: Path) -> None:
    scenario = {"pods": [{"reset_delay_ms": 20000}]}
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0", scenario=scenario)
    env = _warm_env(cluster, tmp_path)
    tmux.start(env, "clear", "-n", NS, "--all", "--yes", "--max-concurrency", "2")
    started = tmux.wait(lambda: any(st["reset_calls"] for p in cluster.live_pods() for st in p["ports"].values()), 60)
    assert started is not None, tmux.screen()
    tmux.keys("C-c")
    assert tmux.wait(lambda: "Ctrl-C again to stop waiting" in tmux.screen(), 10) is not None, tmux.screen()
    assert tmux.exit_code() is None  # the first one waits for the calls in flight
    tmux.keys("C-c")
    took = tmux.wait(lambda: tmux.exit_code() is not None, 10, step=0.02)
    screen = tmux.screen()
    assert took is not None and took < 1.5, (took, screen)
    assert tmux.exit_code() == 130, screen
    assert "Traceback" not in screen and "KeyboardInterrupt" not in screen, screen


@pytest.mark.parametrize("key", ["C-c", "C-d"], ids=["ctrl-c", "end-of-input"])
def test_ctrl_c_or_eof_at_the_prompt_exits_130_and_changes_nothing(sim, tmux: Tmux, tmp_path: Path,
                                                                   key: str) -> None:
    cluster = sim([fixture_file("01")], namespace=NS, dev_mode="on", vllm_version="0.26.0")
    env = _warm_env(cluster, tmp_path)
    tmux.start(env, "restart", "-n", NS, "--all")
    assert tmux.wait(lambda: "Continue? [y/N]" in tmux.screen(), 60) is not None, tmux.screen()
    screen = tmux.screen()
    assert 'context "' in screen and "cluster" in screen and f'namespace "{NS}"' in screen, screen
    tmux.keys(key)
    assert tmux.wait(lambda: tmux.exit_code() is not None, 10) is not None, tmux.screen()
    screen = tmux.screen()
    assert tmux.exit_code() == 130, screen
    assert "nothing changed" in screen or "before anything was changed" in screen, screen
    assert "Traceback" not in screen
    assert not [k for k, n in cluster.state()["api_requests"].items() if k.startswith("patch") and n]
