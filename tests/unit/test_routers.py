"""sglang-router pods (kubectl_kvreset/routers.py): which commands start the router, which policy
keeps a prefix tree (``cache_aware``, the default; sglang-router 0.3.2 ``launch_router --help``),
and the note a clear of SGLang servers gives about them."""

from __future__ import annotations

from typing import Any

import pytest

from kubectl_kvreset.routers import describe_routers, router_entrypoint, router_note


def _pod(command: list[str], args: list[str] | None = None, *, name: str = "router-abc-x1") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "router", "image": "lmsysorg/sglang-router:v0.3.2", "command": command}
    if args is not None:
        container["args"] = args
    return {"metadata": {"name": name, "namespace": "rs", "labels": {"pod-template-hash": "abc"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "router-abc", "controller": True}]},
            "spec": {"containers": [container]}}


@pytest.mark.parametrize("words,first", [
    (["python", "-m", "sglang_router.launch_router", "--port", "8000"], 3),
    (["python3", "-u", "-m", "sglang_router.launch_router"], 4),
    (["/usr/local/bin/sglang-router", "launch", "--worker-urls", "http://w:8000"], 2),
    (["smg", "launch"], 2),
    (["amg", "launch"], 2),
    (["sglang-router", "server", "--model-path", "m"], None),        # starts workers too
    (["python", "-m", "sglang_router.launch_server", "--model-path", "m"], None),
    (["python", "-m", "sglang.launch_server"], None),
    (["echo", "sglang_router.launch_router"], None),
])
def test_router_commands(words: list[str], first: int | None) -> None:
    assert router_entrypoint(words) == first


def test_policies_and_owner() -> None:
    (r,) = describe_routers(_pod(["python", "-m", "sglang_router.launch_router"], ["--worker-urls", "http://w:8000"]))
    assert (r.namespace, r.ref(), r.policies, r.cache_aware) == ("rs", "deployment/router", ("cache_aware",), True)
    (r,) = describe_routers(_pod(["python", "-m", "sglang_router.launch_router", "--policy=round_robin"]))
    assert r.policies == ("round_robin",) and not r.cache_aware
    (r,) = describe_routers(_pod(["sglang-router", "launch", "--pd-disaggregation", "--policy", "round_robin",
                                  "--decode-policy", "cache_aware"]))
    assert r.policies == ("round_robin", "cache_aware") and r.cache_aware
    (r,) = describe_routers(_pod(["bash", "-c"], ["set -e\nexec python3 -m sglang_router.launch_router --policy "
                                                  "$POLICY"]))
    assert r.cache_aware   # an unset variable is no value: the default
    assert describe_routers(_pod(["bash", "-c"], ["echo python -m sglang_router.launch_router"])) == []


def test_the_note_names_only_cache_aware_routers() -> None:
    aware = describe_routers(_pod(["smg", "launch"]))
    plain = describe_routers(_pod(["smg", "launch", "--policy", "random"], name="rr-abc-x2"))
    assert router_note(plain) is None
    note = router_note(aware + plain)
    assert note is not None and "rs/deployment/router" in note and "rr" not in note
    assert "restart the router" in note and "now cold" in note
    assert "now cold" not in (router_note(aware, cleared=False) or "")
