"""Assignments the shell reader cannot follow as straight-line code leave their variable
unevaluated (never the value before nor the one assigned), and the FS tier root built from it
is left; the straight-line cases keep their values."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubectl_kvreset.discovery import VllmPod, describe_pod
from kubectl_kvreset.engines.vllm.servecmd import unevaluated_in
from kubectl_kvreset.shellscript import Shell
from kubectl_kvreset.tiers import TierKind

KTC = json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                  "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
                                                "secondary_tiers": [{"type": "fs", "root_dir": "$ROOT"}]}})
SERVE = 'exec vllm serve org/m --port 8000 --kv-transfer-config "' + KTC.replace('"', '\\"') + '"'


def _root(script: str) -> tuple[str | None, str | None]:
    obj = {"kind": "Pod", "metadata": {"name": "p0", "namespace": "llm", "uid": "u0"},
           "spec": {"nodeName": "n", "containers": [{
               "name": "vllm", "image": "vllm/vllm-openai:v0.26.0", "command": ["bash", "-c", script + "; " + SERVE],
               "volumeMounts": [{"name": "kv", "mountPath": "/mnt/kv"}]}],
               "volumes": [{"name": "kv", "persistentVolumeClaim": {"claimName": "kv"}}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    pod: VllmPod | None = describe_pod(obj)
    assert pod is not None
    (tier,) = [t for t in pod.layout.tiers if t.kind is TierKind.FS]
    return tier.root_dir, tier.unevaluated


NOT_FOLLOWED = {
    "if": 'ROOT=/mnt/kv/a; if [ -n "$X" ]; then ROOT=/mnt/kv/b; fi',
    "if-else": 'ROOT=/mnt/kv/a\nif [ -n "$X" ]\nthen\n  :\nelse\n  ROOT=/mnt/kv/b\nfi',
    "case": 'ROOT=/mnt/kv/a; case "$X" in\n  y) ROOT=/mnt/kv/b ;;\nesac',
    "case-one-line": 'ROOT=/mnt/kv/a; case "$X" in y) ROOT=/mnt/kv/b;; esac',
    "while": "ROOT=/mnt/kv/a; while false; do ROOT=/mnt/kv/b; done",
    "until": "ROOT=/mnt/kv/a; until true; do ROOT=/mnt/kv/b; done",
    "for-body": "ROOT=/mnt/kv/a; for i in 1; do ROOT=/mnt/kv/$i; done",
    "for-variable": "ROOT=/mnt/kv/a; for ROOT in /mnt/kv/b; do :; done",
    "and": 'ROOT=/mnt/kv/a; [ -n "$X" ] && ROOT=/mnt/kv/b',
    "or": 'ROOT=/mnt/kv/a; [ -z "$X" ] || ROOT=/mnt/kv/b',
    "and-group": 'ROOT=/mnt/kv/a; [ -n "$X" ] && { ROOT=/mnt/kv/b; }',
    "subshell": "ROOT=/mnt/kv/a; (ROOT=/mnt/kv/b; true)",
    "pipeline": "ROOT=/mnt/kv/a; echo /mnt/kv/b | read ROOT",
    "background": "ROOT=/mnt/kv/a; ROOT=/mnt/kv/b &",
    "function": "ROOT=/mnt/kv/a; f() { ROOT=/mnt/kv/b; }; f",
    "function-keyword": "ROOT=/mnt/kv/a; function f { ROOT=/mnt/kv/b; }; f",
    "eval": "ROOT=/mnt/kv/a; eval ROOT=/mnt/kv/b",
    "printf-v": "ROOT=/mnt/kv/a; printf -v ROOT %s /mnt/kv/b",
    "read": "ROOT=/mnt/kv/a; read ROOT <<< /mnt/kv/b",
    "read-r": "ROOT=/mnt/kv/a; read -r -p x ROOT < /dev/null",
    "source": "ROOT=/mnt/kv/a; . /etc/kv.sh",
    "source-word": "ROOT=/mnt/kv/a; source /etc/kv.sh",
    "export-n": "export ROOT=/mnt/kv/a; export -n ROOT",
    "declare-n": "ROOT=/mnt/kv/a; declare -n R=ROOT; R=/mnt/kv/b",
    "mapfile": "ROOT=/mnt/kv/a; mapfile -t ROOT < /etc/roots",
    "getopts": "ROOT=/mnt/kv/a; getopts r: ROOT",
    "let": "ROOT=1; let ROOT=2",
    "arith-command": "ROOT=1; ((ROOT=2))",
    "arith-expansion": "ROOT=1; : $((ROOT=2))",
    "nested-if": 'ROOT=/mnt/kv/a; if [ -n "$X" ]; then if true; then Y=1; fi; ROOT=/mnt/kv/b; fi',
    "unset-in-if": 'ROOT=/mnt/kv/a; if [ -n "$X" ]; then unset ROOT; fi',
}


@pytest.mark.parametrize("name", sorted(NOT_FOLLOWED))
def test_an_assignment_not_followed_leaves_the_root_unevaluated(name: str) -> None:
    root, why = _root(NOT_FOLLOWED[name])
    assert why, f"{name}: root {root!r} taken as known"


def test_positional_parameters_after_set_or_shift_are_unevaluated() -> None:
    for script in ('set -- /mnt/kv/b; ROOT="$1"', 'shift; ROOT="$1"'):
        root, why = _root(f"bash -c '{script}; {SERVE}' sh /mnt/kv/a".replace("'", "'") if False else script)
        assert why, script
    shell = Shell({}, ["/mnt/kv/a", "/mnt/kv/b"], wanted=lambda w: bool(w) and w[0] == "server")
    found = shell.run_script('shift; exec server "$1"')
    assert found is not None and unevaluated_in(found[0][1], shell.unevaluated)


def test_a_functions_positional_parameters_are_its_calls() -> None:
    shell = Shell({}, ["/mnt/kv/a"], wanted=lambda w: bool(w) and w[0] == "server")
    found = shell.run_script('start() { exec server "$1"; }; start /mnt/kv/b')
    assert found is not None and unevaluated_in(found[0][1], shell.unevaluated)


STRAIGHT = {
    "plain": ("ROOT=/mnt/kv/a", "/mnt/kv/a"),
    "export": ("export ROOT=/mnt/kv/a", "/mnt/kv/a"),
    "declare": ("declare -x ROOT=/mnt/kv/a", "/mnt/kv/a"),
    "default": ("ROOT=${ROOT:-/mnt/kv/a}", "/mnt/kv/a"),
    "set-options": ("set -euo pipefail; ROOT=/mnt/kv/a", "/mnt/kv/a"),
    "unset": ("ROOT=/mnt/kv/b; unset ROOT; ROOT=${ROOT:-/mnt/kv/a}", "/mnt/kv/a"),
    "after-if": ('if [ -n "$X" ]; then Y=1; fi; ROOT=/mnt/kv/a', "/mnt/kv/a"),
    "reassigned": ("ROOT=/mnt/kv/b; eval true; ROOT=/mnt/kv/a", None),
    "cd-and": ("ROOT=/mnt/kv/a; cd /tmp && true", "/mnt/kv/a"),
    "after-nested-if": ('if [ -n "$X" ]; then if true; then Y=1; fi; fi; ROOT=/mnt/kv/a', "/mnt/kv/a"),
}


@pytest.mark.parametrize("name", sorted(STRAIGHT))
def test_straight_line_assignments_keep_their_values(name: str) -> None:
    script, want = STRAIGHT[name]
    root, why = _root(script)
    if want is None:
        assert root == "/mnt/kv/a"
    else:
        assert (root, why) == (want, None)


def test_the_command_is_still_found_after_and_and_in_branches() -> None:
    def find(script: str) -> Any:
        shell = Shell({}, wanted=lambda w: bool(w) and w[0] == "server")
        return shell.run_script(script)

    assert find("cd /x && exec server a")[0] == ["server", "a"]
    assert find('if [ -n "$X" ]; then exec server b; fi')[0] == ["server", "b"]
    assert find('case "$X" in *) exec server c;; esac')[0] == ["server", "c"]


def test_here_document_lines_are_data_not_assignments() -> None:
    for script in ("ROOT=/mnt/kv/a; cat > /tmp/x <<EOF\nROOT=/mnt/kv/b\nEOF\n:",
                   "ROOT=/mnt/kv/a; cat > /tmp/x <<-'END'\n\tROOT=/mnt/kv/b\n\tEND\n:",
                   "ROOT=/mnt/kv/a; read X <<< word"):
        assert _root(script) == ("/mnt/kv/a", None), script
