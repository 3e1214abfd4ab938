"""The invoice-review rules, through the entry point the case worker calls, on every backend.

The supplier is the local stub over real HTTP, so "requests" below are what a supplier would see.
"""

from __future__ import annotations

import pytest

from shared.core.errors import InvalidEvent
from shared.core.keys import effect_key
from shared.domain import events as ev
from shared.supplier.stub import SupplierStub
from tests.support.app import Harness, invoice
from tests.support.downstream import leave_started
from tests.workflow.conftest import posts


def test_within_tolerance_is_approved_without_any_request(app: Harness, supplier: SupplierStub) -> None:
    result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1004.99"))
    assert (result.outcome, result.status, result.version) == ("committed", "approved", 2)
    assert posts(supplier) == []


def test_over_billed_up_to_the_threshold_requests_one_credit_note(app: Harness, supplier: SupplierStub) -> None:
    result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1250.40"))
    assert (result.outcome, result.status) == ("committed", "credit_requested")
    [post] = posts(supplier)
    key = effect_key("C-1", "request_credit_note", 1)
    assert post["idempotencyKey"] == key
    assert post["body"] == {
        "caseId": "C-1",
        "invoiceId": "INV-1",
        "supplierId": "SUP-9",
        "amount": "250.40",
        "currency": "EUR",
    }
    case = app.cases.require("C-1")
    assert case.data["creditRequest"]["effectKey"] == key
    assert case.data["creditRequest"]["creditNoteId"]


def test_under_billed_goes_to_review(app: Harness, supplier: SupplierStub) -> None:
    result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("900.00"))
    assert (result.outcome, result.status) == ("committed", "needs_review")
    assert posts(supplier) == []


def test_investigating_twice_at_the_same_version_never_requests_twice(app: Harness, supplier: SupplierStub) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    again = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))  # a redelivered webhook
    assert again.outcome == "nothing_to_do"
    for _ in range(3):
        result = app.handle(ev.CASE_INVESTIGATE, "C-1")
        assert result.outcome == "nothing_to_do"
        assert "credit_requested" in result.detail
    assert len(posts(supplier)) == 1


def test_a_second_invoice_under_an_existing_case_id_is_refused(app: Harness) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1000.00"))
    with pytest.raises(InvalidEvent, match="another invoice"):
        app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1000.00", invoiceId="INV-OTHER"))


def test_events_for_an_unknown_case_are_invalid(app: Harness) -> None:
    with pytest.raises(InvalidEvent, match="unknown case"):
        app.handle(ev.PO_UPDATED, "ghost", poAmount="1.00")


def test_po_update_reinvestigates_an_approved_case(app: Harness, supplier: SupplierStub) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1000.00"))
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="900.00")  # now over-billed by 100
    assert [s.outcome for s in result.steps] == ["facts_changed", "committed"]
    assert result.status == "credit_requested"
    [post] = posts(supplier)
    assert post["body"]["amount"] == "100.00"  # type: ignore[index]


def test_po_update_after_a_credit_request_goes_to_review(app: Harness, supplier: SupplierStub) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="1050.00")
    assert result.status == "needs_review"
    assert len(posts(supplier)) == 1
    # Investigating the reviewed case decides on the new facts: a new version, a new key.
    again = app.handle(ev.CASE_INVESTIGATE, "C-1")
    assert again.status == "credit_requested"
    assert len(posts(supplier)) == 2
    assert len({p["idempotencyKey"] for p in posts(supplier)}) == 2


def test_unchanged_po_is_a_no_op(app: Harness) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1000.00"))
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="1000.00")
    assert result.outcome == "nothing_to_do" and app.cases.require("C-1").version == 2


def test_a_full_credit_note_closes_the_case_and_a_partial_one_sends_it_to_review(app: Harness) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    closed = app.handle(ev.CREDIT_NOTE_ISSUED, "C-1", creditNoteId="CN-A", amount="98.00")  # 2.00 left: within 5
    assert closed.status == "closed"
    duplicate = app.handle(ev.CREDIT_NOTE_ISSUED, "C-1", creditNoteId="CN-A", amount="98.00")
    assert duplicate.outcome == "nothing_to_do"

    app.handle(ev.INVOICE_RECEIVED, "C-2", **invoice("1100.00"))
    partial = app.handle(ev.CREDIT_NOTE_ISSUED, "C-2", creditNoteId="CN-B", amount="50.00")
    assert partial.status == "needs_review"
    assert app.cases.require("C-2").facts["credits"] == [{"creditNoteId": "CN-B", "amount": "50.00"}]


def test_investigate_on_a_closed_case_does_nothing_and_says_so(app: Harness) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1000.00"))
    result = app.handle(ev.CASE_INVESTIGATE, "C-1")
    assert result.outcome == "nothing_to_do"
    assert "approved" in result.detail


def test_no_new_decision_while_an_effect_of_the_case_is_unsettled(app: Harness, supplier: SupplierStub) -> None:
    from shared.core.ledger import EffectStatus

    # A request whose outcome is unknown, escalated to a person: the case is in review.
    app.cases.create("C-2", {**invoice("1100.00")})
    effect = leave_started(app.ledger, "C-2")
    app.ledger.mark_needs_reconciliation(effect, "lookup kept failing")
    assert app.cases.commit_status("C-2", 1, "needs_review", reason="escalated")
    result = app.handle(ev.CASE_INVESTIGATE, "C-2")  # needs_review is investigable, but not now
    assert result.outcome == "waiting_for_reconciliation"
    assert "needs_reconciliation" in result.detail
    assert posts(supplier) == []  # nothing was sent
    settled = app.ledger.record_outcome(
        app.ledger.for_case("C-2")[0], EffectStatus.FAILED, reason="supplier has no such request", source="operator"
    )
    assert settled.status is EffectStatus.FAILED
    again = app.handle(ev.CASE_INVESTIGATE, "C-2")  # settled: the case is decided again
    assert again.status == "credit_requested" and len(posts(supplier)) == 1
