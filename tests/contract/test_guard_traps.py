"""Where a stranger steps, the guard answers or refuses, never wrongly in silence; on every backend.

Two effects of one action in one decision (named by ``part``), the same key run with other arguments
(``ArgumentsMismatch``), a pending approval request in the way (``ApprovalPending``), facts changed while a
request waits (the request is closed, visibly), ``create`` of an existing id (``AlreadyExists``), and the
async twin of every blocking method.

The downstream is a dict keyed by idempotency key: a fake, because what is tested is the guard's side (how
often it calls, what it records), and a dict says exactly what a payments API that honours keys would do.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from casekeeper import (
    AlreadyExists,
    Answer,
    ApprovalPending,
    ArgumentsMismatch,
    DocumentStore,
    Guard,
    GuardedEffect,
    StaleApproval,
    StaleDecision,
    effect_key,
)


class Payments:
    """Pays once per key; counts every request."""

    def __init__(self) -> None:
        self.paid: dict[str, dict[str, Any]] = {}
        self.requests = 0

    def pay(self, key: str, args: Any) -> dict[str, Any]:
        self.requests += 1
        return self.paid.setdefault(key, {"amount": args["amount"]})

    def find(self, key: str) -> dict[str, Any] | None:
        return self.paid.get(key)


def guarded(store: DocumentStore) -> tuple[Guard, GuardedEffect, Payments]:
    payments = Payments()
    guard = Guard(store, call_timeout=30)
    refund = guard.register("refund", payments.pay, commit="refunded", lookup=payments.find, retry_same_key=True)
    return guard, refund, payments


def test_two_lines_of_one_action_in_one_decision_are_two_effects_when_named_by_part(store: DocumentStore) -> None:
    guard, refund, payments = guarded(store)
    guard.create("t1", {"lines": {"a": "10.00", "b": "20.00"}}, status="requested")
    decision = guard.decide("t1")
    first = refund.run(decision, {"amount": "10.00"}, part="a")
    second = refund.run(decision, {"amount": "20.00"}, part="b")
    assert (first.replayed, second.replayed) == (False, False)
    assert (first.commit, second.commit) == ("committed", "committed")
    assert first.key == effect_key("t1", "refund", 1, "a") != second.key == effect_key("t1", "refund", 1, "b")
    assert sorted(p["amount"] for p in payments.paid.values()) == ["10.00", "20.00"]
    # Run again (a redelivered message): both replay, nothing is paid twice.
    again = [refund.run(decision, {"amount": a}, part=p) for p, a in (("a", "10.00"), ("b", "20.00"))]
    assert [(r.replayed, r.commit) for r in again] == [(True, "already"), (True, "already")]
    assert payments.requests == 2
    case = guard.get("t1")
    assert case is not None and (case.status, case.version) == ("refunded", 3)
    assert {e.part for e in guard.effects_of(case)} == {"a", "b"}


def test_a_part_is_refused_once_the_facts_changed_after_its_sibling(store: DocumentStore) -> None:
    guard, refund, payments = guarded(store)
    guard.create("t1", {"amount": "30.00"}, status="requested")
    decision = guard.decide("t1")
    refund.run(decision, {"amount": "10.00"}, part="a")
    case = guard.get("t1")
    assert case is not None
    guard.update("t1", case.version, {"amount": "10.00"}, reason="the customer withdrew line b")
    with pytest.raises(StaleDecision):
        refund.run(decision, {"amount": "20.00"}, part="b")
    assert payments.requests == 1


def test_a_second_effect_of_the_same_key_is_refused_and_says_how_to_name_it(store: DocumentStore) -> None:
    guard, refund, payments = guarded(store)
    guard.create("t1", {}, status="requested")
    decision = guard.decide("t1")
    refund.run(decision, {"amount": "10.00"})
    with pytest.raises(ArgumentsMismatch) as refused:
        refund.run(decision, {"amount": "20.00"})
    message = str(refused.value)
    assert refused.value.key in message and "part=" in message
    assert refused.value.recorded_digest in message and refused.value.given_digest in message
    assert refused.value.recorded_digest != refused.value.given_digest
    assert payments.requests == 1 and [p["amount"] for p in payments.paid.values()] == ["10.00"]


def test_the_same_decision_run_with_other_arguments_raises_and_the_same_arguments_replay(store: DocumentStore) -> None:
    guard, refund, payments = guarded(store)
    guard.create("t1", {}, status="requested")
    decision = guard.decide("t1")
    assert refund.run(decision, {"amount": "50.00"}).replayed is False
    with pytest.raises(ArgumentsMismatch):
        refund.run(decision, {"amount": "45.00"})
    # run_on with other args is refused as well; the recorded args replay.
    with pytest.raises(ArgumentsMismatch):
        refund.run_on("t1", 1, {"amount": "45.00"})
    replay = refund.run(decision, {"amount": "50.00"})
    assert (replay.replayed, replay.result) == (True, {"amount": "50.00"})
    assert payments.requests == 1


def test_a_pending_request_blocks_the_action_it_guards_until_approved(store: DocumentStore) -> None:
    guard, refund, payments = guarded(store)
    other = guard.register("notify", lambda key, args: {"sent": True}, commit="notified")
    guard.create("t1", {"amount": "250.00"}, status="requested")
    request = guard.ask(guard.decide("t1"), "refund", {"amount": "250.00"})
    fresh = guard.decide("t1")
    with pytest.raises(ApprovalPending) as refused:
        refund.run(fresh, {"amount": "250.00"})
    assert request.request_id in str(refused.value) and refused.value.request_id == request.request_id
    with pytest.raises(ApprovalPending):
        refund.run_on("t1", request.version, {"amount": "250.00"})
    # A rejecting answer carries no approval either.
    no = Answer(request.request_id, False, "eve", request.version, None)
    with pytest.raises(ApprovalPending):
        refund.run_on("t1", request.version, {"amount": "250.00"}, answer=no)
    assert payments.requests == 0
    case = guard.get("t1")
    assert case is not None and case.status == "awaiting_approval" and case.entries == ()
    # Another action is not guarded by this request; its commit moves the case past the request's version,
    # so the request can no longer be answered: the refund stays refused until a new request is approved.
    assert other.run(fresh, {}).commit == "committed"
    with pytest.raises(StaleApproval):
        guard.answer("t1", request.request_id, approve=True, by="ann", on_version=request.version)
    with pytest.raises(ApprovalPending, match="ask again"):
        refund.run(guard.decide("t1"), {"amount": "250.00"})
    again = guard.ask(guard.decide("t1"), "refund", {"amount": "250.00"})
    replaced = guard.get("t1")
    assert replaced is not None and replaced.data["staleApproval"]["requestId"] == request.request_id
    approved = guard.answer("t1", again.request_id, approve=True, by="ann", on_version=again.version)
    assert approved is not None and refund.run(approved, {"amount": "250.00"}).commit == "committed"
    assert payments.requests == 1


def test_asking_over_a_pending_request_is_refused_and_asking_the_same_again_is_the_same(store: DocumentStore) -> None:
    guard, _, _ = guarded(store)
    guard.create("t1", {}, status="requested")
    first = guard.decide("t1")
    request = guard.ask(first, "refund", {"amount": "250.00"})
    assert guard.ask(first, "refund", {"amount": "250.00"}) == request  # a replay of that ask
    with pytest.raises(ApprovalPending) as refused:
        guard.ask(guard.decide("t1"), "refund", {"amount": "300.00"})
    assert refused.value.request_id == request.request_id
    case = guard.get("t1")
    assert case is not None and case.data["pendingApproval"]["requestId"] == request.request_id


def test_the_approval_a_decision_carries_lets_the_action_run(store: DocumentStore) -> None:
    guard, refund, payments = guarded(store)
    guard.create("t1", {}, status="requested")
    request = guard.ask(guard.decide("t1"), "refund", {"amount": "250.00"})
    approved = guard.answer("t1", request.request_id, approve=True, by="ann", on_version=request.version)
    assert approved is not None
    assert refund.run(approved, {"amount": "250.00"}).commit == "committed"
    # An application that commits the answer with the effect passes it: the request it approves.
    guard.create("t2", {}, status="requested")
    request = guard.ask(guard.decide("t2"), "refund", {"amount": "250.00"})
    yes = Answer(request.request_id, True, "ann", request.version, None)
    assert refund.run_on("t2", request.version, {"amount": "250.00"}, answer=yes).commit == "committed"
    assert payments.requests == 2


def test_facts_changed_during_an_approval_close_the_request_visibly(store: DocumentStore) -> None:
    guard, refund, payments = guarded(store)
    guard.create("t1", {"amount": "250.00"}, status="requested")
    request = guard.ask(guard.decide("t1"), "refund", {"amount": "250.00"})
    changed = guard.update("t1", request.version, {"amount": "260.00"}, reason="customer asked for more")
    assert changed is not None
    # The case left awaiting_approval for the status it was asked from; the request is kept, marked stale.
    assert (changed.status, changed.version) == ("requested", request.version + 1)
    assert changed.data.get("pendingApproval") is None
    stale = changed.data["staleApproval"]
    assert stale["requestId"] == request.request_id
    assert (stale["staleOn"], stale["staleReason"]) == (changed.version, "customer asked for more")
    with pytest.raises(StaleApproval) as answered:
        guard.answer("t1", request.request_id, approve=True, by="ann", on_version=request.version)
    assert "customer asked for more" in str(answered.value) and f"v{changed.version}" in str(answered.value)
    assert answered.value.closed is not None
    # The workflow that acts on "requested" decides again on the new facts: nothing is in its way.
    again = guard.ask(guard.decide("t1"), "refund", {"amount": "260.00"})
    approved = guard.answer("t1", again.request_id, approve=True, by="ann", on_version=again.version)
    assert approved is not None and refund.run(approved, {"amount": "260.00"}).commit == "committed"
    assert [p["amount"] for p in payments.paid.values()] == ["260.00"]


def test_facts_changed_after_an_approval_before_its_effect_ran_lapse_it_visibly(store: DocumentStore) -> None:
    """Approved, then the facts change before the approved effect runs: the approval was given on facts that
    no longer hold, so it lapses in the same write (the record goes back to the status it was asked from),
    instead of leaving the record in "approved" with no decision that can act on it."""
    guard, refund, payments = guarded(store)
    guard.create("t1", {"amount": "250.00"}, status="requested")
    request = guard.ask(guard.decide("t1"), "refund", {"amount": "250.00"})
    approved = guard.answer("t1", request.request_id, approve=True, by="ann", on_version=request.version)
    assert approved is not None and approved.case.status == "approved"
    changed = guard.update("t1", approved.version, {"amount": "90.00"}, reason="customer asked for less")
    assert changed is not None and changed.status == "requested"
    lapsed = changed.data["staleApproval"]
    assert lapsed["requestId"] == request.request_id and lapsed["staleOn"] == changed.version
    assert "customer asked for less" in lapsed["staleReason"] and "lapsed" in lapsed["staleReason"]
    with pytest.raises(StaleDecision):
        refund.run(approved, {"amount": "250.00"})
    with pytest.raises(StaleApproval, match="customer asked for less"):
        guard.answer("t1", request.request_id, approve=True, by="ann", on_version=request.version)
    # Decided again on the new facts, under the threshold the workflow would not ask: it pays 90.00 once.
    assert refund.run(guard.decide("t1"), {"amount": "90.00"}).commit == "committed"
    assert [p["amount"] for p in payments.paid.values()] == ["90.00"]
    # Once its effect committed, an approval is used: a later change of facts leaves the status alone.
    guard.create("t2", {}, status="requested")
    request = guard.ask(guard.decide("t2"), "refund", {"amount": "250.00"})
    approved = guard.answer("t2", request.request_id, approve=True, by="ann", on_version=request.version)
    assert approved is not None and refund.run(approved, {"amount": "250.00"}).commit == "committed"
    done = guard.get("t2")
    assert done is not None
    after = guard.update("t2", done.version, {"note": "paid"}, reason="note")
    assert after is not None and after.status == "refunded" and "staleApproval" not in after.data


def test_a_status_commit_while_a_request_is_pending_closes_it(store: DocumentStore) -> None:
    guard, _, payments = guarded(store)
    guard.create("t1", {}, status="requested")
    request = guard.ask(guard.decide("t1"), "refund", {"amount": "250.00"})
    cancelled = guard.commit(guard.decide("t1"), "cancelled", reason="customer cancelled")
    assert cancelled is not None and cancelled.status == "cancelled" and not cancelled.data.get("pendingApproval")
    assert cancelled.data["staleApproval"]["staleReason"] == "status committed to cancelled: customer cancelled"
    with pytest.raises(StaleApproval, match="customer cancelled"):
        guard.answer("t1", request.request_id, approve=True, by="ann", on_version=request.version)
    assert payments.requests == 0


def test_create_of_an_existing_id_raises_unless_exist_ok(store: DocumentStore) -> None:
    guard, _, _ = guarded(store)
    case, created = guard.create("t1", {"amount": "10.00"})
    assert created is True and case.version == 1
    with pytest.raises(AlreadyExists) as exists:
        guard.create("t1", {"amount": "99.00"})
    assert "exist_ok=True" in str(exists.value) and "'t1'" in str(exists.value)
    again, created = guard.create("t1", {"amount": "99.00"}, exist_ok=True)
    assert created is False and again.facts == {"amount": "10.00"}
    kept = guard.get("t1")
    assert kept is not None and kept.facts == {"amount": "10.00"} and kept.version == 1


def test_every_blocking_public_method_has_an_async_twin() -> None:
    blocking = {
        name
        for name, member in inspect.getmembers(Guard, inspect.isfunction)
        if not name.startswith(("_", "a")) and name not in {"effect", "register", "recheck_due"}  # no I/O
    }
    missing = {name for name in blocking if not inspect.iscoroutinefunction(getattr(Guard, "a" + name, None))}
    assert missing == set()
    runs = {"run", "run_on"}
    assert all(inspect.iscoroutinefunction(getattr(GuardedEffect, "a" + name, None)) for name in runs)


def test_the_async_twins_do_what_the_blocking_methods_do(store: DocumentStore) -> None:
    guard, refund, payments = guarded(store)

    async def scenario() -> None:
        case, created = await guard.acreate("t1", {"amount": "10.00"}, status="requested")
        assert created and (await guard.aget("t1")) == case
        with pytest.raises(AlreadyExists):
            await guard.acreate("t1", {})
        moved = await guard.aupdate("t1", 1, {"amount": "20.00"}, reason="edit")
        assert moved is not None and moved.version == 2
        decision = await guard.adecide("t1")
        assert (await guard.apin(decision.to_json())).version == 2
        assert (await guard.apinned("t1", 2)).version == 2
        assert (await guard.asettle("t1")).case.version == 2
        done = await refund.arun_on("t1", 2, {"amount": "20.00"}, part="x")
        assert done.commit == "committed"
        assert (await guard.areconcile_effect("t1", done.key)).outcome == "settled"
        assert await guard.areconcile() == []
        committed = await guard.acommit(await guard.adecide("t1"), "closed", reason="done")
        assert committed is not None and committed.status == "closed"

    asyncio.run(scenario())
    assert payments.requests == 1
