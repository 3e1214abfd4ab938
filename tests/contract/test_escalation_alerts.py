"""Every escalation that may involve money reaches someone (item 6 of the alert rule), on every backend.

The finisher's escalation of an effect that happened on a version the case has left (money asked on facts
that no longer hold) raises an alert naming the amount; so do re-checks that stop at their cap.
"""

from __future__ import annotations

from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.commits import CommitFinisher
from casekeeper.core.ledger import Ledger
from casekeeper.core.ports import DocumentStore
from casekeeper.core.reconcile import RecheckResult, Reconciler
from shared.app.alerts import Alerter
from tests.support.downstream import CountingDownstream

ACTION = "request_credit_note"
COMMIT = {"status": "credit_requested", "reason": "over-billed", "clearPendingApproval": False}


def test_an_effect_found_on_a_left_version_is_escalated_with_an_alert_naming_the_amount(store: DocumentStore) -> None:
    clock = ManualClock()
    cases = CaseRepository(store, clock)
    alerts = Alerter(store, clock)
    ledger = Ledger(store, cases, call_timeout=120)
    cases.create("C-1", {"poAmount": "1000.00"})
    outcome = ledger.run(
        case_id="C-1",
        action=ACTION,
        decided_on_version=1,
        call=CountingDownstream(),
        request={"amount": "100.00", "currency": "EUR", "commit": COMMIT},
    )
    # The commit is lost (a crash at F5); meanwhile the PO changes and the case moves to v2.
    assert cases.update_facts("C-1", 1, {"poAmount": "1100.00"}, reason="po edited") is not None
    finisher = CommitFinisher(cases, ledger, alert=alerts.raise_alert)
    for _ in range(2):  # a repeat (the reconciler, the timer) neither escalates nor alerts again
        finisher.finish(outcome.effect)
    case = cases.require("C-1")
    assert case.status == "needs_review"
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
