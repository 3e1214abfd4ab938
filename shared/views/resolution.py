"""Settling an effect whose outcome a person established (rule R3): what ``casekeeper effects resolve`` and
the operations page's form (``POST /api/ops/resolve``) both do.

The one module of the views that writes: the command and the page share it as they share the read views, so
that neither reaches into the other. It records the outcome with the ledger's conditional write (from
``started`` or ``needs_reconciliation`` only; ``resolution`` says who, why and when), then settles the case as
a worker would have:

- ``done``: the commit the effect's intent names is written with the outcome (one write): the case gets
  that status and its data, or goes to ``needs_review`` when it moved on since the decision (or when the
  effect names no commit);
- ``failed``: the case goes to ``needs_review`` with the reason (a note, if it is there already).

It refuses (:class:`Refused`), changing nothing, an unknown key, an effect that already has an outcome, and a
``started`` effect still within its call timeout (an attempt may be mid-call: its outcome is coming).

The effect is found by its key on the case it belongs to when that is known (the page's form carries it, the
command takes ``--case``): one point read of the case (and one of its archive row, if the key is not among
its entries). The key alone cannot name its case: without it, a key that is neither open nor archived (a
closed entry, a mistyped key) is looked for on every case (``Ledger.find``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from casekeeper import OPEN_STATUSES, Clock, Effect, EffectStatus
from casekeeper.cases import CaseRepository, Ledger, Reconciler
from casekeeper.errors import InvalidDocumentId, OutcomeAlreadyRecorded
from casekeeper.stores import id_problem
from shared.views.text import age_text, short

SOURCE = "operator"
_MAX_REVIEW_ATTEMPTS = 8
SETTLED_TEXT = {
    "committed": "the commit the effect names is made",
    "already": "it already showed the effect's commit",
    "needs_review": "it moved on since the decision: sent to needs_review for a person",
    "no_intent": "the effect names no commit: sent to needs_review for a person",
    "with_person": "it was handed to a person for this effect and stays so; "
    "'casekeeper send case.investigate ID' decides it again, counting this outcome",
    "sent_to_review": "sent to needs_review with the reason; 'casekeeper send case.investigate ID' decides it again",
    "noted": "it was already in needs_review: a note records the resolution; "
    "'casekeeper send case.investigate ID' decides it again",
    "no_case": "no such case any more: nothing to settle",
    "unsettled": "it kept changing and was not moved: look at it with 'casekeeper case show'",
}
"""What happened to the case after a resolution, for people."""


class Resolver(Protocol):
    """What a resolution acts through. ``shared.app.operations.Operations`` is one."""

    @property
    def clock(self) -> Clock: ...

    @property
    def cases(self) -> CaseRepository: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def reconciler(self) -> Reconciler: ...


@dataclass(frozen=True)
class Settler:
    """A :class:`Resolver` of just its four parts: what the operations page's form is given."""

    clock: Clock
    cases: CaseRepository
    ledger: Ledger
    reconciler: Reconciler


class Refused(Exception):
    """``resolve`` will not record this outcome; nothing was changed."""


class NoSuchEffect(Refused):
    """There is no effect with the key given (on the case given, if one was); ``searched`` says where it was
    looked for: ``case`` (that case alone) or ``everywhere`` (the open effects, the archive, every case)."""

    def __init__(self, message: str, *, searched: str) -> None:
        super().__init__(message)
        self.searched = searched


def resolve(
    ops: Resolver,
    key: str,
    *,
    result: dict[str, Any] | None,
    reason: str | None,
    by: str,
    why: str,
    case_id: str | None = None,
) -> dict[str, Any]:
    """Record ``done`` with ``result`` (or ``failed`` with ``reason``) and settle the case.

    ``case_id``: the case the effect belongs to, if known; the effect is then looked for there alone (one
    point read, and one more for an archived effect) rather than, for a closed or unknown key, on every case.

    Raises :class:`Refused`, with nothing changed, when there is no effect ``key`` (on ``case_id``, when
    given), it already has an outcome (now, or by the time the conditional write lands), or it is
    ``started`` and younger than the call timeout.
    """
    if (result is None) == (reason is None):
        raise ValueError("give exactly one of result and reason")
    effect = _find(ops, key, case_id)
    if effect.status not in OPEN_STATUSES:
        raise Refused(f"effect {short(key)} of case {effect.case_id} already has outcome {effect.status.value}")
    age = ops.ledger.age(effect)
    left = ops.ledger.in_flight_for(effect)
    if left is not None:
        wait = age_text(left)
        raise Refused(
            f"effect {short(key)} of case {effect.case_id} started {age_text(age)} ago, within the call timeout: "
            f"an attempt may be mid-call and its outcome is coming; look again in {wait}"
        )
    resolution = {"by": by, "why": why, "at": ops.clock.now()}
    status = EffectStatus.DONE if result is not None else EffectStatus.FAILED
    committed: str | None = None
    try:
        if result is not None:
            # The outcome and the commit are one write (the commit's data from the action's policy, as the
            # reconciler writes it).
            plan = ops.reconciler.commit_plan(effect)
            recorded, committed = ops.ledger.record_done(
                effect, result, commit=plan, source=SOURCE, resolution=resolution
            )
        else:
            recorded = ops.ledger.record_outcome(
                effect, status, result=result, reason=reason, source=SOURCE, resolution=resolution
            )
    except OutcomeAlreadyRecorded as exc:
        raise Refused(f"effect {short(key)} changed meanwhile (now {exc.recorded_status}); look again") from exc
    settled = committed if committed is not None else _send_to_review(ops, recorded, by)
    case = ops.cases.get(recorded.case_id)
    return {
        "effect": {
            "key": recorded.key,
            "caseId": recorded.case_id,
            "action": recorded.action,
            "status": recorded.status.value,
            "result": recorded.result,
            "reason": recorded.reason,
            "resolution": recorded.resolution,
        },
        "settled": settled,
        "case": {"id": case.id, "status": case.status, "version": case.version} if case is not None else None,
    }


def _find(ops: Resolver, key: str, case_id: str | None) -> Effect:
    """The effect ``key`` (of ``case_id``, when given); :class:`Refused` when there is none."""
    where, searched = "see 'casekeeper effects pending'", "everywhere"
    if case_id is None:
        effect = ops.ledger.find(key)
    else:
        problem = id_problem(case_id)
        if problem is not None:
            raise Refused(f"{case_id!r} is not a case id: {problem}")
        try:
            effect = ops.ledger.find(key, case_id=case_id)
        except InvalidDocumentId:  # a key no store can hold is no effect's key
            effect = None
        where, searched = f"case {case_id} has no effect with it; {where}", "case"
    if effect is None:
        raise NoSuchEffect(f"no effect with key {key!r} (give the full 64-character key; {where})", searched=searched)
    return effect


def _send_to_review(ops: Resolver, effect: Effect, by: str) -> str:
    """After a ``failed`` resolution: the case goes to review, as the commit step does for a refusal.

    Returns ``sent_to_review`` (committed), ``noted`` (already there: a note says what was resolved),
    ``unsettled`` (the case kept changing under the bounded retries) or ``no_case`` (it was deleted).
    Conditional on the version, re-read on a lost race. On the effect's own version the commit also
    withdraws the pending approval the effect's intent cleared, as the commit step would; on a later
    version the pending approval belongs to a newer decision and is left alone.
    """
    review = ops.reconciler.review_status
    reason = f"effect {effect.action} ({short(effect.key)}) resolved as failed by {by}: {effect.reason}"
    intent = effect.request.get("commit")
    clears = isinstance(intent, dict) and bool(intent.get("clearPendingApproval"))
    for _ in range(_MAX_REVIEW_ATTEMPTS):
        case = ops.cases.get(effect.case_id)
        if case is None:
            return "no_case"
        if case.status == review:
            ops.cases.note(case.id, reason, effectKey=effect.key)
            return "noted"
        on_decision = case.version == effect.case_version
        if ops.cases.commit_status(
            case.id,
            case.version,
            review,
            reason=reason,
            effect_key=effect.key if on_decision else None,
            data={"pendingApproval": None} if on_decision and clears else None,
            expected=case,
        ):
            return "sent_to_review"
    return "unsettled"
