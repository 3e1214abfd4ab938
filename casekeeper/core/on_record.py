"""The two writes of a guarded effect on its case (``casekeeper.core.entries``): claim, then outcome with commit.

Private to :class:`~casekeeper.core.ledger.Ledger`: use :meth:`Ledger.run_on_record`. What a reconciler or a
person writes on an entry left open (an outcome, a same-key retry, an escalation) is
``casekeeper.core.on_record_later``.

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
from dataclasses import dataclass
from typing import Any

from casekeeper.core import entries
from casekeeper.core.cases import CASES, Case
from casekeeper.core.effect import EFFECTS, Effect, EffectStatus, _superseded_by_ignorance, late_done, with_outcome
from casekeeper.core.entries import CommitPlan, Committed
from casekeeper.core.errors import (
    AlreadyExists,
    ConcurrencyConflict,
    DownstreamRejected,
    EffectFailed,
    StaleDecision,
)
from casekeeper.core.keys import effect_key
from casekeeper.core.ledger_parts import Call, LedgerParts

MAX_WRITES = 8
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

    def __init__(self, ledger: LedgerParts) -> None:
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
        for _ in range(MAX_WRITES):
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
        for _ in range(MAX_WRITES):
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

    def replay(self, existing: Effect, case: Case, plan: CommitPlan | None) -> RecordOutcome:
        """An entry found by a later attempt: ``done`` is replayed (its commit finished if an adopted row of
        the earlier layout left it unfinished), the others raise as :meth:`Ledger.run` does."""

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
        raise self._ledger._not_done(existing, current_version=case.version)

    def finish(self, done: Effect, case: Case, plan: CommitPlan) -> RecordOutcome:
        """Commit a ``done`` entry whose commit is not on the case (only an entry adopted from the earlier
        layout's open gate can be such: in this layout the outcome and the commit are one write)."""
        for _ in range(MAX_WRITES):
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
