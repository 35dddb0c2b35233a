"""sglang-router pods (the SGLang Model Gateway): found so that a clear of SGLang servers says what
routing still believes. Pure: pod dicts in, frozen dataclasses and note text out.

A router holds no KV cache, so it gets no row. Its ``cache_aware`` policy (the default of
``--policy``, and of ``--prefill-policy``/``--decode-policy`` in prefill/decode mode;
``python -m sglang_router.launch_router --help`` of sglang-router 0.3.2) keeps a prefix tree of the
requests it sent each worker and routes a repeated prefix to the worker that had it. A worker's
``/flush_cache`` does not reach that tree, and neither does the router's own ``/flush_cache``
(sglang-router ``core/worker_manager.rs`` ``flush_cache_all`` only posts to the workers): after a
clear the router still sends repeated prefixes to the same worker, now cold, until its eviction
drops them (it trims the tree when it outgrows ``--max-tree-size``, checked every
``--eviction-interval-secs``, default 60) or the router restarts.

The router is started by ``python -m sglang_router.launch_router ARGS`` or the console scripts
``sglang-router launch ARGS`` / ``smg launch`` / ``amg launch`` (sglang-router 0.3.2's
``entry_points.txt``), read as vLLM's command is (Kubernetes ``$(VAR)`` expansion, ``bash -c``
scripts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .engines.argv import python_module
from .engines.k8senv import kubernetes_expand
from .pods import Owner, deployment_from_replicaset_name, pod_env, pod_owner
from .shellscript import Shell, ShellScriptError

__all__ = ["CACHE_AWARE", "RouterPod", "describe_routers", "router_entrypoint", "router_note"]

#: The policy that keeps a prefix tree per worker.
CACHE_AWARE = "cache_aware"
_SCRIPTS = ("sglang-router", "smg", "amg")


@dataclass(frozen=True)
class RouterPod:
    """One sglang-router container.

    Attributes:
        namespace, name, container: where it runs.
        owner: its workload (``deployment/NAME`` where the ReplicaSet's name gives it).
        policies: the policies it routes with (``--policy``; ``--prefill-policy`` and
            ``--decode-policy`` where given), defaults filled in.
    """

    namespace: str
    name: str
    container: str
    owner: Owner
    policies: tuple[str, ...]

    @property
    def cache_aware(self) -> bool:
        """True when one of its policies keeps a prefix tree (:data:`CACHE_AWARE`)."""
        return CACHE_AWARE in self.policies

    def ref(self) -> str:
        """``deployment/NAME`` (or ``pod/NAME`` without a known owner)."""
        return self.owner.ref() if self.owner.kind != "ReplicaSet" else f"pod/{self.name}"


def router_entrypoint(words: Sequence[str]) -> int | None:
    """The index of the first router argument when ``words`` start sglang-router's router, else
    None (``launch_server`` / ``sglang-router server`` start workers too: not only a router)."""
    if not words:
        return None
    base = words[0].rsplit("/", 1)[-1]
    if base in _SCRIPTS:
        return 2 if len(words) > 1 and words[1] == "launch" else None
    run = python_module(words)
    if run is not None and run[0] == "sglang_router.launch_router":
        return run[1]
    return None


def _policies(args: Sequence[str]) -> tuple[str, ...]:
    values: dict[str, str] = {}
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if key in ("--policy", "--prefill-policy", "--decode-policy"):
            got = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if got and not got.startswith("--") and "$" not in got:
                values[key] = got   # a value the spec does not hold counts as the default: the note may apply
    main = values.get("--policy", CACHE_AWARE)
    pd = "--pd-disaggregation" in args
    if not pd:
        return (main,)
    return tuple(dict.fromkeys((values.get("--prefill-policy", main), values.get("--decode-policy", main))))


def describe_routers(pod: Mapping[str, Any]) -> list[RouterPod]:
    """One :class:`RouterPod` per container of ``pod`` that runs sglang-router's router. A pod
    being deleted is none. Never raises (an unreadable script is no router)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return []
    owner = pod_owner(pod)
    if owner.kind == "ReplicaSet":
        owner = deployment_from_replicaset_name(owner.name, meta.get("labels") or {}) or owner
    out: list[RouterPod] = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        env = pod_env(pod, container)
        words = [kubernetes_expand(str(x), env) for x in (container.get("command") or []) + (container.get("args")
                                                                                             or [])]
        shell = Shell(env, wanted=lambda w: router_entrypoint(w) is not None)
        try:
            found = shell.run_words(words) if words else None
        except (ShellScriptError, RecursionError):
            continue
        if found is None:
            continue
        argv = found[0]
        first = router_entrypoint(argv)
        if first is None:  # pragma: no cover - run_words only returns wanted commands
            continue
        out.append(RouterPod(str(meta.get("namespace", "")), str(meta.get("name", "")), str(container.get("name", "")),
                             owner, _policies(argv[first:])))
    return out


def router_note(routers: Sequence[RouterPod], *, cleared: bool = True) -> str | None:
    """The note on ``routers`` that route with a prefix tree (None when none does): after SGLang
    servers were emptied (``cleared``), or beside them in ``detect``."""
    aware = sorted({f"{r.namespace}/{r.ref()}" for r in routers if r.cache_aware})
    if not aware:
        return None
    where = (f"note: sglang-router {', '.join(aware)} (policy cache_aware) keeps its own prefix tree of the requests "
             "it sent each worker; neither a worker's /flush_cache nor the router's reaches it (sglang-router "
             "worker_manager.rs flush_cache_all posts to the workers only), so ")
    if cleared:
        return where + ("it still routes repeated prefixes to the worker that had them, now cold: restart the router "
                        "for cold routing")
    return where + "after a clear it still routes by the old prefixes: restart the router too for cold routing"
