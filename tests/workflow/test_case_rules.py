"""The invoice-review rules, through the entry point the case worker calls, on every backend.

The supplier is the local stub over real HTTP, so "requests" below are what a supplier would see.
"""

from __future__ import annotations

import pytest

from casekeeper.core.keys import effect_key
from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.errors import InvalidEvent
from tests.support.app import Harness
from tests.support.downstream import leave_started
from tests.support.invoices import invoice
from tests.support.supplier import posts


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


def test_facts_before_their_invoice_are_held_and_a_withdrawal_for_an_unknown_case_is_invalid(
    app: Harness, supplier: SupplierStub
) -> None:
    held = app.handle(ev.PO_UPDATED, "early", poAmount="1.00")
    assert held.status == "awaiting_invoice" and held.outcome == "facts_changed"
    assert app.handle(ev.CASE_INVESTIGATE, "early").outcome == "nothing_to_do"
    assert app.cases.require("early").facts == {"poAmount": "1.00"} and posts(supplier) == []
    withdrawal = {"effectKey": "k", "by": "ana", "why": "settled by phone", "at": 1.0}
    with pytest.raises(InvalidEvent, match="unknown case"):
        app.handle(ev.REQUEST_WITHDRAWN, "ghost", **withdrawal)
    with pytest.raises(InvalidEvent, match="awaits its invoice"):
        app.handle(ev.REQUEST_WITHDRAWN, "early", **withdrawal)


def test_po_update_reinvestigates_an_approved_case(app: Harness, supplier: SupplierStub) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1000.00"))
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="900.00")  # now over-billed by 100
    assert [s.outcome for s in result.steps] == ["facts_changed", "committed"]
    assert result.status == "credit_requested"
    [post] = posts(supplier)
    assert post["body"]["amount"] == "100.00"  # type: ignore[index]


def test_a_po_lowered_after_a_request_asks_only_for_the_remainder(app: Harness, supplier: SupplierStub) -> None:
    """Invoice 1300 / PO 1000: 300 requested. The PO drops to 900: over-billed by 400, of which 300 is
    already outstanding, so 100 more is requested, never 400 (the money rule)."""
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1300.00"))
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="900.00")
    assert result.status == "credit_requested"
    assert [p["body"]["amount"] for p in posts(supplier)] == ["300.00", "100.00"]  # type: ignore[index]
    for _ in range(3):
        app.handle(ev.CASE_INVESTIGATE, "C-1")
    assert len(posts(supplier)) == 2


def test_a_po_raised_after_a_request_goes_to_review_naming_the_excess(app: Harness, supplier: SupplierStub) -> None:
    """Invoice 1300 / PO 1000: 300 requested. The PO rises to 1200: only 100 was over-billed, 300 is
    outstanding: a person reviews, told the excess (200), and nothing more is requested, however often
    the case is investigated."""
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1300.00"))
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="1200.00")
    assert result.status == "needs_review"
    assert "by 200.00 EUR" in result.detail
    for _ in range(3):
        again = app.handle(ev.CASE_INVESTIGATE, "C-1")
        assert again.status == "needs_review"
    assert len(posts(supplier)) == 1


def test_a_lost_commit_sent_to_review_never_leads_to_a_second_full_request(
    app: Harness, supplier: SupplierStub
) -> None:
    """A done request whose commit was lost went to review; deciding again counts it as outstanding."""
    app.cases.create("C-3", invoice("1300.00"))
    first = app.handle(ev.CASE_INVESTIGATE, "C-3")
    assert first.status == "credit_requested"
    app.cases.escalate("C-3", "needs_review", "sent to a person for some reason")
    again = app.handle(ev.CASE_INVESTIGATE, "C-3")
    assert again.status == "credit_requested" and again.outcome == "committed"
    assert [p["body"]["amount"] for p in posts(supplier)] == ["300.00"]  # type: ignore[index]


def test_unchanged_po_is_a_no_op(app: Harness) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1000.00"))
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="1000.00")
    assert result.outcome == "nothing_to_do" and app.cases.require("C-1").version == 2


def requested_note(app: Harness, case_id: str) -> str:
    return str(app.cases.require(case_id).data["creditRequest"]["creditNoteId"])


def test_the_requested_note_received_in_full_closes_the_case(app: Harness) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    note = requested_note(app, "C-1")
    closed = app.handle(ev.CREDIT_NOTE_ISSUED, "C-1", creditNoteId=note, amount="100.00")
    assert closed.status == "closed"
    duplicate = app.handle(ev.CREDIT_NOTE_ISSUED, "C-1", creditNoteId=note, amount="100.00")
    assert duplicate.outcome == "nothing_to_do"


def test_a_partial_note_settles_its_request_and_a_person_may_ask_for_the_rest(
    app: Harness, supplier: SupplierStub
) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-2", **invoice("1100.00"))
    partial = app.handle(ev.CREDIT_NOTE_ISSUED, "C-2", creditNoteId=requested_note(app, "C-2"), amount="60.00")
    assert partial.status == "needs_review"
    assert app.cases.require("C-2").facts["credits"] == [
        {"creditNoteId": requested_note(app, "C-2"), "amount": "60.00"}
    ]
    rest = app.handle(ev.CASE_INVESTIGATE, "C-2")  # the request is settled at 60: 40 may still be asked
    assert rest.status == "credit_requested"
    assert [p["body"]["amount"] for p in posts(supplier)] == ["100.00", "40.00"]  # type: ignore[index]


def test_an_external_credit_while_a_request_is_outstanding_goes_to_review(app: Harness, supplier: SupplierStub) -> None:
    """A credit note we did not ask for arrives while our request for the whole over-billing is
    outstanding: together they exceed it, so a person looks; nothing more is requested."""
    app.handle(ev.INVOICE_RECEIVED, "C-4", **invoice("1100.00"))
    result = app.handle(ev.CREDIT_NOTE_ISSUED, "C-4", creditNoteId="CN-ELSEWHERE", amount="30.00")
    assert result.status == "needs_review" and "exceed" in result.detail
    assert app.handle(ev.CASE_INVESTIGATE, "C-4").status == "needs_review"
    assert len(posts(supplier)) == 1


def test_investigate_on_a_closed_case_does_nothing_and_says_so(app: Harness) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1000.00"))
    result = app.handle(ev.CASE_INVESTIGATE, "C-1")
    assert result.outcome == "nothing_to_do"
    assert "approved" in result.detail


def test_no_new_decision_while_an_effect_of_the_case_is_unsettled(app: Harness, supplier: SupplierStub) -> None:
    from casekeeper.core.ledger import EffectStatus

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


def test_a_redelivered_fact_event_still_runs_the_decision_its_first_delivery_lost(
    app: Harness, supplier: SupplierStub
) -> None:
    """The first delivery wrote the PO and died before deciding; the redelivery finds the facts already
    recorded and must still decide, or the case would stay open forever."""
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1000.00"))  # approved
    case = app.cases.require("C-1")
    app.cases.update_facts("C-1", case.version, {"poAmount": "900.00"}, reason="po.updated", new_status="open")
    redelivered = app.handle(ev.PO_UPDATED, "C-1", poAmount="900.00")
    assert [s.outcome for s in redelivered.steps] == ["nothing_to_do", "committed"]
    assert redelivered.status == "credit_requested"
    assert [p["body"]["amount"] for p in posts(supplier)] == ["100.00"]  # type: ignore[index]


def test_credit_note_redelivered_after_a_lost_decision_decides(app: Harness, supplier: SupplierStub) -> None:
    app.cases.create("C-2", {**invoice("1100.00"), "credits": [{"creditNoteId": "CN-X", "amount": "40.00"}]})
    redelivered = app.handle(ev.CREDIT_NOTE_ISSUED, "C-2", creditNoteId="CN-X", amount="40.00")
    assert redelivered.status == "credit_requested"
    assert [p["body"]["amount"] for p in posts(supplier)] == ["60.00"]  # type: ignore[index]
