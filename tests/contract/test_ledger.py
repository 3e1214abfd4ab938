"""The ledger's contract (rules R2-R4), through the public guard, on every backend.

Every test runs a declared effect the way an application does (``Guard``, ``guard.register``, ``run`` /
``run_on``, ``reconcile_effect``), on the path the product runs: the claim and the outcome are entries of
the case document, two conditional writes of it per effect. What a reconciler or a person records on an
entry left open goes through ``guard.ledger``, as the app's operator commands do.

The downstream is :class:`~tests.support.downstream.CountingDownstream`, a function that counts its calls per
key (the supplier stub over a real socket is the race tests' and the end-to-end tests'); the store is wrapped
by :class:`~tests.support.counting.Counting` where a test counts the operations (every call still reaches
the real store).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casekeeper import (
    Case,
    CaseNotFound,
    ConcurrencyConflict,
    DocumentStore,
    DownstreamRejected,
    EffectFailed,
    EffectInFlight,
    EffectStatus,
    Guard,
    GuardedEffect,
    NeedsReconciliation,
    OutcomeAlreadyRecorded,
    OutcomeUnknown,
    Query,
    SendDeadlinePassed,
    StaleDecision,
    effect_key,
)
from casekeeper.cases import CLOSED_KEPT
from casekeeper.stores import CASES, EFFECTS
from tests.support.counting import Counting
from tests.support.downstream import CountingDownstream

ACTION = "request_credit_note"
ARGS = {"amount": "10.00", "currency": "EUR"}


class Bench:
    """A guard over ``store`` (counted) with the credit-note effect declared on it, calling whatever
    :attr:`downstream` is at the time of the call, and finding by key what it has made (``made``)."""

    def __init__(self, store: DocumentStore, **options: Any) -> None:
        self.counting = Counting(store)
        self.alerts: list[tuple[str, str, dict[str, Any], str]] = []
        self.escalated: list[dict[str, Any]] = []
        options.setdefault("call_timeout", 120)
        self.guard = Guard(
            self.counting,
            alert=lambda kind, message, fields, *, dedupe_key: self.alerts.append(
                (kind, message, dict(fields), dedupe_key)
            ),
            on_escalate=lambda message, fields: self.escalated.append(fields),
            **options,
        )
        self.downstream: Callable[[str], Mapping[str, Any]] = CountingDownstream()
        self.made: dict[str, dict[str, Any]] = {}
        self.lookups = 0
        self.effect = self.declare(ACTION)

    def declare(self, action: str, *, commit: str = "credit_requested", **options: Any) -> GuardedEffect:
        def call(key: str, args: Mapping[str, Any]) -> Mapping[str, Any]:
            result = dict(self.downstream(key))
            self.made.setdefault(key, result)
            return result

        def lookup(key: str) -> Mapping[str, Any] | None:
            self.lookups += 1
            return self.made.get(key)

        options.setdefault("retry_same_key", True)
        return self.guard.register(
            action,
            call,
            commit=commit,
            lookup=lookup,
            flat_request=True,
            commit_data=lambda result: {"creditNoteId": result.get("creditNoteId")},
            **options,
        )

    def run(self, *, version: int = 1, case_id: str = "c1", case: Case | None = None, **options: Any) -> Any:
        effect = options.pop("effect", self.effect)
        return effect.run_on(case_id, version, ARGS, reason="over-billed", proposed_by="rules", case=case)

    def entry(self, case_id: str = "c1", version: int = 1, action: str = ACTION) -> Any:
        return self.guard.ledger.get(case_id, effect_key(case_id, action, version))

    def alert_kinds(self) -> list[str]:
        return [kind for kind, *_ in self.alerts]


@pytest.fixture
def bench(store: DocumentStore) -> Bench:
    made = Bench(store)
    made.guard.create("c1", {"amount": "10.00"})
    return made


def unknown() -> Exception:
    return OutcomeUnknown("timed out")


# --- one effect, once ------------------------------------------------------------------------------


def test_a_first_run_is_two_writes_of_the_case_and_nothing_else(bench: Bench) -> None:
    decision = bench.guard.decide("c1")
    downstream = CountingDownstream()
    bench.downstream = downstream
    bench.counting.reset()
    result = bench.effect.run(decision, ARGS, reason="over-billed", proposed_by="rules")
    key = effect_key("c1", ACTION, 1)
    assert downstream.calls == {key: 1}
    assert (result.key, result.replayed, result.commit) == (key, False, "committed")
    assert bench.counting.ops == Counter({("replace", CASES): 2})
    after = bench.guard.get("c1")
    assert after is not None and (after.status, after.version) == ("credit_requested", 2)
    assert after.data["creditNoteId"] == result.result["creditNoteId"]
    (transition,) = after.transitions_of(key)
    assert transition.from_version == 1 and transition.proposed_by == "rules"
    entry = bench.entry()
    assert entry is not None and entry.status is EffectStatus.DONE and entry.attempts == 1
    assert entry.request["amount"] == "10.00"
    assert bench.counting.inner.query(EFFECTS, Query(partition="c1")) == []
    assert after.to_body()["openEffects"] is False


def test_a_second_run_replays_without_calling_or_writing(bench: Bench) -> None:
    first = bench.run()
    bench.counting.reset()
    again = bench.run(case=bench.guard.get("c1"))
    assert (again.replayed, again.commit, again.result) == (True, "already", first.result)
    assert bench.downstream.total == 1  # type: ignore[attr-defined]
    assert bench.counting.ops[("replace", CASES)] == 0


def test_a_definite_refusal_is_recorded_with_its_escalation_in_one_write_and_re_raised(bench: Bench) -> None:
    bench.downstream = CountingDownstream(fail_with=lambda: DownstreamRejected("supplier closed", status=422))
    bench.counting.reset()
    with pytest.raises(EffectFailed) as first:
        bench.run()
    assert first.value.reason == "supplier closed" and isinstance(first.value.__cause__, DownstreamRejected)
    assert bench.counting.ops[("replace", CASES)] == 2  # the claim; the refusal with the escalation
    with pytest.raises(EffectFailed, match="supplier closed"):
        bench.run()
    assert bench.downstream.total == 1  # type: ignore[attr-defined]
    after = bench.guard.get("c1")
    assert after is not None and after.status == "needs_review"
    entry = bench.entry()
    assert entry is not None and entry.status is EffectStatus.FAILED and entry.reason == "supplier closed"


def test_an_unknown_outcome_stays_started_then_in_flight_then_needs_reconciliation(store: DocumentStore) -> None:
    bench = Bench(store, call_timeout=2.0)
    bench.guard.create("c1", {})
    bench.downstream = CountingDownstream(fail_with=unknown)
    with pytest.raises(OutcomeUnknown):
        bench.run()
    key = effect_key("c1", ACTION, 1)
    assert bench.entry().status is EffectStatus.STARTED
    with pytest.raises(EffectInFlight) as in_flight:
        bench.run()
    assert 0.0 < in_flight.value.retry_after <= 2.0 and in_flight.value.retryable is True
    time.sleep(3.1)  # past the call timeout by the store's clock (Cosmos _ts: whole seconds)
    with pytest.raises(NeedsReconciliation) as unknown_now:
        bench.run()
    assert unknown_now.value.age is not None and unknown_now.value.age >= 2.0
    assert bench.downstream.total == 1  # type: ignore[attr-defined]  # never retried blindly
    assert [e.key for e in bench.guard.ledger.overdue()] == [key]


def test_a_claim_on_a_version_the_case_left_writes_and_calls_nothing(bench: Bench) -> None:
    decided = bench.guard.decide("c1")
    assert bench.guard.update("c1", 1, {"amount": "12.00"}, reason="PO edit") is not None  # now v2
    before = bench.guard.get("c1")
    assert before is not None
    with pytest.raises(StaleDecision) as stale:
        bench.effect.run(decided, ARGS)  # the case as the decision read it: now a lost ETag
    assert (stale.value.decided_on_version, stale.value.current_version) == (1, 2)
    assert bench.downstream.total == 0  # type: ignore[attr-defined]
    after = bench.guard.get("c1")
    assert after is not None and after.entries == () and after.etag == before.etag
    assert bench.guard.ledger.open_entries() == []  # nothing for reconciliation to misread
    assert bench.run(version=2).commit == "committed"


class LaggingReplica:
    """The store as an instance sees it under Cosmos DB's Session consistency when another instance made the
    last write: its first point read of the case comes from a replica that has not caught up. Writes, and
    their conditions, are judged on the latest state. (A wrapper: neither backend can be told to lag.)"""

    def __init__(self, inner: DocumentStore, stale: dict[str, Any]) -> None:
        self.inner = inner
        self.stale = stale

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read(self, container: str, partition: str, doc_id: str) -> Any:
        if container == CASES and doc_id in self.stale:
            return self.stale.pop(doc_id)
        return self.inner.read(container, partition, doc_id)


def test_a_lagging_replica_cannot_let_a_stale_call_through(store: DocumentStore) -> None:
    """The version gate is a conditional write: a read served by a lagging replica shows v1, but the claim on
    it is refused by the latest state, and the re-read after the refusal shows the case has moved."""
    writer = Guard(store)
    writer.create("c1", {})
    before = store.read(CASES, "c1", "c1")
    assert writer.update("c1", 1, {"poAmount": "90.00"}, reason="po edited elsewhere") is not None  # now v2
    bench = Bench(LaggingReplica(store, {"c1": before}))  # type: ignore[arg-type]
    with pytest.raises(StaleDecision):
        bench.run(version=1)
    assert bench.downstream.total == 0  # type: ignore[attr-defined]


def test_a_missing_case_is_refused_before_anything_is_called(bench: Bench) -> None:
    with pytest.raises(CaseNotFound):
        bench.run(case_id="ghost")
    assert bench.downstream.total == 0  # type: ignore[attr-defined]


def test_a_note_between_decision_and_claim_only_costs_a_re_read(bench: Bench) -> None:
    decided = bench.guard.decide("c1")
    bench.guard.cases.note("c1", "looked at it")
    assert bench.effect.run(decided, ARGS).commit == "committed"
    assert bench.downstream.total == 1  # type: ignore[attr-defined]


# --- outcomes recorded by someone else --------------------------------------------------------------


def test_an_outcome_recorded_by_reconciliation_mid_call_stands_and_ours_is_discarded(bench: Bench) -> None:
    downstream = CountingDownstream()
    bench.downstream = downstream

    def reconciler_records_meanwhile(_: str) -> None:
        started = bench.entry()
        assert started is not None and started.status is EffectStatus.STARTED
        bench.guard.ledger.record_outcome(
            started, EffectStatus.DONE, result={"creditNoteId": "CN-FOUND"}, source="reconciler"
        )

    downstream.during_call = reconciler_records_meanwhile
    result = bench.run()
    assert result.replayed is True and result.result == {"creditNoteId": "CN-FOUND"}
    done = bench.entry()
    assert done.result == {"creditNoteId": "CN-FOUND"}
    with pytest.raises(OutcomeAlreadyRecorded):
        bench.guard.ledger.record_outcome(done, EffectStatus.FAILED, reason="late", source="test")
    assert bench.alerts == []  # whoever recorded it knew as much as the call: nothing to alert


def test_record_outcome_is_conditional_on_the_entry_it_read(bench: Bench) -> None:
    bench.downstream = CountingDownstream(fail_with=unknown)
    with pytest.raises(OutcomeUnknown):
        bench.run()
    seen = bench.entry()
    bench.guard.ledger.record_outcome(seen, EffectStatus.DONE, result={"creditNoteId": "A"}, source="one")
    with pytest.raises(OutcomeAlreadyRecorded) as lost:
        bench.guard.ledger.record_outcome(seen, EffectStatus.DONE, result={"creditNoteId": "B"}, source="two")
    assert lost.value.recorded_status == "done"
    assert bench.entry().result == {"creditNoteId": "A"}
    after = bench.guard.get("c1")
    assert after is not None and after.status == "credit_requested"  # the outcome committed its intent


def test_escalation_and_resolution_by_a_person(bench: Bench) -> None:
    bench.downstream = CountingDownstream(fail_with=unknown)
    with pytest.raises(OutcomeUnknown):
        bench.run()
    key = effect_key("c1", ACTION, 1)
    escalated = bench.guard.ledger.mark_needs_reconciliation(bench.entry(), "lookup kept failing")
    assert escalated.status is EffectStatus.NEEDS_RECONCILIATION
    with pytest.raises(NeedsReconciliation, match="lookup kept failing"):
        bench.run()
    assert [e.key for e in bench.guard.ledger.with_status(EffectStatus.NEEDS_RECONCILIATION)] == [key]
    resolved = bench.guard.ledger.record_outcome(
        escalated,
        EffectStatus.DONE,
        result={"creditNoteId": "CN-PHONE"},
        source="operator",
        resolution={"by": "ana", "why": "supplier confirmed by phone"},
    )
    assert resolved.resolution == {"by": "ana", "why": "supplier confirmed by phone"}
    assert bench.run().result == {"creditNoteId": "CN-PHONE"}
    assert bench.downstream.total == 1  # type: ignore[attr-defined]
    found = bench.guard.ledger.find(key)
    assert found is not None and found.status is EffectStatus.DONE


# --- same-key retries --------------------------------------------------------------------------------


def past_its_call_timeout(store: DocumentStore) -> Bench:
    """A guard whose ``started`` entries count as unknown after a second, and an entry left that way past it
    whose call never reached the downstream: a retry is for an attempt that can no longer send."""
    bench = Bench(store, call_timeout=1.0, send_margin=0.0)
    bench.guard.create("c1", {})
    bench.downstream = CountingDownstream(fail_with=lambda: OutcomeUnknown("503"))
    with pytest.raises(OutcomeUnknown):
        bench.run()
    bench.made.clear()  # the 503 came before anything was made
    time.sleep(2.1)  # past the call timeout by the store's clock (Cosmos _ts: whole seconds)
    return bench


def test_a_reconciliation_retry_with_the_same_key_re_claims_and_calls_once(store: DocumentStore) -> None:
    bench = past_its_call_timeout(store)
    key = effect_key("c1", ACTION, 1)
    downstream = CountingDownstream()
    bench.downstream = downstream
    result = bench.guard.reconcile_effect("c1", key)
    assert (result.outcome, result.committed) == ("retried", True)
    assert downstream.calls == {key: 1} and bench.lookups == 1
    entry = bench.entry()
    assert entry.status is EffectStatus.DONE and entry.attempts == 2
    with pytest.raises(OutcomeAlreadyRecorded):
        bench.guard.ledger.retry_same_key(entry, downstream)
    assert bench.guard.reconcile_effect("c1", key).outcome == "settled"
    assert downstream.total == 1


def test_a_retry_after_the_case_moved_on_is_closed_as_stale(store: DocumentStore) -> None:
    bench = past_its_call_timeout(store)
    assert bench.guard.update("c1", 1, {"poAmount": "1.00"}, reason="po edited") is not None
    downstream = CountingDownstream()
    bench.downstream = downstream
    result = bench.guard.reconcile_effect("c1", effect_key("c1", ACTION, 1))
    assert (result.outcome, result.reinvestigate) == ("stale", True)
    assert downstream.total == 0
    closed = bench.entry()
    assert closed.status is EffectStatus.FAILED and closed.stale


def test_a_retry_is_refused_while_the_current_attempt_may_still_send(bench: Bench) -> None:
    """A retry of an entry still within its call timeout would re-claim it under an attempt that may yet send;
    refused by the gate, it would close the entry as stale and the money rule would stop counting a request
    that can still reach the supplier."""
    bench.downstream = CountingDownstream(fail_with=unknown)
    with pytest.raises(OutcomeUnknown):
        bench.run()
    assert bench.guard.update("c1", 1, {"poAmount": "1.00"}, reason="po edited") is not None
    downstream = CountingDownstream()
    with pytest.raises(EffectInFlight):
        bench.guard.ledger.retry_same_key(bench.entry(), downstream)
    still = bench.entry()
    assert still.status is EffectStatus.STARTED and still.attempts == 1
    assert downstream.total == 0


# --- late outcomes, moved facts and paused workers ---------------------------------------------------


def test_a_late_success_over_an_escalation_is_recorded_and_alerted_naming_the_amount(bench: Bench) -> None:
    key = effect_key("c1", ACTION, 1)
    downstream = CountingDownstream()
    bench.downstream = downstream

    def escalated_meanwhile(_: str) -> None:
        # The call outlived its timeout; a reconciler that could not find it escalated it to a person.
        bench.guard.ledger.mark_needs_reconciliation(bench.entry(), "lookup found nothing")
        bench.guard.cases.escalate("c1", "needs_review", "a person looks", effect_key=key)

    downstream.during_call = escalated_meanwhile
    result = bench.run()
    assert result.commit == "with_person" and result.result["creditNoteId"] == "CN-0001"  # the outcome is kept
    stored = bench.entry()
    assert stored.status is EffectStatus.DONE and "late outcome" in (stored.reason or "")
    [(kind, message, fields, dedupe)] = bench.alerts
    assert (kind, dedupe) == ("late_outcome", key)
    assert "10.00 EUR" in message and "over-requested" in message
    assert (fields["amount"], fields["currency"], fields["closedAs"]) == ("10.00", "EUR", "needs_reconciliation")


# --- the late watch over an entry a person resolved failed ---------------------------------------------


def resolved_failed_by_a_person(store: DocumentStore, *, late_watch: float) -> Bench:
    """An effect whose call outlived its timeout (nothing made yet: it is stalled in its client), which a person,
    finding nothing at the downstream, resolved ``failed``."""
    bench = Bench(store, call_timeout=1.0, send_margin=0.0, late_watch=late_watch)
    bench.guard.create("c1", {})
    bench.downstream = CountingDownstream(fail_with=unknown)
    with pytest.raises(OutcomeUnknown):
        bench.run()
    time.sleep(2.1)  # past the call timeout by the store's clock (Cosmos _ts: whole seconds)
    failed = bench.guard.ledger.record_outcome(
        bench.entry(),
        EffectStatus.FAILED,
        reason="no note at the supplier",
        source="operator",
        resolution={"by": "ana", "why": "checked the portal"},
    )
    assert failed.status is EffectStatus.FAILED and failed.watching
    return bench


def open_effects_flag(bench: Bench) -> bool:
    doc = bench.counting.read(CASES, "c1", "c1")
    assert doc is not None
    return bool(doc.body["openEffects"])


def test_a_lookup_that_finds_an_effect_a_person_resolved_failed_records_it_done_late_with_an_alert(
    store: DocumentStore,
) -> None:
    bench = resolved_failed_by_a_person(store, late_watch=60.0)
    key = effect_key("c1", ACTION, 1)
    assert open_effects_flag(bench)  # watched: the feed and the sweep see it
    first = bench.guard.reconcile_effect("c1", key)
    assert (first.outcome, bench.lookups) == ("watching", 1)
    assert first.retry_after is not None and 0 < first.retry_after <= 60.0
    assert bench.entry().status is EffectStatus.FAILED and bench.alerts == []
    bench.made[key] = {"creditNoteId": "CN-LATE"}  # the stalled call reaches the downstream; its process dies
    time.sleep(2.1)  # the sweep looks a watched entry up from a call timeout after the person's outcome
    [swept] = bench.guard.reconcile()
    assert swept.outcome == "recorded_late"
    stored = bench.entry()
    assert stored.status is EffectStatus.DONE and stored.result == {"creditNoteId": "CN-LATE"}
    assert "late outcome" in (stored.reason or "") and not stored.watching
    assert stored.resolution == {"by": "ana", "why": "checked the portal"}  # what the person said stays
    [(kind, message, fields, dedupe)] = bench.alerts
    assert (kind, dedupe, fields["closedAs"], fields["amount"]) == ("late_outcome", key, "failed", "10.00")
    assert "over-requested" in message
    assert bench.downstream.total == 1  # type: ignore[attr-defined]  # looked up, never called again
    assert not open_effects_flag(bench)
    assert bench.guard.reconcile_effect("c1", key).outcome == "settled"
    assert bench.alert_kinds() == ["late_outcome"]  # once


def test_a_watch_that_finds_nothing_until_it_ends_leaves_the_effect_failed_and_stops_looking(
    store: DocumentStore,
) -> None:
    bench = resolved_failed_by_a_person(store, late_watch=2.0)
    key = effect_key("c1", ACTION, 1)
    assert bench.guard.reconcile_effect("c1", key).outcome == "watching"
    time.sleep(2.1)  # past the late watch by the store's clock
    ended = bench.guard.reconcile_effect("c1", key)
    assert (ended.outcome, ended.retry_after) == ("failed", None)
    assert "late watch ended" in ended.detail
    stored = bench.entry()
    assert stored.status is EffectStatus.FAILED and not stored.watching
    assert stored.reason == "no note at the supplier"
    assert not open_effects_flag(bench)
    lookups = bench.lookups
    assert bench.guard.reconcile() == []  # the sweep no longer looks it up
    assert bench.guard.reconcile_effect("c1", key).outcome == "failed" and bench.lookups == lookups
    bench.made[key] = {"creditNoteId": "CN-TOO-LATE"}  # beyond the documented watch: nobody looks any more
    assert bench.guard.reconcile() == [] and bench.entry().status is EffectStatus.FAILED
    assert bench.downstream.total == 1  # type: ignore[attr-defined]  # never retried after a person's failed
    assert bench.alerts == []


def test_a_late_watch_shorter_than_the_call_timeout_is_refused(store: DocumentStore) -> None:
    with pytest.raises(ValueError, match="late_watch"):
        Guard(store, call_timeout=120.0, late_watch=60.0)


def test_facts_changed_during_the_call_record_the_outcome_and_escalate_with_an_alert(bench: Bench) -> None:
    downstream = CountingDownstream()
    bench.downstream = downstream
    downstream.during_call = lambda _: bench.guard.update("c1", 1, {"amount": "9.00"}, reason="PO edit")
    result = bench.run()
    key = effect_key("c1", ACTION, 1)
    assert result.commit == "needs_review"
    after = bench.guard.get("c1")
    assert after is not None and (after.status, after.version) == ("needs_review", 3)
    (transition,) = after.transitions_of(key)
    assert transition.escalation is True
    assert bench.alert_kinds() == ["effect_on_left_version"]
    assert bench.entry().status is EffectStatus.DONE


def test_a_worker_that_pauses_after_its_gate_does_not_send_once_the_entry_may_be_taken_for_lost(
    store: DocumentStore,
) -> None:
    """A worker passes the gate, then stops (GC, SIGSTOP) past the call timeout. Meanwhile the PO changes, a
    reconciler finds nothing under the key, its same-key retry is refused by the gate and the entry is closed
    stale, so the case may ask again. The worker wakes: it must not send the old request."""
    key = effect_key("c1", ACTION, 1)
    reconciler = Bench(store, call_timeout=2.0)

    def pause_after_the_gate(point: str) -> None:
        if point != "F2":
            return
        time.sleep(3.1)  # the pause: past the call timeout, by the store's clock too (Cosmos _ts: whole seconds)
        assert reconciler.guard.update("c1", 1, {"poAmount": "1.00"}, reason="po edited") is not None
        assert reconciler.guard.reconcile_effect("c1", key).outcome == "stale"

    worker = Bench(store, call_timeout=2.0, probe=pause_after_the_gate)
    worker.guard.create("c1", {"amount": "10.00"})
    with pytest.raises(SendDeadlinePassed, match="not sent"):
        worker.run()
    assert worker.downstream.total == 0 and reconciler.downstream.total == 0  # type: ignore[attr-defined]
    closed = worker.entry()
    assert closed.status is EffectStatus.FAILED and closed.stale


def test_a_call_is_sent_only_within_its_deadline(store: DocumentStore) -> None:
    ticks = iter([100.0, 100.0 + 1.49])  # the claim, then the check just before sending
    sent = Bench(store, call_timeout=2.0, send_margin=0.5, monotonic=lambda: next(ticks))
    sent.guard.create("c1", {})
    assert sent.run().commit == "committed"
    late = iter([100.0, 100.0 + 1.51])
    unsent = Bench(store, call_timeout=2.0, send_margin=0.5, monotonic=lambda: next(late))
    unsent.guard.create("c2", {})
    with pytest.raises(SendDeadlinePassed):
        unsent.run(case_id="c2")
    assert unsent.downstream.total == 0  # type: ignore[attr-defined]
    left = unsent.entry("c2")
    assert left.status is EffectStatus.STARTED  # reconciliation settles it by key


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(elapsed=st.floats(0.0, 10.0), margin=st.floats(0.0, 1.99))
def test_a_call_is_sent_exactly_while_its_deadline_leaves_the_margin(
    store: DocumentStore, elapsed: float, margin: float
) -> None:
    case_id = f"c-{uuid.uuid4().hex[:10]}"  # the store outlives the examples
    ticks = iter([50.0, 50.0 + elapsed])  # the worker's clock at the claim, then just before sending
    bench = Bench(store, call_timeout=2.0, send_margin=margin, monotonic=lambda: next(ticks))
    bench.guard.create(case_id, {})
    may_send = elapsed + margin <= 2.0
    if may_send:
        bench.run(case_id=case_id)
    else:
        with pytest.raises(SendDeadlinePassed):
            bench.run(case_id=case_id)
    assert bench.downstream.total == int(may_send)  # type: ignore[attr-defined]


# --- what the case holds -----------------------------------------------------------------------------


def test_the_claim_time_is_frozen_by_the_next_write_so_notes_cannot_postpone_it(bench: Bench) -> None:
    bench.downstream = CountingDownstream(fail_with=unknown)
    with pytest.raises(OutcomeUnknown):
        bench.run()
    claimed = bench.guard.get("c1")
    assert claimed is not None
    start = bench.entry()
    assert start.ts == claimed.ts  # read right after the claim: its own _ts
    for i in range(3):
        bench.guard.cases.note("c1", f"note {i}")
    noted = bench.guard.get("c1")
    assert noted is not None and bench.entry().ts == start.ts
    assert noted.to_body()["effects"][0]["changedTs"] == start.ts
    assert [e.key for e in bench.guard.ledger.open_entries()] == [effect_key("c1", ACTION, 1)]


def test_the_case_stays_bounded_and_every_effect_is_still_found(bench: Bench) -> None:
    total = CLOSED_KEPT + 4
    effects = [bench.effect] + [bench.declare(f"a{i}", commit="open") for i in range(1, total)]
    for i, effect in enumerate(effects):
        bench.run(version=1 + i, effect=effect)
    case = bench.guard.get("c1")
    assert case is not None and len(case.entries) == CLOSED_KEPT and case.effects_archived == 4
    assert len(bench.counting.inner.query(EFFECTS, Query(partition="c1"))) == 4
    expected = {effect_key("c1", e.action, 1 + i) for i, e in enumerate(effects)}
    assert {e.key for e in bench.guard.effects_of(case)} == expected
    oldest = bench.entry()
    assert oldest is not None and oldest.status is EffectStatus.DONE
    assert [e.key for e in bench.guard.decide("c1").done(ACTION)] == [effect_key("c1", ACTION, 1)]


def test_a_case_read_already_gives_its_effects_without_another_read(bench: Bench) -> None:
    bench.run()
    case = bench.guard.get("c1")
    assert case is not None
    bench.counting.reset()
    assert [e.key for e in bench.guard.effects_of(case)] == [effect_key("c1", ACTION, 1)]
    assert bench.counting.total == 0


def test_find_with_its_case_reads_that_case_alone_however_many_cases_there_are(store: DocumentStore) -> None:
    """``find(key, case_id=...)`` (the operator's ``--case``): a point read of the case, and one of its archive
    when the key is not among its entries; never a query, so never the walk over every case that a key alone
    pays when it is neither open nor archived."""
    bench = Bench(store)
    for n in range(6):
        bench.guard.create(f"c{n}", {})
        bench.run(case_id=f"c{n}")
    closed = effect_key("c3", ACTION, 1)
    for i in range(CLOSED_KEPT):  # one more than the case keeps: its first effect goes to the archive
        bench.run(case_id="c5", version=2 + i, effect=bench.declare(f"a{i}", commit="open"))
    archived = effect_key("c5", ACTION, 1)
    case = bench.guard.get("c5")
    assert case is not None and case.effects_archived == 1
    mistyped = closed[:-1] + ("0" if closed[-1] != "0" else "1")

    def ops_of(key: str, case_id: str | None) -> tuple[Any, Counter[tuple[str, str]]]:
        bench.counting.reset()
        found = bench.guard.ledger.find(key, case_id=case_id)
        return found, Counter(bench.counting.ops)

    found, ops = ops_of(closed, "c3")
    assert found is not None and found.key == closed and found.status is EffectStatus.DONE
    assert ops == Counter({("read", CASES): 1})
    found, ops = ops_of(archived, "c5")
    assert found is not None and found.key == archived
    assert ops == Counter({("read", CASES): 1, ("read", EFFECTS): 1})
    for key, case_id in ((mistyped, "c3"), (closed, "c2")):
        found, ops = ops_of(key, case_id)
        assert found is None and ops == Counter({("read", CASES): 1})  # nothing archived there: no more reads
    found, ops = ops_of(closed, "no-such-case")
    assert found is None and ops == Counter({("read", CASES): 1, ("read", EFFECTS): 1})

    # Without the case: the closed entry is found by walking the cases, and a mistyped key walks them all.
    found, ops = ops_of(closed, None)
    assert found is not None and found.key == closed
    assert ops[("query", CASES)] >= 2  # the open entries, then the walk
    found, ops = ops_of(mistyped, None)
    assert found is None and ops[("query", CASES)] >= 2


# --- any interleaving ----------------------------------------------------------------------------------

Step = st.sampled_from(
    ["ok", "unknown", "refused", "note_mid_call", "facts_mid_call", "escalate_mid_call", "crash_F2", "crash_F4"]
)


class Crash(BaseException):
    """The process dying at a probe point (BaseException, so nothing on the way catches it)."""


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(Step, st.integers(0, 2)), min_size=1, max_size=8))
def test_any_interleaving_keeps_one_call_per_key_and_every_done_effect_committed_or_escalated(
    store: DocumentStore, steps: list[tuple[str, int]]
) -> None:
    """Runs on one case (each on the version it reads, or one it left), with a note, a fact update or an
    escalation landing mid-call, calls that fail or leave the outcome unknown, and a crash after the claim
    (F2) or after the reply (F4): at most one call per key, every ``done`` entry is named by a transition
    (its commit or its escalation), nothing claimed is lost, the case stays bounded."""
    crash_at: list[str] = []

    def probe(point: str) -> None:
        if point in crash_at:
            raise Crash(point)

    bench = Bench(store, probe=probe)
    guard = bench.guard
    case_id = f"p-{uuid.uuid4().hex[:8]}"
    guard.create(case_id, {"n": 0})
    calls: Counter[str] = Counter()
    for step, lag in steps:
        current = guard.get(case_id)
        assert current is not None
        decided = max(1, current.version - lag)

        def call(k: str, step: str = step) -> Mapping[str, Any]:
            calls[k] += 1
            if step == "note_mid_call":
                guard.cases.note(case_id, "mid-call note")
            elif step == "facts_mid_call":
                now = guard.get(case_id)
                assert now is not None
                guard.update(case_id, now.version, {"n": now.version}, reason="edit")
            elif step == "escalate_mid_call":
                entry = guard.ledger.get(case_id, k)
                assert entry is not None
                guard.ledger.mark_needs_reconciliation(entry, "looked at")
            if step == "unknown":
                raise OutcomeUnknown("timeout")
            if step == "refused":
                raise DownstreamRejected("no", status=422)
            return {"creditNoteId": f"CN-{k[:6]}"}

        bench.downstream = call
        crash_at[:] = [step.removeprefix("crash_")] if step.startswith("crash_") else []
        with contextlib.suppress(
            StaleDecision, EffectFailed, EffectInFlight, NeedsReconciliation, OutcomeUnknown, Crash
        ):
            bench.run(version=decided, case_id=case_id)
        crash_at.clear()
        assert all(n == 1 for n in calls.values()), calls
    case = guard.get(case_id)
    assert case is not None
    on_case = {e.key: e for e in guard.effects_of(case)}
    assert set(calls) <= set(on_case)
    for effect in on_case.values():
        if effect.status is EffectStatus.DONE:
            assert case.transitions_of(effect.key), effect.key
    closed = [e for e in case.entries if e["status"] in ("done", "failed")]
    assert len(closed) <= CLOSED_KEPT


def test_two_concurrent_runs_make_one_call(bench: Bench) -> None:
    bench.downstream = CountingDownstream(delay=0.2)
    results: list[str] = []
    lock = threading.Lock()

    def one() -> None:
        try:
            outcome = bench.run().commit
        except (EffectInFlight, ConcurrencyConflict) as exc:
            outcome = type(exc).__name__
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bench.downstream.total == 1  # type: ignore[attr-defined]
    assert sorted(results) == ["EffectInFlight", "committed"]
