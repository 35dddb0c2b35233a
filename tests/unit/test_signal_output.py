"""A signal before anything changed prints ``[]`` for ``-o json``/``-o yaml``, also before the
sub-command has started (its options not yet parsed by click)."""

from __future__ import annotations

import signal

import pytest

from kubectl_kvreset.cli import _output_format, signals
from kubectl_kvreset.pool import Cancel


@pytest.mark.parametrize(("args", "found"), [
    (["clear-fs", "--all", "-o", "json"], "json"),
    (["clear-fs", "-oyaml", "--all"], "yaml"),
    (["-n", "x", "detect", "--output=json"], "json"),
    (["detect", "--output", "yaml", "-o", "table"], "table"),
    (["detect", "-n", "x"], None),
    (["detect", "--", "-o", "json"], None),
    (["detect", "-o"], None),
])
def test_the_output_format_is_read_from_the_command_line(args: list[str], found: str | None) -> None:
    assert _output_format(args) == found


@pytest.mark.parametrize(("output", "stdout"), [("json", "[]\n"), ("yaml", "[]\n"), ("table", ""), (None, "")])
def test_before_a_sub_command_runs_json_and_yaml_get_an_empty_list(output: str | None, stdout: str,
                                                                  capfd: pytest.CaptureFixture[str]) -> None:
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        signals.install(Cancel(), output=output)
        with pytest.raises(SystemExit) as stopped:
            signals.on_signal(signal.SIGTERM, None)
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])
    assert stopped.value.code == 143
    out, err = capfd.readouterr()
    assert out == stdout and err == "terminated (SIGTERM) before anything was changed\n"
