"""``casekeeper case show``: a real case, read back whole."""

from __future__ import annotations

from collections.abc import Callable

from casekeeper.core.keys import effect_key
from shared.domain import events as ev
from shared.handlers.rejected import set_aside
from shared.operator.cases import main
from tests.operator.conftest import Ran
from tests.support.app import Harness
from tests.support.invoices import invoice

Run = Callable[..., Ran]


def test_a_credit_requested_case_shows_its_history_effect_and_checkpoints(app: Harness, run: Run) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))  # over-billed by 100: requested at once
    key = effect_key("C-1", "request_credit_note", 1)

    shown = run(main, "show", "C-1", "--json")
    assert shown.code == 0, shown.err
    view = shown.json()
    assert view["case"] == {
        "id": "C-1",
        "status": "credit_requested",
        "version": 2,
        "schemaVersion": 1,
        "facts": app.cases.require("C-1").facts,
    }
    [step] = view["history"]
    assert (step["fromVersion"], step["status"], step["effectKey"]) == (1, "credit_requested", key)
    [effect] = view["effects"]
    assert (effect["key"], effect["shortKey"], effect["status"], effect["attempts"]) == (key, key[:12], "done", 1)
    assert effect["result"]["creditNoteId"] == "CN-000001" and effect["ageSeconds"] >= 0
    assert view["data"]["creditRequest"]["creditNoteId"] == "CN-000001"
    assert view["approvals"] == {"pending": None, "history": []}
    checkpoints = view["checkpoints"]
    # A run that ends on a case holding no checkpoint writes none: nobody would resume it.
    assert checkpoints["list"] == [] and checkpoints["newestRun"] is None
    assert checkpoints["graphHash"] == app.worker.graph_hash

    text = run(main, "show", "C-1")
    assert text.code == 0
    assert text.out.startswith("case C-1: credit_requested at v2 (schema v1)")
    assert "v1 -> credit_requested" in text.out and f"[effect {key[:12]}]" in text.out
    assert f"{key[:12]}  request_credit_note  done  decided on v1  attempts 1" in text.out
    assert 'result: {"creditNoteId": "CN-000001"' in text.out
    assert "newest: run" not in text.out and "NOT resumable" not in text.out


def test_an_approval_paused_case_shows_the_pending_request_then_the_decision(app: Harness, run: Run) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("2500.00"))  # 1500 > the approval threshold
    pending = app.cases.require("C-1").data["pendingApproval"]

    view = run(main, "show", "C-1", "--json").json()
    assert view["case"]["status"] == "awaiting_approval"
    assert view["approvals"]["pending"]["requestId"] == pending["requestId"]
    assert [(e["event"], e["onVersion"]) for e in view["approvals"]["history"]] == [("requested", 2)]
    newest = view["checkpoints"]["list"][-1]
    assert newest["pendingRequestIds"] == [pending["requestId"]]
    assert newest["resumable"] and view["checkpoints"]["newestRun"] == "paused"
    text = run(main, "show", "C-1").out
    assert f"pending: {pending['requestId']} for 1500.00 EUR (request_credit_note), asked on v2" in text
    assert "newest: run paused for an approval" in text

    app.handle(
        ev.APPROVAL_ANSWERED,
        "C-1",
        requestId=pending["requestId"],
        decision="approve",
        caseVersion=pending["caseVersion"],
        approver="ana@example.com",
    )
    after = run(main, "show", "C-1", "--json").json()
    assert after["approvals"]["pending"] is None
    decided = after["approvals"]["history"][-1]
    assert (decided["event"], decided["by"], decided["onVersion"], decided["status"]) == (
        "approved",
        "ana@example.com",
        2,
        "credit_requested",
    )
    assert after["checkpoints"]["newestRun"] == "finished"  # the end is written: it supersedes the pause
    listed = after["checkpoints"]["list"]
    assert listed and all(c["resumable"] for c in listed)
    assert [c["seq"] for c in listed] == sorted(c["seq"] for c in listed)
    assert "v2: approved by ana@example.com -> credit_requested" in run(main, "show", "C-1").out


def test_notes_and_rejected_events_are_shown(app: Harness, run: Run) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    app.cases.note("C-1", "run rebuilt from the case document", kind="graph_changed", checkpointId="cp-1")
    set_aside(
        app.store,
        message_id="m-1",
        case_id="C-1",
        reason="unknown event type 'x'",
        fields={},
        body=b"{}",
        delivery_count=1,
    )
    view = run(main, "show", "C-1", "--json").json()
    assert [n["text"] for n in view["notes"]] == ["run rebuilt from the case document"]
    assert [(r["id"], r["reason"]) for r in view["rejectedEvents"]] == [("m-1", "unknown event type 'x'")]
    text = run(main, "show", "C-1").out
    assert "v2: run rebuilt from the case document  kind=graph_changed checkpointId=cp-1" in text
    assert "m-1: unknown event type 'x'" in text


def test_an_unknown_case_exits_1_with_a_clear_message(app: Harness, run: Run) -> None:
    shown = run(main, "show", "C-404")
    assert shown.code == 1
    assert shown.out == ""
    assert "no case 'C-404' in this store" in shown.err


def test_a_missing_store_is_a_usage_error(run: Run) -> None:
    shown = run(main, "show", "C-1")  # nothing ever wrote to --data
    assert shown.code == 2
    assert "no store at" in shown.err


def test_a_case_awaiting_its_invoice_says_so_and_shows_the_facts_it_holds(app: Harness, run: Run) -> None:
    app.handle(ev.PO_UPDATED, "C-early", poAmount="1450.00")  # before any invoice.received: held

    view = run(main, "show", "C-early", "--json").json()
    assert view["case"]["status"] == "awaiting_invoice" and view["case"]["facts"] == {"poAmount": "1450.00"}
    assert view["credit"] is None and view["effects"] == []
    assert view["awaitingInvoice"]["heldSince"] <= view["awaitingInvoice"]["lastFactAt"]

    text = run(main, "show", "C-early")
    assert text.code == 0, text.err
    assert text.out.startswith("case C-early: awaiting_invoice at v2")
    assert "awaiting its invoice: the facts below came before invoice.received" in text.out
    assert "poAmount       1450.00" in text.out
