"""The model proposes, code commits: a chat agent's proposals are validated like any other."""

from __future__ import annotations

import json

import pytest

from shared.core.ports import DocumentStore
from shared.domain import events as ev
from shared.localhost.supplier_stub import SupplierStub
from shared.workflow.proposers import AgentProposer
from tests.support.app import invoice, make_harness
from tests.support.scripted_chat import ScriptedChatClient
from tests.workflow.conftest import posts


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
