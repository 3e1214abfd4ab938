"""The effect ledger (rules R2-R4): an external call runs at most once per key.

Terminology
-----------
effect
    One call to the outside world (request a credit note), identified by its key
    ``effect_key(case_id, action, decided_on_version)``.
claim
    Creating the effect's ``started`` row. Create first, read only when the create conflicts: the
    happy path pays no read.
outcome
    ``done`` with the result, or ``failed`` with the reason of a definite refusal. Recorded with a
    conditional write on the ``started`` row, so a late attempt cannot overwrite an outcome that
    reconciliation (or a person) recorded meanwhile.

State machine::

    (absent) --claim--> started --call ok--------------> done
                          |  \\--definite refusal-------> failed
                          |   \\--case moved (R4)-------> failed (stale)
                          |--unknown outcome: stays started; after the call timeout -->
                          \\--reconciler/person--------> needs_reconciliation --person--> done | failed

The guard runs effects with :meth:`Ledger.run_on_record`: the claim and the outcome are entries of the case
(``casekeeper.core.entries``), two conditional writes of one document, the second also committing the status.
:meth:`Ledger.run` is the earlier two-container sequence (a row in ``effects``, a separate gate and commit),
kept for the data that layout wrote and the tests of it; on its happy path (four round trips with the
commit)::

    create effect(started) -> read case (version gate) -> call(key) -> replace effect(done, If-Match)
    -> [caller] commit case status (If-Match, the case read by the gate)

A ``started`` row found by someone else is judged by the **store's** clock: younger than the call
timeout means another attempt is mid-call (``EffectInFlight``, with a retry-after); older means the
outcome is unknown (``NeedsReconciliation``). Nothing here ever retries a started effect blindly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from casekeeper.core import entries
from casekeeper.core.cases import CASES, Case, CaseRepository
from casekeeper.core.effect import (
    EFFECTS,
    OPEN_STATUSES,
    Effect,
    EffectStatus,
    _evolve,
    _superseded_by_ignorance,
    escalated,
    late_done,
    late_outcome_alert,
    left_version_alert,
    with_outcome,
)
from casekeeper.core.entries import CommitPlan
from casekeeper.core.errors import (
    AlreadyExists,
    ConcurrencyConflict,
    DownstreamRejected,
    EffectFailed,
    EffectInFlight,
    NeedsReconciliation,
    OutcomeAlreadyRecorded,
    SendDeadlinePassed,
    StaleDecision,
)
from casekeeper.core.keys import effect_key
from casekeeper.core.on_record import OnRecord, RecordOutcome
from casekeeper.core.ports import DocumentStore, OnMalformed, Query, decode_all, walk

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
    "_evolve",
    "_superseded_by_ignorance",
    "late_outcome_alert",
]


class AlertSink(Protocol):
    """Raises an alert, the shape of ``Alerter.raise_alert``: recorded once per kind and ``dedupe_key``."""

    def __call__(self, alert_kind: str, message: str, fields: Mapping[str, Any], *, dedupe_key: str) -> object: ...


Call = Callable[[str], Mapping[str, Any]]
"""A guarded call: receives the effect key (to forward as ``Idempotency-Key``) and returns a JSON
object. It raises ``DownstreamRejected`` for a definite refusal and ``OutcomeUnknown`` (or anything
else) when it cannot tell whether the effect happened."""


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


class Ledger:
    """The effect ledger's policy, written once over any :class:`DocumentStore`."""

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

    @property
    def store(self) -> DocumentStore:
        """The store the ledger writes to."""
        return self._store

    # --- the guarded call ---------------------------------------------------------------------

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
        self._probe("F1")
        # Taken before the claim is written, so never later than the row's start by the store's clock: the
        # deadline measured from it comes no later than the moment a reconciler may act on the row.
        claimed_at = self._monotonic()
        try:
            claimed = Effect.from_document(self._store.create(EFFECTS, case_id, key, body))
        except AlreadyExists as exc:
            existing = self.get(case_id, key)
            if existing is None:  # deleted in between: only an operator does that; let the caller retry
                raise ConcurrencyConflict(
                    f"effect {key} vanished after a conflict", container=EFFECTS, doc_id=key
                ) from exc
            return self._replay(existing)
        self._observe("started", claimed)
        return self._call_claimed(claimed, call, claimed_at)

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
        if effect.in_record:
            done = self._on_record.retry(effect, call, commit, source=source)
            return EffectOutcome(done.effect, replayed=done.replayed, case=done.case, commit=done.commit)
        attempts = effect.attempts + 1
        reclaimed = _evolve(
            effect, attempts=attempts, history_entry={"status": "started", "attempt": attempts, "source": source}
        )
        claimed_at = self._monotonic()
        try:
            doc = self._store.replace(EFFECTS, effect.case_id, effect.key, reclaimed.to_body(), etag=effect.etag)
        except ConcurrencyConflict:
            current = self.get(effect.case_id, effect.key)
            if current is None:
                raise
            return self._replay(current)
        return self._call_claimed(Effect.from_document(doc), call, claimed_at)

    def _call_claimed(self, effect: Effect, call: Call, claimed_at: float) -> EffectOutcome:
        # The gate is a conditional write, not a read (see CaseRepository.pass_gate): its success proves
        # the case was still at the decided version at that moment, whatever replica a read would hit.
        case = self._cases.pass_gate(effect.case_id, effect.case_version, effect_key=effect.key)
        if case is None:
            current = self._cases.get(effect.case_id)
            current_version = current.version if current is not None else None
            # Close the claim: left started, reconciliation would later see an unknown outcome.
            reason = f"stale: decided on v{effect.case_version}, case is at v{current_version}"
            self._try_record(effect, EffectStatus.FAILED, reason=reason, stale=True, source="version-gate")
            self._observe("stale", effect)
            raise StaleDecision(
                key=effect.key,
                case_id=effect.case_id,
                action=effect.action,
                decided_on_version=effect.case_version,
                current_version=current_version,
            )
        self._probe("F2")
        self._check_send_deadline(effect, claimed_at)
        try:
            result = call(effect.key)
        except DownstreamRejected as exc:
            recorded, ours = self._try_record(effect, EffectStatus.FAILED, reason=exc.reason, source="call")
            if not ours:  # someone recorded an outcome meanwhile: theirs stands
                return self._replay(recorded)
            self._observe("failed", recorded)
            raise EffectFailed(key=effect.key, case_id=effect.case_id, action=effect.action, reason=exc.reason) from exc
        # Any other exception: outcome unknown. The row stays started; it propagates unchanged.
        self._probe("F4")
        recorded, ours = self._try_record(effect, EffectStatus.DONE, result=dict(result), source="call")
        if not ours:
            return self._replay(recorded)
        self._observe("done", recorded)
        return EffectOutcome(recorded, replayed=False, case=case)

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

    def _try_record(
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
        try:
            return self.record_outcome(effect, status, result=result, reason=reason, stale=stale, source=source), True
        except OutcomeAlreadyRecorded:
            current = self.get(effect.case_id, effect.key)
            if current is None:
                raise
            if status is EffectStatus.DONE and result is not None and _superseded_by_ignorance(current):
                # Our call succeeded after the row was closed by someone who could not know it (a
                # reconciliation retry refused as stale, or an escalation to a person). The effect
                # happened: record it, or the record would say it did not.
                late = self._record_late_done(current, result, source=source)
                if late is not None:
                    return late, True
                current = self.get(effect.case_id, effect.key) or current
            self._outcome_discarded(effect, current, status)
            return current, False

    def _record_late_done(self, current: Effect, result: dict[str, Any], *, source: str) -> Effect | None:
        updated = late_done(current, result, source=source)
        try:
            doc = self._store.replace(EFFECTS, current.case_id, current.key, updated.to_body(), etag=current.etag)
        except ConcurrencyConflict:
            return None
        self._late_outcome_recorded(current)
        return Effect.from_document(doc)

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

    def _replay(self, existing: Effect) -> EffectOutcome:
        ctx = {"key": existing.key, "case_id": existing.case_id, "action": existing.action}
        if existing.status is EffectStatus.DONE:
            return EffectOutcome(existing, replayed=True)
        if existing.status is EffectStatus.FAILED:
            if existing.stale:
                raise StaleDecision(**ctx, decided_on_version=existing.case_version, current_version=None)
            raise EffectFailed(**ctx, reason=existing.reason or "failed")
        if existing.status is EffectStatus.NEEDS_RECONCILIATION:
            raise NeedsReconciliation(**ctx, age=None, reason=existing.reason or "marked for reconciliation")
        age = self._store.now() - existing.ts
        if age < self._call_timeout:
            raise EffectInFlight(
                key=ctx["key"],
                case_id=ctx["case_id"],
                action=ctx["action"],
                retry_after=max(self._call_timeout - age, 0.0),
            )
        raise NeedsReconciliation(
            **ctx, age=age, reason=f"started {age:.0f}s ago (call timeout {self._call_timeout:.0f}s), outcome unknown"
        )

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

    def _alert_left_version(self, effect: Effect, case_version: int, reason: str) -> None:
        """The ``effect_on_left_version`` alert: the effect happened on facts the case has since left."""
        if self._alert is not None:
            message, fields = left_version_alert(effect, case_version, reason)
            self._alert("effect_on_left_version", message, fields, dedupe_key=effect.key)

    # --- what reconciliation and operators need -----------------------------------------------

    def get(self, case_id: str, key: str) -> Effect | None:
        """The effect ``key`` of ``case_id``: its entry on the case, else its row in ``effects`` (the archive,
        or a row of the earlier layout)."""
        case = self._cases.get(case_id)
        if case is not None:
            found = entries.entry_of(case, key)
            if found is not None:
                return found
        doc = self._store.read(EFFECTS, case_id, key)
        return Effect.from_document(doc) if doc is not None else None

    def effects_of(self, case: Case) -> list[Effect]:
        """The effects on ``case`` as already read (no store access), oldest first. Complete unless
        ``case.effects_archived`` (then :meth:`for_case` adds the archive) or the case was written by the
        earlier layout (``schema_version`` 1: its effects are rows of ``effects``)."""
        return entries.effects_of(case)

    def effects_for(self, case: Case) -> list[Effect]:
        """Every effect of ``case`` as already read: its entries with no store access, unless some may be
        elsewhere (closed entries moved to the archive, a case of the two-container layout, or one whose legacy
        gate is open): then :meth:`for_case` (one more read and one query)."""
        if case.schema_version >= 2 and not case.effects_archived and case.gate is None:
            return entries.effects_of(case)
        return self.for_case(case.id)

    def for_case(self, case_id: str) -> list[Effect]:
        """Every effect of the case: its entries, plus the archive and the rows of the two-container layout
        (one query), deduplicated by key, the case's entry winning; oldest first."""
        case = self._cases.get(case_id)
        on_case = entries.effects_of(case) if case is not None else []
        # Always one query of ``effects`` while :meth:`run` (the two-container sequence) still writes rows
        # there; once every effect runs on its record, a case with ``effects_archived == 0`` and schema 2
        # can skip it (and a fresh decision should use :meth:`effects_of`, which reads nothing).
        docs = self._store.query(EFFECTS, Query(partition=case_id, order_by_ts="asc"))
        keys = {e.key for e in on_case}
        return [Effect.from_document(d) for d in docs if d.id not in keys] + on_case

    def find(self, key: str) -> Effect | None:
        """Find an effect by key alone (operator use): an open entry on a case (one query of the indexed
        ``openEffects`` flag), else a row of ``effects`` (the archive, the two-container layout), else a closed
        entry still on its case (a walk over every case: as slow as the store is large)."""
        found = next((e for e in self.open_entries() if e.key == key), None)
        if found is not None:
            return found
        docs = self._store.query(EFFECTS, Query(equals={"id": key}, limit=1))
        if docs:
            return Effect.from_document(docs[0])
        for doc in walk(self._store, CASES, Query()):
            entry = next((e for e in doc.body.get("effects") or () if e.get("id") == key), None)
            if entry is not None:
                return entries.entry_of(Case.from_document(doc), key)
        return None

    def started_older_than(self, age: float, *, on_malformed: OnMalformed | None = None) -> list[Effect]:
        """``started`` effects whose current attempt began more than ``age`` seconds ago (store clock)."""
        cutoff = self._store.now() - age
        docs = self._store.query(
            EFFECTS, Query(equals={"status": EffectStatus.STARTED.value}, ts_before=cutoff, order_by_ts="asc")
        )
        rows = decode_all(docs, Effect.from_document, on_malformed)
        on_cases = [e for e in self.open_entries(on_malformed=on_malformed) if e.status is EffectStatus.STARTED]
        return rows + sorted((e for e in on_cases if e.ts < cutoff), key=lambda e: e.ts)

    def open_entries(self, *, on_malformed: OnMalformed | None = None) -> list[Effect]:
        """The open entries (``started``, ``needs_reconciliation``) on every case: one query of the indexed
        ``openEffects`` flag, as large as what is open. No ``_ts`` bound on the case: a later note moves the
        case's ``_ts`` but not the entry's time (``casekeeper.core.entries``), so the entries are filtered here."""
        docs = self._store.query(CASES, Query(equals={"openEffects": True}))
        found = decode_all(docs, Case.from_document, on_malformed)
        return [e for case in found for e in entries.effects_of(case) if e.status in OPEN_STATUSES]

    def overdue(self, *, on_malformed: OnMalformed | None = None) -> list[Effect]:
        """``started`` effects past their call timeout: their outcome is unknown, and nobody is mid-call."""
        return self.started_older_than(self._call_timeout, on_malformed=on_malformed)

    def stale_gates(self, *, on_malformed: OnMalformed | None = None) -> list[Case]:
        """Cases whose version gate let an effect through longer ago than the call timeout, with neither
        its commit nor its escalation since: a run stopped between the gate and the commit."""
        return self._cases.with_open_gate(self._call_timeout, on_malformed=on_malformed)

    def with_status_since(self, status: EffectStatus, since: float) -> list[Effect]:
        """Effects in ``status`` that changed after store time ``since``, oldest first."""
        docs = self._store.query(EFFECTS, Query(equals={"status": status.value}, ts_after=since, order_by_ts="asc"))
        return [Effect.from_document(d) for d in docs]

    def with_status(self, *statuses: EffectStatus) -> list[Effect]:
        """Effects in ``statuses``: rows of ``effects`` and, for the open statuses, the open entries on cases
        (closed entries still on their case are not listed here: read them with :meth:`for_case`)."""
        found: list[Effect] = []
        for status in statuses:
            docs = self._store.query(EFFECTS, Query(equals={"status": status.value}, order_by_ts="asc"))
            found.extend(Effect.from_document(d) for d in docs)
        if any(status in OPEN_STATUSES for status in statuses):
            found.extend(e for e in self.open_entries() if e.status in statuses)
        return found

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
        if effect.in_record:
            return self._on_record.record(
                effect,
                status,
                result=dict(result) if result is not None else None,
                reason=reason,
                stale=stale,
                source=source,
                resolution=dict(resolution) if resolution is not None else None,
                plan=commit,
            )[0]
        updated = with_outcome(
            effect,
            status,
            result=dict(result) if result is not None else None,
            reason=reason,
            stale=stale,
            source=source,
            resolution=dict(resolution) if resolution is not None else None,
        )
        return self._conditional_replace(effect, updated)

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
        return self._on_record.record(
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
            return self._on_record.mark(effect, reason, source=source)
        return self._conditional_replace(effect, escalated(effect, reason, source=source))

    def _conditional_replace(self, effect: Effect, updated: Effect) -> Effect:
        try:
            doc = self._store.replace(EFFECTS, effect.case_id, effect.key, updated.to_body(), etag=effect.etag)
        except ConcurrencyConflict as exc:
            current = self.get(effect.case_id, effect.key)
            recorded = current.status.value if current is not None else "deleted"
            raise OutcomeAlreadyRecorded(
                key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=recorded
            ) from exc
        return Effect.from_document(doc)
