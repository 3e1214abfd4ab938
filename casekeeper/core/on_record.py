"""The two writes of a guarded effect on its case (``casekeeper.core.entries``): claim, then outcome with commit.

Private to :class:`~casekeeper.core.ledger.Ledger`: use :meth:`Ledger.run_on_record`.

State machine of an entry::

    (absent) --claim (case at the decided version)--> started --call ok--------> done  (+ commit, same write)
       |                                                 |  \\--definite refusal--> failed (+ review if asked)
       \\--claim on a version the case left: nothing       |--unknown outcome: stays started; after the call
           is written, StaleDecision                      |  timeout -> reconciler (lookup by key / retry)
                                                          \\--reconciler/person--> needs_reconciliation
                                                                                  --person--> done | failed
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from casekeeper.core import entries
from casekeeper.core.cases import CASES, Case
from casekeeper.core.effect import (
    EFFECTS,
    OPEN_STATUSES,
    Effect,
    EffectStatus,
    _evolve,
    _superseded_by_ignorance,
    escalated,
    late_done,
    with_outcome,
)
from casekeeper.core.entries import CommitPlan, Committed
from casekeeper.core.errors import (
    AlreadyExists,
    ConcurrencyConflict,
    DownstreamRejected,
    EffectFailed,
    EffectInFlight,
    MissingCommitIntent,
    NeedsReconciliation,
    OutcomeAlreadyRecorded,
    StaleDecision,
)
from casekeeper.core.keys import effect_key

if TYPE_CHECKING:
    from casekeeper.core.cases import CaseRepository
    from casekeeper.core.ports import DocumentStore


class _Ledger(Protocol):
    """What of :class:`~casekeeper.core.ledger.Ledger` these writes use (named here, not imported: the ledger
    imports this module)."""

    _store: DocumentStore
    _cases: CaseRepository
    _call_timeout: float
    _probe: Callable[[str], None]
    _observe: Callable[[str, Effect], None]
    _monotonic: Callable[[], float]

    def _check_send_deadline(self, effect: Effect, claimed_at: float) -> None: ...

    def _outcome_discarded(self, claimed: Effect, current: Effect, status: EffectStatus) -> None: ...

    def _late_outcome_recorded(self, closed: Effect) -> None: ...

    def _alert_left_version(self, effect: Effect, case_version: int, reason: str) -> None: ...

    def age(self, effect: Effect) -> float: ...


Call = Callable[[str], Mapping[str, Any]]

_MAX_WRITES = 8
"""Re-reads after a 412 before giving up: each one means another writer landed first (a note, a fact)."""


@dataclass(frozen=True)
class RecordOutcome:
    """What :meth:`Ledger.run_on_record` returns for a ``done`` effect: the effect, whether it was replayed
    (no call now), what happened to the commit, and the case after."""

    effect: Effect
    replayed: bool
    commit: Committed
    case: Case

    @property
    def result(self) -> dict[str, Any]:
        assert self.effect.result is not None
        return self.effect.result


class OnRecord:
    """The writes of effects on their case, over the ledger's store and settings."""

    def __init__(self, ledger: _Ledger) -> None:
        self._ledger = ledger

    def run(
        self,
        *,
        case_id: str,
        action: str,
        decided_on_version: int,
        call: Call,
        request: dict[str, Any],
        plan: CommitPlan,
        expected: Case | None,
        refusal_review: str | None,
    ) -> RecordOutcome:

        ledger = self._ledger
        key = effect_key(case_id, action, decided_on_version)
        ledger._probe("F1")
        # Taken before the claim is written: never later than the entry's start by the store's clock.
        claimed_at = ledger._monotonic()
        case = expected if expected is not None and expected.id == case_id else ledger._cases.require(case_id)
        if case.schema_version < 2:
            # A case of the two-container layout may have this key's row in ``effects`` (a run that passed
            # its gate before the upgrade): it is the effect; claiming it again on the case could call twice.
            legacy = ledger._store.read(EFFECTS, case_id, key)
            if legacy is not None and entries.entry_of(case, key) is None:
                return self.replay(Effect.from_document(legacy), case, plan)
        for _ in range(_MAX_WRITES):
            existing = entries.entry_of(case, key)
            if existing is not None:
                return self.replay(existing, case, plan)
            if case.version != decided_on_version:
                raise StaleDecision(
                    key=key,
                    case_id=case_id,
                    action=action,
                    decided_on_version=decided_on_version,
                    current_version=case.version,
                )
            claim = Effect(
                key=key,
                case_id=case_id,
                action=action,
                case_version=decided_on_version,
                status=EffectStatus.STARTED,
                request=dict(request),
                result=None,
                reason=None,
                stale=False,
                attempts=1,
                resolution=None,
                history=({"status": "started", "attempt": 1},),
                etag=case.etag,
                ts=0.0,
                in_record=True,
            )
            try:
                case = self.write(case, entries.put(case, claim))
            except ConcurrencyConflict:
                case = ledger._cases.require(case_id)  # a note, a fact, another run: look again
                continue
            break
        else:
            raise ConcurrencyConflict(f"case {case_id!r} kept changing during a claim", container=CASES, doc_id=case_id)
        claimed = entries.entry_of(case, key)
        assert claimed is not None
        ledger._observe("started", claimed)
        return self.call_claimed(claimed, case, call, claimed_at, plan=plan, refusal_review=refusal_review)

    def call_claimed(
        self,
        claimed: Effect,
        case: Case,
        call: Call,
        claimed_at: float,
        *,
        plan: CommitPlan,
        refusal_review: str | None,
    ) -> RecordOutcome:

        ledger = self._ledger
        ledger._probe("F2")
        ledger._check_send_deadline(claimed, claimed_at)
        try:
            result = call(claimed.key)
        except DownstreamRejected as exc:
            recorded, ours, _, after = self.close(
                claimed, case, EffectStatus.FAILED, reason=exc.reason, plan=plan, refusal_review=refusal_review
            )
            if not ours:
                return self.replay(recorded, after, plan)
            ledger._observe("failed", recorded)
            raise EffectFailed(
                key=claimed.key, case_id=claimed.case_id, action=claimed.action, reason=exc.reason
            ) from exc
        # Any other exception: outcome unknown. The entry stays started; it propagates unchanged.
        ledger._probe("F4")
        recorded, ours, commit, after = self.close(claimed, case, EffectStatus.DONE, result=dict(result), plan=plan)
        if not ours:
            return self.replay(recorded, after, plan)
        ledger._observe("done", recorded)
        assert commit is not None
        return RecordOutcome(recorded, False, commit, after)

    def close(
        self,
        claimed: Effect,
        case: Case,
        status: EffectStatus,
        *,
        plan: CommitPlan | None,
        result: dict[str, Any] | None = None,
        reason: str | None = None,
        stale: bool = False,
        source: str = "call",
        resolution: dict[str, Any] | None = None,
        refusal_review: str | None = None,
    ) -> tuple[Effect, bool, Committed | None, Case]:
        """Record an outcome on the attempt ``claimed`` (and, for ``done`` with a ``plan``, the commit) in one
        conditional write of the case. Returns the entry, whether ours is the outcome recorded (someone who
        closed it meanwhile stands, unless they closed it without knowing: then a late ``done`` is recorded
        over theirs), the commit, and the case after."""

        ledger = self._ledger
        for _ in range(_MAX_WRITES):
            current = entries.entry_of(case, claimed.key)
            if current is None:
                raise ConcurrencyConflict(
                    f"effect {claimed.key} is gone from case {case.id}", container=CASES, doc_id=case.id
                )
            ours = current.status is EffectStatus.STARTED and current.attempts == claimed.attempts
            late = not ours and status is EffectStatus.DONE and result is not None and _superseded_by_ignorance(current)
            if not ours and not late:
                ledger._outcome_discarded(claimed, current, status)
                return current, False, None, case
            if late:
                assert result is not None
                updated = late_done(current, result, source=source)
            else:
                updated = with_outcome(
                    current,
                    status,
                    result=result,
                    reason=reason,
                    stale=stale,
                    source=source,
                    resolution=resolution,
                )
            commit: Committed | None = None
            now = ledger._cases.now()
            if status is EffectStatus.DONE and plan is not None:
                target, commit, left = entries.settle(case, updated, plan, now)
                if left is not None:
                    # Before the write: a repeat after a crash finds the escalation and stops early, so an
                    # alert raised after it could be lost. The alert is deduplicated by the key.
                    ledger._alert_left_version(updated, case.version, left)
            elif status is EffectStatus.FAILED and refusal_review is not None and not stale:
                why = f"{updated.action} refused: {reason}"
                target = entries.escalate(case, updated, refusal_review, why, now)
            else:
                target = entries.put(case, updated)
            try:
                after = self.write(case, target)
            except ConcurrencyConflict:
                case = ledger._cases.require(case.id)  # re-read and re-apply
                continue
            written = entries.entry_of(after, claimed.key)
            assert written is not None
            if late:
                ledger._late_outcome_recorded(current)
            return written, True, commit, after
        raise ConcurrencyConflict(f"case {case.id!r} kept changing during an outcome", container=CASES, doc_id=case.id)

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
        for _ in range(_MAX_WRITES):
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
                after = self.write(case, target)
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
        for _ in range(_MAX_WRITES):
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
                    self.write(case, entries.put(case, closed))
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
                case = self.write(case, entries.put(case, reclaimed))
            except ConcurrencyConflict:
                case = self._current(effect)
                continue
            claimed = entries.entry_of(case, effect.key)
            assert claimed is not None
            plan = plan if plan is not None else _intent_plan(effect)
            if plan is None:
                raise MissingCommitIntent(key=effect.key, case_id=effect.case_id, action=effect.action)
            return self.call_claimed(claimed, case, call, claimed_at, plan=plan, refusal_review=None)
        raise ConcurrencyConflict(f"case {effect.case_id!r} kept changing", container=CASES, doc_id=effect.case_id)

    def mark(self, effect: Effect, reason: str, *, source: str) -> Effect:
        """:meth:`Ledger.mark_needs_reconciliation` for an entry. Raises ``OutcomeAlreadyRecorded``."""

        case = self._current(effect)
        for _ in range(_MAX_WRITES):
            current = self._unchanged(case, effect)
            if current.status is not EffectStatus.STARTED:
                raise OutcomeAlreadyRecorded(
                    key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=current.status.value
                )
            updated = escalated(current, reason, source=source)
            try:
                after = self.write(case, entries.put(case, updated))
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

    def replay(self, existing: Effect, case: Case, plan: CommitPlan | None) -> RecordOutcome:
        """An entry found by a later attempt: ``done`` is replayed (its commit finished if an adopted row of
        the earlier layout left it unfinished), the others raise as :meth:`Ledger.run` does."""

        ledger = self._ledger
        ctx = {"key": existing.key, "case_id": existing.case_id, "action": existing.action}
        if existing.status is EffectStatus.DONE:
            named = case.transitions_of(existing.key)
            if named or plan is None:
                target = plan.status if plan is not None else None
                commit: Committed = (
                    "already"
                    if any(t.from_version == existing.case_version and t.status == target for t in named)
                    or (plan is None and named)
                    else "with_person"
                )
                return RecordOutcome(existing, True, commit, case)
            return self.finish(existing, case, plan)
        if existing.status is EffectStatus.FAILED:
            if existing.stale:
                raise StaleDecision(**ctx, decided_on_version=existing.case_version, current_version=case.version)
            raise EffectFailed(**ctx, reason=existing.reason or "failed")
        if existing.status is EffectStatus.NEEDS_RECONCILIATION:
            raise NeedsReconciliation(**ctx, age=None, reason=existing.reason or "marked for reconciliation")
        age = ledger.age(existing)
        if age < ledger._call_timeout:
            raise EffectInFlight(
                key=existing.key,
                case_id=existing.case_id,
                action=existing.action,
                retry_after=max(ledger._call_timeout - age, 0.0),
            )
        raise NeedsReconciliation(
            **ctx,
            age=age,
            reason=f"started {age:.0f}s ago (call timeout {ledger._call_timeout:.0f}s), outcome unknown",
        )

    def finish(self, done: Effect, case: Case, plan: CommitPlan) -> RecordOutcome:
        """Commit a ``done`` entry whose commit is not on the case (only an entry adopted from the earlier
        layout's open gate can be such: in this layout the outcome and the commit are one write)."""
        for _ in range(_MAX_WRITES):
            current = entries.entry_of(case, done.key) or done
            target, commit, left = entries.settle(case, current, plan, self._ledger._cases.now())
            if commit in ("already", "with_person"):
                return RecordOutcome(current, True, commit, case)
            if left is not None:
                self._ledger._alert_left_version(current, case.version, left)
            try:
                after = self.write(case, target)
            except ConcurrencyConflict:
                case = self._ledger._cases.require(case.id)
                continue
            return RecordOutcome(entries.entry_of(after, done.key) or current, True, commit, after)
        raise ConcurrencyConflict(f"case {case.id!r} kept changing during a commit", container=CASES, doc_id=case.id)

    def write(self, read: Case, updated: Case) -> Case:
        """Replace the case (``If-Match`` on ``read``) with ``updated``, after moving the closed entries
        beyond the bound to the archive (create first; ``AlreadyExists`` means a previous attempt did).
        Raises ``ConcurrencyConflict`` on a 412: the caller re-reads and re-applies."""

        store = self._ledger._store
        archived = entries.over_bound(updated)
        for entry in archived:
            with contextlib.suppress(AlreadyExists):  # a previous attempt archived it
                store.create(EFFECTS, read.id, str(entry["id"]), entries.archive_body(entry))
        if archived:
            updated = entries.without(updated, {str(e["id"]) for e in archived})
        return Case.from_document(store.replace(CASES, read.id, read.id, updated.to_body(), etag=read.etag))


def _intent_plan(effect: Effect) -> CommitPlan | None:
    """The commit the effect's request names (its ``commit`` intent), if it names one."""
    intent = effect.request.get("commit")
    return CommitPlan.from_intent(intent) if isinstance(intent, dict) and intent.get("status") else None
