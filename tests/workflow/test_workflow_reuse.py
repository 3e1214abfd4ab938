"""The case worker's workflow objects are built once and reused (``shared.workflow.reuse``): one run at a time
each, and a run on a reused object behaves as on a new one; what one run knows about its case never reaches
another's, in sequence or at once on one event loop."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

from agent_framework import WorkflowCheckpoint

from benchmarks.guarded_effect import CountingStore
from casekeeper.core.ports import DocumentStore
from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.domain.events import CaseEvent
from shared.domain.invoice import InvoiceFacts
from shared.workflow.build import WORKFLOW_NAME, build_workflow
from shared.workflow.deps import run_knowing
from shared.workflow.messages import Investigate
from shared.workflow.reuse import WorkflowPool, reusable
from shared.workflow.run_checkpoints import RunCheckpoints
from tests.support.app import Harness, make_harness
from tests.support.invoices import invoice
from tests.support.supplier import posts


class Recording:
    """A ``CheckpointStorage`` that keeps every checkpoint a run saves, in order."""

    def __init__(self) -> None:
        self.saved: list[WorkflowCheckpoint] = []

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        self.saved.append(checkpoint)
        return checkpoint.checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        return next(c for c in self.saved if c.checkpoint_id == checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return list(self.saved)

    async def delete(self, checkpoint_id: str) -> bool:
        return False

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        return self.saved[-1] if self.saved else None

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return [c.checkpoint_id for c in self.saved]


def runner_of(app: Harness) -> Any:
    return app.worker._runner


def test_the_installed_agent_framework_lets_the_pool_reset_a_workflow(app: Harness) -> None:
    # Were this false, every run would build its own object again: correct, but the CPU the reuse saves is lost.
    assert reusable(build_workflow(app.deps))
    assert runner_of(app).workflows.reuses


def test_cases_decided_one_after_another_share_one_workflow_object(app: Harness, supplier: SupplierStub) -> None:
    for i, amount in enumerate(("1100.00", "1200.00", "1300.00")):
        assert app.handle(ev.INVOICE_RECEIVED, f"R-{i}", **invoice(amount)).status == "credit_requested"
    assert runner_of(app).workflows.built == 1
    assert [(p["body"]["caseId"], p["body"]["amount"]) for p in posts(supplier)] == [
        ("R-0", "100.00"),
        ("R-1", "200.00"),
        ("R-2", "300.00"),
    ]


def test_a_reused_object_runs_as_a_new_one_would(app: Harness) -> None:
    """Same checkpoints (state, messages, lineage) on a reused object as on a new one: nothing of the run
    before, on another case, is in them."""
    for case_id in ("A-1", "B-1"):  # recorded, not decided yet
        facts = InvoiceFacts(case_id, "SUP-9", "PO-77", Decimal("1100.00"), Decimal("1000.00"), "EUR")
        app.cases.create_if_absent(case_id, facts.to_dict())

    async def run(workflow: Any, case_id: str) -> list[WorkflowCheckpoint]:
        storage = Recording()
        with run_knowing(None):
            result = await workflow.run(Investigate(case_id, "test"), checkpoint_storage=storage)
        assert [o.case_id for o in result.get_outputs()] == [case_id]
        return storage.saved

    pool = WorkflowPool(lambda: build_workflow(app.deps))

    async def scenario() -> tuple[list[WorkflowCheckpoint], list[WorkflowCheckpoint]]:
        first = pool.take()
        before = await run(first, "A-1")
        pool.give_back(first, started_from_message=True, result=_idle_result())
        again = pool.take()
        assert again is first
        return before, await run(again, "B-1")

    before, after = asyncio.run(scenario())
    assert pool.built == 1
    earlier = {c.checkpoint_id for c in before}
    assert after[0].previous_checkpoint_id is None  # a new object's first checkpoint has no parent
    assert not any(c.previous_checkpoint_id in earlier for c in after)  # A-1's checkpoints are no one's parent
    assert [c.previous_checkpoint_id for c in after[1:]] == [c.checkpoint_id for c in after[:-1]]
    assert [c.iteration_count for c in after] == [c.iteration_count for c in before]
    assert [c.state for c in after] == [c.state for c in before]
    assert all(c.workflow_name == WORKFLOW_NAME and c.graph_signature_hash == pool.graph_hash for c in after)
    assert all("A-1" not in repr(c.messages) for c in after) and any("B-1" in repr(c.messages) for c in after)


def _idle_result() -> Any:
    from agent_framework import WorkflowEvent, WorkflowRunResult, WorkflowRunState

    return WorkflowRunResult([], [WorkflowEvent.status(WorkflowRunState.IDLE)])


def test_a_run_paused_for_a_person_keeps_its_object_and_the_next_run_gets_a_new_one(
    app: Harness, supplier: SupplierStub
) -> None:
    assert app.handle(ev.INVOICE_RECEIVED, "P-1", **invoice("2500.00")).status == "awaiting_approval"
    pool = runner_of(app).workflows
    assert pool.built == 1  # the object that ran P-1 waits on its request: it is not lent again
    assert app.handle(ev.INVOICE_RECEIVED, "P-2", **invoice("1100.00")).status == "credit_requested"
    assert pool.built == 2
    pending = app.cases.require("P-1").data["pendingApproval"]
    answer = {"requestId": pending["requestId"], "caseVersion": pending["caseVersion"], "approver": "ana"}
    # The answer resumes P-1's checkpoint on the idle object (P-2's), which holds the restored state after it
    # and is not kept either: P-3 gets a new one.
    assert app.handle(ev.APPROVAL_ANSWERED, "P-1", decision="approve", **answer).status == "credit_requested"
    assert pool.built == 2
    assert app.handle(ev.INVOICE_RECEIVED, "P-3", **invoice("1100.00")).status == "credit_requested"
    assert pool.built == 3
    amounts = {p["body"]["caseId"]: p["body"]["amount"] for p in posts(supplier)}
    assert amounts == {"P-1": "1500.00", "P-2": "100.00", "P-3": "100.00"}


def test_runs_at_once_on_one_loop_each_see_only_their_own_case(store: DocumentStore, supplier: SupplierStub) -> None:
    """Eight sessions' events on one event loop, as the Functions worker runs them: each run knows the case its
    own event wrote (and that it created it), never another's. Knowing it, no run reads a case or an effect: a
    run that saw another run's case would not recognise it as its own and read its own from the store."""
    counting = CountingStore(store)
    app = make_harness(counting, supplier.url)  # type: ignore[arg-type]
    amounts = {f"S-{i}": f"{1100 + 10 * i}.00" for i in range(8)}

    async def all_at_once() -> list[Any]:
        events = [CaseEvent(ev.INVOICE_RECEIVED, c, invoice(a) | {"invoiceId": c}) for c, a in amounts.items()]
        return await asyncio.gather(*(app.worker.handle(e) for e in events))

    counting.take()
    results = asyncio.run(all_at_once())
    calls = counting.take_tally().calls
    assert [r.status for r in results] == ["credit_requested"] * 8
    assert {(container, method): n for (container, method), n in calls.items() if method in ("read", "query")} == {}
    requested = {p["body"]["caseId"]: (p["body"]["amount"], p["body"]["invoiceId"]) for p in posts(supplier)}
    assert requested == {c: (f"{100 + 10 * i}.00", c) for i, c in enumerate(amounts)}
    for case_id in amounts:
        case = app.cases.require(case_id)
        assert case.status == "credit_requested" and case.facts["invoiceId"] == case_id
        [effect] = app.ledger.for_case(case_id)
        assert effect.status.value == "done"
    assert runner_of(app).workflows.built <= 8  # one object per run in flight at most


def test_the_framework_builds_only_the_checkpoints_a_run_may_write(
    app: Harness, supplier: SupplierStub, monkeypatch: Any
) -> None:
    """Of a run's supersteps, only those whose checkpoint is written at once (a pause) or may be written at
    the end (the last) are checkpointed at all; what is written is unchanged (the pause resumes)."""
    built: list[WorkflowCheckpoint] = []
    save = RunCheckpoints.save

    async def counted(self: RunCheckpoints, checkpoint: WorkflowCheckpoint) -> str:
        built.append(checkpoint)
        return await save(self, checkpoint)

    monkeypatch.setattr(RunCheckpoints, "save", counted)
    assert app.handle(ev.INVOICE_RECEIVED, "K-1", **invoice("1100.00")).status == "credit_requested"
    [end] = built  # five supersteps (the entry, intake, propose, gate, commit); the last one only
    assert not any(end.messages.values()) and not end.pending_request_info_events
    built.clear()
    assert app.handle(ev.INVOICE_RECEIVED, "K-2", **invoice("2500.00")).status == "awaiting_approval"
    [pause] = built
    assert pause.pending_request_info_events
    pending = app.cases.require("K-2").data["pendingApproval"]
    answer = {"requestId": pending["requestId"], "caseVersion": pending["caseVersion"], "approver": "ana"}
    assert app.handle(ev.APPROVAL_ANSWERED, "K-2", decision="approve", **answer).status == "credit_requested"
    assert [p["body"]["caseId"] for p in posts(supplier)] == ["K-1", "K-2"]


def test_a_storage_without_needs_checkpoint_gets_every_checkpoint(app: Harness) -> None:
    facts = InvoiceFacts("N-1", "SUP-9", "PO-77", Decimal("1100.00"), Decimal("1000.00"), "EUR")
    app.cases.create_if_absent("N-1", facts.to_dict())
    pool = WorkflowPool(lambda: build_workflow(app.deps))
    storage = Recording()

    async def run() -> None:
        with run_knowing(None):
            await pool.take().run(Investigate("N-1", "test"), checkpoint_storage=storage)

    asyncio.run(run())
    assert [c.iteration_count for c in storage.saved] == [0, 1, 2, 3, 4]
