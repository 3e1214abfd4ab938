"""Deploy safety (rule R8) and checkpoint failures (rule R7) through the entry point."""

from __future__ import annotations

import logging

import pytest

from shared.core.ports import DocumentStore, Query
from shared.domain import events as ev
from shared.localhost.supplier_stub import SupplierStub
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES, CommitOrder, type_key
from tests.support.app import invoice, make_harness
from tests.support.changed_build import build_v2
from tests.workflow.conftest import posts


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
    # The quiet failure mode: a state type missing from the allow-list makes every save fail.
    allowed = ALLOWED_CHECKPOINT_TYPES - {type_key(CommitOrder)}
    app = make_harness(store, supplier.url, allowed_checkpoint_types=allowed)
    with caplog.at_level(logging.WARNING, logger="agent_framework._workflows._runner"):
        result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    records = caplog.records
    assert result.status == "credit_requested"
    assert len(posts(supplier)) == 1
    framework_warnings = [r for r in records if r.getMessage().startswith("Failed to create checkpoint")]
    failures = store.query("health", Query(partition="checkpoint_failure"))
    assert framework_warnings and len(failures) == len(framework_warnings)
    assert {f.body["caseId"] for f in failures} == {"C-1"}
    assert all("CommitOrder" in f.body["error"]["message"] for f in failures)
    assert sorted(f.body["iteration"] for f in failures) == sorted(r.args[0] for r in framework_warnings)  # type: ignore[index]
