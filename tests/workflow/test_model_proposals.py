"""The model proposes, code commits: a chat agent's proposals are validated like any other."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest

from casekeeper.core.ports import DocumentStore, Query
from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.domain.credit import CreditRequest, position, validate
from shared.domain.invoice import Action, InvoiceFacts, Proposal, Rules
from shared.errors import InvalidProposal
from shared.workflow.proposers import AgentProposer
from tests.support.app import make_harness
from tests.support.invoices import invoice
from tests.support.scripted_chat import ScriptedChatClient
from tests.support.supplier import posts


def reply(**fields: object) -> str:
    return json.dumps({"rationale": "scripted", **fields})


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            reply(action="request_credit_note", amount="500.00", currency="EUR"),
            "exceeds what may still be requested, 100.00",
        ),
        (reply(action="request_credit_note", amount="100.00", currency="USD"), "does not match"),
        (reply(action="request_credit_note", amount="-5.00", currency="EUR"), "positive amount"),
        (reply(action="approve"), "approve proposed but 100.00 remains"),
        (reply(action="request_credit_note", amount="1.005", currency="EUR"), "two decimal places"),
        (reply(action="wire_money", amount="100.00"), "not a valid proposal"),
        ("I think you should pay them.", "not a valid proposal"),
    ],
    ids=[
        "above-variance",
        "wrong-currency",
        "negative",
        "approve-out-of-tolerance",
        "sub-cent",
        "unknown-action",
        "not-json",
    ],
)
def test_an_invalid_model_proposal_goes_to_review_and_calls_nobody(
    store: DocumentStore, supplier: SupplierStub, answer: str, reason: str
) -> None:
    client = ScriptedChatClient(replies=[answer])
    app = make_harness(store, supplier.url, proposer=AgentProposer.from_chat_client(client))
    result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    assert (result.outcome, result.status) == ("committed", "needs_review")
    case = app.cases.require("C-1")
    assert reason in (case.history[-1].reason or "")
    assert "invalid proposal from model" in (case.history[-1].reason or "")
    assert posts(supplier) == []


def test_a_valid_model_proposal_is_executed_once(store: DocumentStore, supplier: SupplierStub) -> None:
    client = ScriptedChatClient(replies=[reply(action="request_credit_note", amount="100.00", currency="EUR")])
    app = make_harness(store, supplier.url, proposer=AgentProposer.from_chat_client(client))
    result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    assert result.status == "credit_requested"
    [post] = posts(supplier)
    assert post["body"]["amount"] == "100.00"  # type: ignore[index]
    prompt = json.loads(client.prompts[0])
    # The model is given the money rule's numbers, the same ones its proposal is validated against.
    assert (prompt["overBilled"], prompt["outstanding"], prompt["remaining"]) == ("100.00", "0", "100.00")
    assert prompt["facts"]["invoiceId"] == "INV-1"


def test_with_a_request_outstanding_the_prompt_carries_outstanding_and_remaining(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    """Invoice 1300 / PO 1000: the model asks for 300, which is done. The PO drops to 900: over-billed by
    400, of which 300 is outstanding; the model is told so, and its 100 is what is requested."""
    client = ScriptedChatClient(
        replies=[
            reply(action="request_credit_note", amount="300.00", currency="EUR"),
            reply(action="request_credit_note", amount="100.00", currency="EUR"),
        ]
    )
    app = make_harness(store, supplier.url, proposer=AgentProposer.from_chat_client(client))
    assert app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1300.00")).status == "credit_requested"
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="900.00")
    assert result.status == "credit_requested"
    first, second = (json.loads(p) for p in client.prompts)
    assert (first["overBilled"], first["outstanding"], first["remaining"]) == ("300.00", "0", "300.00")
    assert (second["overBilled"], second["received"], second["outstanding"], second["remaining"]) == (
        "400.00",
        "0",
        "300.00",
        "100.00",
    )
    assert second["facts"]["poAmount"] == "900.00"
    assert [p["body"]["amount"] for p in posts(supplier)] == ["300.00", "100.00"]  # type: ignore[index]


def test_a_model_proposing_the_full_variance_while_a_request_is_outstanding_is_refused(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    """The same case; the second time the model proposes the whole 400 as if nothing were outstanding.
    The money rule refuses it, the case goes to a person, and the supplier is asked for nothing more."""
    client = ScriptedChatClient(
        replies=[
            reply(action="request_credit_note", amount="300.00", currency="EUR"),
            reply(action="request_credit_note", amount="400.00", currency="EUR"),
        ]
    )
    app = make_harness(store, supplier.url, proposer=AgentProposer.from_chat_client(client))
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1300.00"))
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="900.00")
    assert (result.outcome, result.status) == ("committed", "needs_review")
    reason = app.cases.require("C-1").history[-1].reason or ""
    assert "invalid proposal from model" in reason
    assert "amount 400.00 exceeds what may still be requested, 100.00" in reason
    assert "outstanding 300.00" in reason
    assert [p["body"]["amount"] for p in posts(supplier)] == ["300.00"]  # type: ignore[index]


def test_validate_refuses_a_request_above_the_remainder_when_a_request_is_outstanding() -> None:
    """Over-billed 400, 300 requested and not received: at most 100 may be asked for; 100.01 or the
    whole variance is refused, 100 itself is allowed."""
    facts = InvoiceFacts.from_dict(invoice("1300.00", "900.00"))
    pos = position(facts, [CreditRequest("k-300", Decimal("300.00"), decided_on_version=1, known=True)])
    assert (pos.over_billed, pos.outstanding, pos.remaining) == (
        Decimal("400.00"),
        Decimal("300.00"),
        Decimal("100.00"),
    )

    def request(amount: str) -> Proposal:
        return Proposal(Action.REQUEST_CREDIT_NOTE, amount=Decimal(amount), currency="EUR")

    for amount in ("400.00", "100.01"):
        with pytest.raises(InvalidProposal, match=f"amount {amount} exceeds what may still be requested, 100.00"):
            validate(request(amount), case_id="C-1", status="open", pos=pos, rules=Rules())
    allowed = request("100.00")
    assert validate(allowed, case_id="C-1", status="open", pos=pos, rules=Rules()) is allowed


def test_with_more_outstanding_than_owed_the_prompt_shows_the_excess_and_no_request_passes(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    """Invoice 1300 / PO 1000: 300 requested. The PO rises to 1200: over-billed by 100 with 300
    outstanding. The model is told remaining -200.00; any request it proposes is refused."""
    client = ScriptedChatClient(
        replies=[
            reply(action="request_credit_note", amount="300.00", currency="EUR"),
            reply(action="request_credit_note", amount="100.00", currency="EUR"),
        ]
    )
    app = make_harness(store, supplier.url, proposer=AgentProposer.from_chat_client(client))
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1300.00"))
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="1200.00")
    assert result.status == "needs_review"
    second = json.loads(client.prompts[1])
    assert (second["overBilled"], second["outstanding"], second["remaining"]) == ("100.00", "300.00", "-200.00")
    reason = app.cases.require("C-1").history[-1].reason or ""
    assert "amount 100.00 exceeds what may still be requested, -200.00" in reason
    assert [p["body"]["amount"] for p in posts(supplier)] == ["300.00"]  # type: ignore[index]


class Crash(BaseException):
    """Stands for the process dying at a failure point: nothing below the probe runs."""


def test_a_run_that_dies_after_the_model_answered_resumes_without_asking_it_again(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    """The checkpoint after the model's step is the one written mid-run (it saves a model call); the
    redelivered event resumes from it, so the model is asked once and the supplier once."""
    client = ScriptedChatClient(replies=[reply(action="request_credit_note", amount="100.00", currency="EUR")])
    proposer = AgentProposer.from_chat_client(client)

    def die_at_f2(point: str) -> None:
        if point == "F2":
            raise Crash(point)

    dying = make_harness(store, supplier.url, proposer=proposer, probe=die_at_f2, call_timeout=1.0)
    with pytest.raises(Crash):
        dying.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    assert len(client.prompts) == 1 and posts(supplier) == []
    [written] = store.query("checkpoints", Query(partition="C-1", equals={"kind": "checkpoint"}))
    assert not written.body["pendingRequestIds"]  # mid-run: the model's proposal on its way to the gate

    time.sleep(1.2)  # the claim F2 left ages past the call timeout: the resumed run retries it by key
    restarted = make_harness(store, supplier.url, proposer=proposer, call_timeout=1.0)
    result = restarted.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    assert len(client.prompts) == 1  # resumed from the checkpoint: the model was not asked again
    # The claim F2 left is settled by key first (R3): the resumed Commit step hands it to reconciliation.
    assert result.steps[0].outcome == "waiting_for_reconciliation", result
