"""Effects claimed and closed on their case (casekeeper.core.entries, issue 25), on every backend.

Two conditional writes of one document per guarded effect: the claim is the version gate, the outcome and
the commit are one write. These tests count the store's operations through a thin wrapper (a fake only in
that it counts: every call goes to the real store).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casekeeper.core import entries
from casekeeper.core.cases import CASES, CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.entries import CLOSED_KEPT, CommitPlan
from casekeeper.core.keys import effect_key
from casekeeper.core.ledger import EFFECTS, EffectStatus, Ledger
from casekeeper.core.ports import DocumentStore, Query
from casekeeper.errors import (
    DownstreamRejected,
    EffectFailed,
    EffectInFlight,
    NeedsReconciliation,
    OutcomeUnknown,
    StaleDecision,
)
from tests.support.counting import Counting
from tests.support.downstream import CountingDownstream

ACTION = "request_credit_note"
PLAN = CommitPlan(
    "credit_requested",
    reason="over-billed",
    proposed_by="rules",
    data=lambda effect: {"creditNoteId": (effect.result or {}).get("creditNoteId")},
)


@pytest.fixture
def counting(store: DocumentStore) -> Counting:
    return Counting(store)


@pytest.fixture
def cases(counting: Counting) -> CaseRepository:
    return CaseRepository(counting, ManualClock())


def make_ledger(counting: Counting, cases: CaseRepository, **kwargs: Any) -> Ledger:
    return Ledger(counting, cases, call_timeout=120, **kwargs)


def run(ledger: Ledger, downstream: Any, *, version: int = 1, case_id: str = "c1", **kwargs: Any) -> Any:
    return ledger.run_on_record(
        case_id=case_id,
        action=kwargs.pop("action", ACTION),
        decided_on_version=version,
        call=downstream,
        commit=kwargs.pop("commit", PLAN),
        request={"amount": "10.00", "currency": "EUR"},
        **kwargs,
    )


def test_two_writes_of_the_case_and_nothing_else(counting: Counting, cases: CaseRepository) -> None:
    case = cases.create("c1", {"amount": "10.00"})
    ledger = make_ledger(counting, cases)
    downstream = CountingDownstream()
    counting.reset()
    outcome = run(ledger, downstream, expected=case)
    key = effect_key("c1", ACTION, 1)
    assert downstream.calls == {key: 1}
    assert outcome.commit == "committed" and outcome.replayed is False
    assert counting.ops == Counter({("replace", CASES): 2})
    after = cases.require("c1")
    assert after.version == 2 and after.status == "credit_requested"
    assert after.data["creditNoteId"] == outcome.result["creditNoteId"]
    (transition,) = after.transitions_of(key)
    assert transition.from_version == 1 and transition.proposed_by == "rules"
    entry = entries.entry_of(after, key)
    assert entry is not None and entry.status is EffectStatus.DONE and entry.attempts == 1
    assert counting.inner.query(EFFECTS, Query(partition="c1")) == []
    assert after.to_body()["openEffects"] is False


def test_a_second_run_replays_without_calling_or_writing(counting: Counting, cases: CaseRepository) -> None:
    cases.create("c1", {})
    ledger = make_ledger(counting, cases)
    downstream = CountingDownstream()
    first = run(ledger, downstream)
    counting.reset()
    again = run(ledger, downstream, expected=cases.require("c1"))
    assert again.replayed is True and again.commit == "already" and again.result == first.result
    assert downstream.total == 1
    assert counting.ops[("replace", CASES)] == 0


def test_a_claim_on_a_version_the_case_left_writes_and_calls_nothing(counting: Counting, cases: CaseRepository) -> None:
    decided = cases.create("c1", {"amount": "10.00"})
    cases.update_facts("c1", 1, {"amount": "12.00"}, reason="PO edit")
    ledger = make_ledger(counting, cases)
    downstream = CountingDownstream()
    before = cases.require("c1")
    with pytest.raises(StaleDecision) as raised:
        run(ledger, downstream, expected=decided)  # the case as the decision read it: now a lost ETag
    assert raised.value.current_version == 2
    assert downstream.total == 0
    after = cases.require("c1")
    assert after.entries == () and after.etag == before.etag


def test_a_note_between_decision_and_claim_only_costs_a_re_read(counting: Counting, cases: CaseRepository) -> None:
    decided = cases.create("c1", {})
    cases.note("c1", "looked at it")
    ledger = make_ledger(counting, cases)
    downstream = CountingDownstream()
    outcome = run(ledger, downstream, expected=decided)
    assert outcome.commit == "committed" and downstream.total == 1


def test_facts_changed_during_the_call_record_the_outcome_and_escalate(
    counting: Counting, cases: CaseRepository
) -> None:
    cases.create("c1", {"amount": "10.00"})
    alerts: list[tuple[str, Mapping[str, Any]]] = []
    ledger = make_ledger(counting, cases, alert=lambda kind, msg, fields, dedupe_key: alerts.append((kind, fields)))
    downstream = CountingDownstream()

    def edit(_: str) -> None:
        cases.update_facts("c1", 1, {"amount": "9.00"}, reason="PO edit")

    downstream.during_call = edit
    outcome = run(ledger, downstream)
    key = effect_key("c1", ACTION, 1)
    assert outcome.commit == "needs_review"
    after = cases.require("c1")
    assert after.status == "needs_review" and after.version == 3
    (transition,) = after.transitions_of(key)
    assert transition.escalation is True
    assert [kind for kind, _ in alerts] == ["effect_on_left_version"]
    entry = entries.entry_of(after, key)
    assert entry is not None and entry.status is EffectStatus.DONE


def test_a_definite_refusal_is_recorded_with_its_escalation_in_one_write(
    counting: Counting, cases: CaseRepository
) -> None:
    cases.create("c1", {})
    ledger = make_ledger(counting, cases)
    downstream = CountingDownstream(fail_with=lambda: DownstreamRejected("closed", status=422))
    counting.reset()
    with pytest.raises(EffectFailed):
        run(ledger, downstream, refusal_review="needs_review")
    assert counting.ops[("replace", CASES)] == 2
    with pytest.raises(EffectFailed):
        run(ledger, downstream)
    assert downstream.total == 1
    after = cases.require("c1")
    assert after.status == "needs_review"
    entry = entries.entry_of(after, effect_key("c1", ACTION, 1))
    assert entry is not None and entry.status is EffectStatus.FAILED and entry.reason == "closed"


def test_an_unknown_outcome_stays_started_and_a_later_run_is_told_in_flight(
    counting: Counting, cases: CaseRepository
) -> None:
    cases.create("c1", {})
    ledger = make_ledger(counting, cases)
    downstream = CountingDownstream(fail_with=lambda: OutcomeUnknown("timeout"))
    with pytest.raises(OutcomeUnknown):
        run(ledger, downstream)
    with pytest.raises(EffectInFlight):
        run(ledger, CountingDownstream())
    assert downstream.total == 1
    case = cases.require("c1")
    assert case.to_body()["openEffects"] is True
    found = ledger.get("c1", effect_key("c1", ACTION, 1))
    assert found is not None and found.status is EffectStatus.STARTED and found.in_record


def test_the_claim_time_is_frozen_by_the_next_write_so_notes_cannot_postpone_it(
    counting: Counting, cases: CaseRepository
) -> None:
    cases.create("c1", {})
    ledger = make_ledger(counting, cases)
    with pytest.raises(OutcomeUnknown):
        run(ledger, CountingDownstream(fail_with=lambda: OutcomeUnknown("timeout")))
    claimed = cases.require("c1")
    key = effect_key("c1", ACTION, 1)
    start = entries.entry_of(claimed, key)
    assert start is not None and start.ts == claimed.ts  # read right after the claim: its own _ts
    for i in range(3):
        cases.note("c1", f"note {i}")
    noted = cases.require("c1")
    stamped = entries.entry_of(noted, key)
    assert stamped is not None and stamped.ts == start.ts
    assert noted.to_body()["effects"][0]["changedTs"] == start.ts


def test_a_late_done_over_an_escalation_is_recorded_and_alerted(counting: Counting, cases: CaseRepository) -> None:
    cases.create("c1", {})
    alerts: list[str] = []
    ledger = make_ledger(counting, cases, alert=lambda kind, msg, fields, dedupe_key: alerts.append(kind))
    key = effect_key("c1", ACTION, 1)

    def escalate_meanwhile(_: str) -> None:
        open_entry = ledger.get("c1", key)
        assert open_entry is not None
        ledger.mark_needs_reconciliation(open_entry, "a person looks")
        cases.escalate("c1", "needs_review", "a person looks", effect_key=key)

    downstream = CountingDownstream()
    downstream.during_call = escalate_meanwhile
    outcome = run(ledger, downstream)
    assert outcome.commit == "with_person"
    assert alerts == ["late_outcome"]
    entry = ledger.get("c1", key)
    assert entry is not None and entry.status is EffectStatus.DONE


def test_two_concurrent_runs_make_one_call(counting: Counting, cases: CaseRepository) -> None:
    cases.create("c1", {})
    ledger = make_ledger(counting, cases)
    downstream = CountingDownstream(delay=0.2)
    results: list[str] = []

    def one() -> None:
        try:
            results.append(run(ledger, downstream).commit)
        except EffectInFlight:
            results.append("in_flight")

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert downstream.total == 1
    assert sorted(results) == ["committed", "in_flight"]


def test_the_record_stays_bounded_and_for_case_still_sees_every_effect(
    counting: Counting, cases: CaseRepository
) -> None:
    cases.create("c1", {})
    ledger = make_ledger(counting, cases)
    plan = CommitPlan("open")
    total = CLOSED_KEPT + 4
    for i in range(total):
        run(ledger, CountingDownstream(), action=f"a{i}", version=1 + i, commit=plan)
    case = cases.require("c1")
    assert len(case.entries) == CLOSED_KEPT
    assert case.effects_archived == 4
    archived = counting.inner.query(EFFECTS, Query(partition="c1"))
    assert len(archived) == 4
    assert {e.key for e in ledger.for_case("c1")} == {effect_key("c1", f"a{i}", 1 + i) for i in range(total)}
    oldest = ledger.get("c1", effect_key("c1", "a0", 1))
    assert oldest is not None and oldest.status is EffectStatus.DONE and not oldest.in_record


def test_a_case_of_the_earlier_layout_reads_its_rows_as_it_is(store: DocumentStore) -> None:
    cases = CaseRepository(store, ManualClock())
    ledger = Ledger(store, cases, call_timeout=120)
    legacy = {"id": "old", "kind": "case", "status": "open", "version": 2, "schemaVersion": 1, "facts": {}}
    store.create(CASES, "old", "old", {**legacy, "data": {}, "history": [], "notes": []})
    key = effect_key("old", ACTION, 1)
    row = {
        "id": key,
        "kind": "effect",
        "caseId": "old",
        "action": ACTION,
        "caseVersion": 1,
        "status": "done",
        "request": {},
        "result": {"creditNoteId": "CN-1"},
        "reason": None,
        "stale": False,
        "attempts": 1,
        "resolution": None,
        "history": [],
    }
    store.create(EFFECTS, "old", key, row)
    (effect,) = ledger.for_case("old")
    assert effect.key == key and effect.status is EffectStatus.DONE and not effect.in_record
    assert ledger.get("old", key) == effect


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
    (its commit or its escalation), nothing claimed is lost, the record stays bounded."""
    import uuid

    crash_at: list[str] = []

    def probe(point: str) -> None:
        if point in crash_at:
            raise Crash(point)

    cases = CaseRepository(store, ManualClock())
    ledger = Ledger(store, cases, call_timeout=120, probe=probe)
    case_id = f"p-{uuid.uuid4().hex[:8]}"
    cases.create(case_id, {"n": 0})
    calls: Counter[str] = Counter()
    claimed: set[str] = set()
    for step, lag in steps:
        decided = max(1, cases.require(case_id).version - lag)

        def call(k: str, step: str = step) -> Mapping[str, Any]:
            calls[k] += 1
            claimed.add(k)
            if step == "note_mid_call":
                cases.note(case_id, "mid-call note")
            elif step == "facts_mid_call":
                now = cases.require(case_id)
                cases.update_facts(case_id, now.version, {"n": now.version}, reason="edit")
            elif step == "escalate_mid_call":
                entry = ledger.get(case_id, k)
                assert entry is not None
                ledger.mark_needs_reconciliation(entry, "looked at")
            if step == "unknown":
                raise OutcomeUnknown("timeout")
            if step == "refused":
                raise DownstreamRejected("no", status=422)
            return {"creditNoteId": f"CN-{k[:6]}"}

        crash_at[:] = [step.removeprefix("crash_")] if step.startswith("crash_") else []
        with contextlib.suppress(
            StaleDecision, EffectFailed, EffectInFlight, NeedsReconciliation, OutcomeUnknown, Crash
        ):
            run(ledger, call, version=decided, case_id=case_id)
        crash_at.clear()
        assert all(n == 1 for n in calls.values()), calls
    case = cases.require(case_id)
    on_case = {e.key: e for e in ledger.for_case(case_id)}
    assert claimed <= set(on_case)
    for effect in on_case.values():
        if effect.status is EffectStatus.DONE:
            assert case.transitions_of(effect.key), effect.key
    closed = [e for e in case.entries if e["status"] in ("done", "failed")]
    assert len(closed) <= CLOSED_KEPT


def test_the_backstop_finds_an_open_entry_by_its_claim_time_however_many_notes_follow(
    store: DocumentStore,
) -> None:
    cases = CaseRepository(store, ManualClock())
    ledger = Ledger(store, cases, call_timeout=120)
    cases.create("c1", {})
    cases.create("c2", {})
    with pytest.raises(OutcomeUnknown):
        run(ledger, CountingDownstream(fail_with=lambda: OutcomeUnknown("timeout")))
    run(ledger, CountingDownstream(), case_id="c2")
    cases.note("c1", "a later note")
    key = effect_key("c1", ACTION, 1)
    assert [e.key for e in ledger.open_entries()] == [key]
    assert [e.key for e in ledger.with_status(EffectStatus.STARTED)] == [key]
    assert ledger.started_older_than(60) == []
    assert [e.key for e in ledger.started_older_than(-60)] == [key]  # past its time: found, whatever _ts says


def test_a_case_read_already_gives_its_effects_without_another_read(counting: Counting, cases: CaseRepository) -> None:
    cases.create("c1", {})
    ledger = make_ledger(counting, cases)
    run(ledger, CountingDownstream())
    case = cases.require("c1")
    counting.reset()
    assert [e.key for e in ledger.effects_for(case)] == [effect_key("c1", ACTION, 1)]
    assert counting.total == 0
    # A case of the two-container layout (schema 1) may have rows in ``effects``: then they are read too.
    counting.inner.update_if(CASES, "c1", "c1", where={}, set_fields={"schemaVersion": 1})
    legacy = cases.require("c1")
    counting.reset()
    assert [e.key for e in ledger.effects_for(legacy)] == [effect_key("c1", ACTION, 1)]
    assert counting.ops[("query", EFFECTS)] == 1


def test_find_with_its_case_reads_that_case_alone_however_many_cases_there_are(
    counting: Counting, cases: CaseRepository
) -> None:
    """``find(key, case_id=...)`` (the operator's ``--case``): a point read of the case, and one of its archive
    row when the key is not among its entries; never a query, so never the walk over every case that a key
    alone pays when it is neither open nor archived."""
    ledger = make_ledger(counting, cases)
    plan = CommitPlan("open")
    for n in range(6):
        cases.create(f"c{n}", {})
        run(ledger, CountingDownstream(), case_id=f"c{n}", commit=plan)
    closed = effect_key("c3", ACTION, 1)
    for i in range(CLOSED_KEPT):  # one more than the case keeps: its first effect goes to the archive
        run(ledger, CountingDownstream(), case_id="c5", action=f"a{i}", version=2 + i, commit=plan)
    archived = effect_key("c5", ACTION, 1)
    assert cases.require("c5").effects_archived == 1
    mistyped = closed[:-1] + ("0" if closed[-1] != "0" else "1")

    def ops_of(key: str, case_id: str | None) -> tuple[Any, Counter[tuple[str, str]]]:
        counting.reset()
        found = ledger.find(key, case_id=case_id)
        return found, Counter(counting.ops)

    found, ops = ops_of(closed, "c3")
    assert found is not None and found.key == closed and found.status is EffectStatus.DONE and found.in_record
    assert ops == Counter({("read", CASES): 1})
    found, ops = ops_of(archived, "c5")
    assert found is not None and found.key == archived and not found.in_record
    assert ops == Counter({("read", CASES): 1, ("read", EFFECTS): 1})
    for key, case_id in ((mistyped, "c3"), (closed, "c2"), (closed, "no-such-case")):
        found, ops = ops_of(key, case_id)
        assert found is None
        assert ops == Counter({("read", CASES): 1, ("read", EFFECTS): 1})

    # Without the case: the closed entry is found by walking the cases, and a mistyped key walks them all.
    found, ops = ops_of(closed, None)
    assert found is not None and found.key == closed
    assert ops[("query", CASES)] >= 2  # the open entries, then the walk
    found, ops = ops_of(mistyped, None)
    assert found is None and ops[("query", CASES)] >= 2


def test_a_claim_on_a_case_of_the_earlier_layout_obeys_its_row_and_never_calls_twice(store: DocumentStore) -> None:
    """A run of the two-container layout passed its gate and died mid-call (a ``started`` row in ``effects``,
    the case's gate open, schema 1). After the upgrade the same decision runs on the case: the claim finds
    the row (one point read, only for such a case) and is told in flight, then unknown; never a second call."""
    cases = CaseRepository(store, ManualClock())
    ledger = Ledger(store, cases, call_timeout=120)
    cases.create("old", {})
    store.update_if(CASES, "old", "old", where={}, set_fields={"schemaVersion": 1})
    first = CountingDownstream(fail_with=lambda: OutcomeUnknown("timeout"))
    with pytest.raises(OutcomeUnknown):
        ledger.run(case_id="old", action=ACTION, decided_on_version=1, call=first, request={})
    again = CountingDownstream()
    with pytest.raises(EffectInFlight):
        run(ledger, again, case_id="old")
    assert again.total == 0 and first.total == 1
    assert cases.require("old").entries == ()
