"""The clear job's plan: per targeted pod, the API reset (routes and query by version), clear-fs
where an FS tier remains, and the disruptive fallback the user allowed; owner-level steps are
shared by every targeted pod of the owner. ``clear --dry-run`` prints exactly this object, and
:func:`kubectl_kvreset.job.execute.run` executes it (Terraform's plan/apply).

The rules per tier and version are data in :mod:`kubectl_kvreset.plan`; this module reads the
versions (``GET /version``, in parallel, where the plan depends on them) and applies the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..plan import (
    DISRUPTIVE_STEPS,
    FALLBACKS,
    STEP_CLEAR_FS,
    LeftTier,
    PodSteps,
    Step,
    TierEffect,
    api_reset_effects,
    plan_pod_steps,
)
from ..podapi import CallFailure, probe_version
from ..pods import Owner, VllmPod
from ..podstate import NotRunning, not_running
from ..pool import Cancel, NotRun, parallel
from ..rollout import dev_mode_changes
from ..tiers import TierKind
from ..vllm_api import extra_reset_routes, parse_version, reset_query
from .scope import Scope

#: Every reset route; a version that lacks one answers 404 there, read as "not on this version".
ALL_RESET_ROUTES = ("/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache")


class Deferred:
    """Marks a pod whose version is read alongside its resets (see :func:`version_matters`)."""

    def __repr__(self) -> str:
        return "DEFERRED"


DEFERRED = Deferred()

#: What reading a pod's version gave: the version string, why not, not read yet, or not run.
Probed = str | CallFailure | Deferred | NotRun


@dataclass(frozen=True)
class ClearOptions:
    """How a clear runs.

    Attributes:
        fallback: the disruptive step allowed where only replacing pods empties a tier:
            ``restart``, ``devmode`` or ``none``.
        preempt_running: send ``reset_running_requests=true`` (running requests are preempted).
        busy_timeout_s: seconds to retry while vLLM answers ``success: false``.
        rollout_timeout_s: seconds to wait for a restart or dev-mode rollout.
        model_only: clear-fs deletes only the served model's directories.
        whole_tier: clear-fs empties a volume other pods also mount whole (their models'
            files too); without it only the targets' models' directories go there.
        max_concurrency: calls in flight at once.
        probe_all: read every pod's version before planning (the plan is shown first: a prompt or
            ``--dry-run``), instead of only where the plan depends on it.
    """

    fallback: str = "none"
    preempt_running: bool = False
    busy_timeout_s: float = 30.0
    rollout_timeout_s: float = 300.0
    model_only: bool = False
    whole_tier: bool = False
    max_concurrency: int = 64
    probe_all: bool = False

    def __post_init__(self) -> None:
        if self.fallback not in FALLBACKS:
            raise ValueError(f"fallback {self.fallback!r}: use one of {', '.join(FALLBACKS)}")


def dev_mode_on(pod: VllmPod) -> bool | None:
    """Whether the pod's vLLM serves the dev routes, as far as its spec tells.

    True for a literal non-zero integer, False for a literal ``"0"`` or a value vLLM refuses
    (``int()`` fails: the server crash-loops; ``vllm/envs.py``); a value the container's script
    sets (``VLLM_SERVER_DEV_MODE=1 vllm serve``, ``export``) counts the same. None when the spec
    does not say (unset: the image's ENV or a webhook may still set it; ``valueFrom``/``envFrom``):
    the reset is then sent and a 404 decides.
    """
    dm = pod.dev_mode
    if dm.source == "env":
        return bool(dm.enabled)
    if dm.source is None:
        script_value = pod.serve.env.get("VLLM_SERVER_DEV_MODE") if pod.serve.env else None
        if script_value is not None:
            try:
                return int(script_value) != 0
            except ValueError:
                return False
    return None


def pod_not_running(pod: VllmPod) -> NotRunning | None:
    """Why ``pod`` has no running vLLM container (:func:`kubectl_kvreset.podstate.not_running`
    on the pod as discovered), or None when it runs."""
    return not_running(pod.raw, pod.container, dev_mode=pod.dev_mode, owner_ref=pod.owner.ref())


def version_matters(pod: VllmPod) -> bool:
    """True when the pod's plan depends on its vLLM version before anything is sent: a CPU
    offload tier or a shared store (whether the API reset empties them changes by version).
    The GPU prefix cache is reset on every version, the FS tier never, and the answers read
    themselves (an empty 200 before 0.26, ``{"success": ...}`` after)."""
    return any(t.kind in (TierKind.CPU, TierKind.SHARED) for t in pod.layout.tiers)


@dataclass
class PodPlan:
    """What the job will do on one pod: the ``routes`` to call on each port (the first with
    ``query``), what the API reset empties (``effects``) and the chained ``steps``
    (:func:`kubectl_kvreset.plan.plan_pod_steps`). ``probe_failure`` says why the version is
    unknown; ``version_deferred``: the version is read alongside the resets. ``version`` and
    ``probe_failure`` are filled in by the run for a deferred pod, and ``steps`` change when a
    404 shows dev mode off and the allowed fallback applies. ``not_running``: the pod has no
    running vLLM container (Pending, Unschedulable, ContainerCreating, CrashLoopBackOff): no
    step is planned and nothing is sent to it."""

    pod: VllmPod
    version: str | None
    probe_failure: CallFailure | None
    effects: tuple[TierEffect, ...]
    query: tuple[tuple[str, str], ...]
    routes: tuple[str, ...]
    steps: PodSteps
    version_deferred: bool = False
    not_running: NotRunning | None = None

    def has(self, action: str) -> bool:
        """True when the plan holds the step ``action``."""
        return action in self.steps.actions()


@dataclass
class Plan:
    """The whole plan of one clear: ``scope``, ``options`` and one :class:`PodPlan` per
    targeted pod (same order as ``scope.pods``); ``probed`` keeps what the version reads gave,
    so :func:`replan` with another fallback sends nothing. ``fallback_chosen`` is the fallback
    the user named (None: none named, so a terminal may offer one)."""

    scope: Scope
    options: ClearOptions
    pods: list[PodPlan]
    probed: tuple[Probed, ...] = ()
    fallback_chosen: str | None = None
    notes: list[str] = field(default_factory=list)
    devmode_changes: dict[tuple[str, Owner], tuple[str, ...]] = field(default_factory=dict)
    """Per owner whose vLLM container takes ``VLLM_SERVER_DEV_MODE`` from ``valueFrom`` or
    ``envFrom``: what a dev-mode step would replace or override
    (:func:`kubectl_kvreset.rollout.dev_mode_changes`), shown with the plan before it runs."""

    def devmode_notes(self) -> list[str]:
        """One line per replaced or overridden value of an owner whose dev-mode step is planned
        or may follow a 404 (``--fallback=devmode``), for stderr before the run."""
        owners = {(p.pod.namespace, p.pod.owner) for p in self.pods
                  if p.has("devmode") or (self.options.fallback == "devmode" and p.has("api-reset")
                                          and dev_mode_on(p.pod) is None)}
        return [f"note: {ns}/{owner.ref()}: {line}" for (ns, owner), lines in self.devmode_changes.items()
                if (ns, owner) in owners for line in lines]

    def needs(self) -> list[str]:
        """The disruptive steps (sorted) that would empty what the plan leaves."""
        return sorted({p.steps.needs for p in self.pods if p.steps.needs})

    def dev_mode_unknown(self) -> list[PodPlan]:
        """Pods whose API reset is planned although their spec does not say whether dev mode is on."""
        return [p for p in self.pods if p.has("api-reset") and dev_mode_on(p.pod) is None]


def plan(scope: Scope, options: ClearOptions, *, cancel: Cancel | None = None,
         fallback_chosen: str | None = None) -> Plan:
    """Read the versions the plan depends on (``GET /version`` on each pod's first port, in
    parallel, at most ``options.max_concurrency`` at once) and build the :class:`Plan`.

    ``fallback_chosen``: the fallback the user named, kept for the plan's rows (None when
    ``options.fallback`` is the default). Never raises for a pod's failure: a version that
    could not be read is planned as the oldest behaviour (DESIGN §1).
    """
    def probe(pod: VllmPod) -> str | CallFailure:
        if not pod.ports:
            return CallFailure("no-port", "no API port found in the vLLM command")
        return probe_version(scope.caller, scope.ref(pod), pod.ports[0].port, scheme=pod.ports[0].scheme)

    early = [p for p in scope.pods if (options.probe_all or version_matters(p)) and pod_not_running(p) is None]
    # keyed per container: two vLLM containers of one pod may run different releases
    got = dict(zip(((p.uid or p.name, p.container) for p in early),
                   parallel(early, probe, options.max_concurrency, cancel), strict=True))
    probed: tuple[Probed, ...] = tuple(got.get((p.uid or p.name, p.container), DEFERRED) for p in scope.pods)
    changes: dict[tuple[str, Owner], tuple[str, ...]] = {}
    for p in scope.pods:
        key = (p.namespace, p.owner)
        if p.dev_mode.source in ("valueFrom", "envFrom") and key not in changes:
            changes[key] = tuple(dev_mode_changes(scope.kube, p.namespace, p.owner, enable=True))
    return Plan(scope, options, build_plans(list(scope.pods), probed, options.fallback, options.preempt_running),
                probed, fallback_chosen, devmode_changes={k: v for k, v in changes.items() if v})


def replan(old: Plan, fallback: str) -> Plan:
    """The same plan with another ``fallback`` (the user chose one at the prompt); sends nothing."""
    options = replace(old.options, fallback=fallback)
    return Plan(old.scope, options, build_plans(list(old.scope.pods), old.probed, fallback,
                                                options.preempt_running), old.probed, fallback,
                devmode_changes=dict(old.devmode_changes))


def build_plans(pods: list[VllmPod], probed: tuple[Probed, ...], fallback: str, preempt: bool) -> list[PodPlan]:
    """One :class:`PodPlan` per pod. A disruptive step acts on the owner, so when one pod of an
    owner needs it, every targeted pod of that owner gets it (their API reset is dropped: the
    new pods start cold)."""
    plans: list[PodPlan] = []
    for pod, got in zip(pods, probed, strict=True):
        down = pod_not_running(pod)
        if down is not None:
            effects = api_reset_effects(pod.layout, None, reset_external=True)
            left = tuple(LeftTier(e.tier, down.describe(), None) for e in effects)
            plans.append(PodPlan(pod, None, None, effects, (), (), PodSteps((), left, None), not_running=down))
            continue
        deferred = isinstance(got, Deferred)
        version_text = got if isinstance(got, str) else None
        version = parse_version(version_text)
        effects = api_reset_effects(pod.layout, version, reset_external=True)
        query = tuple(reset_query(version, reset_external=True, reset_running_requests=preempt))
        steps = plan_pod_steps(effects, dev_mode_on=dev_mode_on(pod), fallback=fallback)
        routes = ALL_RESET_ROUTES if deferred else ("/reset_prefix_cache",) + extra_reset_routes(version)
        plans.append(PodPlan(pod, version_text, got if isinstance(got, CallFailure) else None, effects, query,
                             routes, steps, version_deferred=deferred))
    owner_step: dict[tuple[str, Owner], str] = {}
    for p in plans:
        for step in p.steps.steps:
            if step.action in DISRUPTIVE_STEPS:
                key = (p.pod.namespace, p.pod.owner)
                owner_step[key] = "restart" if "restart" in (owner_step.get(key), step.action) else step.action
    promote(plans, owner_step)
    return plans


def promote(plans: list[PodPlan], owner_step: dict[tuple[str, Owner], str]) -> None:
    """Give every pod of an owner in ``owner_step`` that owner's disruptive step (``restart``
    or ``devmode``): it acts on the owner, whose new pods start cold, so their API reset is
    dropped and only clear-fs stays before it."""
    for p in plans:
        action = owner_step.get((p.pod.namespace, p.pod.owner))
        if action is None or p.has(action) or p.not_running is not None:
            continue
        local = tuple(e.tier for e in p.effects if e.tier.kind in (TierKind.GPU, TierKind.CPU))
        kept = tuple(s for s in p.steps.steps if s.action == STEP_CLEAR_FS)
        left = tuple(lt for lt in p.steps.left if lt.tier.kind is TierKind.SHARED)
        left += tuple(LeftTier(e.tier, "the owner is replaced, and " + e.reason, None)
                      for e in p.effects if e.tier.kind is TierKind.SHARED and e.emptied_by_api_reset)
        p.steps = PodSteps(kept + (Step(action, local),), left, None)
