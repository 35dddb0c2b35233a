"""The clear job, usable from Python without the command line (no click here).

In outline (pyinfra's facts -> plan per host -> parallel run -> result per host)::

    from kubectl_kvreset.job import ClearOptions, Cancel, Targets, clear, connect, select_targets

    kube = connect(namespace="llm-d")                   # kubectl's flags, as keywords
    scope = select_targets(kube, Targets(all=True))     # discovered vLLM pods, the targeted ones
    done = clear(scope, ClearOptions(fallback="none"), Cancel())   # as `clear --yes`
    assert done.exit_code == 0, done.report.render("table")

:func:`clear` is :func:`prepare` (a :class:`ClearJob`: the pods' :class:`Plan`, one
:class:`PodPlan` per pod with API reset, clear-fs and disruptive fallback, the shared stores'
step and the resets held for consent; ``job.preview()`` is what ``--dry-run`` prints) then
:func:`execute` (a :class:`Cleared`: the pods' :class:`Outcome` with one :class:`PortOutcome`
per pod and port, the store rows, the report ``clear`` prints and its exit code);
:mod:`kubectl_kvreset.job.whole`. :func:`plan` and :func:`run` are the pod step alone. Nothing
here writes to stderr or reads a global: warnings are notes, an interrupt is the caller's
:class:`Cancel`.
"""

from __future__ import annotations

from ..kube import Kube, KubeFlags
from ..pods import Targets
from ..pool import INFLIGHT_BOUND_S, NOT_RUN, Cancel, NotRun, parallel
from .execute import run
from .outcome import LeftRow, Outcome, PortOutcome, RunResults, plan_report, tier_label
from .planning import ClearOptions, Plan, PodPlan, dev_mode_on, plan, replan, version_matters
from .scope import Scope, select_targets
from .whole import Cleared, ClearJob, clear, execute, prepare

__all__ = [
    "INFLIGHT_BOUND_S", "NOT_RUN", "Cancel", "ClearJob", "ClearOptions", "Cleared", "LeftRow", "NotRun", "Outcome",
    "Plan", "PodPlan", "PortOutcome", "RunResults", "Scope", "Targets", "clear", "connect", "dev_mode_on", "execute",
    "parallel", "plan", "plan_report", "prepare", "replan", "run", "select_targets", "tier_label", "version_matters",
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
