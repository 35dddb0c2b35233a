"""Inference pods this version cannot empty: SGLang servers, NVIDIA Dynamo workers, TensorRT-LLM's
``trtllm-serve`` and the LMCache server (``lm://``) of vLLM production-stack. Pure: pod dicts in,
frozen dataclasses out.

They are found so that no such pod stays warm without a word: ``detect`` lists them and
``clear`` gives each a row ``left`` with the restart that would empty it. The command is read as
vLLM's is (:mod:`kubectl_kvreset.engines.vllm.servecmd`: Kubernetes ``$(VAR)`` expansion, the image's
entrypoint, ``bash -c`` scripts read by :class:`~kubectl_kvreset.shellscript.Shell`), so a word
that merely mentions an engine (an env value, an image name, an ``echo``) is not a server.

What starts each (upstream sources):

* SGLang by its label only: an SGLang server whose command names it (``python -m
  sglang.launch_server``, ``sglang serve``) is the SGLang engine's (:mod:`kubectl_kvreset.engines.sglang`);
  a pod labelled ``llm-d.ai/engine-type: sglang`` (llm-d ``guides/**/sglang``) or run by KServe's
  ``kserve-llm-sglang`` runtime (kserve ``config/runtimes/kserve-llm-sglang.yaml``) whose command
  names no engine is listed here, on its listed port or 30000 (``sglang/srt/server_args.py``).
* Dynamo workers: ``python -m dynamo.vllm`` / ``dynamo.sglang`` / ``dynamo.trtllm`` (ai-dynamo/dynamo
  ``components/src/dynamo/``) and ``dynamo-run``; a worker serves no OpenAI port of its own (the
  Dynamo frontend does), so its port is unknown. A Dynamo vLLM worker is not ``vllm serve``:
  it has no ``/reset_prefix_cache``.
* ``trtllm-serve MODEL`` (NVIDIA/TensorRT-LLM ``tensorrt_llm/commands/serve.py``), ``--port``
  default 8000; ``trtllm-serve disaggregated`` is the router in front of workers and holds no
  cache, so it is not listed.
* The LMCache server: ``lmcache_server HOST PORT`` (LMCache ``lmcache/v1/server/__main__.py``;
  vllm-project/production-stack ``helm/templates/deployment-cache-server.yaml``). Engines reach it
  with ``LMCACHE_REMOTE_URL=lm://HOST:PORT``; its protocol has no delete, and it holds the cache
  in memory, so only a restart empties it, for every engine that uses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .engines import engine_for
from .engines.argv import python_module
from .engines.base import ServerCommandError
from .engines.k8senv import kubernetes_expand
from .pods import Owner, Targets, _is_ready, _sidecar, parse_owner_ref, pod_env, pod_owner, pod_role
from .shellscript import Shell, ShellScriptError

__all__ = ["ENGINE_NAMES", "LMCACHE_SERVER", "OtherPod", "describe_other_containers", "other_entrypoint",
           "select_others", "unsupported_reason"]

SGLANG = "sglang"
DYNAMO_VLLM = "dynamo-vllm"
DYNAMO_SGLANG = "dynamo-sglang"
DYNAMO_TRTLLM = "dynamo-trtllm"
DYNAMO_RUN = "dynamo-run"
TRTLLM = "trtllm-serve"
LMCACHE_SERVER = "lmcache-server"

#: Engine key -> the name rows use.
ENGINE_NAMES: Mapping[str, str] = {
    SGLANG: "SGLang",
    DYNAMO_VLLM: "NVIDIA Dynamo (vLLM worker)",
    DYNAMO_SGLANG: "NVIDIA Dynamo (SGLang worker)",
    DYNAMO_TRTLLM: "NVIDIA Dynamo (TensorRT-LLM worker)",
    DYNAMO_RUN: "NVIDIA Dynamo (dynamo-run)",
    TRTLLM: "TensorRT-LLM (trtllm-serve)",
    LMCACHE_SERVER: "the LMCache server (lm://)",
}

#: ``python -m MODULE`` -> engine.
_MODULES: Mapping[str, str] = {
    "dynamo.vllm": DYNAMO_VLLM,
    "dynamo.sglang": DYNAMO_SGLANG,
    "dynamo.trtllm": DYNAMO_TRTLLM,
    "tensorrt_llm.commands.serve": TRTLLM,
    "lmcache.v1.server": LMCACHE_SERVER,
}

#: The default API port per engine (None: the engine serves none of its own).
_DEFAULT_PORTS: Mapping[str, int | None] = {
    SGLANG: 30000, TRTLLM: 8000, DYNAMO_VLLM: None, DYNAMO_SGLANG: None, DYNAMO_TRTLLM: None, DYNAMO_RUN: None,
    LMCACHE_SERVER: None,
}

#: Labels that name an SGLang pod (llm-d's engine type in both eras).
SGLANG_LABELS: tuple[tuple[str, str], ...] = (
    ("llm-d.ai/engine-type", "sglang"),
    ("inference.networking.k8s.io/engine-type", "sglang"),
)
#: KServe's SGLang runtime, by its name in a pod label value.
KSERVE_SGLANG_RUNTIME = "kserve-llm-sglang"



def other_entrypoint(words: Sequence[str]) -> tuple[str, int] | None:
    """If ``words`` (one simple command after expansion) start an engine of :data:`ENGINE_NAMES`,
    return ``(engine, index of its first argument)``, else None.

    ``python -m dynamo.vllm`` (and
    ``.sglang``, ``.trtllm``), ``dynamo-run``, ``trtllm-serve [serve] MODEL`` (not ``trtllm-serve
    disaggregated``, a router), ``lmcache_server HOST PORT`` / ``python -m lmcache.v1.server HOST
    PORT`` (the positional form; the flag-only form is LMCache's MP server, cleared by the store step).
    """
    if not words:
        return None
    base = words[0].rsplit("/", 1)[-1]
    if base == "dynamo-run":
        return DYNAMO_RUN, 1
    if base == "trtllm-serve":
        if len(words) > 1 and words[1].startswith("disaggregated") and words[1] != "disaggregated_mpi_worker":
            return None
        return TRTLLM, 2 if len(words) > 1 and words[1] == "serve" else 1
    if base == "lmcache_server":
        return (LMCACHE_SERVER, 1) if len(words) > 1 and not words[1].startswith("-") else None
    run = python_module(words)
    if run is not None:
        module, k = run
        engine = _MODULES.get(module)
        if engine == LMCACHE_SERVER and (k >= len(words) or words[k].startswith("-")):
            return None
        return (engine, k) if engine is not None else None
    return None


def _flag(args: Sequence[str], names: Sequence[str]) -> str | None:
    """The last value of ``--name V`` / ``--name=V`` (``_`` or ``-`` spelled) in ``args``."""
    found: str | None = None
    wanted = {n.replace("_", "-") for n in names}
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        key, eq, value = arg[2:].partition("=")
        if key.replace("_", "-") in wanted:
            if eq:
                found = value
            elif i + 1 < len(args):
                found = args[i + 1]
    return found


def engine_port(engine: str, args: Sequence[str]) -> tuple[int | None, str | None]:
    """The API port an engine's arguments give, and a note when it cannot be read
    (``--port $P`` with ``P`` not known). The LMCache server takes ``HOST PORT`` positionally;
    ``dynamo-run`` serves ``--http-port`` when given."""
    if engine == LMCACHE_SERVER:
        positional = [a for a in args if not a.startswith("-")]
        raw: str | None = positional[1] if len(positional) > 1 else None
    elif engine == DYNAMO_RUN:
        raw = _flag(args, ("http-port",))
    else:
        raw = _flag(args, ("port",))
    if raw is None:
        return _DEFAULT_PORTS.get(engine), None
    try:
        return int(raw), None
    except ValueError:
        return None, f"port {raw!r} not read from the spec"


@dataclass(frozen=True)
class OtherPod:
    """One container of a pod that runs an inference engine this version cannot empty.

    ``engine``: a key of :data:`ENGINE_NAMES`; ``port``: its API port when known; ``matched_by``:
    ``command`` or the label that named it; ``raw``: the pod object."""

    namespace: str
    name: str
    uid: str
    owner: Owner
    role: str | None
    container: str
    image: str
    engine: str
    port: int | None
    phase: str
    ready: bool
    labels: Mapping[str, str]
    matched_by: str
    notes: tuple[str, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def engine_name(self) -> str:
        """The engine as rows name it (``SGLang``, ``TensorRT-LLM (trtllm-serve)``...)."""
        return ENGINE_NAMES[self.engine]

    @property
    def shared(self) -> bool:
        """True for a store that other engines use (the LMCache server): its restart is store-wide."""
        return self.engine == LMCACHE_SERVER


def unsupported_reason(pod: OtherPod) -> str:
    """Why the row is ``left``: ``SGLang is not supported by this version: its cache was not
    emptied``; for the LMCache server, that its protocol has no delete."""
    if pod.engine == LMCACHE_SERVER:
        return ("the lm:// protocol has no delete; restarting " + pod.owner.ref() + " empties it (for every "
                "engine that uses it)")
    return f"{pod.engine_name} is not supported by this version: its cache was not emptied"


def read_other(container: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, int | None, tuple[str, ...]] | None:
    """``(engine, port, notes)`` when ``container``'s command starts an engine of
    :data:`ENGINE_NAMES`, read as vLLM's is (Kubernetes expansion, ``sh -c`` scripts with their
    variables), else None. An unreadable script gives None (a note is not worth a false row)."""
    command = [kubernetes_expand(str(x), env) for x in container.get("command") or []]
    args = [kubernetes_expand(str(x), env) for x in container.get("args") or []]
    if not command:
        command, args = args, []  # an image whose entrypoint is a shell or the engine itself
        if not command:
            return None
    shell = Shell(env, wanted=lambda words: other_entrypoint(words) is not None)
    try:
        found = shell.run_words(command + args)
    except (ShellScriptError, RecursionError):
        return None
    if found is None:
        return None
    words, _env = found
    entry = other_entrypoint(words)
    if entry is None:  # pragma: no cover - run_words only returns wanted commands
        return None
    engine, first = entry
    port, note = engine_port(engine, words[first:])
    return engine, port, (note,) if note else ()


def _label_engine(labels: Mapping[str, str]) -> str | None:
    """``key=value`` of the label that names the pod an SGLang server, or None."""
    for key, value in SGLANG_LABELS:
        if labels.get(key) == value:
            return f"{key}={value}"
    for key, value in labels.items():
        if value == KSERVE_SGLANG_RUNTIME:
            return f"{key}={value}"
    return None


def describe_other_containers(pod: Mapping[str, Any], rs_owners: Mapping[str, Owner] | None = None,
                              vllm_containers: Sequence[str] = ()) -> list[OtherPod]:
    """One :class:`OtherPod` per container of ``pod`` that runs an engine of :data:`ENGINE_NAMES`
    (``vllm_containers``: the containers found running vLLM, never one of these).

    A pod labelled as SGLang (:data:`SGLANG_LABELS`, KServe's ``kserve-llm-sglang``) whose
    containers' commands name no engine is one too, by its model-server container (``modelserver``
    in llm-d, ``main`` in KServe, else the one container that is not the routing sidecar), unless
    the pod runs vLLM: a label never turns a vLLM pod or a sidecar into SGLang.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    containers = [c for c in spec.get("containers") or [] if str(c.get("name", "")) not in vllm_containers]
    found: list[tuple[Mapping[str, Any], str, int | None, tuple[str, ...], str]] = []
    for container in containers:
        env = pod_env(pod, container)
        got = read_other(container, env)
        if got is not None:
            found.append((container, got[0], got[1], got[2], "command"))
    label = _label_engine(labels)
    if not found and not vllm_containers and label is not None:
        sidecar = _sidecar(spec)
        candidates = [c for c in containers if c is not sidecar and not _claimed(pod, c)]
        named = [c for c in candidates if c.get("name") in ("modelserver", "main")]
        chosen = named[0] if named else (candidates[0] if len(candidates) == 1 else None)
        if chosen is not None:
            port = _listed_port(chosen) or _DEFAULT_PORTS[SGLANG]
            found.append((chosen, SGLANG, port, ("found by its label; its command names no engine the plugin reads",),
                          label))
    status = pod.get("status") or {}
    return [OtherPod(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid", ""),
        owner=pod_owner(pod, rs_owners), role=pod_role(labels), container=str(c.get("name", "")),
        image=str(c.get("image", "")), engine=engine, port=port, phase=str(status.get("phase", "Unknown")),
        ready=_is_ready(pod), labels=dict(labels), matched_by=matched, notes=notes, raw=pod)
        for c, engine, port, notes, matched in found]


def _claimed(pod: Mapping[str, Any], container: Mapping[str, Any]) -> bool:
    """Whether a registered engine (:data:`kubectl_kvreset.engines.ENGINES`) runs its server in
    ``container``: such a container is discovery's, not another engine's."""
    try:
        return engine_for(container, pod_env(pod, container)) is not None
    except ServerCommandError:
        return False


def _listed_port(container: Mapping[str, Any]) -> int | None:
    """The first ``containerPort`` the container lists, or None."""
    for p in container.get("ports") or []:
        if isinstance(p.get("containerPort"), int):
            return int(p["containerPort"])
    return None


def select_others(pods: Sequence[OtherPod], targets: Targets) -> tuple[list[OtherPod], set[str]]:
    """The pods of ``pods`` the targets name, as :func:`kubectl_kvreset.pods.select` selects vLLM
    pods (``all`` and a selector keep every one; an owner keeps its pods, ``pod/NAME`` the pod),
    and the owner arguments that named at least one (so they are not refused for having no vLLM
    pod)."""
    if targets.all or (targets.selector and not targets.owners):
        return list(pods), set()
    chosen: list[OtherPod] = []
    named: set[str] = set()
    for text in targets.owners:
        owner = parse_owner_ref(text)
        hits = [p for p in pods if p.owner == owner or (owner.kind == "Pod" and p.name == owner.name)]
        if hits:
            named.add(text)
        chosen.extend(p for p in hits if p not in chosen)
    return chosen, named
