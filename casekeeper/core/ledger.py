"""The effect ledger (rules R2-R4): an external call runs at most once per key.

Terminology
-----------
effect
    One call to the outside world (request a credit note), identified by its key
    ``effect_key(case_id, action, decided_on_version)``.
claim
    Writing the effect's ``started`` entry on its case, conditional on the case still being at the decided
    version: the claim is the version gate.
outcome
    ``done`` with the result, or ``failed`` with the reason of a definite refusal. Recorded with a
    conditional write on the ``started`` entry, so a late attempt cannot overwrite an outcome that
    reconciliation (or a person) recorded meanwhile; ``done`` commits the case's status in that write.

State machine::

    (absent) --claim--> started --call ok--------------> done
                          |  \\--definite refusal-------> failed
                          |   \\--case moved (R4)-------> failed (stale)
                          |--unknown outcome: stays started; after the call timeout -->
                          \\--reconciler/person--------> needs_reconciliation --person--> done | failed

Where each part lives:

- :meth:`Ledger.run_on_record`, the guard's call: claim, call, outcome and commit on the case
  (``casekeeper.core.on_record``, over ``casekeeper.core.entries``);
- what reconciliation and people write on an entry left open: :meth:`Ledger.record_outcome`,
  :meth:`Ledger.record_done`, :meth:`Ledger.retry_same_key`, :meth:`Ledger.mark_needs_reconciliation`
  (``casekeeper.core.on_record_later``);
- :meth:`Ledger.run` and those writes on a row of the earlier two-container layout (a row in ``effects``, a
  separate gate and commit), kept for the data that layout wrote (``casekeeper.core.on_rows``);
- the reads, an effect by key and the lists reconciliation and operators need
  (``casekeeper.core.effect_reads``);
- here: the settings, what decides "in flight" (:meth:`Ledger.in_flight_for`), the send deadline and the
  alerts both layouts raise.

A ``started`` entry (or row) found by someone else is judged by the **store's** clock: younger than the call
timeout means another attempt is mid-call (``EffectInFlight``, with a retry-after); older means the
outcome is unknown (``NeedsReconciliation``). Nothing here ever retries a started effect blindly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from casekeeper.core.cases import Case, CaseRepository
from casekeeper.core.effect import (
    EFFECTS,
    OPEN_STATUSES,
    Effect,
    EffectStatus,
    _evolve,
    _superseded_by_ignorance,
    late_outcome_alert,
    left_version_alert,
)
from casekeeper.core.effect_reads import EffectReads
from casekeeper.core.entries import CommitPlan
from casekeeper.core.errors import (
    EffectError,
    EffectFailed,
    EffectInFlight,
    NeedsReconciliation,
    OutcomeAlreadyRecorded,
    SendDeadlinePassed,
    StaleDecision,
)
from casekeeper.core.ledger_parts import AlertSink, Call
from casekeeper.core.on_record import OnRecord, RecordOutcome
from casekeeper.core.on_record_later import OnRecordLater
from casekeeper.core.on_rows import EffectOutcome, OnRows
from casekeeper.core.ports import DocumentStore

DEFAULT_CALL_TIMEOUT = 120.0
DEFAULT_SEND_MARGIN_FRACTION = 0.25
"""Without a configured margin, a call is sent only within the first 75% of the call timeout."""

log = logging.getLogger("casekeeper.ledger")

__all__ = [  # the effect's model lives in casekeeper.core.effect; its readers import it from here too
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_SEND_MARGIN_FRACTION",
    "EFFECTS",
    "OPEN_STATUSES",
    "AlertSink",
    "Call",
    "Effect",
    "EffectOutcome",
    "EffectStatus",
    "Ledger",
    "RecordOutcome",
    "_evolve",
    "_superseded_by_ignorance",
    "late_outcome_alert",
]


class Ledger(EffectReads):
    """The effect ledger's policy, written once over any :class:`DocumentStore`; its reads are
    :class:`~casekeeper.core.effect_reads.EffectReads`'."""

    def __init__(
        self,
        store: DocumentStore,
        cases: CaseRepository,
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        probe: Callable[[str], None] | None = None,
        observer: Callable[[str, Effect], None] | None = None,
        alert: AlertSink | None = None,
        send_margin: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``probe`` is called at the named points ``F1`` (decided, before the claim is written), ``F2``
        (claimed, before the call) and ``F4`` (reply received, before it is recorded): the crash tests end
        the process there. ``observer`` hears ``started``, ``done``, ``failed``, ``stale`` and ``not_sent``
        (telemetry). ``alert`` is told of a late outcome recorded over a closed row.

        ``send_margin`` (seconds; default a quarter of the call timeout) is the gate's deadline: a call is
        sent only while the time since its claim was written, by ``monotonic`` (this process's clock), leaves
        at least that much of the call timeout. It must cover how long sending can take (the supplier
        client's pool, connect and write timeouts), so that whatever is sent has reached the downstream
        before anyone may take the row for an unknown outcome (rule R3)."""
        if call_timeout <= 0:
            raise ValueError("call_timeout must be positive")
        margin = call_timeout * DEFAULT_SEND_MARGIN_FRACTION if send_margin is None else send_margin
        if not 0 <= margin < call_timeout:
            raise ValueError("send_margin must be at least 0 and below call_timeout")
        self._send_margin = margin
        self._monotonic = monotonic
        self._store = store
        self._cases = cases
        self._call_timeout = call_timeout
        self._probe = probe or (lambda point: None)
        self._observe = observer or (lambda event, effect: None)
        self._alert = alert
        self._on_record = OnRecord(self)
        self._on_record_later = OnRecordLater(self, self._on_record)
        self._on_rows = OnRows(self)

    @property
    def store(self) -> DocumentStore:
        """The store the ledger writes to."""
        return self._store

    # --- the guarded call ---------------------------------------------------------------------

    def run_on_record(
        self,
        *,
        case_id: str,
        action: str,
        decided_on_version: int,
        call: Call,
        commit: CommitPlan,
        request: Mapping[str, Any] | None = None,
        expected: Case | None = None,
        refusal_review: str | None = None,
    ) -> RecordOutcome:
        """Run ``call`` at most once for (case, action, version), with the claim and the outcome on the case
        (``casekeeper.core.entries``): two conditional writes of the case, the second recording the outcome and
        committing ``commit`` together.

        ``expected``: the case as the decision read it (saves the read before the claim). ``refusal_review``:
        on a definite refusal, the status the case is handed to a person in (same write), or ``None``.
        Returns the ``done`` effect (recorded now or replayed) with what happened to the commit
        (``committed``, ``already``, ``needs_review``: the case had moved on while the call was in flight,
        ``with_person``). Raises as :meth:`run`: ``StaleDecision`` (nothing written, nothing called),
        ``EffectFailed``, ``EffectInFlight``, ``NeedsReconciliation``, the call's own exception (entry left
        ``started``), and ``ConcurrencyConflict`` if the case keeps changing past a bound."""
        return self._on_record.run(
            case_id=case_id,
            action=action,
            decided_on_version=decided_on_version,
            call=call,
            request=dict(request or {}),
            plan=commit,
            expected=expected,
            refusal_review=refusal_review,
        )

    def run(
        self,
        *,
        case_id: str,
        action: str,
        decided_on_version: int,
        call: Call,
        request: Mapping[str, Any] | None = None,
    ) -> EffectOutcome:
        """Run ``call`` at most once for (case, action, version).

        Returns the outcome of a ``done`` effect (recorded now, or earlier). Raises:
        ``StaleDecision`` (the case moved; nothing called), ``EffectFailed`` (definite refusal,
        now or recorded earlier), ``EffectInFlight`` (another attempt is mid-call),
        ``NeedsReconciliation`` (outcome unknown), and re-raises the call's ``OutcomeUnknown``
        (or any other exception) after leaving the row ``started``.
        """
        return self._on_rows.run(
            case_id=case_id, action=action, decided_on_version=decided_on_version, call=call, request=request
        )

    def retry_same_key(
        self, effect: Effect, call: Call, *, source: str = "reconciler", commit: CommitPlan | None = None
    ) -> EffectOutcome:
        """Re-attempt a ``started`` effect with the same key (reconciliation, rule R3).

        Only for an action whose downstream honours idempotency keys, after a lookup by key found
        nothing. The re-attempt re-claims the row (``attempts + 1``, its start time now) and passes the
        same version gate as any call. Raises as :meth:`run`; ``OutcomeAlreadyRecorded`` or
        ``EffectInFlight`` when someone else moved the row first, and ``EffectInFlight`` while the current
        attempt is within its call timeout: it may still send, so its row is neither re-claimed nor, when
        the gate refuses the retry, closed as stale (which would let the money rule stop counting it).
        """
        if effect.status is not EffectStatus.STARTED:
            raise OutcomeAlreadyRecorded(
                key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=effect.status.value
            )
        left = self.in_flight_for(effect)
        if left is not None:
            raise EffectInFlight(key=effect.key, case_id=effect.case_id, action=effect.action, retry_after=left)
        if not effect.in_record:
            return self._on_rows.retry(effect, call, source=source)
        done = self._on_record_later.retry(effect, call, commit, source=source)
        return EffectOutcome(done.effect, replayed=done.replayed, case=done.case, commit=done.commit)

    # --- what both layouts share: the send deadline, the reports of late outcomes ---------------

    def _check_send_deadline(self, effect: Effect, claimed_at: float) -> None:
        """The gate's deadline, checked just before sending: a worker that paused after its gate (GC, a
        frozen VM, SIGSTOP) must not send once a reconciler may have looked the key up, found nothing, and
        closed the row; the case may have asked again since."""
        elapsed = self._monotonic() - claimed_at
        if elapsed + self._send_margin <= self._call_timeout:
            return
        reason = (
            f"not sent: {elapsed:.1f}s since the claim leaves less than the {self._send_margin:.1f}s margin "
            f"of the {self._call_timeout:.0f}s call timeout"
        )
        log.warning("effect %s %s", effect.key, reason, extra={"caseId": effect.case_id, "effectKey": effect.key})
        self._observe("not_sent", effect)
        raise SendDeadlinePassed(reason)

    def _outcome_discarded(self, claimed: Effect, current: Effect, status: EffectStatus) -> None:
        """Our outcome ``status`` for the attempt ``claimed`` is not recorded: someone closed it meanwhile
        (``current``), knowing as much as we do, and theirs stands."""
        log.warning(
            "late outcome discarded: effect %s is already %s",
            claimed.key,
            current.status.value,
            extra={"caseId": claimed.case_id, "effectKey": claimed.key, "discarded": status.value},
        )

    def _late_outcome_recorded(self, closed: Effect) -> None:
        """A late ``done`` was recorded over ``closed`` (:func:`~casekeeper.core.effect.late_done`): the log
        and the ``late_outcome`` alert (deduplicated by the key)."""
        log.warning(
            "effect %s: late outcome recorded over %s",
            closed.key,
            closed.status.value,
            extra={"caseId": closed.case_id, "effectKey": closed.key},
        )
        if self._alert is not None:
            self._alert("late_outcome", *late_outcome_alert(closed), dedupe_key=closed.key)

    def _not_done(self, existing: Effect, *, current_version: int | None) -> EffectError:
        """What a later attempt that finds ``existing`` without a ``done`` outcome raises: the refusal or the
        staleness recorded (``current_version``: the case's version, when it was read), the escalation, or,
        for a ``started`` one by its age on the store's clock, ``EffectInFlight`` (another attempt is mid-call)
        or ``NeedsReconciliation`` (the outcome is unknown)."""
        ctx = {"key": existing.key, "case_id": existing.case_id, "action": existing.action}
        if existing.status is EffectStatus.FAILED:
            if existing.stale:
                return StaleDecision(**ctx, decided_on_version=existing.case_version, current_version=current_version)
            return EffectFailed(**ctx, reason=existing.reason or "failed")
        if existing.status is EffectStatus.NEEDS_RECONCILIATION:
            return NeedsReconciliation(**ctx, age=None, reason=existing.reason or "marked for reconciliation")
        age = self.age(existing)
        if age < self._call_timeout:
            return EffectInFlight(
                key=existing.key,
                case_id=existing.case_id,
                action=existing.action,
                retry_after=max(self._call_timeout - age, 0.0),
            )
        return NeedsReconciliation(
            **ctx, age=age, reason=f"started {age:.0f}s ago (call timeout {self._call_timeout:.0f}s), outcome unknown"
        )

    def _alert_left_version(self, effect: Effect, case_version: int, reason: str) -> None:
        """The ``effect_on_left_version`` alert: the effect happened on facts the case has since left."""
        if self._alert is not None:
            message, fields = left_version_alert(effect, case_version, reason)
            self._alert("effect_on_left_version", message, fields, dedupe_key=effect.key)

    # --- in flight or unknown, and the outcomes reconciliation and people record ---------------

    def age(self, effect: Effect) -> float:
        """Seconds since the effect last changed, by the store's clock."""
        return self._store.now() - effect.ts

    def in_flight_for(self, effect: Effect) -> float | None:
        """For a ``started`` effect still within its call timeout (store clock), the seconds left before
        its outcome counts as unknown; ``None`` otherwise (any other status, or past the timeout).

        The one place that decides "in flight": everything else asks here (or :meth:`recheck_due`)."""
        if effect.status is not EffectStatus.STARTED:
            return None
        left = self._call_timeout - self.age(effect)
        return left if left > 0 else None

    def in_flight(self, effect: Effect) -> bool:
        """Another attempt may be mid-call: do not touch it, look again later."""
        return self.in_flight_for(effect) is not None

    def recheck_due(self, effect: Effect) -> float:
        """When (store clock, seconds since the epoch) a ``started`` effect's current attempt runs out of
        time and its outcome counts as unknown: the moment a re-check can decide it."""
        return effect.ts + self._call_timeout

    def record_outcome(
        self,
        effect: Effect,
        status: EffectStatus,
        *,
        result: Mapping[str, Any] | None = None,
        reason: str | None = None,
        stale: bool = False,
        source: str,
        resolution: Mapping[str, Any] | None = None,
        commit: CommitPlan | None = None,
    ) -> Effect:
        """Record ``done`` (with ``result``) or ``failed`` (with ``reason``) on an effect without one.

        Conditional on the row being unchanged since ``effect`` was read and still open (``started``
        or ``needs_reconciliation``). Raises ``OutcomeAlreadyRecorded`` when it already has an
        outcome or changed meanwhile (re-read and look).

        For an effect on its case (``in_record``), a ``done`` outcome commits in the same write: ``commit``,
        else the commit intent of its ``request``; without either the case is handed to a person in that
        write (nobody can tell what it should become, and a done effect must never sit uncommitted).
        """
        if status is EffectStatus.DONE and result is None:
            raise ValueError("a done outcome needs a result")
        if status is EffectStatus.FAILED and not reason:
            raise ValueError("a failed outcome needs a reason")
        if status not in (EffectStatus.DONE, EffectStatus.FAILED):
            raise ValueError(f"not an outcome: {status}")
        if effect.status not in OPEN_STATUSES:
            raise OutcomeAlreadyRecorded(
                key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=effect.status.value
            )
        given = dict(result) if result is not None else None
        who = dict(resolution) if resolution is not None else None
        if effect.in_record:
            return self._on_record_later.record(
                effect, status, result=given, reason=reason, stale=stale, source=source, resolution=who, plan=commit
            )[0]
        return self._on_rows.record(
            effect, status, result=given, reason=reason, stale=stale, source=source, resolution=who
        )

    def record_done(
        self,
        effect: Effect,
        result: Mapping[str, Any],
        *,
        commit: CommitPlan | None,
        source: str,
        resolution: Mapping[str, Any] | None = None,
    ) -> tuple[Effect, str | None]:
        """Record ``done`` on an open entry and, in the same write, its commit (``commit``, else the intent its
        request names; without either the case goes to a person). Returns the entry and what happened to the
        commit (``committed``, ``already``, ``needs_review``, ``with_person``, ``no_intent``); for a row of
        the two-container layout, ``None`` (finish its commit with ``casekeeper.core.commits``). Raises
        ``OutcomeAlreadyRecorded``."""
        if not effect.in_record:
            done = self.record_outcome(effect, EffectStatus.DONE, result=result, source=source, resolution=resolution)
            return done, None
        return self._on_record_later.record(
            effect,
            EffectStatus.DONE,
            result=dict(result),
            reason=None,
            stale=False,
            source=source,
            resolution=dict(resolution) if resolution is not None else None,
            plan=commit,
        )

    def mark_needs_reconciliation(self, effect: Effect, reason: str, *, source: str = "reconciler") -> Effect:
        """Escalate a ``started`` effect to a person. Raises ``OutcomeAlreadyRecorded`` when it moved."""
        if effect.status is not EffectStatus.STARTED:
            raise OutcomeAlreadyRecorded(
                key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=effect.status.value
            )
        if effect.in_record:
            return self._on_record_later.mark(effect, reason, source=source)
        return self._on_rows.mark(effect, reason, source=source)
