"""``casekeeper events`` (dead letters, redrive) and ``casekeeper requests withdraw``, on the local host's
store and queue as ``--data DIR`` opens them."""

from __future__ import annotations

import getpass
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.messaging.sqlite_queue import LocalSessionQueue
from shared.operator.events import main as events_main
from shared.operator.requests import main as requests_main
from tests.operator.conftest import Ran
from tests.support.app import Harness
from tests.support.invoices import invoice

Run = Callable[..., Ran]
QUEUE = "case-events"


def recorded(name: str) -> str:
    """How an operator command records a person: the typed name and the account that ran the command."""
    return f"{name} <cli:{getpass.getuser()}@{socket.gethostname()}>"


def dead_letter(data: Path, case_id: str, message_id: str) -> None:
    queue = LocalSessionQueue(data / "queue.sqlite", max_delivery_count=1)
    body = f'{{"type":"case.investigate","caseId":"{case_id}","data":{{}}}}'.encode()
    queue.send(QUEUE, body, session_id=case_id, message_id=message_id)
    msg = queue.receive(QUEUE)
    assert msg is not None
    queue.abandon(msg)
    queue.close()


def test_dead_letters_are_listed_and_put_back(app: Harness, data: Path, run: Run) -> None:
    dead_letter(data, "C-1", "webhook:a")
    dead_letter(data, "C-2", "webhook:b")
    listed = run(events_main, "dead-lettered", "--json").json()["deadLettered"]
    assert [(d["caseId"], d["messageId"], d["reason"]) for d in listed] == [
        ("C-1", "webhook:a", "MaxDeliveryCountExceeded"),
        ("C-2", "webhook:b", "MaxDeliveryCountExceeded"),
    ]
    text = run(events_main, "dead-lettered").out
    assert "webhook:a  case C-1" in text and "event: case.investigate" in text
    redriven = run(events_main, "redrive", "webhook:b", "webhook:nope", "--by", "olga")
    assert redriven.code == 1 and "no dead-lettered event 'webhook:nope'" in redriven.err
    # Who put it back: the name given and the account that ran the command, which nobody types.
    assert f"put back: webhook:b (case C-2) by {recorded('olga')}" in redriven.out
    queue = LocalSessionQueue(data / "queue.sqlite")
    [back] = queue.peek(QUEUE)
    assert back.session_id == "C-2" and back.message_id.startswith("webhook:b:redrive:")
    queue.close()
    assert run(events_main, "redrive", "--all").code == 0
    assert run(events_main, "dead-lettered").out == "no dead-lettered events\n"
    with pytest.raises(SystemExit) as usage:  # ids, or --all
        run(events_main, "redrive")
    assert usage.value.code == 2


def test_an_outstanding_request_is_withdrawn_with_who_and_why(app: Harness, run: Run, supplier: SupplierStub) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1300.00"))
    app.handle(ev.PO_UPDATED, "C-1", poAmount="1200.00")  # 300 outstanding, 100 justified: to review
    [effect] = app.ledger.for_case("C-1")
    done = run(requests_main, "withdraw", "C-1", effect.key, "--by", "ana", "--why", "cancelled, ticket 7")
    assert done.code == 0, done.err
    assert "decide it again with: casekeeper send case.investigate C-1" in done.out
    case = app.cases.require("C-1")
    [withdrawal] = case.facts["withdrawn"]
    assert (withdrawal["effectKey"], withdrawal["by"], withdrawal["why"]) == (
        effect.key,
        recorded("ana"),
        "cancelled, ticket 7",
    )
    assert case.status == "needs_review"
    again = run(requests_main, "withdraw", "C-1", effect.key, "--by", "ana", "--why", "twice")
    assert again.code == 0 and "already withdrawn" in again.out
    # Decided again, the withdrawn request no longer counts: the 100 over-billed may be requested.
    result = app.handle(ev.CASE_INVESTIGATE, "C-1")
    assert result.status == "credit_requested"
    assert [p["body"]["amount"] for p in supplier.requests if p["method"] == "POST"] == ["300.00", "100.00"]


def test_only_an_outstanding_request_can_be_withdrawn(app: Harness, run: Run) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-2", **invoice("1300.00"))
    refused = run(requests_main, "withdraw", "C-2", "f" * 64, "--by", "ana", "--why", "typo")
    assert refused.code == 1 and "has no credit-note request" in refused.err
    [effect] = app.ledger.for_case("C-2")
    note = app.cases.require("C-2").data["creditRequest"]["creditNoteId"]
    app.handle(ev.CREDIT_NOTE_ISSUED, "C-2", creditNoteId=note, amount="300.00")
    refused = run(requests_main, "withdraw", "C-2", effect.key, "--by", "ana", "--why", "late")
    assert refused.code == 1 and "is received, not outstanding" in refused.err
