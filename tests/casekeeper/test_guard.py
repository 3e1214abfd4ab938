"""The public guard API on a real store (SQLite, with its clock moved by the test instead of sleeping).

The downstream here is a dict keyed by idempotency key: a fake, because what is tested is the guard's
side (how often it calls, what it records), and a dict says exactly what a payments API that honours
keys would have done. The refund example's tests use a stand-in service across real processes.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from casekeeper import (
    ApprovalNotPending,
    EffectFailed,
    EffectInFlight,
    Guard,
    NeedsReconciliation,
    OutcomeUnknown,
    StaleApproval,
    StaleDecision,
)
from casekeeper.core.entries import CommitPlan
from casekeeper.core.keys import effect_key
from casekeeper.stores.sqlite import SqliteDocumentStore


class Crash(BaseException):
    """Ends a run at a probe point, as a killed process would (nothing after it runs)."""


class Downstream:
    """Pays once per key; counts every request."""

    def __init__(self) -> None:
        self.paid: dict[str, dict[str, Any]] = {}
        self.requests = 0
        self.lose_reply = False

    def pay(self, key: str, args: Any) -> dict[str, Any]:
        self.requests += 1
        self.paid.setdefault(key, {"amount": args["amount"]})
        if self.lose_reply:
            self.lose_reply = False
            raise OutcomeUnknown("reply lost")
        return self.paid[key]

    def find(self, key: str) -> dict[str, Any] | None:
        return self.paid.get(key)


@pytest.fixture
def now() -> list[float]:
    return [1_800_000_000.0]


@pytest.fixture
def store(tmp_path: Path, now: list[float]) -> Iterator[SqliteDocumentStore]:
    opened = SqliteDocumentStore(tmp_path / "store.sqlite", clock=lambda: now[0])
    yield opened
    opened.close()


@pytest.fixture
def down() -> Downstream:
    return Downstream()


def make(store: SqliteDocumentStore, down: Downstream, **options: Any) -> tuple[Guard, Any]:
    guard = Guard(store, call_timeout=30.0, **options)
    pay = guard.register("pay", down.pay, commit="paid", lookup=down.find, retry_same_key=True)
    guard.create("r1", {"amount": "10"})
    return guard, pay


def crash_at(point: str) -> Any:
    def probe(at: str) -> None:
        if at == point:
            raise Crash(at)

    return probe


def test_a_declaration_needs_a_commit_and_is_made_once(store: SqliteDocumentStore, down: Downstream) -> None:
    guard = Guard(store)
    with pytest.raises(ValueError, match="needs a commit"):
        guard.register("pay", down.pay, commit="")
    guard.register("pay", down.pay, commit="paid")
    with pytest.raises(ValueError, match="already declared"):
        guard.effect("pay", commit="paid")(down.pay)
    with pytest.raises(ValueError, match="needs a lookup"):
        guard.register("other", down.pay, commit="paid", retry_same_key=True)


def test_run_twice_calls_once_and_commits_once(store: SqliteDocumentStore, down: Downstream) -> None:
    guard, pay = make(store, down)
    decision = guard.decide("r1")
    first = pay.run(decision, {"amount": "10"})
    second = pay.run(decision, {"amount": "10"})
    assert (first.commit, first.replayed) == ("committed", False)
    assert (second.commit, second.replayed) == ("already", True)
    assert first.key == effect_key("r1", "pay", 1) and down.requests == 1
    case = guard.get("r1")
    assert case is not None and (case.status, case.version) == ("paid", 2)


def test_a_moved_case_is_refused_before_the_call(store: SqliteDocumentStore, down: Downstream) -> None:
    guard, pay = make(store, down)
    decision = guard.decide("r1")
    assert guard.update("r1", 1, {"amount": "5"}, reason="changed") is not None
    with pytest.raises(StaleDecision):
        pay.run(decision.to_json(), {"amount": "10"})  # the pinned decision, carried as JSON
    assert down.requests == 0


def test_an_effect_found_done_without_a_commit_intent_goes_to_a_person_not_a_silent_no_op(
    store: SqliteDocumentStore, down: Downstream, now: list[float]
) -> None:
    escalated: list[dict[str, Any]] = []
    guard, _ = make(store, down, on_escalate=lambda message, fields: escalated.append(fields))
    # An entry claimed without an intent in its request (by code that bypassed the declaration), whose
    # reply was lost: once the downstream is found to have it, nobody can tell what the case becomes.
    key = effect_key("r1", "pay", 1)

    def lost(key: str) -> dict[str, Any]:
        down.paid[key] = {"amount": "10"}
        raise OutcomeUnknown("reply lost")

    with pytest.raises(OutcomeUnknown):
        guard.ledger.run(case_id="r1", action="pay", decided_on_version=1, call=lost, commit=CommitPlan("paid"))
    now[0] += 31
    result = guard.reconcile_effect("r1", key)
    assert result.outcome == "no_intent"
    case = guard.get("r1")
    assert case is not None and case.status == "needs_review"
    assert [t.effect_key for t in case.history] == [key]
    assert escalated and escalated[0]["caseId"] == "r1"


def test_a_crash_right_after_the_outcome_finds_the_commit_already_landed(
    store: SqliteDocumentStore, down: Downstream, now: list[float]
) -> None:
    """ "Done but not committed" cannot happen: the outcome and the commit are one write, so a crash right
    after it (F5) finds the case committed."""
    guard, pay = make(store, down, probe=crash_at("F5"))
    with pytest.raises(Crash):
        pay.run(guard.decide("r1"), {"amount": "10"})
    assert guard.get("r1").status == "paid"  # type: ignore[union-attr]
    decision = Guard(store).decide("r1")
    assert (decision.case.status, decision.version) == ("paid", 2)
    assert [e.key for e in decision.done("pay")] == [effect_key("r1", "pay", 1)]
    assert down.requests == 1


def test_an_unknown_outcome_of_an_earlier_version_refuses_a_new_decision(
    store: SqliteDocumentStore, down: Downstream, now: list[float]
) -> None:
    guard, pay = make(store, down, probe=crash_at("F2"))
    with pytest.raises(Crash):
        pay.run(guard.decide("r1"), {"amount": "10"})
    # The facts change, so a new decision (a new key) could pay a second time: refused until settled.
    guard.cases.update_facts("r1", 1, {"amount": "4"}, reason="changed")
    with pytest.raises(EffectInFlight) as in_flight:
        guard.decide("r1")
    assert 0 < in_flight.value.retry_after <= 30
    now[0] += 31
    with pytest.raises(NeedsReconciliation):
        guard.decide("r1")


def test_this_decisions_own_open_effect_is_left_out_and_replayed_by_key(
    store: SqliteDocumentStore, down: Downstream, now: list[float]
) -> None:
    crashed, crashing_pay = make(store, down, probe=crash_at("F2"))
    with pytest.raises(Crash):
        crashing_pay.run(crashed.decide("r1"), {"amount": "10"})
    guard = Guard(store, call_timeout=30.0)  # the next process
    pay = guard.register("pay", down.pay, commit="paid", lookup=down.find, retry_same_key=True)
    decision = guard.decide("r1")  # its own effect, on this version: not a reason to refuse
    with pytest.raises(EffectInFlight):
        pay.run(decision, {"amount": "10"})
    now[0] += 31
    with pytest.raises(NeedsReconciliation):
        pay.run(decision, {"amount": "10"})
    assert down.requests == 0
    [result] = guard.reconcile()
    assert result.outcome == "retried" and result.committed
    assert down.requests == 1 and guard.get("r1").status == "paid"  # type: ignore[union-attr]


def test_reconcile_records_what_the_lookup_finds_and_calls_nothing(
    store: SqliteDocumentStore, down: Downstream, now: list[float]
) -> None:
    guard, pay = make(store, down)
    down.lose_reply = True
    with pytest.raises(OutcomeUnknown):
        pay.run(guard.decide("r1"), {"amount": "10"})
    assert guard.reconcile() == []  # in flight: nobody touches it
    now[0] += 31
    assert [r.outcome for r in guard.reconcile()] == ["recorded"]
    assert down.requests == 1 and guard.get("r1").status == "paid"  # type: ignore[union-attr]


def test_without_a_lookup_an_unknown_outcome_goes_to_a_person(
    store: SqliteDocumentStore, down: Downstream, now: list[float]
) -> None:
    escalated: list[dict[str, Any]] = []
    guard = Guard(store, call_timeout=30.0, on_escalate=lambda message, fields: escalated.append(fields))
    pay = guard.register("pay", down.pay, commit="paid")
    guard.create("r1", {})
    down.lose_reply = True
    with pytest.raises(OutcomeUnknown):
        pay.run(guard.decide("r1"), {"amount": "1"})
    now[0] += 31
    assert [r.outcome for r in guard.reconcile()] == ["escalated"]
    assert escalated[0]["caseId"] == "r1" and guard.get("r1").status == "needs_review"  # type: ignore[union-attr]


def test_a_definite_refusal_raises_and_hands_the_case_to_a_person(store: SqliteDocumentStore) -> None:
    from casekeeper import DownstreamRejected

    def refuse(key: str, args: Any) -> dict[str, Any]:
        raise DownstreamRejected("card expired", status=402)

    guard = Guard(store)
    pay = guard.register("pay", refuse, commit="paid")
    guard.create("r1", {})
    with pytest.raises(EffectFailed, match="card expired"):
        pay.run(guard.decide("r1"), {})
    case = guard.get("r1")
    assert case is not None and case.status == "needs_review"


@pytest.mark.parametrize("amount", [math.nan, 2**60], ids=["nan", "int-beyond-2^53"])
def test_arguments_a_store_would_not_give_back_are_refused_before_anything_is_written(
    store: SqliteDocumentStore, down: Downstream, amount: float
) -> None:
    guard, pay = make(store, down)
    with pytest.raises(ValueError):  # a retry rebuilds the call from the stored args: they must be exact
        pay.run(guard.decide("r1"), {"amount": amount})
    assert guard.ledger.for_case("r1") == [] and down.requests == 0


def test_a_decision_belongs_to_its_guard(store: SqliteDocumentStore, down: Downstream) -> None:
    _guard, pay = make(store, down)
    other = Guard(store)
    with pytest.raises(ValueError, match="another guard"):
        pay.run(other.decide("r1"), {"amount": "1"})


def test_async_calls_and_lookups_run_on_the_callers_loop(
    store: SqliteDocumentStore, down: Downstream, now: list[float]
) -> None:
    guard = Guard(store, call_timeout=30.0)
    loops: list[object] = []

    async def pay(key: str, args: Any) -> dict[str, Any]:
        loops.append(asyncio.get_running_loop())
        return down.pay(key, args)

    async def find(key: str) -> dict[str, Any] | None:
        loops.append(asyncio.get_running_loop())
        return down.find(key)

    effect = guard.register("pay", pay, commit="paid", lookup=find)
    guard.create("r1", {})
    guard.create("r2", {})

    async def main() -> list[str]:
        done = await effect.arun(await guard.adecide("r1"), {"amount": "1"})
        assert done.commit == "committed"
        down.lose_reply = True
        with pytest.raises(OutcomeUnknown):
            await effect.arun(await guard.adecide("r2"), {"amount": "2"})
        now[0] += 31
        assert loops and all(loop is asyncio.get_running_loop() for loop in loops)
        return [r.outcome for r in await guard.areconcile()]

    assert asyncio.run(main()) == ["recorded"]
    assert down.requests == 2


def test_approval_is_asked_on_a_version_and_answered_once(store: SqliteDocumentStore, down: Downstream) -> None:
    guard, pay = make(store, down)
    decision = guard.decide("r1")
    request = guard.ask(decision, "pay", {"amount": "10"})
    assert guard.ask(decision, "pay", {"amount": "10"}) == request  # a replayed ask asks the same request
    assert request.version == 2
    with pytest.raises(ApprovalNotPending):
        guard.answer("r1", "apr-other", approve=True, by="ann", on_version=2)
    with pytest.raises(StaleApproval):
        guard.answer("r1", request.request_id, approve=True, by="ann", on_version=1)
    approved = guard.answer("r1", request.request_id, approve=True, by="ann", on_version=2)
    assert approved is not None and approved.version == 3 and approved.approval is not None
    # Redelivered before anything else happened: the same decision again, so its effect is replayed.
    again = guard.answer("r1", request.request_id, approve=True, by="ann", on_version=2)
    assert again is not None and again.version == approved.version
    pay.run(approved, {"amount": "10"})
    pay.run(again, {"amount": "10"})
    assert down.requests == 1
    with pytest.raises(ApprovalNotPending):
        guard.answer("r1", request.request_id, approve=False, by="bob", on_version=2)


def test_the_observer_hears_the_ledger(store: SqliteDocumentStore, down: Downstream) -> None:
    heard: list[tuple[str, str]] = []
    guard, pay = make(store, down, observer=lambda event, effect: heard.append((event, effect.action)))
    pay.run(guard.decide("r1"), {"amount": "1"})
    assert heard == [("started", "pay"), ("done", "pay")]
