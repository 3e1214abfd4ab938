"""A same-key retry the version gate refuses closes its entry ``failed`` (stale) and leaves it watched: the
attempt before it had an unknown outcome, and a stalled call that lands afterwards, in a process that dies
before its reply, is found by key, recorded ``done`` (late) and alerted, never called again. Found by
``casekeeper.check`` on the refund example (``tests/examples/test_refund_check.py`` replays it there); here
on the guard alone, on SQLite and the Cosmos DB test server."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest

from casekeeper import DocumentStore, EffectStatus, Guard, OutcomeUnknown, effect_key


def test_a_retry_refused_as_stale_leaves_its_entry_watched_and_a_late_effect_is_found_by_key(
    store: DocumentStore,
) -> None:
    made: dict[str, dict[str, Any]] = {}
    calls: list[str] = []
    alerts: list[tuple[str, dict[str, Any]]] = []

    def alert(kind: str, message: str, fields: Mapping[str, Any], *, dedupe_key: str) -> None:
        alerts.append((kind, dict(fields)))

    def pay(key: str, args: Mapping[str, Any]) -> dict[str, Any]:
        calls.append(key)
        raise OutcomeUnknown("the reply did not come")  # the request is stalled on its way

    guard = Guard(store, call_timeout=1.0, send_margin=0.0, alert=alert)
    refund = guard.register("refund", pay, commit="refunded", lookup=made.get, retry_same_key=True)
    guard.create("r1", {"requested": "50.00"}, status="requested")
    with pytest.raises(OutcomeUnknown):
        refund.run(guard.decide("r1"), {"amount": "50.00"})
    key = effect_key("r1", "refund", 1)
    case = guard.get("r1")
    assert case is not None
    guard.update("r1", case.version, {"requested": "40.00"}, reason="the customer changed the request")

    time.sleep(2.1)  # past the call timeout by the store's clock (Cosmos _ts: whole seconds)
    [refused] = guard.reconcile()  # nothing found by key; the same-key retry meets the gate on a left version
    assert (refused.outcome, refused.reinvestigate) == ("stale", True)
    [entry] = [e for e in guard.effects_of(guard.get("r1")) if e.key == key]  # type: ignore[arg-type]
    assert entry.status is EffectStatus.FAILED and entry.stale and entry.watching

    made[key] = {"paymentId": "pay-late"}  # the stalled request lands; its process dies before the reply
    time.sleep(2.1)  # the watch looks the entry up a call timeout after it was closed
    [found] = guard.reconcile()
    assert (found.outcome, found.reinvestigate) == ("recorded_late", True)
    [entry] = [e for e in guard.effects_of(guard.get("r1")) if e.key == key]  # type: ignore[arg-type]
    assert entry.status is EffectStatus.DONE and entry.result == {"paymentId": "pay-late"} and not entry.watching
    # A late outcome, on a version the case left: both said, both naming the case.
    assert sorted(kind for kind, _ in alerts) == ["effect_on_left_version", "late_outcome"]
    assert all(fields["caseId"] == "r1" for _, fields in alerts)
    assert calls == [key]  # looked up, never called again
    assert guard.reconcile() == []  # settled: nothing left to look at
