"""SIGINT and SIGTERM go to the command line's cancel handle (``cli/signals.py``); the handler
is called directly here, no signal is sent."""

from __future__ import annotations

import signal

import pytest

from kubectl_kvreset.cli import signals
from kubectl_kvreset.pool import INFLIGHT_BOUND_S, Cancel
from kubectl_kvreset.report import ExitCode


@pytest.fixture
def cancel() -> Cancel:
    handle = Cancel()
    signals._State.cancel, signals._State.signum, signals._State.changing = handle, None, 0
    signals._State.commands = 1  # inside a sub-command's run
    signals._State.count = 0
    EXITS.clear()
    signals._State.exit_soon = EXITS.append  # the real one ends the process soon after
    return handle


EXITS: list[int] = []


def test_before_a_sub_command_runs_a_signal_exits_with_its_code(cancel: Cancel) -> None:
    signals._State.commands = 0  # options being parsed: click would say "Aborted!" and exit 1
    with pytest.raises(SystemExit) as stopped:
        signals.on_signal(signal.SIGTERM, None)
    assert stopped.value.code == 143


def test_before_any_change_a_signal_raises_as_ctrl_c_does(cancel: Cancel) -> None:
    with pytest.raises(KeyboardInterrupt):
        signals.on_signal(signal.SIGTERM, None)
    assert cancel.is_set() and signals.exit_code() is ExitCode.TERMINATED
    assert signals.signal_name() == "SIGTERM"


def test_while_changing_sigterm_only_cancels_with_a_short_bound(cancel: Cancel) -> None:
    with signals.changing():
        signals.on_signal(signal.SIGTERM, None)  # no raise: the command goes on to print its rows
        assert cancel.is_set() and not cancel.abandoned()
        assert cancel.inflight_bound_s == signals.TERM_INFLIGHT_BOUND_S < INFLIGHT_BOUND_S
        signals.on_signal(signal.SIGTERM, None)  # a second one stops the wait for calls in flight
        assert cancel.abandoned()
    assert signals.exit_code() is ExitCode.TERMINATED
    assert int(ExitCode.TERMINATED) == 143


def test_sigint_keeps_the_long_bound_and_exits_130(cancel: Cancel) -> None:
    with signals.changing():
        signals.on_signal(signal.SIGINT, None)
    assert cancel.inflight_bound_s == INFLIGHT_BOUND_S
    assert signals.exit_code() is ExitCode.INTERRUPTED and signals.signal_name() == "SIGINT"


def test_sigterm_after_sigint_wins_the_exit_code(cancel: Cancel) -> None:
    with signals.changing():
        signals.on_signal(signal.SIGINT, None)
        signals.on_signal(signal.SIGTERM, None)
    assert signals.exit_code() is ExitCode.TERMINATED and cancel.abandoned()


def test_termination_outranks_every_other_code() -> None:
    assert ExitCode.combine([ExitCode.FAILED, ExitCode.TERMINATED, ExitCode.UNCONFIRMED]) is ExitCode.TERMINATED
    assert ExitCode.combine([ExitCode.INTERRUPTED, ExitCode.TERMINATED]) is ExitCode.TERMINATED


def test_an_api_error_passes_through_the_blocks_unchanged() -> None:
    from kubectl_kvreset.kube import KubeApiError

    err = KubeApiError(403, "Forbidden", "no")  # a frozen dataclass: no __traceback__ may be assigned
    depth = (signals._State.changing, signals._State.commands)
    with pytest.raises(KubeApiError) as got:
        with signals.command(), signals.changing():
            raise err
    assert got.value is err and (signals._State.changing, signals._State.commands) == depth


def test_a_second_signal_ends_the_process_soon_and_a_third_at_once(cancel: Cancel, monkeypatch) -> None:
    import os

    ended: list[int] = []
    monkeypatch.setattr(os, "_exit", ended.append)
    monkeypatch.setattr(os, "write", lambda fd, data: len(data))
    with signals.changing():
        signals.on_signal(signal.SIGINT, None)
        assert EXITS == [] and not ended
        signals.on_signal(signal.SIGINT, None)  # stops waiting; the exit is armed, the rows may print
        assert cancel.abandoned() and EXITS == [130] and not ended
        signals.on_signal(signal.SIGINT, None)  # no traceback, no wait
        assert ended == [130]
