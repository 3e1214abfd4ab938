"""Deploy safety (rule R8) and checkpoint failures (rule R7) through the entry point."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from casekeeper.core.ports import DocumentStore, Query
from casekeeper.errors import StoreUnavailable
from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES, ApprovalRequest, type_key
from tests.support.app import make_harness
from tests.support.changed_build import build_v2
from tests.support.invoices import invoice
from tests.support.supplier import posts


def test_a_changed_graph_rebuilds_the_paused_run_from_the_case_document(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    old = make_harness(store, supplier.url)
    old.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("2500.00"))
    pending = old.cases.require("C-1").data["pendingApproval"]

    new = make_harness(store, supplier.url, build=build_v2)  # the deploy
    assert new.worker.graph_hash != old.worker.graph_hash
    result = new.handle(
        ev.APPROVAL_ANSWERED,
        "C-1",
        requestId=pending["requestId"],
        decision="approve",
        caseVersion=pending["caseVersion"],
        approver="ana",
    )
    assert result.status == "credit_requested"
    assert len(posts(supplier)) == 1
    notes = new.cases.require("C-1").notes
    assert [n["text"] for n in notes] == ["run rebuilt from the case document"]
    assert notes[0]["kind"] == "graph_changed"


def test_failing_checkpoint_saves_are_recorded_and_the_run_still_completes(
    store: DocumentStore, supplier: SupplierStub, caplog: pytest.LogCaptureFixture
) -> None:
    # The quiet failure mode: a state type missing from the allow-list makes the save fail. The pause for
    # a person is written at once, and its request's type is the one missing.
    allowed = ALLOWED_CHECKPOINT_TYPES - {type_key(ApprovalRequest)}
    app = make_harness(store, supplier.url, allowed_checkpoint_types=allowed)
    with caplog.at_level(logging.WARNING, logger="agent_framework._workflows._runner"):
        result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("2500.00"))
    records = caplog.records
    assert result.status == "awaiting_approval"
    framework_warnings = [r for r in records if r.getMessage().startswith("Failed to create checkpoint")]
    failures = store.query("health", Query(equals={"record": "checkpoint_failure"}))
    assert framework_warnings and len(failures) == len(framework_warnings)
    assert {f.body["caseId"] for f in failures} == {"C-1"}
    assert all("ApprovalRequest" in f.body["error"]["message"] for f in failures)
    assert sorted(f.body["iteration"] for f in failures) == sorted(r.args[0] for r in framework_warnings)  # type: ignore[index]


class CheckpointWritesFail:
    """The real store, except that writing a finished run's checkpoint document (one without pending
    requests) fails as a store outage would. A wrapper, not a fake: every other call, the pause checkpoint
    and the failure records included, reaches the real store."""

    def __init__(self, inner: DocumentStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, container: str, partition: str, doc_id: str, body: dict[str, Any]) -> Any:
        if container == "checkpoints" and body.get("kind") == "checkpoint" and not body.get("pendingRequestIds"):
            raise StoreUnavailable("injected: checkpoint write refused")
        return self.inner.create(container, partition, doc_id, body)


def test_the_deferred_last_checkpoint_failing_is_recorded_and_the_decision_stands(
    store: DocumentStore, supplier: SupplierStub, caplog: pytest.LogCaptureFixture
) -> None:
    """A run without a pause or a model call on a case that holds a checkpoint (here its pause) writes one
    more, its last, when it ends; a failure there is recorded exactly like the framework's own failed saves,
    and the committed decision is untouched."""
    app = make_harness(CheckpointWritesFail(store), supplier.url)  # type: ignore[arg-type]
    assert app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("2500.00")).status == "awaiting_approval"
    pending = app.cases.require("C-1").data["pendingApproval"]
    answer = {"requestId": pending["requestId"], "caseVersion": pending["caseVersion"], "approver": "ana"}
    with caplog.at_level(logging.WARNING, logger="agent_framework._workflows._runner"):
        result = app.handle(ev.APPROVAL_ANSWERED, "C-1", decision="approve", **answer)
    assert result.status == "credit_requested" and len(posts(supplier)) == 1
    [warning] = [r for r in caplog.records if r.getMessage().startswith("Failed to create checkpoint")]
    [failure] = store.query("health", Query(equals={"record": "checkpoint_failure"}))
    assert failure.body["caseId"] == "C-1" and "injected" in failure.body["error"]["message"]
    assert failure.body["iteration"] == warning.args[0]  # type: ignore[index]


def test_a_decision_on_a_new_case_writes_no_checkpoint_and_a_pause_writes_it_at_once(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    """Checkpoints only where they save work: a credit-note run on a new case writes none (nobody resumes a
    finished run, and there is no older checkpoint to supersede); a run that asks a person writes the paused
    one, the approval resumes from it, and its end is written because it supersedes the pause."""
    app = make_harness(store, supplier.url)
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    assert store.query("checkpoints", Query(partition="C-1")) == []
    app.handle(ev.INVOICE_RECEIVED, "C-2", **invoice("2500.00"))
    [paused] = store.query("checkpoints", Query(partition="C-2", equals={"kind": "checkpoint"}))
    assert paused.body["pendingRequestIds"]
    pending = app.cases.require("C-2").data["pendingApproval"]
    result = app.handle(
        ev.APPROVAL_ANSWERED,
        "C-2",
        requestId=pending["requestId"],
        decision="approve",
        caseVersion=pending["caseVersion"],
        approver="ana",
    )
    assert result.status == "credit_requested"
    assert not [n for n in app.cases.require("C-2").notes if n.get("text") == "run rebuilt from the case document"]
    assert len(store.query("checkpoints", Query(partition="C-2", equals={"kind": "checkpoint"}))) == 2
