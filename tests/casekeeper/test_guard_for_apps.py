"""What the public guard offers an application that has its own stored data and its own commit step (the
invoice app is built on these): settling step by step, running on a carried version, the answer recorded
on the commit, args stored flat, retry args rebuilt from old rows, refusals left to the caller, tracing.

Same fake downstream as ``test_guard.py`` (a dict keyed by idempotency key), for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from casekeeper import (
    Answer,
    DownstreamRejected,
    Effect,
    EffectFailed,
    EffectInFlight,
    Guard,
    NeedsReconciliation,
    OutcomeUnknown,
    StaleDecision,
    asked_on,
    effect_key,
)
from casekeeper.stores.sqlite import SqliteDocumentStore
from tests.casekeeper.test_guard import Crash, Downstream, crash_at


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


def flat(store: SqliteDocumentStore, down: Downstream, **options: Any) -> tuple[Guard, Any]:
    guard = Guard(store, call_timeout=30.0, **options)
    pay = guard.register(
        "pay",
        down.pay,
        commit="paid",
        lookup=down.find,
        retry_same_key=True,
        flat_request=True,
        commit_data_from=lambda effect: {"paidBy": effect.key, "amount": effect.request["amount"]},
    )
    guard.create("r1", {"amount": "10"})
    return guard, pay


def test_run_on_a_carried_version_records_who_proposed_and_the_answer_on_the_commit(
    store: SqliteDocumentStore, down: Downstream
) -> None:
    guard, pay = flat(store, down)
    answer = Answer("req-1", True, "ann", 1)
    done = pay.run_on("r1", 1, {"amount": "10"}, reason="approved", proposed_by="rules", answer=answer)
    case = guard.get("r1")
    assert case is not None and done.commit == "committed" and case.status == "paid"
    [transition] = case.history
    assert (transition.answer, transition.proposed_by, transition.reason) == (answer, "rules", "approved")
    assert case.data == {"paidBy": done.key, "amount": "10"}
    [effect] = guard.ledger.for_case("r1")
    assert effect.request == {"amount": "10", "commit": effect.request["commit"]}  # args flat, beside commit
    assert effect.request["commit"]["answer"] == answer.to_json()
    with pytest.raises(StaleDecision):  # the version moved: refused by the gate, nothing called
        pay.run_on("r1", 1 + 5, {"amount": "10"})
    assert down.requests == 1


def test_commit_fields_are_stored_for_readers_and_cannot_overwrite_the_guards(
    store: SqliteDocumentStore, down: Downstream
) -> None:
    guard, pay = flat(store, down)
    with pytest.raises(ValueError, match="commit_fields may not set"):
        pay.run_on("r1", 1, {"amount": "10"}, commit_fields={"status": "elsewhere"})
    pay.run_on("r1", 1, {"amount": "10"}, commit_fields={"clearsSomething": True})
    [effect] = guard.ledger.for_case("r1")
    assert effect.request["commit"]["clearsSomething"] is True and effect.request["commit"]["status"] == "paid"


def test_a_refusal_is_left_to_the_caller_when_the_effect_says_so(store: SqliteDocumentStore) -> None:
    guard = Guard(store, call_timeout=30.0)

    def refuse(key: str, args: Any) -> dict[str, Any]:
        raise DownstreamRejected("no such account", status=422)

    pay = guard.register("pay", refuse, commit="paid", review_on_refusal=False)
    guard.create("r1", {"amount": "10"})
    with pytest.raises(EffectFailed):
        pay.run_on("r1", 1, {"amount": "10"})
    case = guard.get("r1")
    assert case is not None and (case.status, case.version) == ("open", 1)  # the caller commits it


def test_a_crash_right_after_the_outcome_leaves_settle_nothing_to_finish(
    store: SqliteDocumentStore, down: Downstream
) -> None:
    guard, pay = flat(store, down, probe=crash_at("F5"))
    with pytest.raises(Crash):
        pay.run_on("r1", 1, {"amount": "10"})
    settled = guard.settle("r1")  # the outcome and the commit were one write
    assert (settled.case.status, settled.case.version) == ("paid", 2)
    assert [e.status.value for e in settled.effects] == ["done"]


def test_settle_refuses_while_an_outcome_is_unknown_even_on_the_current_version_when_asked(
    store: SqliteDocumentStore, down: Downstream, now: list[float]
) -> None:
    guard, pay = flat(store, down)
    down.lose_reply = True
    with pytest.raises(OutcomeUnknown):
        pay.run_on("r1", 1, {"amount": "10"})
    guard.settle("r1")  # its own decision's effect: left out by default
    with pytest.raises(EffectInFlight):
        guard.settle("r1", include_current=True)
    now[0] += 31  # past the call timeout: the outcome is unknown
    with pytest.raises(NeedsReconciliation):
        guard.settle("r1", include_current=True)


def test_the_trace_hook_wraps_the_call_and_then_the_commit(store: SqliteDocumentStore, down: Downstream) -> None:
    seen: list[tuple[str, str, dict[str, Any]]] = []

    class Span:
        def __init__(self) -> None:
            self.attributes: dict[str, Any] = {}

        def set_attribute(self, name: str, value: Any) -> None:
            self.attributes[name] = value

    @contextmanager
    def trace(name: str, attributes: Any) -> Iterator[Span]:
        seen.append(("enter", name, dict(attributes)))
        span = Span()
        yield span
        seen.append(("exit", name, span.attributes))

    _guard, pay = flat(store, down, trace=trace)
    pay.run_on("r1", 1, {"amount": "10"})
    key = effect_key("r1", "pay", 1)
    assert [(what, name) for what, name, _ in seen] == [
        ("enter", "effect pay"),
        ("exit", "effect pay"),
        ("enter", "commit_status"),
        ("exit", "commit_status"),
    ]
    assert seen[0][2] == {"casekeeper.case_id": "r1", "casekeeper.case_version": 1, "casekeeper.effect_key": key}
    assert seen[3][2] == {"casekeeper.committed": "committed"}


def test_an_approval_is_asked_on_the_version_after_the_decision_and_answered_as_data(
    store: SqliteDocumentStore, down: Downstream
) -> None:
    guard, _pay = flat(store, down)
    decision = guard.decide("r1")
    request = guard.ask(decision, "pay", {"amount": "10"})
    assert request.version == asked_on(decision.version) == 2
    approved = guard.answer("r1", request.request_id, approve=True, by="ann", on_version=2)
    assert approved is not None
    case = guard.get("r1")
    assert case is not None
    answered = case.transition_from(2)
    assert answered is not None and answered.answer == Answer(request.request_id, True, "ann", 2)


def test_effect_entries_read_back_as_effects(store: SqliteDocumentStore, down: Downstream) -> None:
    guard, pay = flat(store, down)
    pay.run_on("r1", 1, {"amount": "10"})
    [effect] = guard.ledger.for_case("r1")
    assert isinstance(effect, Effect) and effect.status.value == "done" and effect.request["amount"] == "10"
