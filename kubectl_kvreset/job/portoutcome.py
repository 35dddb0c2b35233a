"""One pod and API port's end of a clear (:class:`~kubectl_kvreset.job.outcometypes.PortOutcome`):
each tier's state from the step that was to empty it, the row's result, messages and exit code.

:func:`port_outcome` reads the pod's steps in order: the API reset (:func:`_reset_step`), the
owner's rollout (:func:`_owner_step`, or why it did not run), then each tier from the step that
empties it (:func:`_tier_end`), and derives the result from them (:func:`_result`: never
``emptied`` while a tier is left or unconfirmed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ..consent import SHARED_FLAG
from ..engines.vllm.api import ResetOutcome, engine_list, parse_version, reset_answers_for_every_engine
from ..fs import FsClearResult, sharing_message
from ..plan import LeftTier, TierEffect
from ..podapi import ResetResult
from ..pods import ApiPort, VllmPod
from ..pool import InFlight, NotRun
from ..report import ExitCode
from ..rollout import DevModeResult, RestartResult
from ..tiers import Tier
from .outcometypes import TIER_KINDS, LeftRow, PortOutcome, RunResults, UnconfirmedRow, tier_label
from .planning import PodPlan, dev_mode_on

#: What to do about an API reset that failed, by the row's result.
RESET_REMEDIES = {
    "busy": "retry later, raise --busy-timeout, or use --preempt-running",
    "dev mode off": "--fallback=devmode|restart, or kubectl kvreset devmode --enable",
    "forbidden": "grant the rights the message names (rbac/ has the role), then run clear again",
    "unreachable": "run clear again once the pod is Ready and its API port answers, or --fallback=restart",
    "interrupted": "run clear again",
}
#: What to do about a busy reset on an engine that cannot preempt running requests
#: (:attr:`~kubectl_kvreset.engines.base.Engine.preempts_running`).
BUSY_REMEDY = "retry later, or raise --busy-timeout"
#: What to do about a reset failure not in :data:`RESET_REMEDIES`.
RESET_REMEDY = "run clear again once the cause in the message is fixed, or --fallback=restart"
#: What to do about an FS tier whose deletion did not empty it.
FS_REMEDY = "run kubectl kvreset clear-fs again once the cause in the message is fixed"



def dev_mode_hint(pod: VllmPod) -> str:
    """The row's short hint for a pod whose vLLM has dev mode off (the long one is a note,
    :func:`kubectl_kvreset.job.outcome.dev_mode_note`, given once)."""
    return f"dev mode off: rerun with --fallback=devmode|restart, or kubectl kvreset devmode --enable {pod.owner.ref()}"


@dataclass(frozen=True)
class _StepEnd:
    """What one step of a pod gave, before its tiers are read: the ``state`` of the tiers it
    empties (None: not in the plan, or nothing to say), the ``messages`` it adds to the row (in
    order), the ``failure`` result it earns (the row keeps the first one) and whether its success
    is ``unconfirmed``. The API reset's also say whether the pod was ``gone``, whether the last
    answer was ``busy`` (``success: false``), and the data-parallel ``engines_emptied`` even so."""

    state: str | None = None
    messages: tuple[str, ...] = ()
    failure: str | None = None
    unconfirmed: bool = False
    gone: bool = False
    busy: bool = False
    engines_emptied: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Ran:
    """What a pod's steps gave, as its tiers read it: the API ``reset``'s and the ``owner``
    rollout's ends (``owner_res``: the rollout's own result), the row's ``messages`` so far, the
    ``failure`` so far, ``reset_reason`` (those messages joined, when the reset did not empty: the
    reason of a tier it leaves), the pod's FS deletions (``fs``), and per tier (by identity) the
    step that empties it (``step_of``) and the plan's entry for a tier it leaves (``left_of``)."""

    reset: _StepEnd
    owner: _StepEnd
    owner_res: RestartResult | DevModeResult | None
    messages: tuple[str, ...]
    failure: str | None
    reset_reason: str
    fs: list[FsClearResult]
    step_of: Mapping[int, str]
    left_of: Mapping[int, LeftTier]


@dataclass(frozen=True)
class _TierEnd:
    """One tier's end: its ``kind`` column and ``state``, the ``messages`` it adds, its
    ``left_row`` or ``unconfirmed_row`` entry, whether it makes the row ``unconfirmed``, and the
    ``failure`` result it earns."""

    kind: str
    state: str
    messages: tuple[str, ...] = ()
    left_row: LeftRow | None = None
    unconfirmed_row: UnconfirmedRow | None = None
    unconfirmed: bool = False
    failure: str | None = None


def _first(failures: Iterable[str | None]) -> str | None:
    return next((f for f in failures if f is not None), None)


def port_outcome(plan: PodPlan, port: ApiPort | None, results: RunResults, *, interrupted: bool) -> PortOutcome:
    """The :class:`PortOutcome` of one pod and port: each tier's state from the step that was
    to empty it, the result, the messages and the exit code it earns."""
    pod = plan.pod
    if plan.not_running is not None:
        return not_running_outcome(plan, port)
    got = results.resets.get((pod.namespace, pod.name, pod.container, port.port)) if port is not None else None
    answers: list[ResetResult] = [] if got is None or isinstance(got, NotRun) else got
    ran = _steps_ran(plan, port, got, results, interrupted=interrupted)
    tiers = [_tier_end(plan, effect, ran) for effect in plan.effects]
    failure, config_text = _config_failure(pod, _first([ran.failure, *(t.failure for t in tiers)]))
    unconfirmed = ran.reset.unconfirmed or any(t.unconfirmed for t in tiers)
    result, code = _result(plan, results, tiers, failure, unconfirmed=unconfirmed, gone=ran.reset.gone)
    messages = (*ran.messages, *(m for t in tiers for m in t.messages), *config_text,
                *_version_note(plan, ran.reset.state))
    cells = {kind: states for kind in TIER_KINDS if (states := tuple(t.state for t in tiers if t.kind == kind))}
    return PortOutcome(
        engine=pod.engine.name,
        namespace=pod.namespace, pod=pod.name, container=pod.container, port=port.port if port is not None else None,
        role=pod.role, owner=pod.owner.ref(), version=plan.version, tiers=cells, result=result, messages=messages,
        steps=plan.steps.actions(), calls=sum(r.calls for r in answers),
        busy_answers=answers[0].busy_answers if answers else 0,
        left=tuple(t.left_row for t in tiers if t.left_row is not None), code=code,
        unconfirmed=tuple(t.unconfirmed_row for t in tiers if t.unconfirmed_row is not None),
        reset_busy=ran.reset.busy, engines_emptied=ran.reset.engines_emptied)


def _steps_ran(plan: PodPlan, port: ApiPort | None, got: list[ResetResult] | NotRun | None, results: RunResults,
               *, interrupted: bool) -> _Ran:
    """The ends of the pod's steps (API reset, owner rollout, or why none ran) in row order."""
    pod = plan.pod
    owner_res = results.owners.get((pod.namespace, pod.owner))
    reset = _reset_step(plan, port, got, results, interrupted=interrupted)
    owner = _owner_step(plan, owner_res)
    ends = (reset, owner, _rollout_not_started(plan, owner_res, interrupted=interrupted),
            _dev_mode_off(plan, owner_res))
    messages = (*plan.notes, *(m for end in ends for m in end.messages))
    step_of: dict[int, str] = {}
    for step in plan.steps.steps:
        for tier in step.empties:
            step_of.setdefault(id(tier), step.action)
    return _Ran(reset=reset, owner=owner, owner_res=owner_res, messages=messages,
                failure=_first(end.failure for end in ends),
                reset_reason="; ".join(messages) if reset.state in ("not emptied", "unconfirmed") else "",
                fs=results.fs.get((pod.namespace, pod.name), []), step_of=step_of,
                left_of={id(lt.tier): lt for lt in plan.steps.left})


def _reset_step(plan: PodPlan, port: ApiPort | None, got: list[ResetResult] | NotRun | None, results: RunResults,
                *, interrupted: bool) -> _StepEnd:
    """The API reset's end on ``port`` from what the run recorded for it (``got``; None:
    nothing): interrupted in flight or before it ran, no port, or the first route's answer
    followed by the other routes' failures."""
    if not plan.has("api-reset"):
        return _StepEnd()
    if isinstance(got, InFlight):  # sent, and vLLM may have acted on it: never "not reset"
        return _StepEnd("unconfirmed", ("unknown: interrupted in flight (the reset was sent and vLLM may have emptied "
                                        "the cache, but its answer was not awaited)",), "interrupted")
    if isinstance(got, NotRun) or (got is None and interrupted and port is not None):
        return _StepEnd("not emptied", ("not reset: the run was interrupted before this call finished",),
                        "interrupted")
    if not got:
        return _StepEnd("not emptied", ("no API port found in the vLLM command",), "failed")
    first = _first_route(plan, port, got[0], results)
    if first.state not in ("emptied", "unconfirmed"):
        return first
    extra = _extra_routes(got[1:])
    return replace(first, messages=first.messages + extra, failure="failed" if extra else None)


def _first_route(plan: PodPlan, port: ApiPort | None, first: ResetResult, results: RunResults) -> _StepEnd:
    """The end of the first route (the prefix-cache reset): emptied (unconfirmed when it
    vouches for data-parallel engine 0 alone, or vLLM < 0.26), the pod replaced, or failed."""
    pod = plan.pod
    if first.outcome is ResetOutcome.CLEARED:
        dp_text = engine_zero_only(plan.version, pod.serve.engines_per_port, port, plan.engines,
                                   unknown=pod.serve.engines_unknown, secret=pod.serve.engines_secret)
        return _StepEnd("emptied") if dp_text is None else _StepEnd("unconfirmed", (dp_text,), unconfirmed=True)
    if first.outcome is ResetOutcome.UNCONFIRMED:
        text = pod.engine.unconfirmed_text(first.answer) if first.answer is not None else "not confirmed"
        return _StepEnd("unconfirmed", (text,), unconfirmed=True)
    if first.failure is not None and first.failure.kind == "pod-gone":
        successors = results.successors.get((pod.namespace, pod.owner), [])
        return _StepEnd("replaced", (f"pod {pod.name} was deleted during the run"
                                     + (f"; its successor {', '.join(successors)} is a new pod and starts cold"
                                        if successors else " and has no successor: nothing is left to empty"),),
                        gone=True)
    failure, text = describe_reset_failure(pod, first)
    busy = first.outcome is ResetOutcome.BUSY
    split = results.engines.get((pod.namespace, pod.name, pod.container, port.port)) if port is not None else None
    if split is None:
        return _StepEnd("not emptied", (text,), failure, busy=busy)
    return _StepEnd("not emptied", (f"{split.describe()}: {text}",), failure, busy=busy,
                    engines_emptied=tuple(split.emptied))


def _extra_routes(rest: Sequence[ResetResult]) -> tuple[str, ...]:
    """One message per route after the first that did not empty its cache."""
    texts: list[str] = []
    for extra in rest:
        if extra.outcome not in (ResetOutcome.CLEARED, ResetOutcome.UNCONFIRMED):
            detail = extra.answer.detail if extra.answer else (extra.failure.message if extra.failure else "")
            texts.append(f"{extra.route}: {detail}")
    return tuple(texts)


def _owner_step(plan: PodPlan, owner_res: RestartResult | DevModeResult | None) -> _StepEnd:
    """The end of the owner's restart or dev-mode rollout (``owner_res``; None: it did not run)."""
    if owner_res is None:
        return _StepEnd()
    if owner_result_ok(owner_res):
        verb = "restarted" if plan.has("restart") else "dev mode turned on, which rolled"
        return _StepEnd("emptied", (f"{plan.pod.owner.ref()} {verb}: its new pods start cold",))
    if owner_res.result == "interrupted" and owner_res.requested:  # the pods are being replaced
        return _StepEnd("unconfirmed", (owner_result_message(owner_res),), "interrupted")
    return _StepEnd("not emptied", (owner_result_message(owner_res),),
                    "interrupted" if owner_res.result == "interrupted" else "failed")


def _rollout_not_started(plan: PodPlan, owner_res: RestartResult | DevModeResult | None, *,
                         interrupted: bool) -> _StepEnd:
    """The planned restart or dev-mode rollout that an interrupt kept from starting, if any."""
    if interrupted and owner_res is None and any(st.disruptive for st in plan.steps.steps):
        return _StepEnd(messages=("the restart or dev-mode rollout was not started: the run was interrupted",),
                        failure="interrupted")
    return _StepEnd()


def _dev_mode_off(plan: PodPlan, owner_res: RestartResult | DevModeResult | None) -> _StepEnd:
    """A pod with neither an API reset nor a rollout because its spec turns dev mode off."""
    if not plan.has("api-reset") and owner_res is None and dev_mode_on(plan.pod) is False:
        return _StepEnd(messages=(dev_mode_hint(plan.pod),), failure="dev mode off")
    return _StepEnd()


def _tier_end(plan: PodPlan, effect: TierEffect, ran: _Ran) -> _TierEnd:
    """One tier's end, from the step that was to empty it (or why none was)."""
    tier = effect.tier
    action = ran.step_of.get(id(tier))
    lt = ran.left_of.get(id(tier))
    if lt is not None or action is None:
        return _left_tier(effect, lt, ran.reset.state)
    if action == "api-reset":
        return _reset_tier(plan, effect, ran)
    if action == "clear-fs":
        return _fs_tier(tier, ran.fs)
    return _owner_tier(plan.pod, tier, ran.owner.state, ran.owner_res)


def _left_tier(effect: TierEffect, lt: LeftTier | None, reset_state: str | None) -> _TierEnd:
    """A tier no planned step empties: ``left``, with the plan's reason and flag."""
    tier, label = effect.tier, tier_label(effect.tier)
    reason = lt.reason if lt is not None else effect.reason
    flag = lt.flag if lt is not None else None
    # after a failed call, the failure is the message
    said = () if reset_state == "not emptied" else (
        f"{label} left: {reason}" + (f"; to empty it: {flag}" if flag else ""),)
    return _TierEnd(tier.kind.value, "left", said, left_row=LeftRow(label, reason, flag))


def _reset_tier(plan: PodPlan, effect: TierEffect, ran: _Ran) -> _TierEnd:
    """A tier the API reset empties: the reset's state (``unconfirmed`` for a tier whose reset
    result cannot be known), left with the remedy of the reset's failure when not emptied."""
    tier, label = effect.tier, tier_label(effect.tier)
    kind, state = tier.kind.value, ran.reset.state or "not emptied"
    if state == "emptied" and any(tier is t for t in plan.unconfirmed):
        return _TierEnd(kind, "unconfirmed", (f"{label}: {effect.reason}",),
                        unconfirmed_row=UnconfirmedRow(label, effect.reason), unconfirmed=True)
    if state == "not emptied":
        return _TierEnd(kind, state, left_row=LeftRow(label, ran.reset_reason or "the reset did not run",
                                                      reset_remedy(plan.pod, ran.failure)))
    if state == "unconfirmed":
        return _TierEnd(kind, state, unconfirmed_row=UnconfirmedRow(label, ran.reset_reason))
    return _TierEnd(kind, state)


def _fs_tier(tier: Tier, fs_results: list[FsClearResult]) -> _TierEnd:
    """A tier clear-fs empties: its state from the volume deletions (:func:`fs_state`)."""
    kind, label = tier.kind.value, tier_label(tier)
    state, fs_text = fs_state(tier, fs_results)
    said = (fs_text,) if fs_text else ()
    if state == "unconfirmed":
        return _TierEnd(kind, state, said, unconfirmed=True,
                        unconfirmed_row=UnconfirmedRow(label, fs_text or "the deletion was not confirmed"))
    if state == "emptied":
        return _TierEnd(kind, state, said)
    # directories kept for consent (pods outside the targets serve that model on the
    # volume) are left as a store held back is: partial, with the flag as the remedy
    held = [r for r in fs_results if r.result == "left" and r.target.held is not None
            and (r.target.root == tier.root_dir or len(fs_results) == 1)]
    disk = tier.tier_type == "lmcache_local_disk"  # the disk is left to the store step: partial
    remedy = "kubectl kvreset clear-store" if disk else f"{SHARED_FLAG} (or --whole-tier)" if held else FS_REMEDY
    return _TierEnd(kind, state, said, left_row=LeftRow(label, fs_text or "the deletion did not empty it", remedy),
                    failure=None if disk or held else "failed")


def _owner_tier(pod: VllmPod, tier: Tier, owner_state: str | None,
                owner_res: RestartResult | DevModeResult | None) -> _TierEnd:
    """A tier only the owner's restart or dev-mode rollout empties: the rollout's state."""
    kind, label = tier.kind.value, tier_label(tier)
    state = owner_state or "not emptied"
    if state == "not emptied":
        why = (owner_result_message(owner_res) if owner_res is not None
               else "the restart or dev-mode rollout did not run")
        return _TierEnd(kind, state, left_row=LeftRow(
            label, why, f"check kubectl rollout status {pod.owner.ref()}, then run clear again"))
    if state == "unconfirmed":
        why = owner_result_message(owner_res) if owner_res is not None else "the rollout was not waited for"
        return _TierEnd(kind, state, unconfirmed_row=UnconfirmedRow(label, why))
    return _TierEnd(kind, state)


def _config_failure(pod: VllmPod, failure: str | None) -> tuple[str | None, tuple[str, ...]]:
    """The row's failure result and extra message once a ``--config`` file that could not be
    read counts: the port or tiers it sets are not established, so the pod is never
    ``emptied`` (``config unread`` unless a more telling failure is already the result)."""
    if pod.serve.config_error is None:
        return failure, ()
    return ("config unread" if failure in (None, "failed") else failure,
            (f"--config {pod.serve.config_file}: {pod.serve.config_error}; what it sets "
             "(port, kv-transfer-config) is not known, so this pod is not reported emptied",))


def _result(plan: PodPlan, results: RunResults, tiers: Sequence[_TierEnd], failure: str | None, *,
            unconfirmed: bool, gone: bool) -> tuple[str, ExitCode]:
    """The row's result and exit code: ``replaced``/``gone`` for a pod that vanished, the
    failure (or ``partial``) while a tier is not done, else ``emptied`` or ``unconfirmed`` (never
    ``emptied`` while a tier is left or unconfirmed)."""
    pod = plan.pod
    if gone and failure is None:
        return ("replaced" if results.successors.get((pod.namespace, pod.owner)) else "gone"), ExitCode.OK
    if failure is not None or not all(t.state in ("emptied", "unconfirmed", "replaced") for t in tiers):
        return failure or "partial", ExitCode.FAILED
    if unconfirmed:
        return "unconfirmed", ExitCode.UNCONFIRMED
    if any(t.left_row is not None for t in tiers):
        return "partial", ExitCode.FAILED
    if any(t.unconfirmed_row is not None for t in tiers):
        return "unconfirmed", ExitCode.UNCONFIRMED
    return "emptied", ExitCode.OK


def _version_note(plan: PodPlan, reset_state: str | None) -> tuple[str, ...]:
    """Why the reset read as the oldest version's, when the version probe failed."""
    if plan.probe_failure is not None and plan.version is None and reset_state in ("emptied", "unconfirmed"):
        return (f"version unknown ({plan.probe_failure.message}): assumed the oldest behaviour",)
    return ()


def skipped_outcome(pod: VllmPod, port: ApiPort | None, container: str | None) -> PortOutcome:
    """The row of a vLLM container ``--container`` left out: result ``skipped``, nothing done,
    exit 0 (it was not a target)."""
    return PortOutcome(
        engine=pod.engine.name,
        namespace=pod.namespace, pod=pod.name, container=pod.container, port=port.port if port is not None else None,
        role=pod.role, owner=pod.owner.ref(), version=pod.version, tiers={}, result="skipped",
        messages=(f"container {pod.container} not targeted (--container {container}): nothing was reset",),
        steps=(), calls=0, busy_answers=0, left=(), code=ExitCode.OK)


def engine_zero_only(version: str | None, engines: int, port: ApiPort | None,
                     labels: tuple[str, ...] = (), *, unknown: str | None = None, secret: bool = False) -> str | None:
    """Why a successful reset answer does not confirm every data-parallel engine behind
    ``port`` (None when it does: one engine established, or a version that ANDs every engine's
    result, :func:`~kubectl_kvreset.engines.vllm.api.reset_answers_for_every_engine`). ``labels``: the
    engines' ``engine`` labels from ``/metrics`` when they gave the count (the first one, the
    lowest rank the server manages, is the one that answers; ``vllm/v1/engine/core_client.py``
    ``call_utility_async``), else ``()`` and the count is the serve flags'. ``unknown``: why
    neither source established the count (then the answer vouches for engine 0 alone, whatever
    ``engines`` says); ``secret``: the flags' count was read from a Secret and is not written."""
    if reset_answers_for_every_engine(parse_version(version)) or (engines <= 1 and unknown is None):
        return None
    who = f"vLLM {version}" if version else "vLLM of unknown version"
    where = f" behind port {port.port}" if port is not None else ""
    tail = " (vLLM 0.32.0 and later answer for every engine)"
    if unknown is not None:
        return (f"{who} answers the reset for engine 0 only, and the number of data-parallel engines{where} is not "
                f"known ({unknown}): any other engine is not confirmed{tail}")
    counted = len(labels) == engines
    if secret and not counted:
        return (f"{who} answers the reset for engine 0 only: the other data-parallel engines{where} (their count "
                f"is read from a Secret, not shown) are not confirmed{tail}")
    first = labels[0] if counted else "0"
    others = engine_list(labels[1:]) if counted else ("engine 1" if engines == 2 else f"engines 1-{engines - 1}")
    source = "the engine labels of GET /metrics" if counted else "the serve flags"
    return (f"{who} answers the reset for engine {first} only: {others} of the {engines} data-parallel "
            f"engines{where} ({source}) are not confirmed{tail}")


def not_running_outcome(plan: PodPlan, port: ApiPort | None) -> PortOutcome:
    """The :class:`PortOutcome` of a pod with no running vLLM container: result ``not
    running``, every tier ``left`` with the pod's state and cause as the reason, nothing sent,
    exit code 1."""
    pod, down = plan.pod, plan.not_running
    assert down is not None
    cells: dict[str, list[str]] = {}
    for effect in plan.effects:
        cells.setdefault(effect.tier.kind.value, []).append("left")
    return PortOutcome(
        engine=pod.engine.name,
        namespace=pod.namespace, pod=pod.name, container=pod.container, port=port.port if port is not None else None,
        role=pod.role, owner=pod.owner.ref(), version=None, tiers={k: tuple(v) for k, v in cells.items()},
        result="not running", messages=(down.describe() + ": nothing was sent to it",), steps=(), calls=0,
        busy_answers=0, left=tuple(LeftRow(tier_label(lt.tier), lt.reason, None) for lt in plan.steps.left),
        code=ExitCode.FAILED)


def reset_remedy(pod: VllmPod, failure: str | None) -> str:
    """What to do about an API reset of ``pod`` whose row's result is ``failure``
    (:data:`RESET_REMEDIES`; ``busy`` offers ``--preempt-running`` only where the pod's engine
    can preempt)."""
    if failure == "busy" and not pod.engine.preempts_running:
        return BUSY_REMEDY
    return RESET_REMEDIES.get(failure or "", RESET_REMEDY)


def describe_reset_failure(pod: VllmPod, first: ResetResult) -> tuple[str, str]:
    """``(result, message)`` for an API reset that did not empty the cache."""
    if first.failure is not None:
        result = {"forbidden": "forbidden", "pod-gone": "pod gone", "unreachable": "unreachable",
                  "refused": "unreachable", "timeout": "unreachable",
                  "interrupted": "interrupted"}.get(first.failure.kind, "failed")
        return result, first.failure.message
    if first.outcome is ResetOutcome.BUSY:
        return "busy", f"{pod.engine.busy_reason(first.elapsed_s, first.busy_answers)}: {reset_remedy(pod, 'busy')}"
    if first.outcome is ResetOutcome.DEV_MODE_OFF:
        return "dev mode off", dev_mode_hint(pod)
    return "failed", first.answer.detail if first.answer else "no answer"


def fs_state(tier: Tier, results: list[FsClearResult]) -> tuple[str, str | None]:
    """The state of an FS tier from the volume deletions covering it, and a message.

    LMCache's local disk is never one of clear-fs's deletions (``fs.FS_TIER_TYPES``): the
    store step deletes its ``*.pt`` files and says so in its own ``StoreClear`` row, so here it
    is not emptied whatever other FS tier of the pod was."""
    if tier.tier_type == "lmcache_local_disk":
        return "not emptied", (f"{tier_label(tier)}: LMCache's local disk is emptied by the store step "
                               "(clear-store, chained by clear), not here: see its StoreClear row")
    mine = [r for r in results if r.target.root == tier.root_dir] or results
    if not mine:
        return "not emptied", f"{tier_label(tier)}: no deletion ran"
    for r in mine:
        if r.result not in ("emptied", "unconfirmed"):
            return "not emptied", f"{tier_label(tier)}: {r.message or 'the deletion ' + r.result}"
    for r in mine:
        if r.result == "unconfirmed":
            return "unconfirmed", f"{tier_label(tier)}: {r.message or 'the deletion was not confirmed'}"
    shared = [text for r in mine if (text := sharing_message(r.target, r)) is not None]
    return "emptied", "; ".join(shared) or None


def owner_result_ok(res: RestartResult | DevModeResult) -> bool:
    """True when an owner's pods were replaced: a restart whose rollout completed, or a
    dev-mode patch that rolled the pods (``unchanged`` rolled nothing, so it empties nothing)."""
    if isinstance(res, DevModeResult) and res.action == "enable":
        return res.ok and res.result == "enabled"
    return res.ok


def owner_result_message(res: RestartResult | DevModeResult) -> str:
    """What an owner's failed rollout reported."""
    if isinstance(res, DevModeResult) and res.action == "enable" and res.result == "unchanged":
        return (f"{res.owner.ref()} already sets VLLM_SERVER_DEV_MODE=1 in its template, so nothing was rolled: "
                "the pods differ from their template; use --fallback=restart")
    return str(res.message or res.result)


