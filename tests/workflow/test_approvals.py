"""Approvals (rule R6): versioned requests, deterministic ids, answers that take effect once."""

from __future__ import annotations

import pytest

from casekeeper.core.keys import approval_request_id, effect_key
from casekeeper.errors import EffectInFlight, OutcomeUnknown
from devhost.supplier_stub import Faults, SupplierStub
from shared.domain import events as ev
from tests.support.app import Harness
from tests.support.invoices import invoice
from tests.support.supplier import posts


def ask(app: Harness, case_id: str = "C-1") -> dict[str, object]:
    result = app.handle(ev.INVOICE_RECEIVED, case_id, **invoice("2500.00"))  # over-billed by 1500 > 1000
    assert (result.outcome, result.status, result.version) == ("awaiting_approval", "awaiting_approval", 2)
    pending = app.cases.require(case_id).data["pendingApproval"]
    assert pending["requestId"] == approval_request_id(case_id, "request_credit_note", 2)
    assert pending["caseVersion"] == 2 and pending["amount"] == "1500.00"
    assert pending["facts"]["invoiceAmount"] == "2500.00"
    return dict(pending)


def answer(app: Harness, pending: dict[str, object], decision: str = "approve", version: int | None = None):  # type: ignore[no-untyped-def]
    return app.handle(
        ev.APPROVAL_ANSWERED,
        "C-1",
        requestId=pending["requestId"],
        decision=decision,
        caseVersion=version if version is not None else pending["caseVersion"],
        approver="ana@example.com",
    )


def test_approve_at_the_current_version_requests_the_credit_note(app: Harness, supplier: SupplierStub) -> None:
    pending = ask(app)
    assert posts(supplier) == []
    result = answer(app, pending)
    assert (result.outcome, result.status) == ("committed", "credit_requested")
    [post] = posts(supplier)
    assert post["idempotencyKey"] == effect_key("C-1", "request_credit_note", 2)
    assert app.cases.require("C-1").data["pendingApproval"] is None


def test_the_same_answer_twice_takes_effect_once(app: Harness, supplier: SupplierStub) -> None:
    pending = ask(app)
    answer(app, pending)
    again = answer(app, pending)
    assert again.outcome == "ignored"
    assert "is not pending (no approval is pending" in again.detail
    assert len(posts(supplier)) == 1


def test_reject_goes_to_review(app: Harness, supplier: SupplierStub) -> None:
    pending = ask(app)
    result = answer(app, pending, decision="reject")
    assert (result.outcome, result.status) == ("committed", "needs_review")
    assert posts(supplier) == []


def test_an_answer_on_an_older_version_commits_nothing(app: Harness, supplier: SupplierStub) -> None:
    pending = ask(app)
    # The PO is edited while the approver looks: the case is decided again at v3 and asks again at v4.
    changed = app.handle(ev.PO_UPDATED, "C-1", poAmount="900.00")
    assert changed.status == "awaiting_approval"
    new_pending = app.cases.require("C-1").data["pendingApproval"]
    assert new_pending["requestId"] != pending["requestId"] and new_pending["caseVersion"] == 4
    assert new_pending["amount"] == "1600.00"

    stale = answer(app, pending)
    assert stale.outcome == "ignored"
    assert posts(supplier) == []
    assert app.cases.require("C-1").data["pendingApproval"] == new_pending

    # The right answer, with a version the approver did not see, is refused too.
    wrong_version = answer(app, dict(new_pending), version=2)
    assert wrong_version.steps[0].outcome == "stale_answer"
    assert posts(supplier) == []
    ok = answer(app, dict(new_pending))
    assert ok.status == "credit_requested" and len(posts(supplier)) == 1


def test_an_answer_with_no_checkpoint_is_rebuilt_from_the_case_document(app: Harness, supplier: SupplierStub) -> None:
    pending = ask(app)
    for doc in app.store.query(
        "checkpoints", __import__("casekeeper.core.ports", fromlist=["Query"]).Query(partition="C-1")
    ):
        app.store.delete("checkpoints", "C-1", doc.id)
    result = answer(app, pending)
    assert result.status == "credit_requested"
    assert len(posts(supplier)) == 1


def test_a_rejection_never_commits_while_the_approved_call_is_in_flight(app: Harness, supplier: SupplierStub) -> None:
    """The issue's race: the approval's call reached the supplier and its reply was lost (outcome unknown,
    in flight); a rejection of the same request on the same version arrives next. It must not commit v3
    ``needs_review`` past the approved request: it waits for the effect, as an investigation would."""
    pending = ask(app)
    supplier.set_faults(Faults(drop_after_create=1))
    with pytest.raises(OutcomeUnknown):
        answer(app, pending)
    with pytest.raises(EffectInFlight):
        answer(app, pending, decision="reject")
    case = app.cases.require("C-1")
    assert (case.status, case.version) == ("awaiting_approval", 2)
    assert len(posts(supplier)) == 1
