"""Every escalation that may involve money reaches someone (item 6 of the alert rule), on every backend.

An effect that happened on a version the case has left (money asked on facts that no longer hold) is
escalated with an alert naming the amount; so are re-checks that stop at their cap.
"""

from __future__ import annotations

from typing import Any

from casekeeper import Guard
from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.ledger import Ledger
from casekeeper.core.ports import DocumentStore
from casekeeper.core.reconcile import RecheckResult, Reconciler
from shared.app.alerts import Alerter

ACTION = "request_credit_note"


def test_an_effect_found_on_a_left_version_is_escalated_with_an_alert_naming_the_amount(store: DocumentStore) -> None:
    clock = ManualClock()
    alerts = Alerter(store, clock)
    guard = Guard(store, clock=clock, call_timeout=120, alert=alerts.raise_alert)

    def request(key: str, args: Any) -> dict[str, Any]:
        # While the call is in flight the PO changes and the case moves to v2.
        assert guard.update("C-1", 1, {"poAmount": "1100.00"}, reason="po edited") is not None
        return {"creditNoteId": "CN-1"}

    note = guard.register(ACTION, request, commit="credit_requested", flat_request=True)
    guard.create("C-1", {"poAmount": "1000.00"})
    decision = guard.decide("C-1")
    first = note.run(decision, {"amount": "100.00", "currency": "EUR"})
    again = note.run_on("C-1", 1, {"amount": "100.00", "currency": "EUR"})  # a replay neither escalates again
    assert (first.commit, again.commit, again.replayed) == ("needs_review", "with_person", True)
    case = guard.get("C-1")
    assert case is not None and case.status == "needs_review" and case.version == 3
    [alert] = alerts.recent()
    assert alert.alert_kind == "effect_on_left_version"
    assert "100.00 EUR" in alert.message and "over-requested" in alert.message
    assert (alert.fields["decidedOnVersion"], alert.fields["caseVersion"], alert.fields["amount"]) == (1, 2, "100.00")


def test_rechecks_that_stop_at_their_cap_raise_one_alert(store: DocumentStore) -> None:
    clock = ManualClock()
    cases = CaseRepository(store, clock)
    alerts = Alerter(store, clock)
    reconciler = Reconciler(Ledger(store, cases), cases, store, {}, raise_alert=alerts.raise_alert)
    stuck = RecheckResult("lookup_failed", "k" * 64, "C-1", "lookup failed (2/3): 503", retry_after=30.0)
    for _ in range(2):
        reconciler.rechecks_exhausted(stuck, 50)
    [alert] = alerts.recent()
    assert alert.alert_kind == "rechecks_exhausted"
    assert alert.fields == {
        "caseId": "C-1",
        "effectKey": "k" * 64,
        "outcome": "lookup_failed",
        "detail": "lookup failed (2/3): 503",
        "rechecks": 50,
    }
