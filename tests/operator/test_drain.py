"""``casekeeper drain check``: in-flight runs a new build could not resume (rule R8)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from casekeeper.stores.sqlite import SqliteDocumentStore
from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.operator.drain import main
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES, ApprovalRequest, Proposed, type_key
from shared.workflow.proposers import AgentProposer
from tests.operator.conftest import Ran
from tests.support.app import Harness, make_harness
from tests.support.changed_build import build_v2
from tests.support.invoices import invoice
from tests.support.scripted_chat import ScriptedChatClient

Run = Callable[..., Ran]


def pause_for_approval(app: Harness, case_id: str) -> dict[str, object]:
    app.handle(ev.INVOICE_RECEIVED, case_id, **invoice("2500.00"))
    return dict(app.cases.require(case_id).data["pendingApproval"])


def answer(app: Harness, case_id: str, pending: dict[str, object]) -> None:
    app.handle(
        ev.APPROVAL_ANSWERED,
        case_id,
        requestId=pending["requestId"],
        decision="approve",
        caseVersion=pending["caseVersion"],
        approver="ana@example.com",
    )


def test_only_finished_runs_pass(app: Harness, run: Run) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))  # credit requested: the run finished
    app.handle(ev.INVOICE_RECEIVED, "C-2", **invoice("1000.00"))  # approved
    checked = run(main, "check", build=build_v2)  # even a changed graph strands nothing
    assert checked.code == 0, checked.out
    assert checked.out == "0 in-flight runs, 0 cannot be resumed by this build\n"


def test_a_paused_run_passes_under_the_same_build(app: Harness, run: Run) -> None:
    pause_for_approval(app, "C-1")
    checked = run(main, "check", "--json")
    assert checked.code == 0
    report = checked.json()
    assert report["inFlight"] == 1 and report["cannotResume"] == []
    assert [(r["caseId"], r["run"]) for r in report["resumable"]] == [("C-1", "paused")]


def test_a_paused_run_under_a_changed_graph_fails_until_it_finishes(app: Harness, run: Run) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-0", **invoice("1100.00"))  # finished: does not count
    pending = pause_for_approval(app, "C-1")

    checked = run(main, "check", build=build_v2)
    assert checked.code == 1
    lines = checked.out.splitlines()
    assert lines[0].startswith("C-1  awaiting_approval v2  run paused  checkpoint ")
    assert "graph changed: checkpoint graph " in lines[0] and "this build's" in lines[0]
    assert lines[-1] == "1 in-flight runs, 1 cannot be resumed by this build"

    report = run(main, "check", "--json", build=build_v2).json()
    [stranded] = report["cannotResume"]
    assert stranded["caseId"] == "C-1" and stranded["pendingRequestIds"] == [pending["requestId"]]
    assert [p["kind"] for p in stranded["problems"]] == ["graph_changed"]
    assert report["graphHash"] != app.worker.graph_hash

    answer(app, "C-1", pending)  # the old build finishes the run before the deploy
    again = run(main, "check", build=build_v2)
    assert again.code == 0
    assert again.out == "0 in-flight runs, 0 cannot be resumed by this build\n"


def test_a_paused_run_whose_type_would_not_load_fails(app: Harness, run: Run) -> None:
    pause_for_approval(app, "C-1")
    without = ALLOWED_CHECKPOINT_TYPES - {type_key(ApprovalRequest)}  # the next build renamed it
    checked = run(main, "check", "--json", allowed_types=without)
    assert checked.code == 1
    [stranded] = checked.json()["cannotResume"]
    [problem] = stranded["problems"]
    # The checkpoint's stored schemas name the type, so it is a deploy's change, found before unpickling.
    assert problem["kind"] == "schema_changed" and problem["text"] == "state type changed"
    assert "ApprovalRequest" in problem["reason"] and "renamed or removed" in problem["reason"]


class Died(Exception):
    """Stands for the process dying at a failure point."""


def interrupt(store: SqliteDocumentStore, supplier_url: str, case_id: str) -> None:
    """A run that dies right after its effect's outcome-and-commit write (F5), having asked a model: its
    newest checkpoint is the one written after the model's step, and holds its proposal, a pending message.
    (A run that asks no model writes nothing mid-run, so it leaves nothing in flight to strand.) The case
    already shows the commit: the outcome and the commit are one write."""

    def probe(point: str) -> None:
        if point == "F5":
            raise Died(point)

    answer = json.dumps({"action": "request_credit_note", "amount": "100.00", "currency": "EUR", "rationale": "x"})
    model = AgentProposer.from_chat_client(ScriptedChatClient(replies=[answer]))
    harness = make_harness(store, supplier_url, probe=probe, proposer=model)
    with pytest.raises(Died):
        harness.handle(ev.INVOICE_RECEIVED, case_id, **invoice("1100.00"))


def test_an_interrupted_run_counts_and_fails_when_its_types_would_not_load(
    app: Harness, store: SqliteDocumentStore, supplier: SupplierStub, run: Run
) -> None:
    interrupt(store, supplier.url, "C-1")
    same = run(main, "check", "--json").json()
    assert same["inFlight"] == 1 and same["cannotResume"] == []
    assert [(r["run"], r["pendingMessages"]) for r in same["resumable"]] == [("interrupted", 1)]

    # Without Proposed on the allow-list the checkpoint does not decode; that it is mid-run is still told
    # from the encoding's structure, without unpickling anything.
    without = ALLOWED_CHECKPOINT_TYPES - {type_key(Proposed)}
    checked = run(main, "check", allowed_types=without)
    assert checked.code == 1
    assert "C-1  credit_requested v2  run interrupted" in checked.out
    assert (
        "state type changed: shared.workflow.messages:Proposed: a state type this build no longer has "
        "(renamed or removed)"
    ) in checked.out

    app.handle(ev.CASE_INVESTIGATE, "C-1", reason="redelivered")  # the worker resumes it and finishes
    assert app.cases.require("C-1").status == "credit_requested"
    assert run(main, "check", allowed_types=without).code == 0
