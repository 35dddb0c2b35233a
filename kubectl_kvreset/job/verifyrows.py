"""The rows of a verified clear: each ``CacheReset`` row gets the ``verify`` column (``cold``,
``warm: N cached tokens from SOURCE``, ``busy: ...`` or ``not verifiable: WHY``; per engine
where several answer behind the port) and the ``proof`` field (per engine: the canary's
control, every probe with its counters, the last reset's answer).

A ``warm`` engine makes the row ``warm`` with exit code 1: the tier its source names is
reported ``warm``, never ``emptied``, and is listed in ``left`` with the remedy. A ``not
verifiable`` or ``busy`` engine keeps the row's result and earns at least exit code 3: the run
asked for a proof it did not get.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..report import Column, ExitCode, Report
from .outcome import LeftRow, Outcome, PortOutcome, result_columns
from .verify import WARM_REMEDIES, EngineProof, Verifier, verdict, warm_tiers

__all__ = ["BUSY_TEXT", "mark_busy", "verify_columns", "with_verification"]


def verify_columns(scope: str | None) -> list[Column]:
    """The ``CacheReset`` columns with VERIFY before MESSAGE."""
    cols = result_columns(scope)
    at = next(i for i, c in enumerate(cols) if c.key == "message")
    return [*cols[:at], Column("VERIFY", "verify"), *cols[at:]]


def _text(proofs: list[EngineProof]) -> str:
    if not proofs:
        return "not verifiable: nothing was probed on this port"
    if len(proofs) == 1:
        return verdict(proofs[0])[1]
    texts = [verdict(p)[1] for p in proofs]
    if len(set(texts)) == 1:
        return f"{texts[0]} (engines {', '.join(p.engine for p in proofs)})"
    return "; ".join(f"engine {p.engine}: {t}" for p, t in zip(proofs, texts, strict=True))


#: Why an engine whose reset answered busy is not proven cold by a canary that missed.
BUSY_TEXT = ("its reset answered success:false (running requests held blocks), so what they cached stays; "
             "the canary's miss does not prove it cold: --preempt-running or --wait-idle")


def mark_busy(po: PortOutcome, proofs: list[EngineProof]) -> None:
    """Mark the proofs of a port whose reset ended busy (every engine but those the row shows
    emptied): :func:`~kubectl_kvreset.job.verify.verdict` then never says ``cold`` for them."""
    if not po.reset_busy:
        return
    for proof in proofs:
        if proof.engine not in po.engines_emptied:
            proof.busy = BUSY_TEXT


def _verified(po: PortOutcome, proofs: list[EngineProof]) -> tuple[PortOutcome, ExitCode]:
    states = [verdict(p)[0] for p in proofs] or ["not verifiable"]
    code = po.code
    if "warm" not in states:
        if any(s != "cold" for s in states) and po.code is ExitCode.OK:
            code = ExitCode.UNCONFIRMED
        return replace(po, code=code), code
    tiers = dict(po.tiers)
    left = list(po.left)
    messages = list(po.messages)
    for proof in proofs:
        if verdict(proof)[0] != "warm":
            continue
        last = proof.probes[-1]
        where = f"engine {proof.engine}" if proof.engine else "the server"
        for kind in warm_tiers(proof, [k for k in po.tiers if k != "gpu"]):
            remedy = WARM_REMEDIES[kind]
            if kind in tiers:
                tiers[kind] = tuple("warm" if st in ("emptied", "unconfirmed", "replaced") else st
                                    for st in tiers[kind])
            else:
                tiers[kind] = ("warm",)
            reason = (f"the canary probe after {last.point} found {last.cached} cached tokens on {where} "
                      f"(pod {last.pod})")
            left.append(LeftRow(kind, reason, remedy))
            messages.append(f"{kind} warm: {reason}; to empty it: {remedy}")
    # a failure the row already names (dev mode off, busy) stays its result: it says what to do
    result = "warm" if po.result in ("emptied", "unconfirmed", "replaced", "gone", "partial") else po.result
    po = replace(po, tiers=tiers, left=tuple(left), messages=tuple(messages), result=result, code=ExitCode.FAILED)
    return po, ExitCode.FAILED


def with_verification(outcome: Outcome, verifier: Verifier, scope: str | None) -> Outcome:
    """The outcome with every row verified (module docstring); ``scope`` is the listed
    namespace (None with ``-A``), for the columns."""
    report = Report("CacheReset", verify_columns(scope))
    ports: list[PortOutcome] = []
    for po in outcome.ports:
        if po.result == "skipped" or po.port is None:
            ports.append(po)
            report.add({**po.row(), "verify": None, "proof": []}, po.code)
            continue
        proofs = verifier.for_port(po.namespace, po.pod, po.container, po.port)
        mark_busy(po, proofs)
        po, code = _verified(po, proofs)
        ports.append(po)
        row: dict[str, Any] = {**po.row(), "verify": _text(proofs), "proof": [p.as_dict() for p in proofs]}
        report.add(row, code)
    return replace(outcome, ports=tuple(ports), report=outcome.add_others(report, {"verify": None, "proof": []}))
