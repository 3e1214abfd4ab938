"""A person's answer is data: who decided what, on which version, is a field of the transition it commits,
never only prose in its reason (a reason such as "approved by X, but 1500.00 exceeds what may still be
requested (500.00)" names no approver a reader could parse back reliably)."""

from __future__ import annotations

from typing import Any

from casekeeper import Answer, effect_key
from casekeeper.core.ports import DocumentStore
from shared.domain import events as ev
from shared.operator.cases import case_document
from shared.workflow.approval import pending_request
from shared.workflow.messages import ApprovalRequest
from tests.support.app import Harness
from tests.support.invoices import invoice

APPROVER = "ana@example.com"


def ask(app: Harness) -> ApprovalRequest:
    result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("2500.00"))  # over-billed by 1500 > 1000
    assert result.outcome == "awaiting_approval"
    pending = pending_request(app.cases.require("C-1"))
    assert pending is not None and pending.case_version == 2
    return pending


def answer(app: Harness, pending: ApprovalRequest, decision: str, **extra: Any) -> None:
    app.handle(
        ev.APPROVAL_ANSWERED,
        "C-1",
        requestId=pending.request_id,
        decision=decision,
        caseVersion=pending.case_version,
        approver=APPROVER,
        **extra,
    )


def test_an_approval_is_recorded_as_fields_of_the_commit_it_leads_to(app: Harness) -> None:
    pending = ask(app)
    answer(app, pending, "approve")
    case = app.cases.require("C-1")
    committed = case.transition_from(2)
    assert committed is not None and committed.status == "credit_requested"
    assert committed.answer == Answer(pending.request_id, True, APPROVER, 2)
    assert case.data["pendingApproval"] is None


def test_a_rejection_keeps_its_reason_as_a_field_whatever_the_reason_says(app: Harness) -> None:
    pending = ask(app)
    why = "PO 4711 (reason: see mail), but not this one"  # prose that would confuse any pattern
    answer(app, pending, "reject", reason=why)
    committed = app.cases.require("C-1").transition_from(2)
    assert committed is not None and committed.status == "needs_review"
    assert committed.answer == Answer(pending.request_id, False, APPROVER, 2, why)


def _a_done_request_on_v1(store: DocumentStore, amount: str) -> None:
    """A credit-note request of v1 that is done and whose note has not arrived: outstanding money. Written
    directly onto the case as its effect entry (as a person's resolution would leave it) because no run can
    make one once the case is at v2."""
    key = effect_key("C-1", "request_credit_note", 1)
    body = {
        "id": key,
        "kind": "effect",
        "caseId": "C-1",
        "action": "request_credit_note",
        "caseVersion": 1,
        "status": "done",
        "request": {"amount": amount, "currency": "EUR", "invoiceId": "INV-1", "supplierId": "SUP-1"},
        "result": {"creditNoteId": "CN-EARLIER"},
        "reason": None,
        "stale": False,
        "attempts": 1,
        "resolution": None,
        "history": [],
    }
    doc = store.read("cases", "C-1", "C-1")
    assert doc is not None
    store.replace("cases", "C-1", "C-1", {**doc.body, "effects": [*doc.body.get("effects", []), body]}, etag=doc.etag)


def test_approved_but_exceeding_names_the_approver_not_the_prose_after_it(app: Harness) -> None:
    pending = ask(app)
    _a_done_request_on_v1(app.store, "1000.00")  # remaining is now 500.00, below the 1500.00 approved
    answer(app, pending, "approve")
    case = app.cases.require("C-1")
    committed = case.transition_from(2)
    assert committed is not None and committed.status == "needs_review"
    assert committed.reason is not None and committed.reason.startswith(f"approved by {APPROVER}, but 1500.00")
    assert committed.answer == Answer(pending.request_id, True, APPROVER, 2)

    view = case_document(app_operations(app), case)
    [_, decided] = view["approvals"]["history"]
    assert (decided["event"], decided["by"], decided["onVersion"], decided["status"]) == (
        "approved",
        APPROVER,
        2,
        "needs_review",
    )


def app_operations(app: Harness) -> Any:
    """What ``case_document`` reads: the case repository and the ledger (a stand-in for ``Operations``,
    whose other parts this view does not touch)."""

    class Ops:
        store = app.store
        cases = app.cases
        ledger = app.ledger

    return Ops()
