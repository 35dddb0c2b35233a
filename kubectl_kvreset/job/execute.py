"""Run a clear :class:`~kubectl_kvreset.job.planning.Plan`: API resets on every port and route
(parallel, bounded), FS tiers (one deletion per backing volume, parallel), then owner rollouts
(dev mode, restart; prefill before decode); replaced pods get their successors named. Returns
an :class:`~kubectl_kvreset.job.outcome.Outcome`: typed results per pod and port, rows, notes.

Never writes to stderr: warnings are notes on the outcome; rollout progress goes to the
``progress`` callback the caller passes; an interrupt arrives through the caller's
:class:`~kubectl_kvreset.pool.Cancel`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..discovery import discover_all
from ..engines.vllm.api import (
    EngineSplit,
    MetricsParseError,
    ResetOutcome,
    parse_version,
    reset_answers_for_every_engine,
    split_engines,
)
from ..fs import plan_fs_clear, run_fs_clear, sharing_message
from ..kube import KubeError
from ..plan import STEP_API_RESET, STEP_CLEAR_FS, STEP_DEVMODE, STEP_RESTART
from ..podapi import PodRef, ResetResult, fetch_metrics, reset
from ..pods import ApiPort, Owner, VllmPod
from ..pool import Cancel, NotRun, parallel
from ..rollout import NOT_STARTED, DevModeResult, restart_owners, run_phased, set_dev_mode
from .fsclear import UNLISTED, FsPlan, plan_fs_shared
from .idle import wait_idle
from .outcome import Outcome, OwnerKey, PortKey, RunResults, build_outcome, owner_result_ok
from .planning import Plan, PodPlan, dev_mode_on, promote
from .planning import pod_plan as plan_one_pod
from .probes import contradicts, probe_templates, template_key
from .verify import Verifier, verifier_for
from .verifyrows import with_verification

#: ``events(kind, key, value)`` of :func:`run`: ``"ports"`` (key ``""``, value the number of
#: API ports to reset), ``"busy"`` (a port, value the seconds left retrying), ``"done"`` (a
#: port all of whose routes answered), ``"restarting"`` / ``"restarted"`` (an owner, value None).
Events = Callable[[str, str, "float | None"], None]


def reset_route(plan: Plan, pod_plan: PodPlan, port: ApiPort, route: str,
                on_busy: Callable[[float], None] | None = None) -> ResetResult:
    """Call one reset route of ``pod_plan`` on one port (the prefix-cache reset with the plan's
    query): a :class:`~kubectl_kvreset.podapi.ResetResult`. ``on_busy``: see
    :func:`kubectl_kvreset.podapi.reset`."""
    pod = pod_plan.pod
    ref = PodRef(pod.namespace, pod.name, pod.container)
    caller = plan.scope.caller
    first = route == pod_plan.routes[0]
    query = tuple(pod_plan.query) + tuple(pod.engine.busy_query(plan.options.busy_timeout_s)) if first else ()
    headers = pod.engine.reset_headers(pod.serve, getattr(plan, "reset_keys", {}).get(  # a hand-built plan has none
        (pod.namespace, pod.name, pod.container), {}))
    return reset(caller, ref, port.port, route, query, scheme=port.scheme,
                 busy_timeout_s=plan.options.busy_timeout_s, on_busy=on_busy, engine=pod.engine,
                 serve=pod.serve, headers=headers)


def run(plan: Plan, cancel: Cancel | None = None, *, progress: Callable[[str], None] | None = None,
        verifier: Verifier | None = None, events: Events | None = None) -> Outcome:
    """Execute ``plan``; returns its :class:`~kubectl_kvreset.job.outcome.Outcome`.

    ``plan.options.verify`` (without a ``verifier``): the canaries are seeded first, probed
    after each step, the last reset removes them, and the rows carry the ``verify`` column
    (:mod:`kubectl_kvreset.job.verify`). A caller that runs more steps after this (the store
    step) passes its own seeded ``verifier`` instead: it is probed after the steps here, and the
    caller probes, finishes and applies it (:func:`kubectl_kvreset.job.verifyrows.with_verification`).

    ``cancel``: once set, no new call starts and later phases are skipped; rows of what did not
    run say ``interrupted`` and the exit code is 130. ``progress``: called with one line per
    rollout wait step (the command line passes it only when stderr is a terminal). ``events``:
    see :data:`Events` (called from worker threads; the command line's live progress line).
    Never raises for a pod's or owner's failure: each row says what happened.

    The phases, in order: wait for idle engines (:func:`_wait_idle`), the API resets
    (:func:`_reset_phase`), the dev-mode fallback a 404 decided (:func:`_promote_dev_mode_off`),
    the FS tiers (:func:`_fs_phase`), the dev-mode rollouts (:func:`_devmode_phase`), the restarts
    (:func:`_restart_phase`), then the successors and the outcome (:func:`_verified`).
    """
    cancel = cancel or Cancel()
    own = verifier is None and plan.options.verify
    if own:
        verifier = verifier_for(plan, cancel)
        verifier.seed()
    results = RunResults()
    notes: list[str] = list(plan.notes)
    if plan.options.wait_idle_s > 0 and not cancel.is_set():
        notes += _wait_idle(plan, cancel, progress)
    _reset_phase(plan, results, cancel, events)
    if verifier is not None and not cancel.is_set():
        verifier.probe("api-reset")
    if plan.options.fallback in ("devmode", "restart"):
        _promote_dev_mode_off(plan, results)
    _fs_phase(plan, results, notes, cancel, verifier)
    if not cancel.is_set():
        _devmode_phase(plan, results, notes, cancel, progress)
    _restart_phase(plan, results, cancel, progress, events)
    find_successors(plan, results)
    outcome = build_outcome(plan, results, notes, interrupted=cancel.is_set())
    return _verified(plan, outcome, verifier, cancel, own=own)


def _wait_idle(plan: Plan, cancel: Cancel, progress: Callable[[str], None] | None) -> list[str]:
    """``--wait-idle``: wait for the engines of the ports to reset to hold no request; the
    warning (one note) when some were still busy at the end."""
    options = plan.options
    ports = [(p.pod, port) for p in plan.pods if p.has(STEP_API_RESET) for port in p.pod.ports]
    busy = wait_idle(plan.scope.caller, ports, options.wait_idle_s, progress=progress, cancel=cancel,
                     max_concurrency=options.max_concurrency)
    if not busy:
        return []
    return [f"warning: --wait-idle {options.wait_idle_s:g}s ended with {len(busy)} engine(s) still busy "
            f"({', '.join(busy[:5])}{' ...' if len(busy) > 5 else ''}): their reset answers busy "
            "unless --preempt-running"]


def _reset_phase(plan: Plan, results: RunResults, cancel: Cancel, events: Events | None) -> None:
    """The API resets: every route of every port at once (the caches are independent, and a
    route the version lacks is not called: the plan's routes follow the version its template
    reported; every port's first route is submitted before the others), then the pods whose
    answers contradict that version probed again (:func:`reprobe`) and the busy data-parallel
    ports split (:func:`split_busy_engines`).
    Fills ``results.resets`` and ``results.engines``."""
    ports = [(p, port) for p in plan.pods if p.has(STEP_API_RESET) for port in p.pod.ports if p.routes]
    # every port's first route (the prefix-cache reset) is sent before any other route: it is the
    # one that can take long (a busy answer is retried until --busy-timeout, a connector's hook
    # empties its store), so the short ones fill the connections it frees instead of delaying it
    # (longest first); the routes are independent, so the order changes no answer
    units = [(p, port, p.routes[0]) for p, port in ports] + \
        [(p, port, route) for p, port in ports for route in p.routes[1:]]
    got = parallel(units, _reporting(plan, units, events), plan.options.max_concurrency, cancel)
    by_port: dict[PortKey, list[ResetResult | NotRun]] = {}
    for (p, port, _route), result in zip(units, got, strict=True):
        if isinstance(result, (ResetResult, NotRun)):
            by_port.setdefault((p.pod.namespace, p.pod.name, p.pod.container, port.port), []).append(result)
    if not cancel.is_set():
        reprobe(plan, by_port, cancel)
    if not cancel.is_set():
        results.engines.update(split_busy_engines(plan, by_port, cancel))
    for key, port_results in by_port.items():
        # the prefix-cache reset comes first; after a cancel an extra route that did not run is
        # dropped; a first one still in flight (IN_FLIGHT) stays: vLLM may have acted on it
        first = port_results[0]
        results.resets[key] = (first if isinstance(first, NotRun)
                               else [r for r in port_results if not isinstance(r, NotRun)])


def _promote_dev_mode_off(plan: Plan, results: RunResults) -> None:
    """Dev mode the spec did not show: the 404 decided it, so the allowed fallback applies now
    to the owners of the pods whose first route answered it (:func:`~kubectl_kvreset.job.planning.promote`)."""
    off = {(p.pod.namespace, p.pod.owner): plan.options.fallback for p in plan.pods
           if any(isinstance(r, list) and r and r[0].outcome is ResetOutcome.DEV_MODE_OFF
                  for (ns, name, _, _), r in results.resets.items() if (ns, name) == (p.pod.namespace, p.pod.name))}
    promote(plan.pods, off)


def _fs_phase(plan: Plan, results: RunResults, notes: list[str], cancel: Cancel, verifier: Verifier | None) -> None:
    """The FS tiers of the ``clear-fs`` pods: one deletion per backing volume, in parallel
    (``results.fs``, per pod); a volume pods outside the targets share adds a warning to
    ``notes``. When those other pods cannot be listed, only the targets' models' directories are
    deleted."""
    scope, options = plan.scope, plan.options
    fs_pods = [p.pod for p in plan.pods if p.has(STEP_CLEAR_FS)]
    if not fs_pods or cancel.is_set():
        return
    try:
        targets = plan_fs_shared(scope, fs_pods, notes, model_only=options.model_only,
                                 whole_tier=options.whole_tier, shared_stores=options.shared_stores)
    except KubeError as exc:
        # other users of the volumes unknown: keep to the targets' models' directories, and
        # on a hostPath/NFS volume the pods of other namespaces count as possible users
        notes.append(f"warning: the pods that may share the FS tier volumes could not be listed ({exc}): only "
                     "the targets' models' directories are deleted")
        targets = plan_fs_clear(fs_pods, scope.universe, model_only=True, unlisted=UNLISTED,
                                shared_stores=options.shared_stores)
    fs_results = parallel(targets, lambda t: run_fs_clear(scope.kube, t), options.max_concurrency, cancel)
    for target, fs_result in zip(targets, fs_results, strict=True):
        if isinstance(fs_result, NotRun):
            continue
        for name in target.pods:
            results.fs.setdefault((target.namespace, str(name)), []).append(fs_result)
        shared = sharing_message(target, fs_result)
        if shared is not None:
            notes.append(f"warning: {shared}")
    if verifier is not None and not cancel.is_set():
        verifier.probe("clear-fs", [(p.namespace, p.name) for p in fs_pods])


def _devmode_phase(plan: Plan, results: RunResults, notes: list[str], cancel: Cancel,
                   progress: Callable[[str], None] | None) -> None:
    """The dev-mode rollouts (``VLLM_SERVER_DEV_MODE=1`` on the owners, prefill before decode:
    :func:`~kubectl_kvreset.rollout.run_phased`) into ``results.owners``, and per namespace one
    warning in ``notes`` naming the owners whose dev mode is now on."""
    devmode_owners = _owners(plan.pods, STEP_DEVMODE)
    if not devmode_owners:
        return
    scope, options = plan.scope, plan.options

    def enable(ns: str, owner: Owner, role: str | None) -> DevModeResult:
        return set_dev_mode(scope.kube, ns, owner, enable=True, timeout_s=options.rollout_timeout_s,
                            progress=progress, role=role, stop=cancel.is_set)

    def skip(ns: str, owner: Owner, role: str | None, why: str) -> DevModeResult:
        return DevModeResult(ns, owner, role, "enable", "skipped", message=why)

    def not_started(ns: str, owner: Owner, role: str | None) -> DevModeResult:
        return DevModeResult(ns, owner, role, "enable", "interrupted",
                             message=NOT_STARTED.replace("restarted", "patched"))

    turned_on: dict[str, list[str]] = {}  # namespace -> owners, one warning for them all
    for dm in run_phased(devmode_owners, enable, skip, ok=lambda r: bool(r.ok), cancel=cancel,
                         interrupted=not_started):
        results.owners[(dm.namespace, dm.owner)] = dm
        if dm.result == "enabled" or dm.requested:
            turned_on.setdefault(dm.namespace, []).append(dm.owner.ref())
    for ns, refs in turned_on.items():
        notes.append(f"warning: dev mode is now on for {', '.join(refs)}: vLLM's dev routes (cache resets, "
                     "sleep, collective_rpc, weight updates) are unauthenticated; turn it off when done with "
                     f"'kubectl kvreset devmode --disable {' '.join(refs)} -n {ns}'")


def _restart_phase(plan: Plan, results: RunResults, cancel: Cancel, progress: Callable[[str], None] | None,
                   events: Events | None) -> None:
    """The restarts: the owners of the ``restart`` pods, then (where allowed) those of the
    engines this version cannot empty, into ``results.owners``; ``events`` is told when each
    starts and ends."""
    restart = _owners(plan.pods, STEP_RESTART) if not cancel.is_set() else []
    if not cancel.is_set():  # the owners of the engines this version cannot empty, where allowed
        known = {(ns, owner) for ns, owner, _role in restart}
        for other in plan.others:
            owner_key = (other.pod.namespace, other.pod.owner)
            if other.restart and owner_key not in known:
                known.add(owner_key)
                restart.append((other.pod.namespace, other.pod.owner, other.pod.role))
    if not restart:
        return
    for ns, owner, _role in restart:
        if events is not None:
            events("restarting", f"{ns}/{owner.ref()}", None)
    for owner_result in restart_owners(plan.scope.kube, restart, timeout_s=plan.options.rollout_timeout_s,
                                       progress=progress, cancel=cancel):
        results.owners[(owner_result.namespace, owner_result.owner)] = owner_result
        if events is not None:
            events("restarted", f"{owner_result.namespace}/{owner_result.owner.ref()}", None)


def _verified(plan: Plan, outcome: Outcome, verifier: Verifier | None, cancel: Cancel, *, own: bool) -> Outcome:
    """``outcome`` once the rollouts' replaced pods are probed; with the run's ``own`` verifier
    finished, the rows carry the ``verify`` column."""
    if verifier is not None and not cancel.is_set() and outcome.replaced:
        verifier.replaced(outcome.replaced)
        verifier.probe("rollout", list(outcome.replaced))
    if own and verifier is not None:
        verifier.finish()
        outcome = with_verification(outcome, verifier, plan.scope.namespace)
    return outcome


def split_busy_engines(plan: Plan, by_port: dict[PortKey, list[ResetResult | NotRun]],
                       cancel: Cancel) -> dict[PortKey, EngineSplit]:
    """For each port with several data-parallel engines whose reset ended ``{"success": false}``
    on vLLM >= 0.32 (each engine resets on its own, the answer is their AND): read ``GET
    /metrics``, send the same reset once more, read ``/metrics`` again. A ``true`` replaces the
    port's first result (every engine emptied); otherwise the two scrapes say which engines held
    no request around that call (:func:`~kubectl_kvreset.engines.vllm.api.split_engines`), returned per
    port. Changes ``by_port`` in place; a scrape that fails leaves the port out."""
    todo: list[tuple[PodPlan, ApiPort, PortKey]] = []
    for p in plan.pods:
        engines = max(p.pod.serve.engines_per_port, len(p.engines))
        if engines <= 1 or not reset_answers_for_every_engine(parse_version(p.version)):
            continue
        for port in p.pod.ports:
            key = (p.pod.namespace, p.pod.name, p.pod.container, port.port)
            got = by_port.get(key) or []
            if got and isinstance(got[0], ResetResult) and got[0].outcome is ResetOutcome.BUSY:
                todo.append((p, port, key))

    def one(unit: tuple[PodPlan, ApiPort, PortKey]) -> tuple[ResetResult, EngineSplit | None]:
        pod_plan, port, key = unit
        ref = PodRef(pod_plan.pod.namespace, pod_plan.pod.name, pod_plan.pod.container)
        caller = plan.scope.caller
        before = fetch_metrics(caller, ref, port.port, scheme=port.scheme)
        again = reset(caller, ref, port.port, pod_plan.routes[0], pod_plan.query, scheme=port.scheme,
                      busy_timeout_s=0.0, engine=pod_plan.pod.engine)
        after = fetch_metrics(caller, ref, port.port, scheme=port.scheme)
        if again.outcome is not ResetOutcome.BUSY or before.text is None or after.text is None:
            return again, None
        connector = any(e.tier.connector for e in pod_plan.effects)
        try:
            return again, split_engines(before.text, after.text, blocks_outlive_requests=connector)
        except MetricsParseError:
            return again, None

    out: dict[PortKey, EngineSplit] = {}
    for (_p, _port, key), done in zip(todo, parallel(todo, one, plan.options.max_concurrency, cancel), strict=True):
        if not isinstance(done, tuple):
            continue
        again, split = done
        first = by_port[key][0]
        assert isinstance(first, ResetResult)
        if again.outcome is ResetOutcome.CLEARED:
            by_port[key][0] = replace(again, calls=first.calls + again.calls,
                                      busy_answers=first.busy_answers + again.busy_answers,
                                      elapsed_s=first.elapsed_s + again.elapsed_s)
        elif split is not None:
            by_port[key][0] = replace(first, calls=first.calls + again.calls,
                                      busy_answers=first.busy_answers + again.busy_answers)
            out[key] = split
    return out


def _reporting(plan: Plan, units: list[tuple[PodPlan, ApiPort, str]],
               events: Events | None) -> Callable[[tuple[PodPlan, ApiPort, str]], ResetResult]:
    """The function :func:`run` applies to each ``(pod plan, port, route)``: the reset, with
    ``events`` told how many ports there are, when one is busy and when all of a port's routes
    have answered."""
    if events is None:
        return lambda u: reset_route(plan, u[0], u[1], u[2])
    import threading

    def key(u: tuple[PodPlan, ApiPort, str]) -> str:
        return f"{u[0].pod.namespace}/{u[0].pod.name}/{u[0].pod.container}:{u[1].port}"

    left: dict[str, int] = {}
    for u in units:
        left[key(u)] = left.get(key(u), 0) + 1
    lock = threading.Lock()
    events("ports", "", float(len(left)))

    def one(u: tuple[PodPlan, ApiPort, str]) -> ResetResult:
        k = key(u)
        result = reset_route(plan, u[0], u[1], u[2], on_busy=lambda s: events("busy", k, s))
        with lock:
            left[k] -= 1
            finished = left[k] == 0
        if finished:
            events("done", k, None)
        return result

    return one


def reprobe(plan: Plan, by_port: dict[PortKey, list[ResetResult | NotRun]], cancel: Cancel) -> None:
    """Probe again, on its own, each pod whose reset answer contradicts the version its template
    reported (:func:`kubectl_kvreset.job.probes.contradicts`: a ``:latest`` image pulled again
    under the template), rebuild its plan from that probe and call the reset routes the new
    plan has that were not called yet. Changes ``plan.pods`` and ``by_port`` in place."""
    odd: list[int] = []
    for i, p in enumerate(plan.pods):
        if not p.has(STEP_API_RESET) or not p.pod.ports:
            continue
        first = by_port.get((p.pod.namespace, p.pod.name, p.pod.container, p.pod.ports[0].port), [])
        outcome = first[0].outcome if first and isinstance(first[0], ResetResult) else None
        if contradicts(p.version, outcome, p.pod.engine):
            odd.append(i)
    if not odd:
        return
    originals = {(p.namespace, p.name): p for p in plan.scope.pods}
    firsts: dict[tuple[str, ...], VllmPod] = {}
    for i in odd:
        pod = originals.get((plan.pods[i].pod.namespace, plan.pods[i].pod.name), plan.pods[i].pod)
        firsts[("reprobe", pod.name) + template_key(pod)] = pod
    probes = probe_templates(plan.scope.caller, firsts, plan.options.max_concurrency, cancel, dev_mode_on)
    more: list[tuple[PodPlan, ApiPort, str]] = []
    for key, pod in firsts.items():
        i = next(j for j in odd if plan.pods[j].pod.name == pod.name and plan.pods[j].pod.namespace == pod.namespace)
        old = plan.pods[i]
        new = plan_one_pod(pod, probes[key], plan.options.fallback, plan.options.preempt_running,
                           plan.holds.get(pod.uid))
        new.notes += (f"this pod's answers did not fit the version its template reported "
                      f"({old.version or 'unknown'}): probed on its own, it reports {new.version or 'no version'}",)
        plan.pods[i] = new
        port_keys = [(pod.namespace, pod.name, pod.container, port.port) for port in pod.ports]
        for k in port_keys:  # a route the pod's own version lacks was not its to call
            if k in by_port:
                by_port[k] = [r for r in by_port[k] if isinstance(r, NotRun) or r.route in new.routes]
        if new.has(STEP_API_RESET):
            more += [(new, port, r) for port in new.pod.ports for r in new.routes if r not in old.routes]
    extra = parallel(more, lambda u: reset_route(plan, u[0], u[1], u[2]), plan.options.max_concurrency, cancel)
    for (p, port, _route), result in zip(more, extra, strict=True):
        if isinstance(result, (ResetResult, NotRun)):
            by_port.setdefault((p.pod.namespace, p.pod.name, p.pod.container, port.port), []).append(result)


def find_successors(plan: Plan, results: RunResults) -> None:
    """For owners with a pod that vanished during the run (the reset answered 404 for the pod)
    and owners whose pods a restart or dev-mode rollout replaced, list the owner's pods again:
    the pods not there before (by uid: a StatefulSet's successor keeps the name) are its
    successors, which start cold. A namespace that cannot be listed again gives none."""
    gone_ns: set[str] = set()
    for (ns, _pod, _container, _port), got in results.resets.items():
        if isinstance(got, list) and got and got[0].failure is not None and got[0].failure.kind == "pod-gone":
            gone_ns.add(ns)
    rolled = {key for key, res in results.owners.items() if owner_result_ok(res)}
    gone_ns |= {ns for ns, _owner in rolled}
    # the pods of engines this version cannot empty are listed too: their owners' restarts have
    # successors the rows name; a pod of several containers is one successor
    known = {p.uid for p in plan.scope.universe} | {o.uid for o in plan.scope.other_universe}
    for ns in sorted(gone_ns):
        try:
            now, now_others = discover_all(plan.scope.kube, ns)
        except KubeError:
            continue
        seen: set[str] = set()
        found: list[tuple[str, str, Owner]] = [(p.uid, p.name, p.owner) for p in now]
        found += [(o.uid, o.name, o.owner) for o in now_others]
        for uid, name, owner in found:
            if uid not in known and (uid or name) not in seen:
                seen.add(uid or name)
                results.successors.setdefault((ns, owner), []).append(name)


def _owners(plans: list[PodPlan], action: str) -> list[tuple[str, Owner, str | None]]:
    seen: dict[OwnerKey, str | None] = {}
    for p in plans:
        if p.has(action):
            seen.setdefault((p.pod.namespace, p.pod.owner), p.pod.role)
    return [(ns, owner, role) for (ns, owner), role in seen.items()]


def preview_fs(plan: Plan) -> FsPlan | None:
    """The FS-tier deletions :func:`run` will plan for ``plan``'s ``clear-fs`` pods on volumes
    that pods outside the targets also use, as clear-fs's rows (``planned``, ``left``), for
    ``--dry-run`` and the confirmation: per shared volume, the pods outside the targets that use
    it, what each serves there, and what is to be deleted or kept. None when no pod has the
    step. Nothing is changed.

    Raises:
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer a pod list.
    """
    fs_pods = [p.pod for p in plan.pods if p.has(STEP_CLEAR_FS)]
    if not fs_pods:
        return None
    notes: list[str] = []
    options = plan.options
    targets = plan_fs_shared(plan.scope, fs_pods, notes, model_only=options.model_only,
                             whole_tier=options.whole_tier, shared_stores=options.shared_stores)
    # a volume only the targets use needs no row: the PlannedReset step names its root
    return FsPlan(plan.scope, tuple(t for t in targets if t.other_pods), tuple(notes))
