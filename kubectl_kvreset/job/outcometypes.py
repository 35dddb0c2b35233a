"""The clear job's outcome as types: one :class:`PortOutcome` per pod and API port (tiers as
states), the :class:`Outcome` of a run (its rows, notes and exit code), and the
:class:`RunResults` it is built from (:func:`kubectl_kvreset.job.outcome.build_outcome`).

Tier states: ``emptied``, ``unconfirmed`` (vLLM < 0.26 answers an empty 200; an exec without
an exit status), ``replaced``
(the pod vanished and its successor starts cold), ``not emptied`` (a step failed) and ``left``
(no planned step empties it). Never ``emptied`` for a tier that was not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engines.vllm.api import EngineSplit
from ..fs import FsClearResult
from ..podapi import ResetResult
from ..pods import Owner
from ..pool import NotRun
from ..report import ExitCode, Report
from ..rollout import DevModeResult, RestartResult
from ..tiers import Tier

#: ``(namespace, pod, container, port)``: where an API reset ran (a pod with several vLLM
#: containers gets a key per container and port).
PortKey = tuple[str, str, str, int]
#: ``(namespace, owner)``: what a restart or dev-mode rollout acts on.
OwnerKey = tuple[str, Owner]


@dataclass
class RunResults:
    """What every step of a run gave, keyed for the outcome: API resets per :data:`PortKey`
    (:data:`~kubectl_kvreset.pool.NOT_RUN` when the first route did not run), FS volume results per (namespace,
    pod), owner results per (namespace, owner), successors of vanished pods per owner, and which
    data-parallel engines reset on a port whose answer stayed ``success: false`` (``engines``)."""

    resets: dict[PortKey, list[ResetResult] | NotRun] = field(default_factory=dict)
    fs: dict[tuple[str, str], list[FsClearResult]] = field(default_factory=dict)
    owners: dict[OwnerKey, RestartResult | DevModeResult] = field(default_factory=dict)
    successors: dict[OwnerKey, list[str]] = field(default_factory=dict)
    engines: dict[PortKey, EngineSplit] = field(default_factory=dict)


#: The tier kinds, in column order.
TIER_KINDS = ("gpu", "cpu", "fs", "shared")


def tier_label(tier: Tier) -> str:
    """``gpu``, ``cpu``, ``fs:/root/dir`` or ``shared:store`` for a tier."""
    kind = tier.kind.value
    if tier.root_dir:
        return f"{kind}:{tier.root_dir}"
    if tier.store:
        return f"{kind}:{tier.store}"
    return str(kind)


@dataclass(frozen=True)
class LeftRow:
    """A tier that was not emptied: its label, why (no planned step empties it, or the step
    failed), and what would empty it (a flag, or what to do; None only when nothing the
    plugin does can, e.g. a store outside the pods)."""

    tier: str
    reason: str
    remedy: str | None


@dataclass(frozen=True)
class UnconfirmedRow:
    """A tier whose emptying ran but could not be confirmed: its label and why."""

    tier: str
    reason: str


@dataclass(frozen=True)
class PortOutcome:
    """The end of a clear on one pod and API port (``port`` None for a pod without one).

    ``tiers``: kind (``gpu``, ``cpu``, ``fs``, ``shared``) -> the states of that kind's tiers
    (several FS roots or stores give several states). ``result``: ``emptied``, ``unconfirmed``,
    ``replaced``, ``gone``, ``partial`` or the failure (``failed``, ``busy``, ``dev mode off``,
    ``unreachable``, ``forbidden``, ``interrupted``, ``config unread``: a ``--config`` file whose
    port or tiers could not be read...). ``code``: the exit code it earns.
    Keyed by :attr:`key` (namespace, pod, container, port), so several vLLM containers per pod
    or several ports each get their own. ``successor``: the new pod that took this pod's place
    when a restart or dev-mode rollout replaced it; the row then names the new pod, and its
    message the one it replaces (the key keeps the pod the plan was made for). ``reset_busy``:
    the reset's last answer was ``success: false`` (blocks held by running requests);
    ``engines_emptied``: the data-parallel engines behind the port shown emptied even so
    (:class:`~kubectl_kvreset.engines.vllm.api.EngineSplit`). ``engine``: the server's engine
    (:attr:`kubectl_kvreset.engines.base.Engine.name`), the row's ``engine`` field.
    """

    namespace: str
    pod: str
    container: str
    port: int | None
    role: str | None
    owner: str
    version: str | None
    tiers: dict[str, tuple[str, ...]]
    result: str
    messages: tuple[str, ...]
    steps: tuple[str, ...]
    calls: int
    busy_answers: int
    left: tuple[LeftRow, ...]
    code: ExitCode
    unconfirmed: tuple[UnconfirmedRow, ...] = ()
    successor: str | None = None
    reset_busy: bool = False
    engines_emptied: tuple[str, ...] = ()
    engine: str = "vllm"

    @property
    def key(self) -> tuple[str, str, str, int | None]:
        """``(namespace, pod, container, port)``."""
        return (self.namespace, self.pod, self.container, self.port)

    @property
    def emptied(self) -> bool:
        """True when every tier of this port was emptied and confirmed (or its pod replaced)."""
        return self.result in ("emptied", "replaced", "gone") and self.code is ExitCode.OK

    def row(self) -> dict[str, Any]:
        """The ``CacheReset`` row (the README documents its fields)."""
        messages = self.messages
        if self.successor is not None:
            messages = (f"replaces {self.pod}" if self.successor != self.pod
                        else f"a new pod of the same name replaced {self.pod}",) + messages
        return {
            "namespace": self.namespace, "pod": self.successor or self.pod, "port": self.port, "role": self.role,
            "owner": self.owner, "container": self.container, "engine": self.engine, "version": self.version,
            **{kind: _join(list(self.tiers.get(kind, ()))) for kind in TIER_KINDS},
            "result": self.result, "message": "; ".join(messages) or None, "steps": list(self.steps),
            "calls": self.calls, "busy_answers": self.busy_answers,
            "left": [{"tier": lt.tier, "reason": lt.reason, "remedy": lt.remedy} for lt in self.left],
            "unconfirmed": [{"tier": u.tier, "reason": u.reason} for u in self.unconfirmed],
        }


@dataclass(frozen=True)
class Outcome:
    """What a clear did: one :class:`PortOutcome` per pod and port (plan order), the ``notes``
    the user should read (lines for stderr: shared volumes, dev mode now on), whether the run
    was ``interrupted``, and the ``report`` (rows and exit code) the command line prints.
    ``replaced``: ``(namespace, pod)`` of each pod a restart or dev-mode rollout replaced ->
    its owner's new pods (empty when none came up); a later step that would reach the old pod
    uses these (:func:`kubectl_kvreset.job.storeclear.run_store`)."""

    ports: tuple[PortOutcome, ...]
    notes: tuple[str, ...]
    interrupted: bool
    report: Report
    replaced: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    other_rows: tuple[tuple[dict[str, Any], ExitCode], ...] = ()
    """The rows of the inference pods this version cannot empty (:mod:`kubectl_kvreset.job.others`)
    and their exit codes, after the vLLM rows in :attr:`report`; kept when a later step rebuilds it."""

    def add_others(self, report: Report, extra: Mapping[str, Any] | None = None) -> Report:
        """``report`` with :attr:`other_rows` appended (each with ``extra`` fields), returned."""
        for row, code in self.other_rows:
            report.add({**row, **(extra or {})}, code)
        return report

    @property
    def exit_code(self) -> ExitCode:
        """0, 1, 3 or 130 (130, then 1, then 3: README "Exit codes"); the command line reports a
        run stopped by SIGTERM as 143 instead of 130 (:func:`kubectl_kvreset.cli.signals.exit_code`)."""
        codes = list(self.report.codes) + ([ExitCode.INTERRUPTED] if self.interrupted else [])
        return ExitCode.combine(codes)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The ``CacheReset`` rows, as ``-o json`` prints them."""
        return self.report.rows


def _join(states: list[str]) -> str | None:
    return ",".join(dict.fromkeys(states)) if states else None

