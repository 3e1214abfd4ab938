"""The approval threshold is cumulative: a person approves when the total asked of a case (done + outstanding
+ this proposal) would cross it, however the requests are split (README's rules, docs/design.md#money).

A model steered by the invoice text (the scripted chat client stands in for the Azure OpenAI deployment)
proposes 999.00 on an invoice over-billed by 1400.00, just under the threshold of 1000.00; the supplier credits
it; the case is investigated again and the model proposes the remaining 401.00. Per proposal neither crosses
the threshold; together they do, so the second waits for a person.
"""

from __future__ import annotations

import json

from casekeeper.core.ports import DocumentStore
from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.workflow.proposers import AgentProposer
from tests.support.app import Harness, make_harness
from tests.support.invoices import invoice
from tests.support.scripted_chat import ScriptedChatClient
from tests.support.supplier import posts


def reply(amount: str) -> str:
    return json.dumps({"rationale": "scripted", "action": "request_credit_note", "amount": amount, "currency": "EUR"})


def asked(supplier: SupplierStub) -> list[str]:
    return [str(p["body"]["amount"]) for p in posts(supplier)]  # type: ignore[index]


def first_request_credited(app: Harness, supplier: SupplierStub) -> None:
    """The first request is made and the supplier's note for it arrives: 1400.00 - 999.00 remains."""
    assert app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("2400.00")).status == "credit_requested"
    assert asked(supplier) == ["999.00"]
    note = supplier.notes[0]
    credited = app.handle(ev.CREDIT_NOTE_ISSUED, "C-1", creditNoteId=note["creditNoteId"], amount="999.00")
    assert credited.status == "needs_review"  # 401.00 of the over-billing is not covered yet


def test_a_request_split_under_the_threshold_still_asks_a_person_once_the_total_crosses_it(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    client = ScriptedChatClient(replies=[reply("999.00"), reply("401.00")])
    app = make_harness(store, supplier.url, proposer=AgentProposer.from_chat_client(client))
    first_request_credited(app, supplier)
    result = app.handle(ev.CASE_INVESTIGATE, "C-1")
    assert (result.outcome, result.status) == ("awaiting_approval", "awaiting_approval")
    pending = app.cases.require("C-1").data["pendingApproval"]
    assert (pending["amount"], pending["currency"]) == ("401.00", "EUR")
    assert asked(supplier) == ["999.00"]  # nothing more until a person says yes


def test_requests_whose_total_stays_under_the_threshold_need_no_person(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    """The threshold sums what was asked, no more: 600.00 then 400.00 is 1000.00, not above it."""
    client = ScriptedChatClient(replies=[reply("600.00"), reply("400.00")])
    app = make_harness(store, supplier.url, proposer=AgentProposer.from_chat_client(client))
    assert app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("2000.00")).status == "credit_requested"
    note = supplier.notes[0]
    assert app.handle(ev.CREDIT_NOTE_ISSUED, "C-1", creditNoteId=note["creditNoteId"], amount="600.00").status == (
        "needs_review"
    )
    assert app.handle(ev.CASE_INVESTIGATE, "C-1").status == "credit_requested"
    assert asked(supplier) == ["600.00", "400.00"]
