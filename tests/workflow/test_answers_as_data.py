"""A person's answer is data (issue 27): who decided what, on which version, is a field of the transition.

Before, the answer was written into the transition's reason ("approved by X", "rejected by X (reason: Y)",
"approved by X, but 1500.00 exceeds what may still be requested (500.00)") and read back with a regex, which
took the approver of that last form to be "X, but 1500.00 exceeds ...". Old documents still carry only the
prose; they are read with a pattern that knows every form the workflow wrote.
"""

from __future__ import annotations

from typing import Any

from casekeeper import Answer, approval_request_id, effect_key
from casekeeper.core.ports import DocumentStore
from shared.domain import events as ev
from shared.operator.cases import case_document
from shared.workflow.approval import LEGACY_ANSWER, answer_of, pending_request
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
    assert answer_of("C-1", committed) == committed.answer
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


def test_a_transition_written_before_answers_were_fields_is_read_from_its_prose(app: Harness) -> None:
    pending = ask(app)
    _a_done_request_on_v1(app.store, "1000.00")
    answer(app, pending, "approve")
    _forget_answer_fields(app.store, "C-1")  # what a document written by the previous release holds
    old = app.cases.require("C-1").transition_from(2)
    assert old is not None and old.answer is None

    read = answer_of("C-1", old)
    assert read is not None
    assert (read.by, read.approved, read.on_version) == (APPROVER, True, 2)
    assert read.request_id == approval_request_id("C-1", "request_credit_note", 2) == pending.request_id
    assert read.reason is None  # the approver gave none; what became of the approval is the transition's reason


def test_the_legacy_pattern_reads_every_form_the_workflow_wrote() -> None:
    forms = {  # (decision, approver, the approver's reason): the groups in order, as the old pattern had them
        "approved by ann": ("approved", "ann", None),
        "rejected by bob (reason: wrong PO)": ("rejected", "bob", "wrong PO"),
        "approved by ann (commit finished by reconciliation)": ("approved", "ann", None),
        "approved by ann, but 10.00 exceeds what may still be requested (5.00)": ("approved", "ann", None),
        "rejected by Ann Smith (reason: a, b (c))": ("rejected", "Ann Smith", "a, b (c)"),
    }
    for reason, (decision, by, why) in forms.items():
        match = LEGACY_ANSWER.match(reason)
        assert match is not None, reason
        assert match.groups() == (decision, by, why), reason
    assert LEGACY_ANSWER.match("approval requested for 1500.00 EUR") is None


def _forget_answer_fields(store: DocumentStore, case_id: str) -> None:
    doc = store.read("cases", case_id, case_id)
    assert doc is not None
    body = dict(doc.body)
    body["history"] = [{k: v for k, v in t.items() if k != "answer"} for t in body["history"]]
    store.replace("cases", case_id, case_id, body, etag=doc.etag)


def app_operations(app: Harness) -> Any:
    """What ``case_document`` reads: the case repository and the ledger (a stand-in for ``Operations``,
    whose other parts this view does not touch)."""

    class Ops:
        store = app.store
        cases = app.cases
        ledger = app.ledger

    return Ops()
