"""The writes on an entry after its run left it open: an outcome a reconciler or a person established, a
same-key retry, an escalation (``casekeeper.core.entries``).

Private to :class:`~casekeeper.core.ledger.Ledger`: use :meth:`Ledger.record_outcome`, :meth:`Ledger.record_done`,
:meth:`Ledger.retry_same_key` and :meth:`Ledger.mark_needs_reconciliation`. Each is one conditional write of
the case, on an entry unchanged since it was read (its status and attempt; a note moves the case's ETag, not
the entry): re-read and re-applied after a 412, ``OutcomeAlreadyRecorded`` when the entry itself moved. A
``done`` outcome commits in the same write, as :class:`~casekeeper.core.on_record.OnRecord` does after a call.
"""

from __future__ import annotations

from typing import Any, Literal

from casekeeper.core import entries
from casekeeper.core.cases import CASES, Case
from casekeeper.core.effect import OPEN_STATUSES, Effect, EffectStatus, _evolve, escalated, with_outcome
from casekeeper.core.entries import CommitPlan, Committed
from casekeeper.core.errors import ConcurrencyConflict, MissingCommitIntent, OutcomeAlreadyRecorded, StaleDecision
from casekeeper.core.ledger_parts import Call, LedgerParts
from casekeeper.core.on_record import MAX_WRITES, OnRecord, RecordOutcome


class OnRecordLater:
    """The later writes of effects on their case, over the ledger's settings and :class:`OnRecord`'s writes."""

    def __init__(self, ledger: LedgerParts, on_record: OnRecord) -> None:
        self._ledger = ledger
        self._on_record = on_record

    def record(
        self,
        effect: Effect,
        status: EffectStatus,
        *,
        result: dict[str, Any] | None,
        reason: str | None,
        stale: bool,
        source: str,
        resolution: dict[str, Any] | None,
        plan: CommitPlan | None,
    ) -> tuple[Effect, Committed | Literal["no_intent"] | None]:
        """:meth:`Ledger.record_outcome` for an entry: an outcome on an open entry unchanged since ``effect``
        was read (its status and attempt), with the commit for ``done``. Raises ``OutcomeAlreadyRecorded``."""

        case = self._current(effect)
        review = plan.review_status if plan is not None else "needs_review"
        if status is EffectStatus.DONE and plan is None:
            plan = _intent_plan(effect)
        for _ in range(MAX_WRITES):
            current = self._unchanged(case, effect)
            updated = with_outcome(
                current, status, result=result, reason=reason, stale=stale, source=source, resolution=resolution
            )
            now = self._ledger._cases.now()
            commit: Committed | Literal["no_intent"] | None = None
            if status is EffectStatus.DONE and plan is not None:
                target, commit, left = entries.settle(case, updated, plan, now)
                if left is not None:
                    self._ledger._alert_left_version(updated, case.version, left)
            elif status is EffectStatus.DONE:
                why = f"effect {effect.action} ({effect.key[:12]}) is done but names no commit intent"
                target, commit = entries.escalate(case, updated, review, why, now), "no_intent"
            else:
                target = entries.put(case, updated)
            try:
                after = self._on_record.write(case, target)
            except ConcurrencyConflict:
                case = self._current(effect)
                continue
            written = entries.entry_of(after, effect.key)
            assert written is not None
            return written, commit
        raise ConcurrencyConflict(f"case {effect.case_id!r} kept changing", container=CASES, doc_id=effect.case_id)

    def retry(self, effect: Effect, call: Call, plan: CommitPlan | None, *, source: str) -> RecordOutcome:
        """:meth:`Ledger.retry_same_key` for an entry: re-claim it (``attempts + 1``, its clock restarted) in a
        write conditional on the case still being at the effect's version, then call and close as
        :meth:`run`. On a version the case has left the entry is closed as ``failed`` (stale) in that write
        and ``StaleDecision`` raised: nothing is called. Raises ``OutcomeAlreadyRecorded`` when it moved."""

        ledger = self._ledger
        case = self._current(effect)
        for _ in range(MAX_WRITES):
            current = self._unchanged(case, effect)
            if current.status is not EffectStatus.STARTED:
                raise OutcomeAlreadyRecorded(
                    key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=current.status.value
                )
            claimed_at = ledger._monotonic()
            if case.version != effect.case_version:
                reason = f"stale: decided on v{effect.case_version}, case is at v{case.version}"
                closed = with_outcome(
                    current,
                    EffectStatus.FAILED,
                    result=None,
                    reason=reason,
                    stale=True,
                    source="version-gate",
                    resolution=None,
                )
                try:
                    self._on_record.write(case, entries.put(case, closed))
                except ConcurrencyConflict:
                    case = self._current(effect)
                    continue
                ledger._observe("stale", closed)
                raise StaleDecision(
                    key=effect.key,
                    case_id=effect.case_id,
                    action=effect.action,
                    decided_on_version=effect.case_version,
                    current_version=case.version,
                )
            attempts = current.attempts + 1
            reclaimed = _evolve(
                current, attempts=attempts, history_entry={"status": "started", "attempt": attempts, "source": source}
            )
            try:
                case = self._on_record.write(case, entries.put(case, reclaimed))
            except ConcurrencyConflict:
                case = self._current(effect)
                continue
            claimed = entries.entry_of(case, effect.key)
            assert claimed is not None
            plan = plan if plan is not None else _intent_plan(effect)
            if plan is None:
                raise MissingCommitIntent(key=effect.key, case_id=effect.case_id, action=effect.action)
            return self._on_record.call_claimed(claimed, case, call, claimed_at, plan=plan, refusal_review=None)
        raise ConcurrencyConflict(f"case {effect.case_id!r} kept changing", container=CASES, doc_id=effect.case_id)

    def mark(self, effect: Effect, reason: str, *, source: str) -> Effect:
        """:meth:`Ledger.mark_needs_reconciliation` for an entry. Raises ``OutcomeAlreadyRecorded``."""

        case = self._current(effect)
        for _ in range(MAX_WRITES):
            current = self._unchanged(case, effect)
            if current.status is not EffectStatus.STARTED:
                raise OutcomeAlreadyRecorded(
                    key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=current.status.value
                )
            updated = escalated(current, reason, source=source)
            try:
                after = self._on_record.write(case, entries.put(case, updated))
            except ConcurrencyConflict:
                case = self._current(effect)
                continue
            written = entries.entry_of(after, effect.key)
            assert written is not None
            return written
        raise ConcurrencyConflict(f"case {effect.case_id!r} kept changing", container=CASES, doc_id=effect.case_id)

    def _current(self, effect: Effect) -> Case:
        case = self._ledger._cases.get(effect.case_id)
        if case is None:
            raise OutcomeAlreadyRecorded(
                key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status="deleted"
            )
        return case

    def _unchanged(self, case: Case, effect: Effect) -> Effect:
        """The entry of ``effect`` on ``case`` if it is still open and on the same attempt as when read
        (a note moves the case's ETag, not the entry); raises ``OutcomeAlreadyRecorded`` otherwise."""

        current = entries.entry_of(case, effect.key)
        if (
            current is None
            or current.status not in OPEN_STATUSES
            or current.status is not effect.status
            or current.attempts != effect.attempts
        ):
            recorded = current.status.value if current is not None else "deleted"
            raise OutcomeAlreadyRecorded(
                key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=recorded
            )
        return current


def _intent_plan(effect: Effect) -> CommitPlan | None:
    """The commit the effect's request names (its ``commit`` intent), if it names one."""
    intent = effect.request.get("commit")
    return CommitPlan.from_intent(intent) if isinstance(intent, dict) and intent.get("status") else None
