"""The two-container layout's writes of an effect: a row of the ``effects`` container, a separate gate and commit.

Private to :class:`~casekeeper.core.ledger.Ledger` (:meth:`Ledger.run`, and its writes on such a row): kept for
the data that layout wrote and the tests of it; the guard runs effects on their case
(``casekeeper.core.on_record``). On the happy path, four round trips with the commit::

    create effect(started) -> read case (version gate) -> call(key) -> replace effect(done, If-Match)
    -> [caller] commit case status (If-Match, the case read by the gate)

The claim creates the ``started`` row (create first, read only when the create conflicts: the happy path
pays no read); the outcome is a conditional write on that row, so a late attempt cannot overwrite an
outcome that reconciliation (or a person) recorded meanwhile. The commit is finished by
``casekeeper.core.commits``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from casekeeper.core.cases import Case
from casekeeper.core.effect import (
    EFFECTS,
    Effect,
    EffectStatus,
    _evolve,
    _superseded_by_ignorance,
    escalated,
    late_done,
    with_outcome,
)
from casekeeper.core.errors import (
    AlreadyExists,
    ConcurrencyConflict,
    DownstreamRejected,
    EffectFailed,
    OutcomeAlreadyRecorded,
    StaleDecision,
)
from casekeeper.core.keys import effect_key
from casekeeper.core.ledger_parts import Call, LedgerParts


@dataclass(frozen=True)
class EffectOutcome:
    """What :meth:`Ledger.run` returns for a ``done`` effect.

    ``replayed`` is True when the result came from the ledger and no call was made. ``case`` is the
    case as the version gate read it just before the call (``None`` when replayed): pass it to
    ``CaseRepository.commit_status(expected=...)`` to commit without another read.
    """

    effect: Effect
    replayed: bool
    case: Case | None = None
    commit: str | None = None
    """For an effect on its case: what its outcome's write did to the commit (``committed``, ``already``,
    ``needs_review``, ``with_person``); ``None`` for a row of the two-container layout."""

    @property
    def result(self) -> dict[str, Any]:
        """The downstream's answer recorded on the ``done`` effect."""
        assert self.effect.result is not None
        return self.effect.result


class OnRows:
    """The writes of effects as rows of the ``effects`` container, over the ledger's store and settings."""

    def __init__(self, ledger: LedgerParts) -> None:
        self._ledger = ledger

    def run(
        self, *, case_id: str, action: str, decided_on_version: int, call: Call, request: Mapping[str, Any] | None
    ) -> EffectOutcome:
        """:meth:`Ledger.run`: claim the row, pass the case's version gate, call, record the outcome."""
        ledger = self._ledger
        key = effect_key(case_id, action, decided_on_version)
        body = {
            "id": key,
            "kind": "effect",
            "caseId": case_id,
            "action": action,
            "caseVersion": decided_on_version,
            "status": EffectStatus.STARTED.value,
            "request": dict(request or {}),
            "result": None,
            "reason": None,
            "stale": False,
            "attempts": 1,
            "resolution": None,
            "history": [{"status": "started", "attempt": 1}],
        }
        ledger._probe("F1")
        # Taken before the claim is written, so never later than the row's start by the store's clock: the
        # deadline measured from it comes no later than the moment a reconciler may act on the row.
        claimed_at = ledger._monotonic()
        try:
            claimed = Effect.from_document(ledger._store.create(EFFECTS, case_id, key, body))
        except AlreadyExists as exc:
            existing = ledger.get(case_id, key)
            if existing is None:  # deleted in between: only an operator does that; let the caller retry
                raise ConcurrencyConflict(
                    f"effect {key} vanished after a conflict", container=EFFECTS, doc_id=key
                ) from exc
            return self.replay(existing)
        ledger._observe("started", claimed)
        return self.call_claimed(claimed, call, claimed_at)

    def retry(self, effect: Effect, call: Call, *, source: str) -> EffectOutcome:
        """:meth:`Ledger.retry_same_key` for a row: re-claim it (``attempts + 1``, conditional on its ETag),
        then pass the gate and call as :meth:`run`."""
        ledger = self._ledger
        attempts = effect.attempts + 1
        reclaimed = _evolve(
            effect, attempts=attempts, history_entry={"status": "started", "attempt": attempts, "source": source}
        )
        claimed_at = ledger._monotonic()
        try:
            doc = ledger._store.replace(EFFECTS, effect.case_id, effect.key, reclaimed.to_body(), etag=effect.etag)
        except ConcurrencyConflict:
            current = ledger.get(effect.case_id, effect.key)
            if current is None:
                raise
            return self.replay(current)
        return self.call_claimed(Effect.from_document(doc), call, claimed_at)

    def call_claimed(self, effect: Effect, call: Call, claimed_at: float) -> EffectOutcome:
        ledger = self._ledger
        # The gate is a conditional write, not a read (see CaseRepository.pass_gate): its success proves
        # the case was still at the decided version at that moment, whatever replica a read would hit.
        case = ledger._cases.pass_gate(effect.case_id, effect.case_version, effect_key=effect.key)
        if case is None:
            current = ledger._cases.get(effect.case_id)
            current_version = current.version if current is not None else None
            # Close the claim: left started, reconciliation would later see an unknown outcome.
            reason = f"stale: decided on v{effect.case_version}, case is at v{current_version}"
            self.try_record(effect, EffectStatus.FAILED, reason=reason, stale=True, source="version-gate")
            ledger._observe("stale", effect)
            raise StaleDecision(
                key=effect.key,
                case_id=effect.case_id,
                action=effect.action,
                decided_on_version=effect.case_version,
                current_version=current_version,
            )
        ledger._probe("F2")
        ledger._check_send_deadline(effect, claimed_at)
        try:
            result = call(effect.key)
        except DownstreamRejected as exc:
            recorded, ours = self.try_record(effect, EffectStatus.FAILED, reason=exc.reason, source="call")
            if not ours:  # someone recorded an outcome meanwhile: theirs stands
                return self.replay(recorded)
            ledger._observe("failed", recorded)
            raise EffectFailed(key=effect.key, case_id=effect.case_id, action=effect.action, reason=exc.reason) from exc
        # Any other exception: outcome unknown. The row stays started; it propagates unchanged.
        ledger._probe("F4")
        recorded, ours = self.try_record(effect, EffectStatus.DONE, result=dict(result), source="call")
        if not ours:
            return self.replay(recorded)
        ledger._observe("done", recorded)
        return EffectOutcome(recorded, replayed=False, case=case)

    def try_record(
        self,
        effect: Effect,
        status: EffectStatus,
        *,
        result: dict[str, Any] | None = None,
        reason: str | None = None,
        stale: bool = False,
        source: str,
    ) -> tuple[Effect, bool]:
        """Record an outcome on our claim. Returns the row and whether our outcome is the one recorded:
        if someone (reconciliation, a person) recorded one meanwhile, theirs stands."""
        ledger = self._ledger
        try:
            recorded = ledger.record_outcome(effect, status, result=result, reason=reason, stale=stale, source=source)
            return recorded, True
        except OutcomeAlreadyRecorded:
            current = ledger.get(effect.case_id, effect.key)
            if current is None:
                raise
            if status is EffectStatus.DONE and result is not None and _superseded_by_ignorance(current):
                # Our call succeeded after the row was closed by someone who could not know it (a
                # reconciliation retry refused as stale, or an escalation to a person). The effect
                # happened: record it, or the record would say it did not.
                late = self._record_late_done(current, result, source=source)
                if late is not None:
                    return late, True
                current = ledger.get(effect.case_id, effect.key) or current
            ledger._outcome_discarded(effect, current, status)
            return current, False

    def _record_late_done(self, current: Effect, result: dict[str, Any], *, source: str) -> Effect | None:
        updated = late_done(current, result, source=source)
        try:
            doc = self._ledger._store.replace(
                EFFECTS, current.case_id, current.key, updated.to_body(), etag=current.etag
            )
        except ConcurrencyConflict:
            return None
        self._ledger._late_outcome_recorded(current)
        return Effect.from_document(doc)

    def replay(self, existing: Effect) -> EffectOutcome:
        """A row found by a later attempt: ``done`` is replayed, the others raise as :meth:`Ledger.run` does."""
        if existing.status is EffectStatus.DONE:
            return EffectOutcome(existing, replayed=True)
        raise self._ledger._not_done(existing, current_version=None)

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
    ) -> Effect:
        """:meth:`Ledger.record_outcome` for a row. Raises ``OutcomeAlreadyRecorded``."""
        updated = with_outcome(
            effect, status, result=result, reason=reason, stale=stale, source=source, resolution=resolution
        )
        return self.replace(effect, updated)

    def mark(self, effect: Effect, reason: str, *, source: str) -> Effect:
        """:meth:`Ledger.mark_needs_reconciliation` for a row. Raises ``OutcomeAlreadyRecorded``."""
        return self.replace(effect, escalated(effect, reason, source=source))

    def replace(self, effect: Effect, updated: Effect) -> Effect:
        """Replace the row ``effect`` with ``updated``, conditional on its ETag; ``OutcomeAlreadyRecorded``
        when it changed since ``effect`` was read (with its status now)."""
        ledger = self._ledger
        try:
            doc = ledger._store.replace(EFFECTS, effect.case_id, effect.key, updated.to_body(), etag=effect.etag)
        except ConcurrencyConflict as exc:
            current = ledger.get(effect.case_id, effect.key)
            recorded = current.status.value if current is not None else "deleted"
            raise OutcomeAlreadyRecorded(
                key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=recorded
            ) from exc
        return Effect.from_document(doc)
