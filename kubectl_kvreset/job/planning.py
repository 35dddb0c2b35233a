"""The clear job's plan: per targeted pod, the API reset (routes and query by version), clear-fs
where an FS tier remains, and the disruptive fallback the user allowed; owner-level steps are
shared by every targeted pod of the owner. ``clear --dry-run`` prints exactly this object, and
:func:`kubectl_kvreset.job.execute.run` executes it (Terraform's plan/apply).

The rules per tier and version are data in :mod:`kubectl_kvreset.plan`; this module reads what
the servers say (:mod:`kubectl_kvreset.job.probes`: ``/version`` and the live configuration once
per owner and pod template, ``/openapi.json`` for an unknown build) and applies the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from packaging.version import Version

from ..consent import User
from ..kube import KubeApiError
from ..plan import (
    DISRUPTIVE_STEPS,
    FALLBACKS,
    STEP_CLEAR_FS,
    STORE_WIDE_HOOKS,
    LeftTier,
    PodSteps,
    Step,
    TierEffect,
    api_reset_effects,
    plan_pod_steps,
    store_wide_hook,
)
from ..plan import (
    NEWEST_KNOWN as _NEWEST_KNOWN,
)
from ..podapi import CallFailure
from ..pods import NOT_NEEDED, Owner, VllmPod
from ..podstate import NotRunning, ResolvedDevMode, not_running
from ..pool import NOT_RUN, Cancel, NotRun
from ..rollout import dev_mode_changes, pod_dev_modes, source_lookup
from ..stores.calls import SHARED_FLAG, StoreCall
from ..tiers import KVLayout, Tier, TierKind
from .others import OtherKey, OtherPlan, leads_to, needs_restart, other_key, other_users, plan_others, targeted_users
from .probes import Probe, apply_probe, probe_pods
from .resetconsent import ResetHold, reset_holds
from .scope import Scope

#: What probing a pod's template gave (:class:`~kubectl_kvreset.job.probes.Probe`), or not run.
Probed = Probe | NotRun

#: The newest release the reset rules know (:data:`kubectl_kvreset.plan.NEWEST_KNOWN`).
NEWEST_KNOWN = _NEWEST_KNOWN


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
        verify: ``--verify``: each engine proves with a salted canary that it is cold after the
            job (:mod:`kubectl_kvreset.job.verify`); the rows get the ``verify`` column.
        wait_idle_s: ``--wait-idle``: seconds to wait, before the reset, for every targeted
            engine to run and queue nothing (:mod:`kubectl_kvreset.job.idle`); 0: no wait.
        shared_stores: ``--shared-stores``: a reset that is itself store-wide (vLLM's
            ``MooncakeStoreConnector`` runs ``remove_all``, LMCache's ``LMCacheMPConnector``
            clears its MP server's L1: :data:`kubectl_kvreset.plan.STORE_WIDE_HOOKS`) is sent with
            ``reset_external=true`` even where pods outside the targets use that store
            (:mod:`kubectl_kvreset.job.resetconsent`).
        force_mp: ``--force-mp-clear``: the store step's LMCache MP server clears send
            ``force: true`` (:func:`kubectl_kvreset.job.storeclear.plan_store`).
    """

    fallback: str = "none"
    preempt_running: bool = False
    busy_timeout_s: float = 30.0
    rollout_timeout_s: float = 300.0
    model_only: bool = False
    whole_tier: bool = False
    max_concurrency: int = 64
    shared_stores: bool = False
    verify: bool = False
    wait_idle_s: float = 0.0
    force_mp: bool = False

    def __post_init__(self) -> None:
        if self.fallback not in FALLBACKS:
            raise ValueError(f"fallback {self.fallback!r}: use one of {', '.join(FALLBACKS)}")


def dev_mode_on(pod: VllmPod) -> bool | None:
    """Whether the pod's vLLM serves the dev routes, as far as its spec tells.

    True for a literal non-zero integer, False for a literal ``"0"`` or a value vLLM refuses
    (``int()`` fails: the server crash-loops; ``vllm/envs.py``); a value the container's script
    sets (``VLLM_SERVER_DEV_MODE=1 vllm serve``, ``export``) counts the same. None when the spec
    does not say (unset: the image's ENV or a webhook may still set it; ``valueFrom``/``envFrom``):
    the reset is then sent and a 404 decides. True for a server whose engine has no dev mode
    (:data:`kubectl_kvreset.pods.NOT_NEEDED`): its reset routes are always served.
    """
    dm = pod.dev_mode
    if dm.source == NOT_NEEDED:
        return True
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


#: ``(namespace, pod, container)``: the vLLM container a resolved dev-mode value belongs to.
ContainerKey = tuple[str, str, str]
#: namespace -> a :func:`kubectl_kvreset.rollout.source_lookup` (ConfigMap/Secret data, each read once).
Lookups = dict[str, Callable[[str, str], "Mapping[str, str] | None"]]


def pod_not_running(pod: VllmPod, resolved: ResolvedDevMode | None = None) -> NotRunning | None:
    """Why ``pod`` has no running vLLM container (:func:`kubectl_kvreset.podstate.not_running`
    on the pod as discovered), or None when it runs. ``resolved``: its ``VLLM_SERVER_DEV_MODE``
    as the kubelet resolves a ``valueFrom``/``envFrom`` value
    (:class:`~kubectl_kvreset.devmode.DevModeReading`), which then explains a crash loop."""
    return not_running(pod.raw, pod.container, dev_mode=pod.dev_mode, owner_ref=pod.owner.ref(),
                       resolved=resolved)


def crash_dev_modes(scope: Scope, lookups: Lookups | None = None) -> dict[ContainerKey, ResolvedDevMode]:
    """The resolved ``VLLM_SERVER_DEV_MODE`` of each targeted pod that crash-loops while its
    spec takes the variable through ``valueFrom`` or ``envFrom`` (the value may be why vLLM
    exits), keyed by :data:`ContainerKey`. API requests: one GET per ConfigMap or Secret the
    run has not read yet (``lookups``: namespace -> :func:`kubectl_kvreset.rollout.source_lookup`,
    shared with the plan's other reads); none when no such pod is targeted."""
    crashing = [p for p in scope.pods if p.dev_mode.source in ("valueFrom", "envFrom")
                and (down := pod_not_running(p)) is not None and down.state == "CrashLoopBackOff"]
    if not crashing:
        return {}
    readings = pod_dev_modes(scope.kube, [p.raw for p in crashing], {} if lookups is None else lookups,
                             [p.container for p in crashing])
    return {(p.namespace, p.name, p.container): r for p, r in zip(crashing, readings, strict=True)}


def refused_dev_mode(pod: VllmPod, down: NotRunning, resolved: ResolvedDevMode | None = None) -> bool:
    """True when ``pod``'s vLLM container crash-loops on a ``VLLM_SERVER_DEV_MODE`` value vLLM
    refuses at start-up (``"true"``: ``vllm/envs.py`` reads it with ``int()``), written in the
    spec or resolved from its ConfigMap or Secret (``resolved``): the dev-mode step, which
    writes ``"1"``, makes that container start again."""
    if down.state != "CrashLoopBackOff":
        return False
    if pod.dev_mode.source == "env":
        return pod.dev_mode.accepted is False
    return resolved is not None and resolved.value is not None and resolved.accepted is False


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
    unknown; ``unconfirmed``: tiers whose reset is sent but whose result cannot be known (the
    connector tiers of an unknown build: reported ``unconfirmed``, never ``emptied``); ``notes``:
    what the running server said that the spec did not (the live configuration, the build), for
    the plan's and the result's rows. ``not_running``: the pod has no running vLLM container
    (Pending, Unschedulable, ContainerCreating, CrashLoopBackOff): no step is planned and nothing
    is sent to it. ``engines``: the ``engine`` labels ``/metrics`` showed (the engine count
    came from them; ``()``: from the serve flags). ``steps`` change
    when a 404 shows dev mode off and the allowed fallback applies, and the whole plan of a pod
    whose answers contradict its template's is rebuilt from its own probe."""

    pod: VllmPod
    version: str | None
    probe_failure: CallFailure | None
    effects: tuple[TierEffect, ...]
    query: tuple[tuple[str, str], ...]
    routes: tuple[str, ...]
    steps: PodSteps
    not_running: NotRunning | None = None
    unconfirmed: tuple[Tier, ...] = ()
    notes: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()

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
    dev_modes: dict[ContainerKey, ResolvedDevMode] = field(default_factory=dict)
    """The resolved dev-mode values of crash-looping pods (:func:`crash_dev_modes`), which name
    the cause in their rows; kept so :func:`replan` reads nothing again."""
    holds: dict[str, tuple[ResetHold, ...]] = field(default_factory=dict)
    """Per pod uid: why its reset may not send ``reset_external=true`` (a store-wide reset
    without consent, one row per hook, :func:`kubectl_kvreset.job.resetconsent.reset_holds`); kept by
    :func:`replan`."""
    others: list[OtherPlan] = field(default_factory=list)
    """One per targeted inference pod this version cannot empty (SGLang, Dynamo, ``trtllm-serve``,
    the LMCache server): its restart or the row ``left`` (:mod:`kubectl_kvreset.job.others`)."""
    other_users: dict[OtherKey, tuple[User, ...]] = field(default_factory=dict)
    """Per LMCache server among them, the engines outside the targets that use it (its restart's
    consent); kept by :func:`replan`."""
    reset_keys: dict[ContainerKey, dict[str, str]] = field(default_factory=dict, repr=False)
    """Per server container: the reset credentials read from Secrets (flag -> value; never shown,
    :func:`kubectl_kvreset.job.resetkeys.read_reset_keys`)."""
    other_targeted: dict[OtherKey, tuple[str, ...]] = field(default_factory=dict)
    """Per LMCache server among them, the targeted engines (``ns/pod``) that use it; kept by :func:`replan`."""

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
        needs = {p.steps.needs for p in self.pods if p.steps.needs}
        if needs_restart(self.others):
            needs.add("restart")
        return sorted(needs)

    def dev_mode_unknown(self) -> list[PodPlan]:
        """Pods whose API reset is planned although their spec does not say whether dev mode is on."""
        return [p for p in self.pods if p.has("api-reset") and dev_mode_on(p.pod) is None]


def plan(scope: Scope, options: ClearOptions, *, cancel: Cancel | None = None,
         fallback_chosen: str | None = None, holds: Mapping[str, tuple[ResetHold, ...]] | None = None,
         store_calls: Sequence[StoreCall] = ()) -> Plan:
    """Probe each owner's pod templates (``GET /version`` and, where dev mode may be on,
    ``GET /server_info?config_format=json``, at most ``options.max_concurrency`` at once;
    :func:`kubectl_kvreset.job.probes.probe_pods`) and build the :class:`Plan`.

    ``fallback_chosen``: the fallback the user named, kept for the plan's rows (None when
    ``options.fallback`` is the default). ``holds``: per pod uid, why its reset may not send
    ``reset_external=true`` (:func:`~kubectl_kvreset.job.resetconsent.reset_holds` over
    clear-store's plan; ``clear`` passes the one it already made). None: found here, as
    clear-store finds the stores, where a targeted pod runs a connector of
    :data:`~kubectl_kvreset.plan.STORE_WIDE_HOOKS`. ``store_calls``: the store step's calls
    (clear-store's plan), which say which engines use an LMCache server the targets hold
    (:func:`kubectl_kvreset.job.others.other_users`). Never
    raises for a pod's failure: a version that could not be read is planned as the oldest
    behaviour.

    Raises:
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer a list made to
            find the stores.
    """
    running = [p for p in scope.pods if pod_not_running(p) is None]
    answers = probe_pods(scope.caller, running, options.max_concurrency, cancel, dev_mode_on)
    got = {id(p): a for p, a in zip(running, answers, strict=True)}
    # a pod that is not running is sent nothing: build_plans plans it from its status alone
    probed: tuple[Probed, ...] = tuple(got.get(id(p), NOT_RUN) for p in scope.pods)
    changes: dict[tuple[str, Owner], tuple[str, ...]] = {}
    lookups: Lookups = {}  # ConfigMaps and Secrets read once for both uses below
    for p in scope.pods:
        key = (p.namespace, p.owner)
        if p.dev_mode.source in ("valueFrom", "envFrom") and key not in changes:
            lookup = lookups.setdefault(p.namespace, source_lookup(scope.kube, p.namespace))
            changes[key] = tuple(dev_mode_changes(scope.kube, p.namespace, p.owner, enable=True, lookup=lookup))
    dev_modes = crash_dev_modes(scope, lookups)
    if holds is None:
        holds = store_holds(scope, options.shared_stores)
    held = dict(holds)
    wide, unlisted = lmcache_server_universe(scope, store_calls)
    users = {other_key(o): other_users(o, wide, scope.pods, store_calls, unlisted) for o in scope.others}
    mine = {other_key(o): targeted_users(o, scope.pods, store_calls) for o in scope.others}
    return Plan(scope, options, build_plans(list(scope.pods), probed, options.fallback, options.preempt_running,
                                            dev_modes, held),
                probed, fallback_chosen, devmode_changes={k: v for k, v in changes.items() if v}, dev_modes=dev_modes,
                holds=held, others=plan_others(scope.others, options.fallback, shared=options.shared_stores,
                                               users=users, targeted=mine), other_users=users, other_targeted=mine)


def lmcache_server_universe(scope: Scope, store_calls: Sequence[StoreCall]) -> tuple[list[VllmPod], list[str]]:
    """The vLLM pods that may use a targeted LMCache server no store call of the targets leads to
    (:func:`kubectl_kvreset.job.others.other_users`): every one the caller can list, in every
    namespace and whatever the selector (an engine of another namespace reaches it by its
    Service's DNS name), and the namespaces that could not be listed; the scope's own universe
    when no such server is targeted (nothing is listed then)."""
    from ..discovery import discover

    if not any(o.shared and not leads_to(o, store_calls) for o in scope.others):
        return list(scope.universe), []
    universe = list(scope.universe)
    seen = {p.uid for p in universe}
    try:
        universe += [p for p in discover(scope.kube, None) if p.uid not in seen]
    except KubeApiError:
        return universe, ["other namespaces"]
    return universe, []


def store_holds(scope: Scope, shared: bool) -> dict[str, tuple[ResetHold, ...]]:
    """The holds of :func:`plan` when the caller gave none: clear-store's finding
    (:func:`kubectl_kvreset.job.storeclear.plan_store`) where a targeted pod's spec names a
    connector of :data:`~kubectl_kvreset.plan.STORE_WIDE_HOOKS`; otherwise no list is made (a pod
    whose live configuration alone shows the connector is then held as of an unknown store)."""
    if shared:
        return {}
    if not any(h.connector in p.layout.connectors for p in scope.pods for h in STORE_WIDE_HOOKS):
        return reset_holds(scope.pods, (), shared=False)
    from .storeclear import plan_store

    stores = plan_store(scope, shared=False)
    return reset_holds(scope.pods, stores.calls, stores.unknown, shared=False)


def replan(old: Plan, fallback: str) -> Plan:
    """The same plan with another ``fallback`` (the user chose one at the prompt); sends nothing."""
    options = replace(old.options, fallback=fallback)
    return Plan(old.scope, options, build_plans(list(old.scope.pods), old.probed, fallback,
                                                options.preempt_running, old.dev_modes, old.holds), old.probed,
                fallback, devmode_changes=dict(old.devmode_changes), dev_modes=dict(old.dev_modes),
                holds=dict(old.holds),
                others=plan_others(old.scope.others, fallback, shared=options.shared_stores, users=old.other_users,
                                   targeted=old.other_targeted),
                other_users=dict(old.other_users), other_targeted=dict(old.other_targeted), reset_keys=old.reset_keys)


def engine_effects(pod: VllmPod, version: Version | None) -> tuple[TierEffect, ...]:
    """What the API reset does to each tier of ``pod`` on ``version``: its engine's own answer
    (:meth:`~kubectl_kvreset.engines.base.Engine.tier_resets`) when it gives one, else the
    reset-effect table (:func:`~kubectl_kvreset.plan.api_reset_effects`, vLLM's connectors)."""
    own = pod.engine.tier_resets(pod.layout, version)
    if own is None:
        return api_reset_effects(pod.layout, version, reset_external=True)
    return tuple(TierEffect(tier, r.emptied, r.reason, None if r.emptied else r.remedy)
                 for tier, r in zip(pod.layout.tiers, own, strict=True))


def build_plans(pods: list[VllmPod], probed: tuple[Probed, ...], fallback: str, preempt: bool,
                dev_modes: dict[ContainerKey, ResolvedDevMode] | None = None,
                holds: Mapping[str, tuple[ResetHold, ...]] | None = None) -> list[PodPlan]:
    """One :class:`PodPlan` per pod, from the pod as its template's probe describes it
    (:func:`pod_plan`, with the pod's hold from ``holds``, keyed by uid); a pod that is not
    running is planned from its status, its crash cause read with its resolved dev-mode value
    (``dev_modes``, :func:`crash_dev_modes`); with ``fallback="devmode"``, one that crash-loops on
    a dev-mode value vLLM refuses (:func:`refused_dev_mode`) gets the dev-mode step instead. A disruptive step
    acts on the owner, so when one
    pod of an owner needs it, every targeted pod of that owner gets it (their API reset is
    dropped: the new pods start cold)."""
    plans: list[PodPlan] = []
    for pod, got in zip(pods, probed, strict=True):
        resolved = (dev_modes or {}).get((pod.namespace, pod.name, pod.container))
        down = pod_not_running(pod, resolved)
        if down is not None and fallback == "devmode" and refused_dev_mode(pod, down, resolved):
            # the dev-mode step writes the value vLLM accepts: the new pods start, cold
            effects = engine_effects(pod, None)
            plans.append(PodPlan(pod, None, None, effects, (), (),
                                 plan_pod_steps(effects, dev_mode_on=False, fallback=fallback),
                                 notes=(f"{down.describe()}: --fallback devmode replaces that value",)))
            continue
        if down is not None:
            effects = engine_effects(pod, None)
            left = tuple(LeftTier(e.tier, down.describe(), None) for e in effects)
            plans.append(PodPlan(pod, None, None, effects, (), (), PodSteps((), left, None), not_running=down))
            continue
        plans.append(pod_plan(pod, got, fallback, preempt, (holds or {}).get(pod.uid)))
    owner_step: dict[tuple[str, Owner], str] = {}
    for p in plans:
        for step in p.steps.steps:
            if step.action in DISRUPTIVE_STEPS:
                key = (p.pod.namespace, p.pod.owner)
                owner_step[key] = "restart" if "restart" in (owner_step.get(key), step.action) else step.action
    promote(plans, owner_step)
    return plans


def pod_plan(pod: VllmPod, got: Probed, fallback: str, preempt: bool,
             hold: ResetHold | tuple[ResetHold, ...] | None = None) -> PodPlan:
    """The plan of one pod from its probe: the live layout where ``/server_info`` was read,
    the routes and query by release (``0.23.1.dev42`` counts as 0.23.1), and for an unknown
    build the routes and parameters ``/openapi.json`` lists, its connector tiers ``unconfirmed``.

    With a ``hold`` (one or one per hook) whose hook reaches a store of this server
    (:func:`active_holds`), the reset is sent with ``reset_external=false`` and every tier that
    leaves is planned ``left`` (:func:`withhold_external`), naming the store, its other users and
    :data:`~kubectl_kvreset.stores.calls.SHARED_FLAG`.
    """
    probe = got if isinstance(got, Probe) else None
    spec_notes = set(pod.notes)
    pod = apply_probe(pod, got)
    notes = [n for n in pod.notes if n not in spec_notes]
    if probe is not None and probe.failure is not None and probe.failure.kind == "unknown-build":
        notes.append(f"an unknown build ({probe.failure.message}): "
                     + ("/openapi.json decided the reset routes and parameters" if probe.routes is not None
                        else "the oldest behaviour is assumed"))
    version_text = probe.version if probe else None
    engine = pod.engine
    version = engine.release(version_text)
    effects = engine_effects(pod, version)
    query = tuple(engine.reset_query(version, reset_external=True, reset_running_requests=preempt))
    routes = (engine.reset_route,) + engine.extra_reset_routes(version)
    unconfirmed: tuple[Tier, ...] = ()
    if probe is not None and version is None and probe.routes is not None:
        listed = probe.routes
        routes = (engine.reset_route,) + tuple(r for r in listed.routes if r != engine.reset_route)
        query = tuple((k, v) for k, v in engine.reset_query(None, reset_external="reset_external" in listed.params,
                                                             reset_running_requests=preempt) if k in listed.params)
        if "reset_external" in listed.params:
            newest = {e.tier: e for e in api_reset_effects(pod.layout, NEWEST_KNOWN, reset_external=True)}
            changed = []
            for e in effects:
                best = newest[e.tier]
                if e.tier.connector and not e.emptied_by_api_reset and best.emptied_by_api_reset:
                    e = TierEffect(e.tier, True, "an unknown build (its /openapi.json lists reset_external): the "
                                   "connector reset is sent, but what it does is not known; " + best.reason, None)
                    unconfirmed += (e.tier,)
                changed.append(e)
            effects = tuple(changed)
    held: tuple[Tier, ...] = ()
    active = active_holds(pod.layout, version, hold)
    if active and ("reset_external", "true") in query:
        effects, held = withhold_external(pod.layout, version, effects, active)
        query = tuple(("reset_external", "false") if k == "reset_external" else (k, v) for k, v in query)
        unconfirmed = tuple(t for t in unconfirmed if t not in held)
        notes.append("reset sent with reset_external=false: " + "; ".join(h.reason() for h in active)
                     + f" ({SHARED_FLAG} allows it)")
    steps = plan_pod_steps(effects, dev_mode_on=dev_mode_on(pod), fallback=fallback)
    if held:
        steps = flag_held(steps, held)
    failure = probe.failure if probe is not None and probe.version is None else None
    if probe is not None and probe.failure is not None and probe.failure.kind == "unknown-build":
        failure = probe.failure
    labels = probe.engines if probe is not None and probe.engines else ()
    return PodPlan(pod, version_text, failure, effects, query, routes, steps, unconfirmed=unconfirmed,
                   notes=tuple(notes), engines=labels if len(labels) == pod.serve.engines_per_port else ())


def active_holds(layout: KVLayout, version: Version | None,
                 hold: ResetHold | tuple[ResetHold, ...] | None) -> tuple[ResetHold, ...]:
    """The rows of ``hold`` whose hook empties a store of ``layout`` on ``version``
    (:func:`kubectl_kvreset.plan.store_wide_hook`). An unknown version counts as
    :data:`NEWEST_KNOWN` here: the server may well have the hook, and consent errs on the side of
    the other users."""
    rows = (hold,) if isinstance(hold, ResetHold) else hold or ()
    hooks = {h.connector for t in layout.tiers if (h := store_wide_hook(t, version or NEWEST_KNOWN)) is not None}
    return tuple(r for r in rows if r.hook.connector in hooks)


def store_wide_reset(layout: KVLayout, version: Version | None) -> bool:
    """Whether ``reset_external=true`` may empty a whole shared store on this server: a tier of a
    connector of :data:`kubectl_kvreset.plan.STORE_WIDE_HOOKS` (``MooncakeStoreConnector`` from
    vLLM 0.23, vllm PR #42694; LMCache's ``LMCacheMPConnector``). An unknown version counts as
    :data:`NEWEST_KNOWN`."""
    return any(store_wide_hook(t, version or NEWEST_KNOWN) is not None for t in layout.tiers)


def _hooked(tier: Tier) -> bool:
    """The store of a connector whose reset is store-wide on some release."""
    return store_wide_hook(tier, NEWEST_KNOWN) is not None


def withhold_external(layout: KVLayout, version: Version | None, effects: tuple[TierEffect, ...],
                      holds: ResetHold | tuple[ResetHold, ...]) -> tuple[tuple[TierEffect, ...], tuple[Tier, ...]]:
    """``effects`` with the reset sent as ``reset_external=false``: each shared store a hook of
    :data:`~kubectl_kvreset.plan.STORE_WIDE_HOOKS` reaches and every tier only the connector reset
    empties on this version (per version and connector: :data:`kubectl_kvreset.plan.RESET_RULES`,
    e.g. the CPU tier of an OffloadingConnector from 0.22) are not emptied, their reason naming the
    hold of that store's hook (or every hold). Returns ``(effects, the tiers held)``."""
    rows = (holds,) if isinstance(holds, ResetHold) else holds
    off = {e.tier: e for e in api_reset_effects(layout, version, reset_external=False)}
    why = "; ".join(h.reason() for h in rows)
    own = {h.hook.connector: h.reason() for h in rows}
    changed: list[TierEffect] = []
    held: list[Tier] = []
    for e in effects:
        low = off.get(e.tier)
        if _hooked(e.tier):
            e = TierEffect(e.tier, False,
                           f"reset sent with reset_external=false: {own.get(e.tier.connector or '', why)}",
                           None)
            held.append(e.tier)
        elif e.emptied_by_api_reset and low is not None and not low.emptied_by_api_reset:
            e = TierEffect(e.tier, False, "reset sent with reset_external=false, which leaves the tiers only the "
                           f"connector reset empties: {why}", low.remedy)
            held.append(e.tier)
        changed.append(e)
    return tuple(changed), tuple(held)


def flag_held(steps: PodSteps, held: tuple[Tier, ...]) -> PodSteps:
    """``steps`` with the remedy of each tier ``left`` because of a hold: :data:`SHARED_FLAG`
    (with the other remedy, e.g. ``--fallback=restart``, where one applies)."""
    left: list[LeftTier] = []
    for lt in steps.left:
        if lt.tier in held:
            if _hooked(lt.tier):
                reason = lt.reason.removesuffix("; outside the pods, a restart does not clear it")
                lt = LeftTier(lt.tier, reason, SHARED_FLAG)
            else:
                flag = f"{SHARED_FLAG} (reset_external=true, which also empties the whole shared store)"
                lt = LeftTier(lt.tier, lt.reason, flag + (f" or {lt.flag}" if lt.flag else ""))
        left.append(lt)
    return PodSteps(steps.steps, tuple(left), steps.needs)


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
