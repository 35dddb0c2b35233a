"""The shell-script reader on its own: which command a script starts and with what environment,
for any command the caller wants (here a made-up ``server``), without running anything."""

from __future__ import annotations

import pytest

from kubectl_kvreset.shellscript import Shell, ShellScriptError


def wanted(words) -> bool:
    return bool(words) and words[0] == "server"


def read(script: str, env: dict[str, str] | None = None):
    return Shell(env or {}, wanted=wanted).run_script(script)


def test_finds_the_wanted_command_after_assignments_and_exports() -> None:
    found = read('PORT=8000\nexport MODE=1\necho start && exec server --port "$PORT" --name "a b"')
    assert found is not None
    words, env = found
    assert words == ["server", "--port", "8000", "--name", "a b"]
    assert env["MODE"] == "1" and "PORT" not in env  # only exported variables reach the command


def test_parameter_and_arithmetic_expansion() -> None:
    words, _ = read("N=${REPLICAS:-2}; server --n $((N * 4)) --host ${HOST:-0.0.0.0}")
    assert words == ["server", "--n", "8", "--host", "0.0.0.0"]
    words, _ = read("server --n ${REPLICAS:-2}", {"REPLICAS": "5"})
    assert words == ["server", "--n", "5"]


def test_nested_shell_and_prefix_assignment() -> None:
    found = read("""bash -c 'export X=7; server --x "$X"'""")
    assert found is not None and found[0] == ["server", "--x", "7"]
    # a prefix assignment applies to the command, not to its own words (as in sh)
    found = read('X=7 server --x "$X"')
    assert found is not None and found[0] == ["server", "--x", "$X"] and found[1]["X"] == "7"
    words, env = read("LEVEL=debug server")
    assert words == ["server"] and env["LEVEL"] == "debug"


def test_no_wanted_command_gives_none() -> None:
    assert read("echo hello; sleep 10") is None
    assert Shell({}).run_script("server --x 1") is None  # nothing is wanted by default


def test_unbalanced_quote_is_an_error_naming_the_construct() -> None:
    with pytest.raises(ShellScriptError, match="quote"):
        read("server --name 'unterminated")
