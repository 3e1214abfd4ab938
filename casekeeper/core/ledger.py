"""The effect ledger (rules R2-R4): an external call runs at most once per key.

Terminology
-----------
effect
    One call to the outside world (request a credit note), identified by its key
    ``effect_key(case_id, action, decided_on_version, part)`` (``part`` names one of several effects of one
    action in one decision; usually ``None``). Its claim records the digest of its arguments.
entry
    The effect as it is stored: an entry of its case document (``casekeeper.core.entries``), one per key.
claim
    Adding the effect's ``started`` entry to its case, in a conditional replace of the case as the decision
    read it: it lands only while the case is at the decided-on version, so the claim is the version gate.
outcome
    ``done`` with the result, or ``failed`` with the reason of a definite refusal. Recorded in a conditional
    replace of the case that finds the entry as the attempt left it, so a late attempt cannot overwrite an
    outcome that reconciliation (or a person) recorded meanwhile; ``done`` commits the case in that write.

State machine of an entry::

    (absent) --claim (case at the decided version)--> started --call ok--------> done  (+ commit, same write)
       |                                                 |  \\--definite refusal--> failed (+ review if asked)
       \\--claim on a version the case left: nothing       |--unknown outcome: stays started; after the call
           is written, StaleDecision                      |  timeout -> reconciler (lookup by key / retry)
                                                          |--same-key retry on a version the case left
                                                          |  --> failed (stale, watched): nothing called now
                                                          \\--reconciler/person--> needs_reconciliation
                                                                                  --person--> done | failed

    failed | needs_reconciliation --an earlier attempt's call succeeded--> done (late; ``late_outcome`` alert)

    failed by a person or a stale retry (``watching``) --found by key within the late watch--> done (late; alert)
                                                       \\--nothing found when the watch ends--> failed, unwatched

Sequence of one guarded effect on the happy path (two store round trips)::

    replace case (+entry started, If-Match) -> call(key) -> replace case (entry done + commit, If-Match)

A 412 on either write means someone wrote the case meanwhile (a note, a fact update, another run, the
reconciler): the writer re-reads and re-applies, a bounded number of times (:data:`MAX_WRITES`).

A ``started`` entry found by someone else is judged by the **store's** clock: younger than the call timeout
means another attempt is mid-call (``EffectInFlight``, with a retry-after); older means the outcome is unknown
(``NeedsReconciliation``). Nothing here ever retries a started effect blindly: :meth:`Ledger.retry_same_key`
is for a reconciler that looked the key up and found nothing, on a downstream that honours keys.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from casekeeper.core import entries
from casekeeper.core.cases import CASES, Case, CaseRepository, checked_body
from casekeeper.core.effect import (
    EFFECTS,
    OPEN_STATUSES,
    Effect,
    EffectStatus,
    escalated,
    late_done,
    late_outcome_alert,
    left_version_alert,
    reclaimed,
    superseded_by_ignorance,
    watch_ended,
    with_outcome,
)
from casekeeper.core.entries import CommitPlan, Committed
from casekeeper.core.errors import (
    AlreadyExists,
    ArgumentsMismatch,
    ConcurrencyConflict,
    DownstreamRejected,
    EffectError,
    EffectFailed,
    EffectInFlight,
    MissingCommitIntent,
    NeedsReconciliation,
    OutcomeAlreadyRecorded,
    SendDeadlinePassed,
    StaleDecision,
)
from casekeeper.core.keys import effect_key
from casekeeper.core.ports import DocumentStore, OnMalformed, Query, decode_all, walk
from casekeeper.core.watch import AlertSink

DEFAULT_CALL_TIMEOUT = 120.0
DEFAULT_LATE_WATCH = 86_400.0
"""How long (seconds, store clock) after a person resolves an effect ``failed`` the guard still looks it up by
key: a call stalled in its client (a frozen worker) can still reach the downstream after the person looked.
Nothing bounds that stall, so the watch is a day, far past any call timeout, and costs a few lookups per
watched entry (:meth:`Ledger.next_watch_lookup`)."""
DEFAULT_SEND_MARGIN_FRACTION = 0.25
"""Without a configured margin, a call is sent only within the first 75% of the call timeout."""
MAX_WRITES = 8
"""Re-reads after a 412 before giving up: each one means another writer landed first (a note, a fact)."""

log = logging.getLogger("casekeeper.ledger")

Call = Callable[[str], Mapping[str, Any]]
"""A guarded call: receives the effect key (to forward as ``Idempotency-Key``) and returns a JSON
object. It raises ``DownstreamRejected`` for a definite refusal and ``OutcomeUnknown`` (or anything
else) when it cannot tell whether the effect happened."""


@dataclass(frozen=True)
class EffectOutcome:
    """What :meth:`Ledger.run` (and a same-key retry) returns for a ``done`` effect: the effect, whether it was
    replayed (no call now), what happened to the commit, and the case after."""

    effect: Effect
    replayed: bool
    commit: Committed
    case: Case

    @property
    def result(self) -> dict[str, Any]:
        """The downstream's answer recorded on the ``done`` effect."""
        assert self.effect.result is not None
        return self.effect.result


class Ledger:
    """The effect ledger's policy, written once over any :class:`DocumentStore`: the guarded call, what
    reconciliation and people write on an entry left open, what decides "in flight", and the reads."""

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
        late_watch: float = DEFAULT_LATE_WATCH,
    ) -> None:
        """``probe`` is called at the named points ``F1`` (decided, before the claim is written), ``F2``
        (claimed, before the call) and ``F4`` (reply received, before it is recorded): the crash tests end
        the process there. ``observer`` hears ``started``, ``done``, ``failed``, ``stale`` and ``not_sent``
        (telemetry). ``alert`` is told of a late outcome recorded over a closed entry and of an effect that
        happened on a version its case has left.

        ``send_margin`` (seconds; default a quarter of the call timeout) is the gate's deadline: a call is
        sent only while the time since its claim was written, by ``monotonic`` (this process's clock), leaves
        at least that much of the call timeout. It must cover how long sending can take (the supplier
        client's pool, connect and write timeouts), so that whatever is sent has reached the downstream
        before anyone may take the entry for an unknown outcome (rule R3).

        ``late_watch`` (seconds; default :data:`DEFAULT_LATE_WATCH`): how long an entry a person resolved
        ``failed`` is still looked up by key (docs/design.md#close-stale-claims)."""
        if call_timeout <= 0:
            raise ValueError("call_timeout must be positive")
        if late_watch < call_timeout:
            raise ValueError("late_watch must be at least call_timeout")
        self._late_watch = late_watch
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

    @property
    def store(self) -> DocumentStore:
        """The store the ledger writes to."""
        return self._store

    @property
    def cases(self) -> CaseRepository:
        """The case repository the ledger's writes go through."""
        return self._cases

    # --- the guarded call ---------------------------------------------------------------------------

    def run(
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
        part: str | None = None,
        args_digest: str | None = None,
        admit: Callable[[Case, str], None] | None = None,
    ) -> EffectOutcome:
        """Run ``call`` at most once for (case, action, version, part): claim, call, then the outcome and
        ``commit`` in one write of the case.

        ``part`` names one of several effects of ``action`` in one decision (it joins the key).
        ``args_digest`` (``casekeeper.core.keys.args_digest``) is recorded with the claim; an entry of the key
        claimed with another digest raises ``ArgumentsMismatch`` (nothing called) instead of replaying.
        ``admit(case, key)`` may refuse a new claim on the case as it is about to be written (it raises;
        nothing written); a replay of an existing entry is not asked.

        ``expected``: the case as the decision read it (saves the read before the claim). ``refusal_review``:
        on a definite refusal, the status the case is handed to a person in (same write), or ``None``.
        Returns the ``done`` effect (recorded now or replayed) with what happened to the commit
        (``committed``, ``already``, ``needs_review``: the case had moved on while the call was in flight,
        ``with_person``). Raises ``StaleDecision`` (the case is not at the decided-on version: nothing
        written, nothing called), ``EffectFailed`` (a definite refusal, now or recorded earlier),
        ``EffectInFlight`` (another attempt is mid-call), ``NeedsReconciliation`` (outcome unknown past the
        call timeout), the call's own exception (entry left ``started``), ``SendDeadlinePassed`` (too long
        since the claim to send: entry left ``started``), and ``ConcurrencyConflict`` if the case keeps
        changing past a bound."""
        key = effect_key(case_id, action, decided_on_version, part)
        self._probe("F1")
        # Taken before the claim is written: never later than the entry's start by the store's clock.
        claimed_at = self._monotonic()
        case = expected if expected is not None and expected.id == case_id else self._cases.require(case_id)
        for _ in range(MAX_WRITES):
            existing = entries.entry_of(case, key)
            if existing is not None:
                if args_digest is not None and existing.args_digest not in (None, args_digest):
                    raise ArgumentsMismatch(
                        key=key, case_id=case_id, action=action, recorded=existing.args_digest, given=args_digest
                    )
                return self._replay(existing, case, commit)
            claim = Effect(
                key=key,
                case_id=case_id,
                action=action,
                case_version=decided_on_version,
                status=EffectStatus.STARTED,
                request=dict(request or {}),
                result=None,
                reason=None,
                stale=False,
                attempts=1,
                resolution=None,
                history=({"status": "started", "attempt": 1},),
                etag=case.etag,
                ts=0.0,
                part=part,
                args_digest=args_digest,
            )
            if case.version != decided_on_version and not (
                part is not None and entries.on_decision(case, decided_on_version)
            ):
                self._observe("stale", claim)  # refused: nothing was written
                raise StaleDecision(
                    key=key,
                    case_id=case_id,
                    action=action,
                    decided_on_version=decided_on_version,
                    current_version=case.version,
                )
            if admit is not None:
                admit(case, key)  # e.g. a pending approval guarding the action: refused, nothing written
            try:
                # A new claim is refused on a case at its size bound (nothing written, nothing called); the
                # writes that follow it (its outcome and commit) never are (docs/design.md#case-bounds).
                case = self._write(case, entries.put(case, claim), limit=self._cases.max_bytes)
            except ConcurrencyConflict:
                case = self._cases.require(case_id)  # a note, a fact, another run: look again
                continue
            break
        else:
            raise ConcurrencyConflict(f"case {case_id!r} kept changing during a claim", container=CASES, doc_id=case_id)
        claimed = entries.entry_of(case, key)
        assert claimed is not None
        self._observe("started", claimed)
        return self._call_claimed(claimed, case, call, claimed_at, plan=commit, refusal_review=refusal_review)

    def retry_same_key(
        self, effect: Effect, call: Call, *, source: str = "reconciler", commit: CommitPlan | None = None
    ) -> EffectOutcome:
        """Re-attempt a ``started`` effect with the same key (reconciliation, rule R3), committing ``commit``
        (else the intent its request names) once done.

        Only for an action whose downstream honours idempotency keys, after a lookup by key found nothing.
        The re-attempt re-claims the entry (``attempts + 1``, its clock restarted) in a write conditional on
        the case still being at the effect's version, then calls and closes as :meth:`run`. On a version the
        case has left the entry is closed as ``failed`` (stale) in that write and ``StaleDecision`` raised:
        nothing is called (the entry is watched: the attempt before may have sent). Raises
        ``OutcomeAlreadyRecorded`` when someone else moved the entry first, ``MissingCommitIntent`` when its
        request names no commit, and ``EffectInFlight`` while the current
        attempt is within its call timeout: it may still send, so its entry is neither re-claimed nor, when
        the gate refuses the retry, closed as stale (which would let the money rule stop counting it)."""
        if effect.status is not EffectStatus.STARTED:
            raise OutcomeAlreadyRecorded(
                key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=effect.status.value
            )
        left = self.in_flight_for(effect)
        if left is not None:
            raise EffectInFlight(key=effect.key, case_id=effect.case_id, action=effect.action, retry_after=left)
        plan = commit if commit is not None else intent_plan(effect)
        if plan is None:
            raise MissingCommitIntent(key=effect.key, case_id=effect.case_id, action=effect.action)
        case = self._current(effect)
        for _ in range(MAX_WRITES):
            current = self._unchanged(case, effect)
            if current.status is not EffectStatus.STARTED:
                raise OutcomeAlreadyRecorded(
                    key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=current.status.value
                )
            claimed_at = self._monotonic()
            if case.version != effect.case_version and not (
                effect.part is not None and entries.on_decision(case, effect.case_version)
            ):
                reason = f"stale: decided on v{effect.case_version}, case is at v{case.version}"
                closed = with_outcome(
                    current, EffectStatus.FAILED, result=None, reason=reason, stale=True, source="version-gate"
                )
                # The attempt closed here may have sent: its outcome was unknown, and a call stalled past its
                # timeout can still land after the lookup found nothing. Watched, as a person's failed is:
                # looked up by key (never called again) for the late watch.
                closed = replace(closed, watching=True)
                try:
                    self._write(case, entries.put(case, closed))
                except ConcurrencyConflict:
                    case = self._current(effect)
                    continue
                self._observe("stale", closed)
                raise StaleDecision(
                    key=effect.key,
                    case_id=effect.case_id,
                    action=effect.action,
                    decided_on_version=effect.case_version,
                    current_version=case.version,
                )
            try:
                case = self._write(case, entries.put(case, reclaimed(current, source=source)))
            except ConcurrencyConflict:
                case = self._current(effect)
                continue
            claimed = entries.entry_of(case, effect.key)
            assert claimed is not None
            return self._call_claimed(claimed, case, call, claimed_at, plan=plan, refusal_review=None)
        raise ConcurrencyConflict(f"case {effect.case_id!r} kept changing", container=CASES, doc_id=effect.case_id)

    # --- what reconciliation and people record on an entry left open --------------------------------

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
        """Record ``done`` (with ``result``) or ``failed`` (with ``reason``) on an effect without one; see
        :meth:`record_done` for what a ``done`` outcome commits. Raises ``OutcomeAlreadyRecorded`` when the
        entry has an outcome already or changed since ``effect`` was read (re-read and look)."""
        if status is EffectStatus.DONE and result is None:
            raise ValueError("a done outcome needs a result")
        if status is EffectStatus.FAILED and not reason:
            raise ValueError("a failed outcome needs a reason")
        if status not in (EffectStatus.DONE, EffectStatus.FAILED):
            raise ValueError(f"not an outcome: {status}")
        return self._record(
            effect,
            status,
            result=dict(result) if result is not None else None,
            reason=reason,
            stale=stale,
            source=source,
            resolution=dict(resolution) if resolution is not None else None,
            plan=commit,
        )[0]

    def record_done(
        self,
        effect: Effect,
        result: Mapping[str, Any],
        *,
        commit: CommitPlan | None,
        source: str,
        resolution: Mapping[str, Any] | None = None,
    ) -> tuple[Effect, Committed | Literal["no_intent"]]:
        """Record ``done`` on an open entry and, in the same write, its commit: ``commit``, else the intent its
        request names; without either the case is handed to a person in that write (nobody can tell what it
        should become, and a done effect must never sit uncommitted). Returns the entry and what happened to
        the commit (``committed``, ``already``, ``needs_review``, ``with_person``, ``no_intent``). Raises
        ``OutcomeAlreadyRecorded``."""
        recorded, committed = self._record(
            effect,
            EffectStatus.DONE,
            result=dict(result),
            reason=None,
            stale=False,
            source=source,
            resolution=dict(resolution) if resolution is not None else None,
            plan=commit,
        )
        assert committed is not None
        return recorded, committed

    def mark_needs_reconciliation(self, effect: Effect, reason: str, *, source: str = "reconciler") -> Effect:
        """Escalate a ``started`` effect to a person. Raises ``OutcomeAlreadyRecorded`` when it moved."""
        case = self._current(effect)
        for _ in range(MAX_WRITES):
            current = self._unchanged(case, effect)
            if current.status is not EffectStatus.STARTED:
                raise OutcomeAlreadyRecorded(
                    key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=current.status.value
                )
            try:
                after = self._write(case, entries.put(case, escalated(current, reason, source=source)))
            except ConcurrencyConflict:
                case = self._current(effect)
                continue
            written = entries.entry_of(after, effect.key)
            assert written is not None
            return written
        raise ConcurrencyConflict(f"case {effect.case_id!r} kept changing", container=CASES, doc_id=effect.case_id)

    # --- the late watch over an entry a person resolved failed ---------------------------------------

    def record_late_found(
        self, watched: Effect, found: Mapping[str, Any], *, commit: CommitPlan | None, source: str
    ) -> tuple[Effect, Committed | Literal["no_intent"]]:
        """A lookup by key found ``watched`` (``failed`` by a person, still watched) at the downstream: record it
        ``done`` (late) over the failed entry, with its commit as a late call's outcome has it, and raise the
        ``late_outcome`` alert before the write. Raises ``OutcomeAlreadyRecorded`` when the entry is no longer
        that watched failure (recorded meanwhile, or its watch ended)."""
        case = self._current(watched)
        plan = commit if commit is not None else intent_plan(watched)
        for _ in range(MAX_WRITES):
            current = self._still_watched(case, watched)
            updated = late_done(current, dict(found), source=source)
            now = self._cases.now()
            committed: Committed | Literal["no_intent"]
            if plan is not None:
                target, committed = self._settled(case, updated, plan, now)
            else:
                why = f"effect {watched.action} ({watched.key[:12]}) is done (late) but names no commit intent"
                target, committed = entries.escalate(case, updated, "needs_review", why, now), "no_intent"
            self._late_outcome_recorded(current)  # before the write: a repeat finds it done and stays quiet
            try:
                after = self._write(case, target)
            except ConcurrencyConflict:
                case = self._current(watched)
                continue
            written = entries.entry_of(after, watched.key)
            assert written is not None
            return written, committed
        raise ConcurrencyConflict(f"case {watched.case_id!r} kept changing", container=CASES, doc_id=watched.case_id)

    def end_watch(self, watched: Effect, *, source: str = "late-watch") -> Effect:
        """Stop looking ``watched`` up: it stays ``failed`` and no longer marks its case as watched. Raises
        ``OutcomeAlreadyRecorded`` when it is no longer that watched failure."""
        case = self._current(watched)
        for _ in range(MAX_WRITES):
            current = self._still_watched(case, watched)
            try:
                after = self._write(case, entries.put(case, watch_ended(current, source=source)))
            except ConcurrencyConflict:
                case = self._current(watched)
                continue
            written = entries.entry_of(after, watched.key)
            assert written is not None
            return written
        raise ConcurrencyConflict(f"case {watched.case_id!r} kept changing", container=CASES, doc_id=watched.case_id)

    def watch_left(self, watched: Effect) -> float:
        """Seconds (store clock) left of the late watch of an entry a person resolved ``failed``; at most 0 once
        it is over. Its ``ts`` is when the person's outcome was written."""
        return self._late_watch - self.age(watched)

    def next_watch_lookup(self, watched: Effect) -> float:
        """Seconds until the next lookup of a watched entry: one call timeout after the person's resolve, then
        each time as long again as the entry has been watched (so a day's watch costs about ten lookups),
        never past the watch's end."""
        age = self.age(watched)
        return max(0.0, min(self._late_watch - age, max(self._call_timeout - age, age)))

    def _still_watched(self, case: Case, watched: Effect) -> Effect:
        current = entries.entry_of(case, watched.key)
        if (
            current is None
            or current.status is not EffectStatus.FAILED
            or not current.watching
            or current.attempts != watched.attempts
        ):
            recorded = current.status.value if current is not None else "closed"
            raise OutcomeAlreadyRecorded(
                key=watched.key, case_id=watched.case_id, action=watched.action, recorded_status=recorded
            )
        return current

    # --- in flight or unknown -----------------------------------------------------------------------

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
        time and its outcome counts as unknown: the moment a re-check can decide it. For a ``watching`` one (a
        person resolved it failed), its first lookup: a call timeout after the person's outcome."""
        return effect.ts + self._call_timeout

    # --- reads --------------------------------------------------------------------------------------

    def get(self, case_id: str, key: str) -> Effect | None:
        """The effect ``key`` of ``case_id``: its entry on the case, else its document in the archive."""
        case = self._cases.get(case_id)
        if case is not None:
            found = entries.entry_of(case, key)
            if found is not None:
                return found
            if not case.effects_archived:
                return None
        doc = self._store.read(EFFECTS, case_id, key)
        return Effect.from_document(doc) if doc is not None else None

    def effects_of(self, case: Case) -> list[Effect]:
        """The effects on ``case`` as already read (no store access), oldest first. Complete unless
        ``case.effects_archived`` (then :meth:`effects_for` adds the archive)."""
        return entries.effects_of(case)

    def effects_for(self, case: Case) -> list[Effect]:
        """Every effect of ``case`` as already read: its entries with no store access, plus, when some were
        moved to the archive, the archive's (one query)."""
        on_case = entries.effects_of(case)
        if not case.effects_archived:
            return on_case
        keys = {e.key for e in on_case}
        docs = self._store.query(EFFECTS, Query(partition=case.id, order_by_ts="asc"))
        return [Effect.from_document(d) for d in docs if d.id not in keys] + on_case

    def for_case(self, case_id: str) -> list[Effect]:
        """Every effect of the case (read now), oldest first; none for a case that does not exist."""
        case = self._cases.get(case_id)
        return self.effects_for(case) if case is not None else []

    def find(self, key: str, *, case_id: str | None = None) -> Effect | None:
        """Find an effect by its key (operator use).

        With ``case_id`` (the case the effect belongs to, which the key alone cannot give): only there, as
        :meth:`get` does; ``None`` if it is not that case's. Without it: an open entry on a case (one query of
        the indexed ``openEffects`` flag), else the archive, else a closed entry still on its case (a walk over
        every case: as slow as the store is large, and what a mistyped or unknown key always pays)."""
        if case_id is not None:
            return self.get(case_id, key)
        found = next((e for e in self.open_entries() if e.key == key), None)
        if found is not None:
            return found
        docs = self._store.query(EFFECTS, Query(equals={"id": key}, limit=1))
        if docs:
            return Effect.from_document(docs[0])
        for doc in walk(self._store, CASES, Query()):
            if any(e.get("id") == key for e in doc.body.get("effects") or ()):
                return entries.entry_of(Case.from_document(doc), key)
        return None

    def open_entries(self, *, on_malformed: OnMalformed | None = None) -> list[Effect]:
        """The open entries (``started``, ``needs_reconciliation``) on every case: one query of the indexed
        ``openEffects`` flag, as large as what is open. No ``_ts`` bound on the case: a later note moves the
        case's ``_ts`` but not the entry's time (``casekeeper.core.entries``), so the entries are filtered
        here."""
        docs = self._store.query(CASES, Query(equals={"openEffects": True}))
        found = decode_all(docs, Case.from_document, on_malformed)
        return [e for case in found for e in entries.effects_of(case) if e.status in OPEN_STATUSES]

    def overdue(self, *, on_malformed: OnMalformed | None = None) -> list[Effect]:
        """``started`` effects past their call timeout, oldest first: their outcome is unknown, and nobody is
        mid-call."""
        cutoff = self._store.now() - self._call_timeout
        started = [e for e in self.open_entries(on_malformed=on_malformed) if e.status is EffectStatus.STARTED]
        return sorted((e for e in started if e.ts < cutoff), key=lambda e: e.ts)

    def watched_due(self, *, on_malformed: OnMalformed | None = None) -> list[Effect]:
        """Entries a person resolved ``failed`` that are still watched (:meth:`record_late_found`), past their
        first lookup's time: from the same indexed ``openEffects`` query, as large as what is open or
        watched."""
        cutoff = self._store.now() - self._call_timeout
        docs = self._store.query(CASES, Query(equals={"openEffects": True}))
        found = decode_all(docs, Case.from_document, on_malformed)
        return [e for case in found for e in entries.effects_of(case) if e.watching and e.ts < cutoff]

    def with_status(self, *statuses: EffectStatus) -> list[Effect]:
        """Effects in ``statuses``: for the open statuses, the open entries on cases; for the closed ones, the
        archive (closed entries still on their case are not listed here: read them with :meth:`for_case`)."""
        found: list[Effect] = []
        for status in statuses:
            if status in OPEN_STATUSES:
                continue
            docs = self._store.query(EFFECTS, Query(equals={"status": status.value}, order_by_ts="asc"))
            found.extend(Effect.from_document(d) for d in docs)
        if any(status in OPEN_STATUSES for status in statuses):
            found.extend(e for e in self.open_entries() if e.status in statuses)
        return found

    # --- the writes behind the methods above --------------------------------------------------------

    def _call_claimed(
        self,
        claimed: Effect,
        case: Case,
        call: Call,
        claimed_at: float,
        *,
        plan: CommitPlan,
        refusal_review: str | None,
    ) -> EffectOutcome:
        self._probe("F2")
        self._check_send_deadline(claimed, claimed_at)
        try:
            result = call(claimed.key)
        except DownstreamRejected as exc:
            recorded, ours, _, after = self._close(
                claimed, case, EffectStatus.FAILED, reason=exc.reason, plan=plan, refusal_review=refusal_review
            )
            if not ours:
                return self._replay(recorded, after, plan)
            self._observe("failed", recorded)
            raise EffectFailed(
                key=claimed.key, case_id=claimed.case_id, action=claimed.action, reason=exc.reason
            ) from exc
        # Any other exception: outcome unknown. The entry stays started; it propagates unchanged.
        self._probe("F4")
        recorded, ours, commit, after = self._close(claimed, case, EffectStatus.DONE, result=dict(result), plan=plan)
        if not ours:
            return self._replay(recorded, after, plan)
        self._observe("done", recorded)
        assert commit is not None
        return EffectOutcome(recorded, False, commit, after)

    def _close(
        self,
        claimed: Effect,
        case: Case,
        status: EffectStatus,
        *,
        plan: CommitPlan,
        result: dict[str, Any] | None = None,
        reason: str | None = None,
        refusal_review: str | None = None,
    ) -> tuple[Effect, bool, Committed | None, Case]:
        """Record the call's outcome on the attempt ``claimed`` (and, for ``done``, the commit) in one
        conditional write of the case. Returns the entry, whether ours is the outcome recorded (someone who
        closed it meanwhile stands, unless they closed it without knowing: then a late ``done`` is recorded
        over theirs), the commit, and the case after."""
        for _ in range(MAX_WRITES):
            current = entries.entry_of(case, claimed.key)
            if current is None:
                raise ConcurrencyConflict(
                    f"effect {claimed.key} is gone from case {case.id}", container=CASES, doc_id=case.id
                )
            ours = current.status is EffectStatus.STARTED and current.attempts == claimed.attempts
            late = not ours and status is EffectStatus.DONE and superseded_by_ignorance(current)
            if not ours and not late:
                self._outcome_discarded(claimed, current, status)
                return current, False, None, case
            if late:
                assert result is not None
                updated = late_done(current, result, source="call")
            else:
                updated = with_outcome(current, status, result=result, reason=reason, stale=False, source="call")
            commit: Committed | None = None
            now = self._cases.now()
            if status is EffectStatus.DONE:
                target, commit = self._settled(case, updated, plan, now)
            elif refusal_review is not None:
                target = entries.escalate(case, updated, refusal_review, f"{updated.action} refused: {reason}", now)
            else:
                target = entries.put(case, updated)
            if late:
                # Before the write, as for a left version: once the late done is written, a repeat of this call
                # replays it and would never raise the alert (it is deduplicated by the key).
                self._late_outcome_recorded(current)
            try:
                after = self._write(case, target)
            except ConcurrencyConflict:
                case = self._cases.require(case.id)  # re-read and re-apply
                continue
            written = entries.entry_of(after, claimed.key)
            assert written is not None
            return written, True, commit, after
        raise ConcurrencyConflict(f"case {case.id!r} kept changing during an outcome", container=CASES, doc_id=case.id)

    def _record(
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
        """An outcome on an open entry unchanged since ``effect`` was read (its status and attempt; a note moves
        the case's ETag, not the entry), with the commit for ``done``. Raises ``OutcomeAlreadyRecorded``."""
        case = self._current(effect)
        review = plan.review_status if plan is not None else "needs_review"
        if status is EffectStatus.DONE and plan is None:
            plan = intent_plan(effect)
        for _ in range(MAX_WRITES):
            current = self._unchanged(case, effect)
            updated = with_outcome(
                current, status, result=result, reason=reason, stale=stale, source=source, resolution=resolution
            )
            if status is EffectStatus.FAILED and resolution is not None and not stale:
                # A person found nothing, but a stalled call may still land: looked up for the late watch.
                updated = replace(updated, watching=True)
            now = self._cases.now()
            commit: Committed | Literal["no_intent"] | None = None
            if status is EffectStatus.DONE and plan is not None:
                target, commit = self._settled(case, updated, plan, now)
            elif status is EffectStatus.DONE:
                why = f"effect {effect.action} ({effect.key[:12]}) is done but names no commit intent"
                target, commit = entries.escalate(case, updated, review, why, now), "no_intent"
            else:
                target = entries.put(case, updated)
            try:
                after = self._write(case, target)
            except ConcurrencyConflict:
                case = self._current(effect)
                continue
            written = entries.entry_of(after, effect.key)
            assert written is not None
            return written, commit
        raise ConcurrencyConflict(f"case {effect.case_id!r} kept changing", container=CASES, doc_id=effect.case_id)

    def _settled(self, case: Case, done: Effect, plan: CommitPlan, now: float) -> tuple[Case, Committed]:
        """``case`` with ``done`` and its commit (:func:`entries.settle`); the ``effect_on_left_version`` alert
        when the case had moved on, raised before the write: a repeat after a crash finds the escalation and
        stops early, so an alert raised after it could be lost (the alert is deduplicated by the key)."""
        target, commit, left = entries.settle(case, done, plan, now)
        if left is not None and self._alert is not None:
            message, fields = left_version_alert(done, case.version, left)
            self._alert("effect_on_left_version", message, fields, dedupe_key=done.key)
        return target, commit

    def _replay(self, existing: Effect, case: Case, plan: CommitPlan) -> EffectOutcome:
        """An entry found by a later attempt: ``done`` is replayed with what became of its commit (a ``done``
        entry is always written together with its commit or its escalation: it is read back from the
        transitions that name it), the others raise."""
        if existing.status is EffectStatus.DONE:
            named = case.transitions_of(existing.key)
            landed = entries.landed(case, existing, plan.status)
            if not landed and not named:
                raise MissingCommitIntent(key=existing.key, case_id=existing.case_id, action=existing.action)
            return EffectOutcome(existing, True, "already" if landed else "with_person", case)
        raise self._not_done(existing, current_version=case.version)

    def _not_done(self, existing: Effect, *, current_version: int) -> EffectError:
        """What a later attempt that finds ``existing`` without a ``done`` outcome raises: the refusal or the
        staleness recorded, the escalation, or, for a ``started`` one by its age on the store's clock,
        ``EffectInFlight`` (another attempt is mid-call) or ``NeedsReconciliation`` (the outcome is unknown)."""
        ctx: dict[str, Any] = {"key": existing.key, "case_id": existing.case_id, "action": existing.action}
        if existing.status is EffectStatus.FAILED:
            if existing.stale:
                return StaleDecision(**ctx, decided_on_version=existing.case_version, current_version=current_version)
            return EffectFailed(**ctx, reason=existing.reason or "failed")
        if existing.status is EffectStatus.NEEDS_RECONCILIATION:
            return NeedsReconciliation(**ctx, age=None, reason=existing.reason or "marked for reconciliation")
        left = self.in_flight_for(existing)
        if left is not None:
            return EffectInFlight(**ctx, retry_after=left)
        age = self.age(existing)
        return NeedsReconciliation(
            **ctx, age=age, reason=f"started {age:.0f}s ago (call timeout {self._call_timeout:.0f}s), outcome unknown"
        )

    def _check_send_deadline(self, effect: Effect, claimed_at: float) -> None:
        """The gate's deadline, checked just before sending: a worker that paused after its gate (GC, a
        frozen VM, SIGSTOP) must not send once a reconciler may have looked the key up, found nothing, and
        closed the entry; the case may have asked again since."""
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
            "outcome discarded: effect %s is already %s",
            claimed.key,
            current.status.value,
            extra={"caseId": claimed.case_id, "effectKey": claimed.key, "discarded": status.value},
        )

    def _late_outcome_recorded(self, closed: Effect) -> None:
        """A late ``done`` is being recorded over ``closed``: the log and the ``late_outcome`` alert (deduplicated
        by the key)."""
        log.warning(
            "effect %s: late outcome recorded over %s",
            closed.key,
            closed.status.value,
            extra={"caseId": closed.case_id, "effectKey": closed.key},
        )
        if self._alert is not None:
            self._alert("late_outcome", *late_outcome_alert(closed), dedupe_key=closed.key)

    def _current(self, effect: Effect) -> Case:
        case = self._cases.get(effect.case_id)
        if case is None:
            raise OutcomeAlreadyRecorded(
                key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status="deleted"
            )
        return case

    def _unchanged(self, case: Case, effect: Effect) -> Effect:
        """The entry of ``effect`` on ``case`` if it is still open and on the same attempt as when read (a note
        moves the case's ETag, not the entry); raises ``OutcomeAlreadyRecorded`` otherwise (an archived entry
        is closed, so it is not on the case to find)."""
        current = entries.entry_of(case, effect.key)
        if (
            current is None
            or current.status not in OPEN_STATUSES
            or current.status is not effect.status
            or current.attempts != effect.attempts
        ):
            recorded = current.status.value if current is not None else "closed"
            raise OutcomeAlreadyRecorded(
                key=effect.key, case_id=effect.case_id, action=effect.action, recorded_status=recorded
            )
        return current

    def _write(self, read: Case, updated: Case, *, limit: int | None = None) -> Case:
        """Replace the case (``If-Match`` on ``read``) with ``updated``, after moving the closed entries
        beyond the bound to the archive (create first; ``AlreadyExists`` means a previous attempt did).
        Raises ``ConcurrencyConflict`` on a 412: the caller re-reads and re-applies; ``CaseTooLarge`` when
        ``limit`` is set and the case would pass it (nothing written)."""
        archived = entries.over_bound(updated)
        if archived:
            updated = entries.without(updated, {str(e["id"]) for e in archived})
            checked_body(updated, limit=limit)  # refused before anything is archived
        for entry in archived:
            with contextlib.suppress(AlreadyExists):  # a previous attempt archived it
                self._store.create(EFFECTS, read.id, str(entry["id"]), entries.archive_body(entry))
        return self._cases.replace(read, updated, limit=limit)


def intent_plan(effect: Effect) -> CommitPlan | None:
    """The commit the effect's request names (its ``commit`` intent), if it names one."""
    intent = effect.request.get("commit")
    return CommitPlan.from_intent(intent) if isinstance(intent, Mapping) and intent.get("status") else None
