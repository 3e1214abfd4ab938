"""The guard's watch (``Guard(watch=...)``): every write of a case is judged before it lands, whoever writes it,
and each finding is raised once, before the write, on every backend.

The watch here flags a case whose ``facts.limit`` is below what its done effects asked (``asked``): the shape
of the invoice app's money rule, with nothing of the app in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from casekeeper import Case, DocumentStore, Guard, OutcomeUnknown, StoreUnavailable, effect_key
from casekeeper.cases import Finding
from tests.support.downstream import CountingDownstream

ACTION = "refund"


class Sink:
    def __init__(self) -> None:
        self.raised: list[tuple[str, str, dict[str, Any]]] = []
        self.down = False

    def __call__(self, kind: str, message: str, fields: Mapping[str, Any], *, dedupe_key: str) -> None:
        if self.down:
            raise StoreUnavailable("the alert store is down")
        self.raised.append((kind, dedupe_key, dict(fields)))


def over_limit(case: Case) -> list[Finding]:
    counted = ("started", "done", "needs_reconciliation")
    asked = sum(int(e["request"]["amount"]) for e in case.entries if e.get("status") in counted)
    limit = int(case.facts.get("limit", 0))
    if asked <= limit:
        return []
    excess = asked - limit
    return [Finding("over_limit", f"{case.id}: {asked} > {limit}", f"{case.id}:{excess}", {"excess": excess})]


@pytest.fixture
def world(store: DocumentStore) -> tuple[Guard, Sink, Any]:
    sink = Sink()
    guard = Guard(store, call_timeout=120, alert=sink, watch=over_limit)
    downstream = CountingDownstream()
    effect = guard.register(ACTION, lambda key, args: downstream(key), commit="refunded", flat_request=True)
    guard.create("r1", {"limit": 10})
    return guard, sink, effect


def test_a_fact_change_after_an_effect_raises_once_per_excess(world: tuple[Guard, Sink, Any]) -> None:
    guard, sink, effect = world
    assert effect.run(guard.decide("r1"), {"amount": "10"}).commit == "committed"
    assert sink.raised == []
    case = guard.get("r1")
    assert case is not None
    guard.update("r1", case.version, {"limit": 4}, reason="limit lowered")
    guard.cases.note("r1", "a person looks")  # another write of the same state raises nothing more
    case = guard.get("r1")
    assert case is not None
    guard.update("r1", case.version, {"limit": 3}, reason="lowered again")
    assert [(kind, key) for kind, key, _ in sink.raised] == [("over_limit", "r1:6"), ("over_limit", "r1:7")]


def test_an_outcome_written_by_the_ledger_is_judged_too(world: tuple[Guard, Sink, Any]) -> None:
    """The claim and the outcome are the ledger's writes of the case: they go through the same judgment."""
    guard, sink, effect = world
    with pytest.raises(ValueError):
        Guard(guard.store, watch=over_limit)  # a watch with nobody to tell is refused
    case = guard.get("r1")
    assert case is not None
    guard.update("r1", case.version, {"limit": 5}, reason="limit lowered before the decision")
    effect.run(guard.decide("r1"), {"amount": "8"})  # a decision the app's own rule should have refused
    assert [(kind, key) for kind, key, _ in sink.raised] == [("over_limit", "r1:3")]


def test_a_finding_that_cannot_be_raised_stops_the_write(world: tuple[Guard, Sink, Any]) -> None:
    """Raised before the write: if the alert cannot be recorded, nothing is written, and the retry raises it."""
    guard, sink, effect = world
    effect.run(guard.decide("r1"), {"amount": "10"})
    before = guard.get("r1")
    assert before is not None
    sink.down = True
    with pytest.raises(StoreUnavailable):
        guard.update("r1", before.version, {"limit": 4}, reason="limit lowered")
    after = guard.get("r1")
    assert after is not None and (after.version, after.facts["limit"]) == (before.version, 10)
    sink.down = False
    assert guard.update("r1", before.version, {"limit": 4}, reason="limit lowered") is not None
    assert [key for _, key, _ in sink.raised] == ["r1:6"]


def test_an_effect_left_unknown_counts_while_it_is_open(world: tuple[Guard, Sink, Any]) -> None:
    guard, sink, _ = world

    def lost(key: str, args: Mapping[str, Any]) -> Mapping[str, Any]:
        raise OutcomeUnknown("the reply was lost")

    unknown = guard.register("charge", lost, commit="charged", flat_request=True)
    with pytest.raises(OutcomeUnknown):
        unknown.run(guard.decide("r1"), {"amount": "9"})
    assert guard.ledger.get("r1", effect_key("r1", "charge", 1)) is not None
    case = guard.get("r1")
    assert case is not None
    guard.update("r1", case.version, {"limit": 2}, reason="limit lowered while the outcome is unknown")
    assert [key for _, key, _ in sink.raised] == ["r1:7"]
