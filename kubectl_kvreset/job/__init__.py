"""The clear job, usable from Python without the command line (no click here).

In outline (pyinfra's facts -> plan per host -> parallel run -> result per host)::

    from kubectl_kvreset.job import ClearOptions, Cancel, Targets, connect, plan, run, select_targets

    kube = connect(namespace="llm-d")                   # kubectl's flags, as keywords
    scope = select_targets(kube, Targets(all=True))     # discovered vLLM pods, the targeted ones
    the_plan = plan(scope, ClearOptions(fallback="none"))   # what --dry-run prints
    outcome = run(the_plan, Cancel())                   # typed outcome per pod and port
    assert all(p.emptied for p in outcome.ports), outcome.rows

:func:`plan` reads the versions the plan depends on and builds a :class:`Plan` (one
:class:`PodPlan` per pod: API reset, clear-fs, disruptive fallback); :func:`run` executes it
and returns an :class:`Outcome` (one :class:`PortOutcome` per pod and port, its rows, notes
and exit code). Nothing here writes to stderr or reads a global: warnings are
:attr:`Outcome.notes`, an interrupt is the caller's :class:`Cancel`.
"""

from __future__ import annotations

from ..kube import Kube, KubeFlags
from ..pods import Targets
from ..pool import INFLIGHT_BOUND_S, NOT_RUN, Cancel, NotRun, parallel
from .execute import run
from .outcome import LeftRow, Outcome, PortOutcome, RunResults, plan_report, tier_label
from .planning import ClearOptions, Plan, PodPlan, dev_mode_on, plan, replan, version_matters
from .scope import Scope, select_targets

__all__ = [
    "INFLIGHT_BOUND_S", "NOT_RUN", "Cancel", "ClearOptions", "LeftRow", "NotRun", "Outcome", "Plan", "PodPlan",
    "PortOutcome", "RunResults", "Scope", "Targets", "connect", "dev_mode_on", "parallel", "plan", "plan_report",
    "replan", "run", "select_targets", "tier_label", "version_matters",
]


def connect(*, pool_size: int = 16, **flags: object) -> Kube:
    """A connection from kubectl's flags given as keywords (the fields of
    :class:`~kubectl_kvreset.kube.KubeFlags`: ``kubeconfig``, ``context``, ``namespace``,
    ``request_timeout``...); the kubeconfig is found and merged as kubectl does.

    Raises:
        TypeError: an unknown flag name.
        kubectl_kvreset.kube.KubeConfigError: no usable kubeconfig, an unknown context.
    """
    return Kube.connect(KubeFlags(**flags), pool_size=pool_size)  # type: ignore[arg-type]
