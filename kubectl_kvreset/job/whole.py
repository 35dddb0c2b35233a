"""The whole clear, as ``kubectl kvreset clear`` runs it: the pod steps and the store step.

:func:`prepare` gathers what a run needs (the pods' plan, the shared stores the targets use and
the resets held for consent, :func:`kubectl_kvreset.job.resetconsent.reset_holds`) into one
:class:`ClearJob`; :meth:`ClearJob.preview` is what ``--dry-run`` prints; :func:`execute` runs it
(the canaries of ``--verify`` seeded first, the stores a ``reset_external=true`` empties counted
before the resets, the resets, FS deletion and fallbacks of
:func:`kubectl_kvreset.job.execute.run`, then the store step of ``clear-store``, the pods' rows
told what the store step emptied, and the probes) and returns one :class:`Cleared`. :func:`clear`
is both. The command line adds only the prompt, stderr and the output format, so a benchmark
harness calling :func:`clear` gets the same rows and exit code as ``clear`` on the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..pool import Cancel
from ..report import ExitCode, Report
from .execute import Events, preview_fs, run
from .others import router_notes, store_calls_named
from .outcome import Outcome, plan_report, with_lmcache_clears, with_store_results
from .planning import ClearOptions, Plan, plan, replan
from .resetconsent import reset_holds, reset_reaches
from .resetkeys import read_reset_keys
from .scope import Scope
from .storeclear import (
    ChainedReport,
    StorePlan,
    count_first,
    lmcache_cpu_cleared,
    lmcache_cpu_planned,
    plan_store,
    run_store,
    with_counts_before_reset,
)

__all__ = ["ClearJob", "Cleared", "clear", "execute", "prepare"]


@dataclass
class ClearJob:
    """One planned clear.

    Attributes:
        plan: the pods' plan (:class:`~kubectl_kvreset.job.planning.Plan`), its resets already
            held where a store-wide reset would empty a store that pods outside the targets use.
        stores: the store step (:class:`~kubectl_kvreset.job.storeclear.StorePlan`); empty when
            the targets use no shared store.
        notes: lines for the user before anything runs (``note: ...``, ``error: ...``): store
            configuration that could not be read.
        plan_notes: lines that explain the plan where it is shown (a dry run, the prompt): an
            LMCache CPU tier that the plan lists as left but the store step empties.
    """

    plan: Plan
    stores: StorePlan
    notes: list[str] = field(default_factory=list)
    plan_notes: list[str] = field(default_factory=list)

    @property
    def options(self) -> ClearOptions:
        """The options the job was planned with."""
        return self.plan.options

    def with_fallback(self, fallback: str) -> ClearJob:
        """The same job with another fallback (chosen at the prompt); sends nothing."""
        return replace(self, plan=replan(self.plan, fallback))

    def fs_preview(self) -> Report | None:
        """The clear-fs step as planned per backing volume (who else mounts it, what is deleted
        and what kept), or None when no FS tier is to be emptied. Lists pods; deletes nothing."""
        fs = preview_fs(self.plan)
        return fs.report() if fs is not None and fs.targets else None

    def preview(self, cancel: Cancel | None = None) -> ChainedReport:
        """What ``clear --dry-run`` prints: the pods' plan, the clear-fs plan per volume and the
        store step with each store's count (read, never changed)."""
        parts = [plan_report(self.plan, store=not self.stores.empty)]
        fs = self.fs_preview()
        if fs is not None:
            parts.append(fs)
        parts.append(run_store(self.stores, dry_run=True, max_concurrency=self.options.max_concurrency, cancel=cancel))
        return ChainedReport(parts)


@dataclass
class Cleared:
    """What one clear did.

    Attributes:
        outcome: the pods' :class:`~kubectl_kvreset.job.outcome.Outcome`, each tier the store step
            emptied already counted (and verified, with ``--verify``).
        stores: the store step's ``StoreClear`` rows.
        report: both, as ``clear`` prints them (``CacheReset`` rows, then ``StoreClear`` rows);
            ``report.exit_code`` is the command's exit code.
        notes: lines for the user (rollout waits, verification remarks).
        interrupted: the run's :class:`~kubectl_kvreset.pool.Cancel` was set before it ended.
    """

    outcome: Outcome
    stores: Report
    report: ChainedReport
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False

    @property
    def exit_code(self) -> ExitCode:
        """The exit code of the run: every row's combined, 130 once it was cancelled."""
        return ExitCode.INTERRUPTED if self.interrupted else self.report.exit_code


def prepare(scope: Scope, options: ClearOptions, *, cancel: Cancel | None = None,
            fallback_chosen: str | None = None) -> ClearJob:
    """Plan one clear of ``scope``'s targets: the shared stores they use
    (:func:`~kubectl_kvreset.job.storeclear.plan_store` with ``options.shared_stores`` and
    ``options.force_mp``), the resets held for consent, then the pods' plan
    (:func:`~kubectl_kvreset.job.planning.plan`, which reads each owner's version).

    Raises:
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer a list made to
            find the stores.
    """
    stores = plan_store(scope, shared=options.shared_stores, force_mp=options.force_mp)
    holds = reset_holds(scope.pods, stores.calls, stores.unknown, shared=options.shared_stores)
    the_plan = plan(scope, options, cancel=cancel, fallback_chosen=fallback_chosen, holds=holds,
                    store_calls=stores.calls)
    stores = replace(stores, calls=store_calls_named(stores.calls, the_plan.others))
    notes = [n for n in stores.notes if n.startswith(("note:", "error:"))]
    the_plan.reset_keys, key_notes = read_reset_keys(scope.kube, [p.pod for p in the_plan.pods])
    notes += key_notes
    covered = lmcache_cpu_planned(stores)
    plan_notes = [f"note: the LMCache CPU tier of {', '.join(covered)} is emptied by the store step "
                  "(lmcache-controller / lmcache-worker rows), though the reset plan lists it as left"
                  ] if covered else []
    files = sorted({(d.store, ref) for d in stores.disks if d.blocked is None and d.store != "lmcache-disk"
                    for ref in d.model_pods or d.targeted})
    for store in sorted({s for s, _ in files}):
        plan_notes.append(f"note: the {store} tier of {', '.join(r for s, r in files if s == store)} is emptied by "
                          f"the store step ({store} rows), though the reset plan lists it as left")
    return ClearJob(the_plan, stores, notes, plan_notes)


def execute(job: ClearJob, cancel: Cancel | None = None, *, progress: Callable[[str], None] | None = None,
            events: Events | None = None) -> Cleared:
    """Run ``job``: with ``options.verify`` the canaries are seeded first
    (:func:`~kubectl_kvreset.job.verify.verifier_for`); the stores that a targeted reset with
    ``reset_external=true`` empties by itself are counted (so their rows show what was there);
    the pods' steps run (:func:`~kubectl_kvreset.job.execute.run`; ``progress`` and ``events``
    as there); then the store step, told which pods a restart replaced; each pod row's shared
    tiers take the store rows' result; the canaries are probed a last time and removed.

    ``cancel``: once set, nothing new starts; the rows of what did not run say ``interrupted``
    and the exit code is 130. Never raises for a pod's or a store's failure: each row says it.
    """
    cancel = cancel or Cancel()
    the_plan, stores = job.plan, job.stores
    width = job.options.max_concurrency
    verifier = None
    if job.options.verify:
        from .verify import verifier_for

        verifier = verifier_for(the_plan, cancel, store=not stores.empty)
        verifier.seed()
    first = count_first(stores, reset_reaches(stores.calls, the_plan.pods), max_concurrency=width, cancel=cancel)
    outcome = run(the_plan, cancel, progress=progress, verifier=verifier, events=events)
    store_rows = run_store(stores, max_concurrency=width, cancel=cancel, replaced=outcome.replaced)
    store_rows = with_counts_before_reset(store_rows, stores, first)
    outcome = with_store_results(outcome, the_plan, store_rows.done)
    outcome = with_lmcache_clears(the_plan, outcome, lmcache_cpu_cleared(store_rows.done))
    if verifier is not None:
        from .verifyrows import with_verification

        verifier.probe("store")
        verifier.finish()
        outcome = with_verification(outcome, verifier, the_plan.scope.namespace)
    report = ChainedReport([outcome.report, store_rows])
    # a router keeps routing by its tree only where a server's cache went: rows whose reset reached it
    flushed = {(r.get("namespace"), r.get("pod")) for r in outcome.report.rows
               if r.get("result") in ("emptied", "partial", "unconfirmed")}
    notes = list(outcome.notes) + router_notes(the_plan.scope.kube, [p for p in the_plan.scope.pods
                                                                     if (p.namespace, p.name) in flushed])
    return Cleared(outcome, store_rows, report, notes, interrupted=cancel.is_set())


def clear(scope: Scope, options: ClearOptions, cancel: Cancel | None = None, *,
          progress: Callable[[str], None] | None = None) -> Cleared:
    """:func:`prepare` then :func:`execute`: what ``kubectl kvreset clear --yes`` does for
    ``scope`` (no prompt; ``options.fallback`` as given)."""
    return execute(prepare(scope, options, cancel=cancel), cancel, progress=progress)
