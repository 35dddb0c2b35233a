"""The terminal questions of ``cli/prompt.py``: answers read line by line from standard input
(a pipe here), and a signal handled by another thread still ends the wait."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

import click
import pytest

from kubectl_kvreset.cli.prompt import ask_choice, ask_yes_no


class _Stdin:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


@pytest.fixture
def typed(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The write end of a pipe that is standard input."""
    read_fd, write_fd = os.pipe()
    monkeypatch.setattr(sys, "stdin", _Stdin(read_fd))
    yield write_fd
    os.close(read_fd)
    try:
        os.close(write_fd)
    except OSError:
        pass


def test_yes_no_asks_again_after_an_invalid_answer(typed: int, capsys: pytest.CaptureFixture[str]) -> None:
    os.write(typed, b"maybe\nYes\n\n")
    assert ask_yes_no("Continue?") is True
    assert ask_yes_no("Continue?") is False  # an empty answer is no
    err = capsys.readouterr().err
    assert err.count("Continue? [y/N]: ") == 3 and "error: invalid input" in err


def test_choice_takes_the_default_on_an_empty_answer_and_refuses_others(typed: int,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    os.write(typed, b"reboot\nrestart\n\n")
    assert ask_choice("Fallback", ["restart", "devmode", "none"], default="none") == "restart"
    assert ask_choice("Fallback", ["restart", "devmode", "none"], default="none") == "none"
    err = capsys.readouterr().err
    assert "Fallback (restart, devmode, none) [none]: " in err
    assert "error: 'reboot' is not one of 'restart', 'devmode', 'none'." in err


def test_end_of_input_is_no_answer(typed: int) -> None:
    os.write(typed, b"y")  # no newline before the end
    os.close(typed)
    with pytest.raises(click.Abort):
        ask_yes_no("Continue?")


def test_a_signal_another_thread_receives_ends_the_wait(typed: int) -> None:
    # the kernel may deliver a process signal to any thread: the main thread blocked in a plain
    # read would never see it; here the wakeup pipe wakes the select and the handler raises
    late = threading.Event()  # the wait was ended by the typed fallback, not by the signal

    def raise_interrupt(_signum: int, _frame: FrameType | None) -> None:
        if not late.is_set():
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, raise_interrupt)
    fallback = threading.Event()

    main = threading.get_ident()

    def waiting() -> bool:  # the main thread is inside the read of the answer
        frame = sys._current_frames().get(main)
        while frame is not None:
            if frame.f_code.co_name == "_read_line":
                return True
            frame = frame.f_back
        return False

    def other_thread() -> None:
        while not waiting() and not fallback.is_set():
            fallback.wait(0.01)
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
        if not fallback.wait(10):  # never needed when the signal ends the wait: then fail, not hang
            late.set()
            os.write(typed, b"n\n")

    worker = threading.Thread(target=other_thread)
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.start()
            ask_yes_no("Continue?")
    finally:
        fallback.set()
        worker.join()
        signal.signal(signal.SIGUSR1, previous)
