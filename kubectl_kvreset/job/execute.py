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

from ..discovery import discover
from ..fstier import plan_fs_clear, run_fs_clear, sharing_message
from ..kube import KubeError
from ..plan import STEP_API_RESET, STEP_CLEAR_FS, STEP_DEVMODE, STEP_RESTART
from ..podapi import PodRef, ResetResult, reset
from ..pods import ApiPort, Owner, VllmPod
from ..pool import NOT_RUN, Cancel, NotRun, parallel
from ..rollout import DevModeResult, restart_owners, run_phased, set_dev_mode
from ..vllm_api import ResetOutcome
from .fsclear import plan_fs_shared
from .outcome import Outcome, OwnerKey, PortKey, RunResults, build_outcome, owner_result_ok
from .planning import Plan, PodPlan, dev_mode_on, promote
from .planning import pod_plan as plan_one_pod
from .probes import contradicts, probe_templates, template_key


def reset_route(plan: Plan, pod_plan: PodPlan, port: ApiPort, route: str) -> ResetResult:
    """Call one reset route of ``pod_plan`` on one port (the prefix-cache reset with the plan's
    query): a :class:`~kubectl_kvreset.podapi.ResetResult`."""
    pod = pod_plan.pod
    ref = PodRef(pod.namespace, pod.name, pod.container)
    caller = plan.scope.caller
    query = pod_plan.query if route == pod_plan.routes[0] else ()
    return reset(caller, ref, port.port, route, query, scheme=port.scheme,
                 busy_timeout_s=plan.options.busy_timeout_s)


def run(plan: Plan, cancel: Cancel | None = None, *, progress: Callable[[str], None] | None = None) -> Outcome:
    """Execute ``plan``; returns its :class:`~kubectl_kvreset.job.outcome.Outcome`.

    ``cancel``: once set, no new call starts and later phases are skipped; rows of what did not
    run say ``interrupted`` and the exit code is 130. ``progress``: called with one line per
    rollout wait step (the command line passes it only when stderr is a terminal).
    Never raises for a pod's or owner's failure: each row says what happened.
    """
    cancel = cancel or Cancel()
    scope, options = plan.scope, plan.options
    results = RunResults()
    notes: list[str] = list(plan.notes)
    pods = plan.pods
    # every route of every port at once: the caches are independent, and a route the version
    # lacks is not called (the plan's routes follow the version its template reported)
    units = [(p, port, route) for p in pods if p.has(STEP_API_RESET) for port in p.pod.ports for route in p.routes]
    got = parallel(units, lambda u: reset_route(plan, u[0], u[1], u[2]), options.max_concurrency, cancel)
    by_port: dict[PortKey, list[ResetResult | NotRun]] = {}
    for (p, port, _route), result in zip(units, got, strict=True):
        if isinstance(result, (ResetResult, NotRun)):
            by_port.setdefault((p.pod.namespace, p.pod.name, p.pod.container, port.port), []).append(result)
    if not cancel.is_set():
        reprobe(plan, by_port, cancel)
    for key, port_results in by_port.items():
        # the prefix-cache reset comes first; after a cancel an extra route that did not run is dropped
        results.resets[key] = (NOT_RUN if isinstance(port_results[0], NotRun)
                               else [r for r in port_results if not isinstance(r, NotRun)])
    if options.fallback in ("devmode", "restart"):
        # dev mode the spec did not show: the 404 decided it, so the allowed fallback applies now
        off = {(p.pod.namespace, p.pod.owner): options.fallback for p in pods
               if any(isinstance(r, list) and r and r[0].outcome is ResetOutcome.DEV_MODE_OFF
                      for (ns, name, _, _), r in results.resets.items() if (ns, name) == (p.pod.namespace, p.pod.name))}
        promote(pods, off)

    fs_pods = [p.pod for p in pods if p.has(STEP_CLEAR_FS)]
    if fs_pods and not cancel.is_set():
        try:
            targets = plan_fs_shared(scope, fs_pods, notes, model_only=options.model_only,
                                     whole_tier=options.whole_tier)
        except KubeError as exc:
            # other users of the volumes unknown: keep to the targets' models' directories
            notes.append(f"warning: the pods that may share the FS tier volumes could not be listed ({exc}): only "
                         "the targets' models' directories are deleted")
            targets = plan_fs_clear(fs_pods, scope.universe, model_only=True)
        fs_results = parallel(targets, lambda t: run_fs_clear(scope.kube, t), options.max_concurrency, cancel)
        for target, fs_result in zip(targets, fs_results, strict=True):
            if isinstance(fs_result, NotRun):
                continue
            for name in target.pods:
                results.fs.setdefault((target.namespace, str(name)), []).append(fs_result)
            shared = sharing_message(target, fs_result)
            if shared is not None:
                notes.append(f"warning: {shared}")

    devmode_owners = _owners(pods, STEP_DEVMODE) if not cancel.is_set() else []
    if devmode_owners:
        def enable(ns: str, owner: Owner, role: str | None) -> DevModeResult:
            return set_dev_mode(scope.kube, ns, owner, enable=True, timeout_s=options.rollout_timeout_s,
                                progress=progress, role=role)

        def skip(ns: str, owner: Owner, role: str | None, why: str) -> DevModeResult:
            return DevModeResult(ns, owner, role, "enable", "skipped", message=why)

        for dm in run_phased(devmode_owners, enable, skip, ok=lambda r: bool(r.ok)):
            results.owners[(dm.namespace, dm.owner)] = dm
            if dm.result == "enabled":
                notes.append(f"warning: dev mode is now on for {dm.owner.ref()}: vLLM's dev routes (cache resets, "
                             "sleep, collective_rpc, weight updates) are unauthenticated; turn it off when done with "
                             f"'kubectl kvreset devmode --disable {dm.owner.ref()} -n {dm.namespace}'")
    restart = _owners(pods, STEP_RESTART) if not cancel.is_set() else []
    if restart:
        for owner_result in restart_owners(scope.kube, restart, timeout_s=options.rollout_timeout_s,
                                           progress=progress):
            results.owners[(owner_result.namespace, owner_result.owner)] = owner_result
    find_successors(plan, results)
    return build_outcome(plan, results, notes, interrupted=cancel.is_set())


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
        if contradicts(p.version, outcome):
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
    known = {p.uid for p in plan.scope.universe}
    for ns in sorted(gone_ns):
        try:
            now = discover(plan.scope.kube, ns)
        except KubeError:
            continue
        for pod in now:
            if pod.uid not in known:
                results.successors.setdefault((ns, pod.owner), []).append(pod.name)


def _owners(plans: list[PodPlan], action: str) -> list[tuple[str, Owner, str | None]]:
    seen: dict[OwnerKey, str | None] = {}
    for p in plans:
        if p.has(action):
            seen.setdefault((p.pod.namespace, p.pod.owner), p.pod.role)
    return [(ns, owner, role) for (ns, owner), role in seen.items()]
