"""merge_global_flags: kubectl's flags given before the sub-command, by kubectl's rules; and
completion for both placements."""

from __future__ import annotations

from typing import Any

import pytest

from kubectl_kvreset import completion
from kubectl_kvreset.cli import cli
from kubectl_kvreset.cli.flags import flags_from


def merged(*args: str) -> dict[str, Any]:
    """The parameters ``detect`` would run with for ``kubectl kvreset ARGS``."""
    seen: dict[str, Any] = {}
    from kubectl_kvreset.cli import detect, options

    def capture(**params: Any) -> None:
        seen.update(params)

    original = detect.command.callback
    try:
        detect.command.callback = options.handle_errors(capture)
        with pytest.raises(SystemExit) as ended:
            cli.main(args=list(args), prog_name="kubectl kvreset")
        assert ended.value.code in (0, None)
    finally:
        detect.command.callback = original
    return seen


def test_flags_before_equal_flags_after() -> None:
    before = merged("-n", "ns", "--context", "c", "--kubeconfig", "k", "detect")
    after = merged("detect", "-n", "ns", "--context", "c", "--kubeconfig", "k")
    assert flags_from(before) == flags_from(after)
    assert flags_from(before).namespace == "ns" and flags_from(before).context == "c"


def test_single_valued_flag_takes_the_value_after_the_sub_command() -> None:
    got = flags_from(merged("-n", "first", "--request-timeout", "5s", "detect", "-n", "second"))
    assert got.namespace == "second" and got.request_timeout == "5s"
    assert flags_from(merged("-v", "7", "detect")).verbosity == 7
    assert flags_from(merged("-v", "7", "detect", "-v", "2")).verbosity == 2


def test_repeatable_flag_adds_up_and_on_off_flags_hold_from_either_side() -> None:
    got = flags_from(merged("--as", "alice", "--as-group", "a", "detect", "--as-group", "b"))
    assert got.impersonate == "alice" and got.impersonate_groups == ("a", "b")
    assert flags_from(merged("-A", "detect", "-n", "x")).all_namespaces
    assert flags_from(merged("-n", "x", "detect", "-A")).all_namespaces
    assert flags_from(merged("--insecure-skip-tls-verify", "detect")).insecure_skip_tls_verify
    assert not flags_from(merged("detect")).all_namespaces


def test_a_bad_flag_before_the_sub_command_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(args=["--nosuch", "detect"], prog_name="kubectl kvreset")
    assert ended.value.code == 2
    with pytest.raises(SystemExit) as ended:
        cli.main(args=["-v", "x", "detect"], prog_name="kubectl kvreset")
    assert ended.value.code == 2


def test_completion_for_both_placements() -> None:
    seen: list[tuple[str, object]] = []

    def lister(kind: str, params: dict[str, Any]) -> list[str]:
        seen.append((kind, params.get("namespace")))
        return {"namespaces": ["a", "b"], "deployments": ["dec", "pre"], "leaderworkersets": []}.get(kind, [])

    def values(*words: str) -> list[str]:
        return [c.value for c in completion.complete(list(words), lister=lister)[0]]

    assert values("-n", "") == ["a", "b"]
    assert values("-n", "x", "cl") == ["clear", "clear-fs", "clear-store"]
    assert values("-n", "x", "clear", "deployment/p") == ["deployment/pre"]
    assert ("deployments", "x") in seen
    assert values("--context", "c", "-n", "y", "restart", "") == ["dec", "pre"]
    assert ("deployments", "y") in seen
    assert "--namespace" in values("--")
    assert values("-n", "x", "nosuchcommand", "") == []
