"""Deploying the four changes a release makes over paused and in-flight runs (rule R8).

Each test is an operator's deploy, both builds on one store (the local host's SQLite file): the old build
leaves a run paused for an approval and a run interrupted mid-superstep (it died right after its effect's
outcome-and-commit write, before its last checkpoint: F5), ``casekeeper drain check`` runs on each build
before the deploy, the new build handles the answer and the redelivered event, then the same again
backwards (the rollback). Every run must end committed once (one request to the supplier, one commit) or
with a person, every event must be handled on its first delivery (a raise is what sends a message towards
the dead-letter queue), and the drain check must have named exactly the runs that were then rebuilt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from casekeeper.core.ports import Document, DocumentStore, Query
from casekeeper.errors import StoreUnavailable
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.domain import events as ev
from shared.localhost.supplier_stub import SupplierStub
from shared.operator.drain import main as drain
from shared.views.runs import Build
from shared.workflow.build import build_workflow
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES
from tests.operator.conftest import Ran
from tests.operator.test_drain import answer, interrupt, pause_for_approval
from tests.support.app import Harness, make_harness
from tests.support.changed_build import (
    build_v2,
    build_with_check,
    deploy_approvers_field,
    deploy_renamed_request,
    deploy_request_summary,
)

REBUILT = "run rebuilt from the case document"
PAUSED, IN_FLIGHT = "C-paused", "C-inflight"


@dataclass(frozen=True)
class Change:
    """One release's change: how to deploy it, and what the drain check must say about old runs."""

    build: Build
    deploy_types: Callable[[pytest.MonkeyPatch], frozenset[str]] | None  # a state type change, in this process
    stranded: dict[str, str]  # case id -> the problem kind drain check names (and the rebuild notes)
    named: str  # what the drain check's reason must name

    @contextlib.contextmanager
    def deployed(self) -> Iterator[frozenset[str]]:
        """This build in this process (its allow-list); leaving it is the rollback."""
        with pytest.MonkeyPatch.context() as patch:
            yield ALLOWED_CHECKPOINT_TYPES if self.deploy_types is None else self.deploy_types(patch)


CHANGES = {
    "executor added between two others": Change(
        build_with_check, None, {PAUSED: "graph_changed", IN_FLIGHT: "graph_changed"}, "checkpoint graph"
    ),
    "executor class renamed, same id": Change(
        build_v2, None, {PAUSED: "graph_changed", IN_FLIGHT: "graph_changed"}, "checkpoint graph"
    ),
    "state type renamed": Change(
        build_workflow, deploy_renamed_request, {PAUSED: "schema_changed"}, "shared.workflow.messages:ApprovalRequest"
    ),
    "default_factory field added": Change(
        build_workflow,
        deploy_approvers_field,
        {PAUSED: "schema_changed"},
        "shared.workflow.messages:ApprovalRequest.approvers",
    ),
}


def drain_check(run: Callable[..., Ran], build: Build, allowed: frozenset[str]) -> tuple[int, dict[str, Any]]:
    checked = run(drain, "check", "--json", build=build, allowed_types=allowed)
    return checked.code, checked.json()


def stranded_by_drain(report: dict[str, Any]) -> dict[str, str]:
    return {r["caseId"]: r["problems"][0]["kind"] for r in report["cannotResume"]}


def rebuild_notes(app: Harness, case_id: str) -> list[str]:
    return [n["kind"] for n in app.cases.require(case_id).notes if n.get("text") == REBUILT]


def requests_sent(supplier: SupplierStub) -> list[str]:
    """The idempotency keys of the credit-note requests the supplier received."""
    return [str(r["idempotencyKey"]) for r in supplier.requests if r["method"] == "POST"]


def assert_committed_once(app: Harness, supplier: SupplierStub, case_id: str) -> None:
    case = app.cases.require(case_id)
    assert case.status == "credit_requested", (case_id, case.status, case.notes)
    [effect] = app.ledger.for_case(case_id)
    assert effect.status == "done"
    assert requests_sent(supplier).count(effect.key) == 1, (case_id, requests_sent(supplier))
    assert [t.status for t in case.transitions_of(effect.key)] == ["credit_requested"]


def alerts(store: SqliteDocumentStore) -> list[str]:
    return [d.body["alertKind"] for d in store.query("health", Query(equals={"record": "alert"}))]


@pytest.mark.parametrize("name", list(CHANGES))
def test_a_deploy_rebuilds_what_drain_check_names_and_resumes_the_rest(
    name: str, store: SqliteDocumentStore, supplier: SupplierStub, run: Callable[..., Ran]
) -> None:
    change = CHANGES[name]
    old = make_harness(store, supplier.url)
    pending = pause_for_approval(old, PAUSED)
    interrupt(store, supplier.url, IN_FLIGHT)
    # F5: sent and committed in one write, the run interrupted before its last checkpoint.
    assert requests_sent(supplier) != [] and old.cases.require(IN_FLIGHT).status == "credit_requested"

    # Before the deploy: the old build strands nothing; the new one names exactly what it cannot resume.
    code, report = drain_check(run, build_workflow, ALLOWED_CHECKPOINT_TYPES)
    assert (code, stranded_by_drain(report)) == (0, {})
    with change.deployed() as allowed:
        code, report = drain_check(run, change.build, allowed)
        assert (code, stranded_by_drain(report)) == (1, change.stranded)
        assert change.named in report["cannotResume"][0]["problems"][0]["reason"]

        new = make_harness(store, supplier.url, build=change.build, allowed_checkpoint_types=allowed)
        answer(new, PAUSED, pending)
        new.handle(ev.CASE_INVESTIGATE, IN_FLIGHT, reason="redelivered after the deploy")
        for case_id in (PAUSED, IN_FLIGHT):
            assert_committed_once(new, supplier, case_id)
            assert rebuild_notes(new, case_id) == ([change.stranded[case_id]] if case_id in change.stranded else [])
        assert drain_check(run, change.build, allowed)[0] == 0

        # The new build pauses a run of its own, then the deploy is rolled back.
        pending = pause_for_approval(new, "C-new")
    code, report = drain_check(run, build_workflow, ALLOWED_CHECKPOINT_TYPES)
    assert (code, list(stranded_by_drain(report))) == (1, ["C-new"])
    answer(old, "C-new", pending)
    assert_committed_once(old, supplier, "C-new")
    assert len(rebuild_notes(old, "C-new")) == 1

    assert alerts(store) == []  # every rebuild was foreseen by the checks: none is a failed resume
    assert store.query("health", Query(equals={"record": "checkpoint_failure"})) == []


def test_a_resume_that_fails_where_no_check_looked_is_rebuilt_with_a_note_and_an_alert(
    store: SqliteDocumentStore, supplier: SupplierStub, run: Callable[..., Ran]
) -> None:
    """The new build computes a value when a request is made and reads it when the answer is decided: no field,
    type or graph changed, so neither drain check nor the check before resuming can see it, and the resume
    itself fails. It is rebuilt from the case document (where the request is made anew), not redelivered."""
    old = make_harness(store, supplier.url)
    pending = pause_for_approval(old, PAUSED)
    with pytest.MonkeyPatch.context() as patch:
        allowed = deploy_request_summary(patch)
        assert drain_check(run, build_workflow, allowed)[0] == 0  # nothing to see
        new = make_harness(store, supplier.url, allowed_checkpoint_types=allowed)
        answer(new, PAUSED, pending)  # raises nothing: handled on its first delivery
        assert_committed_once(new, supplier, PAUSED)
        [note] = [n for n in new.cases.require(PAUSED).notes if n.get("text") == REBUILT]
        assert note["kind"] == "resume_failed" and "AttributeError" in note["reason"] and "summary" in note["reason"]
    assert alerts(store) == ["resume_failed"]


def strip_state_schemas(store: SqliteDocumentStore, case_id: str) -> None:
    """Take the state schemas out of the case's checkpoint documents."""
    for doc in store.query("checkpoints", Query(partition=case_id, equals={"kind": "checkpoint"})):
        body = {k: v for k, v in doc.body.items() if k != "stateSchemas"}
        store.replace("checkpoints", case_id, doc.id, body, etag=doc.etag)


class CheckpointReadFailsOnce:
    """The real store, except that one read of a checkpoint document, once armed, fails as an outage would.
    A wrapper, not a fake: every other call reaches the real store."""

    def __init__(self, inner: DocumentStore) -> None:
        self.inner = inner
        self.reads_before_failing: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read(self, container: str, partition: str, doc_id: str) -> Document | None:
        if container == "checkpoints" and self.reads_before_failing is not None:
            if self.reads_before_failing == 0:
                self.reads_before_failing = None
                raise StoreUnavailable("injected: the store is down while the run resumes")
            self.reads_before_failing -= 1
        return self.inner.read(container, partition, doc_id)


def test_a_store_outage_while_resuming_is_retried_not_rebuilt(
    store: SqliteDocumentStore, supplier: SupplierStub
) -> None:
    flaky = CheckpointReadFailsOnce(store)
    app = make_harness(flaky, supplier.url)  # type: ignore[arg-type]
    pending = pause_for_approval(app, PAUSED)
    flaky.reads_before_failing = 1  # the check before resuming reads it; the framework's load fails
    with pytest.raises(StoreUnavailable):
        answer(app, PAUSED, pending)
    assert flaky.reads_before_failing is None  # the failure happened inside the resume
    assert app.cases.require(PAUSED).status == "awaiting_approval" and rebuild_notes(app, PAUSED) == []
    answer(app, PAUSED, pending)  # the redelivery, once the store is back, resumes the checkpoint
    assert_committed_once(app, supplier, PAUSED)
    assert rebuild_notes(app, PAUSED) == [] and alerts(store) == []


def test_a_checkpoint_records_the_schemas_of_the_types_it_holds(
    store: SqliteDocumentStore, supplier: SupplierStub
) -> None:
    app = make_harness(store, supplier.url)
    pause_for_approval(app, PAUSED)
    interrupt(store, supplier.url, IN_FLIGHT)

    def newest_schemas(case_id: str) -> dict[str, Any]:
        docs = store.query("checkpoints", Query(partition=case_id, equals={"kind": "checkpoint"}))
        return dict(max(docs, key=lambda d: d.body["seq"]).body["stateSchemas"])

    paused, in_flight = newest_schemas(PAUSED), newest_schemas(IN_FLIGHT)
    assert "shared.workflow.messages:ApprovalRequest" in paused
    assert paused["shared.workflow.messages:ApprovalRequest"]["basis"] == {"type": "dict[str, Any]", "factory": "dict"}
    assert {"shared.workflow.messages:Proposed", "shared.workflow.messages:CaseSnapshot"} <= set(in_flight)
    assert "shared.workflow.messages:ApprovalRequest" not in in_flight  # only what it holds: the rename spares it
    assert set(paused) | set(in_flight) <= ALLOWED_CHECKPOINT_TYPES


def test_a_checkpoint_document_without_its_schemas_is_refused_and_the_run_rebuilt(
    store: SqliteDocumentStore, supplier: SupplierStub
) -> None:
    """Every checkpoint this build writes stores its state schemas: one without them is malformed (edited, or
    written by something else), so it is not resumed on trust; the run is rebuilt from the case document."""
    app = make_harness(store, supplier.url)
    pending = pause_for_approval(app, PAUSED)
    strip_state_schemas(store, PAUSED)
    answer(app, PAUSED, pending)
    assert_committed_once(app, supplier, PAUSED)
    assert rebuild_notes(app, PAUSED) == ["schema_changed"]


def test_drain_check_names_the_type_and_the_field_in_its_text(
    store: SqliteDocumentStore, supplier: SupplierStub, run: Callable[..., Ran]
) -> None:
    pause_for_approval(make_harness(store, supplier.url), PAUSED)
    with CHANGES["default_factory field added"].deployed() as allowed:
        checked = run(drain, "check", allowed_types=allowed)
    assert checked.code == 1
    line = checked.out.splitlines()[0]
    assert line.endswith(
        "state type changed: shared.workflow.messages:ApprovalRequest.approvers: added with a default_factory: "
        "an object restored from a checkpoint lacks it (no __init__ runs)"
    ), line
