"""The ledger's contract (rules R2-R4), on every backend."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.keys import effect_key
from casekeeper.core.ledger import EffectStatus, Ledger
from casekeeper.core.ports import DocumentStore
from casekeeper.errors import (
    DownstreamRejected,
    EffectFailed,
    EffectInFlight,
    NeedsReconciliation,
    OutcomeAlreadyRecorded,
    OutcomeUnknown,
    SendDeadlinePassed,
    StaleDecision,
)
from tests.support.downstream import CountingDownstream

ACTION = "request_credit_note"


@pytest.fixture
def cases(store: DocumentStore) -> CaseRepository:
    return CaseRepository(store, ManualClock())


@pytest.fixture
def ledger(store: DocumentStore, cases: CaseRepository) -> Ledger:
    cases.create("c1", {"amount": "10.00"})
    return Ledger(store, cases, call_timeout=120)


def run(ledger: Ledger, downstream: CountingDownstream, *, version: int = 1, case_id: str = "c1"):  # type: ignore[no-untyped-def]
    return ledger.run(case_id=case_id, action=ACTION, decided_on_version=version, call=downstream, request={"a": 1})


def test_first_run_calls_once_and_records_done(ledger: Ledger) -> None:
    downstream = CountingDownstream()
    outcome = run(ledger, downstream)
    key = effect_key("c1", ACTION, 1)
    assert outcome.effect.key == key
    assert outcome.replayed is False
    assert outcome.result["creditNoteId"] == "CN-0001"
    assert outcome.case is not None and outcome.case.version == 1
    assert downstream.calls == {key: 1}
    stored = ledger.get("c1", key)
    assert stored is not None and stored.status is EffectStatus.DONE and stored.request == {"a": 1}


def test_duplicate_claim_returns_the_recorded_result_without_calling(ledger: Ledger) -> None:
    downstream = CountingDownstream()
    first = run(ledger, downstream)
    second = run(ledger, downstream)
    assert second.replayed is True
    assert second.result == first.result
    assert downstream.total == 1


def test_a_definite_refusal_is_recorded_and_re_raised_without_calling_again(ledger: Ledger) -> None:
    downstream = CountingDownstream(fail_with=lambda: DownstreamRejected("supplier closed", status=422))
    with pytest.raises(EffectFailed) as first:
        run(ledger, downstream)
    assert first.value.reason == "supplier closed"
    assert isinstance(first.value.__cause__, DownstreamRejected)
    with pytest.raises(EffectFailed, match="supplier closed"):
        run(ledger, downstream)
    assert downstream.total == 1
    stored = ledger.get("c1", effect_key("c1", ACTION, 1))
    assert stored is not None and stored.status is EffectStatus.FAILED


def test_unknown_outcome_stays_started_then_in_flight_then_needs_reconciliation(
    store: DocumentStore, cases: CaseRepository
) -> None:
    cases.create("c1", {})
    ledger = Ledger(store, cases, call_timeout=2.0)
    downstream = CountingDownstream(fail_with=lambda: OutcomeUnknown("timed out"))
    with pytest.raises(OutcomeUnknown):
        run(ledger, downstream)
    key = effect_key("c1", ACTION, 1)
    assert ledger.get("c1", key).status is EffectStatus.STARTED  # type: ignore[union-attr]

    with pytest.raises(EffectInFlight) as in_flight:
        run(ledger, downstream)
    assert 0.0 < in_flight.value.retry_after <= 2.0
    assert in_flight.value.retryable is True

    time.sleep(3.1)  # past the call timeout by the store's clock (Cosmos _ts: whole seconds)
    with pytest.raises(NeedsReconciliation) as unknown:
        run(ledger, downstream)
    assert unknown.value.age is not None and unknown.value.age >= 2.0
    assert downstream.total == 1  # never retried blindly
    assert [e.key for e in ledger.started_older_than(2.0)] == [key]
    assert ledger.started_older_than(600.0) == []


def test_stale_decision_is_refused_before_the_call_and_the_claim_is_closed(
    ledger: Ledger, cases: CaseRepository
) -> None:
    assert cases.update_facts("c1", 1, {"poAmount": "90.00"}, reason="po edited")  # case is now v2
    downstream = CountingDownstream()
    with pytest.raises(StaleDecision) as stale:
        run(ledger, downstream, version=1)
    assert (stale.value.decided_on_version, stale.value.current_version) == (1, 2)
    assert downstream.total == 0
    closed = ledger.get("c1", effect_key("c1", ACTION, 1))
    assert closed is not None and closed.status is EffectStatus.FAILED and closed.stale
    assert ledger.started_older_than(0.0) == []  # nothing for reconciliation to misread
    with pytest.raises(StaleDecision):
        run(ledger, downstream, version=1)
    assert downstream.total == 0
    assert run(ledger, downstream, version=2).result["creditNoteId"] == "CN-0001"


class LaggingReplica:
    """The store as an instance sees it under Cosmos DB's Session consistency when another instance made
    the last write: point reads of the case may come from a replica that has not caught up. Writes, and
    their conditions, are judged on the latest state. (A wrapper: neither backend can be told to lag.)"""

    def __init__(self, inner: DocumentStore, stale: dict[str, Any]) -> None:
        self.inner = inner
        self.stale = stale

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read(self, container: str, partition: str, doc_id: str) -> Any:
        if container == "cases" and doc_id in self.stale:
            return self.stale[doc_id]
        return self.inner.read(container, partition, doc_id)


def test_a_lagging_replica_cannot_let_a_stale_call_through(
    store: DocumentStore, cases: CaseRepository, ledger: Ledger
) -> None:
    """The version gate is a conditional write: a read served by a lagging replica would show v1 and let
    the call through on facts that already changed."""
    before = store.read("cases", "c1", "c1")
    assert cases.update_facts("c1", 1, {"poAmount": "90.00"}, reason="po edited elsewhere")  # now v2
    lagging = LaggingReplica(store, {"c1": before})
    lagging_ledger = Ledger(lagging, CaseRepository(lagging, ManualClock()))  # type: ignore[arg-type]
    downstream = CountingDownstream()
    with pytest.raises(StaleDecision):
        run(lagging_ledger, downstream, version=1)
    assert downstream.total == 0


def test_a_missing_case_is_a_stale_decision(store: DocumentStore, cases: CaseRepository) -> None:
    ledger = Ledger(store, cases)
    downstream = CountingDownstream()
    with pytest.raises(StaleDecision):
        run(ledger, downstream, case_id="ghost")
    assert downstream.total == 0


def test_a_late_outcome_after_reconciliation_is_refused(ledger: Ledger) -> None:
    key = effect_key("c1", ACTION, 1)
    downstream = CountingDownstream()

    def reconciler_records_meanwhile(_: str) -> None:
        started = ledger.get("c1", key)
        assert started is not None and started.status is EffectStatus.STARTED
        ledger.record_outcome(started, EffectStatus.DONE, result={"creditNoteId": "CN-FOUND"}, source="reconciler")

    downstream.during_call = reconciler_records_meanwhile
    outcome = run(ledger, downstream)
    assert outcome.replayed is True
    assert outcome.result == {"creditNoteId": "CN-FOUND"}  # the recorded outcome stands
    assert ledger.get("c1", key).result == {"creditNoteId": "CN-FOUND"}  # type: ignore[union-attr]
    done = ledger.get("c1", key)
    with pytest.raises(OutcomeAlreadyRecorded):
        ledger.record_outcome(done, EffectStatus.FAILED, reason="late", source="test")  # type: ignore[arg-type]


def test_record_outcome_is_conditional_on_the_row_it_read(ledger: Ledger) -> None:
    with pytest.raises(OutcomeUnknown):
        run(ledger, CountingDownstream(fail_with=lambda: OutcomeUnknown("reset")))
    key = effect_key("c1", ACTION, 1)
    seen = ledger.get("c1", key)
    assert seen is not None
    ledger.record_outcome(seen, EffectStatus.DONE, result={"creditNoteId": "A"}, source="one")
    with pytest.raises(OutcomeAlreadyRecorded) as lost:
        ledger.record_outcome(seen, EffectStatus.DONE, result={"creditNoteId": "B"}, source="two")
    assert lost.value.recorded_status == "done"
    assert ledger.get("c1", key).result == {"creditNoteId": "A"}  # type: ignore[union-attr]


def test_escalation_and_resolution_by_a_person(ledger: Ledger) -> None:
    downstream = CountingDownstream(fail_with=lambda: OutcomeUnknown("reset"))
    with pytest.raises(OutcomeUnknown):
        run(ledger, downstream)
    key = effect_key("c1", ACTION, 1)
    escalated = ledger.mark_needs_reconciliation(ledger.get("c1", key), "lookup kept failing")  # type: ignore[arg-type]
    assert escalated.status is EffectStatus.NEEDS_RECONCILIATION
    with pytest.raises(NeedsReconciliation, match="lookup kept failing"):
        run(ledger, downstream)
    assert [e.key for e in ledger.with_status(EffectStatus.NEEDS_RECONCILIATION)] == [key]
    resolved = ledger.record_outcome(
        escalated,
        EffectStatus.DONE,
        result={"creditNoteId": "CN-PHONE"},
        source="operator",
        resolution={"by": "ana", "why": "supplier confirmed by phone"},
    )
    assert resolved.resolution == {"by": "ana", "why": "supplier confirmed by phone"}
    assert run(ledger, downstream).result == {"creditNoteId": "CN-PHONE"}
    assert downstream.total == 1
    assert ledger.find(key) is not None and ledger.find(key).status is EffectStatus.DONE  # type: ignore[union-attr]


def past_its_call_timeout(store: DocumentStore, cases: CaseRepository) -> Ledger:
    """A ledger whose ``started`` rows count as unknown after a second, and a row left that way past it: a
    retry is for an attempt that can no longer send."""
    ledger = Ledger(store, cases, call_timeout=1.0, send_margin=0.0)
    with pytest.raises(OutcomeUnknown):
        run(ledger, CountingDownstream(fail_with=lambda: OutcomeUnknown("503")))
    time.sleep(2.1)  # past the call timeout by the store's clock (Cosmos _ts: whole seconds)
    return ledger


def test_retry_with_the_same_key_re_claims_and_calls_once(
    ledger: Ledger, store: DocumentStore, cases: CaseRepository
) -> None:
    ledger = past_its_call_timeout(store, cases)
    key = effect_key("c1", ACTION, 1)
    downstream = CountingDownstream()
    outcome = ledger.retry_same_key(ledger.get("c1", key), downstream)  # type: ignore[arg-type]
    assert outcome.result["key"] == key
    assert downstream.calls == {key: 1}
    assert outcome.effect.attempts == 2
    with pytest.raises(OutcomeAlreadyRecorded):
        ledger.retry_same_key(outcome.effect, downstream)
    assert downstream.total == 1


def test_a_retry_after_the_case_moved_on_is_closed_as_stale(
    ledger: Ledger, store: DocumentStore, cases: CaseRepository
) -> None:
    ledger = past_its_call_timeout(store, cases)
    key = effect_key("c1", ACTION, 1)
    assert cases.update_facts("c1", 1, {"poAmount": "1.00"}, reason="po edited")
    downstream = CountingDownstream()
    with pytest.raises(StaleDecision):
        ledger.retry_same_key(ledger.get("c1", key), downstream)  # type: ignore[arg-type]
    assert downstream.total == 0
    closed = ledger.get("c1", key)
    assert closed is not None and closed.status is EffectStatus.FAILED and closed.stale


def test_a_late_success_is_recorded_over_an_escalation_that_could_not_know_it(ledger: Ledger) -> None:
    key = effect_key("c1", ACTION, 1)
    downstream = CountingDownstream()

    def escalated_meanwhile(_: str) -> None:
        # The call outlived its timeout; a reconciler that could not find it escalated it.
        ledger.mark_needs_reconciliation(ledger.get("c1", key), "lookup found nothing")  # type: ignore[arg-type]

    downstream.during_call = escalated_meanwhile
    outcome = run(ledger, downstream)
    assert outcome.result["creditNoteId"] == "CN-0001"  # the outcome is known: it is kept
    stored = ledger.get("c1", key)
    assert stored is not None and stored.status is EffectStatus.DONE and "late outcome" in (stored.reason or "")


def test_a_worker_that_pauses_after_its_gate_does_not_send_once_the_row_may_be_taken_for_lost(
    store: DocumentStore, cases: CaseRepository
) -> None:
    """The issue's paused worker: it passes the gate, then stops (GC, SIGSTOP) past the call timeout. Meanwhile
    the PO changes, a reconciler finds nothing under the key, its same-key retry is refused by the gate and
    the row is closed stale, so the case may ask again. The worker wakes: it must not send the old request."""
    cases.create("c1", {"amount": "10.00"})
    worker = Ledger(store, cases, call_timeout=2.0)
    reconciler = Ledger(store, cases, call_timeout=2.0)
    downstream = CountingDownstream()
    key = effect_key("c1", ACTION, 1)

    def pause_after_the_gate(point: str) -> None:
        if point != "F2":
            return
        time.sleep(3.1)  # the pause: past the call timeout, by the store's clock too (Cosmos _ts: whole seconds)
        assert cases.update_facts("c1", 1, {"poAmount": "1.00"}, reason="po edited") is not None
        with pytest.raises(StaleDecision):
            reconciler.retry_same_key(reconciler.get("c1", key), downstream)  # type: ignore[arg-type]

    worker._probe = pause_after_the_gate  # the ledger's failure-point hook, here a pause instead of a crash
    with pytest.raises(SendDeadlinePassed, match="not sent"):
        run(worker, downstream)
    assert downstream.total == 0  # neither the woken worker nor the refused retry asked the supplier
    closed = worker.get("c1", key)
    assert closed is not None and closed.status is EffectStatus.FAILED and closed.stale


def test_a_call_within_its_deadline_is_sent(store: DocumentStore, cases: CaseRepository) -> None:
    cases.create("c1", {})
    ticks = iter([100.0, 100.0 + 1.49])  # the claim, then the check just before sending
    ledger = Ledger(store, cases, call_timeout=2.0, send_margin=0.5, monotonic=lambda: next(ticks))
    assert run(ledger, CountingDownstream()).result["creditNoteId"] == "CN-0001"
    late = iter([100.0, 100.0 + 1.51])
    ledger = Ledger(store, cases, call_timeout=2.0, send_margin=0.5, monotonic=lambda: next(late))
    cases.create("c2", {})
    downstream = CountingDownstream()
    with pytest.raises(SendDeadlinePassed):
        run(ledger, downstream, case_id="c2")
    assert downstream.total == 0
    left = ledger.get("c2", effect_key("c2", ACTION, 1))
    assert left is not None and left.status is EffectStatus.STARTED  # reconciliation settles it by key


def test_a_retry_is_refused_while_the_current_attempt_may_still_send(ledger: Ledger, cases: CaseRepository) -> None:
    """A retry of a row still within its call timeout would re-claim it under an attempt that may yet send;
    refused by the gate, it would close the row as stale and the money rule would stop counting a request
    that can still reach the supplier."""
    with pytest.raises(OutcomeUnknown):
        run(ledger, CountingDownstream(fail_with=lambda: OutcomeUnknown("503")))
    key = effect_key("c1", ACTION, 1)
    assert cases.update_facts("c1", 1, {"poAmount": "1.00"}, reason="po edited") is not None
    downstream = CountingDownstream()
    with pytest.raises(EffectInFlight):
        ledger.retry_same_key(ledger.get("c1", key), downstream)  # type: ignore[arg-type]
    still = ledger.get("c1", key)
    assert still is not None and still.status is EffectStatus.STARTED and still.attempts == 1
    assert downstream.total == 0


def test_a_late_success_over_a_closed_row_raises_an_alert_naming_the_amount(
    store: DocumentStore, cases: CaseRepository
) -> None:
    cases.create("c1", {})
    alerts: list[tuple[str, str, dict[str, Any], str]] = []
    ledger = Ledger(
        store, cases, call_timeout=120, alert=lambda k, m, f, *, dedupe_key: alerts.append((k, m, dict(f), dedupe_key))
    )
    key = effect_key("c1", ACTION, 1)
    downstream = CountingDownstream()
    downstream.during_call = lambda _: ledger.mark_needs_reconciliation(ledger.get("c1", key), "not found")  # type: ignore[arg-type]
    outcome = ledger.run(
        case_id="c1",
        action=ACTION,
        decided_on_version=1,
        call=downstream,
        request={"amount": "100.00", "currency": "EUR"},
    )
    assert outcome.effect.status is EffectStatus.DONE
    [(kind, message, fields, dedupe)] = alerts
    assert (kind, dedupe) == ("late_outcome", key)
    assert "100.00 EUR" in message and "over-requested" in message
    assert (fields["amount"], fields["currency"], fields["closedAs"]) == ("100.00", "EUR", "needs_reconciliation")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(elapsed=st.floats(0.0, 10.0), margin=st.floats(0.0, 1.99))
def test_a_call_is_sent_exactly_while_its_deadline_leaves_the_margin(
    store: DocumentStore, cases: CaseRepository, elapsed: float, margin: float
) -> None:
    case_id = f"c-{uuid.uuid4().hex[:10]}"  # the store outlives the examples
    cases.create(case_id, {})
    ticks = iter([50.0, 50.0 + elapsed])  # the worker's clock at the claim, then just before sending
    ledger = Ledger(store, cases, call_timeout=2.0, send_margin=margin, monotonic=lambda: next(ticks))
    downstream = CountingDownstream()
    may_send = elapsed + margin <= 2.0
    if may_send:
        run(ledger, downstream, case_id=case_id)
    else:
        with pytest.raises(SendDeadlinePassed):
            run(ledger, downstream, case_id=case_id)
    assert downstream.total == int(may_send)
