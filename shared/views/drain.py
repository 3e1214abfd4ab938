"""The drain check's view: the in-flight runs, judged against a build (rule R8). Shown by
``casekeeper drain check`` and the operations page.

**What it reads** is bounded by the runs a deploy could strand, not by the cases that exist: the cases
marked by their runs (:mod:`shared.workflow.run_marker`, one indexed question across partitions) and the
cases waiting for an approval (indexed on ``status``: a run paused before the marks existed is found there),
both read a page at a time; then, for each such case, the case and its newest checkpoint, exactly as the
worker chooses it (``CaseCheckpointStorage.latest_record``). A marked case whose newest checkpoint is of a
finished run (a stale mark: a paused run that a new fact replaced) is not reported, and its mark is removed,
conditionally on the mark as read, so that stale marks cost one check each, not one per check.

A run is **in flight** when its case's newest checkpoint is not of a finished run (:mod:`.runs`). An
in-flight run **cannot be resumed** when its checkpoint's graph hash is not the build's, a state type it
holds changed incompatibly, it does not decode under the build's allow-list, or it vanished while read.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from casekeeper import Case
from casekeeper.checkpoints import CHECKPOINTS, CaseCheckpointStorage, CheckpointRecord
from casekeeper.errors import ConcurrencyConflict
from casekeeper.stores import CASES, Document, DocumentStore, Query, walk
from shared.domain.invoice import Status
from shared.views.runs import CheckpointView, inspect_checkpoint
from shared.workflow import run_marker
from shared.workflow.build import WORKFLOW_NAME

PAGE = 200
"""Documents per page of the candidate queries."""


@dataclass(frozen=True)
class InFlightRun:
    case_id: str
    case_status: str
    case_version: int
    checkpoint: CheckpointView

    def to_json(self) -> dict[str, Any]:
        return {
            "caseId": self.case_id,
            "caseStatus": self.case_status,
            "caseVersion": self.case_version,
            "run": self.checkpoint.run,
            **self.checkpoint.to_json(),
        }


@dataclass(frozen=True)
class DrainReport:
    graph_hash: str
    in_flight: tuple[InFlightRun, ...]
    examined: int = 0
    """Cases whose newest checkpoint was read (the marked and the waiting ones): the check's cost."""

    @property
    def stranded(self) -> tuple[InFlightRun, ...]:
        return tuple(run for run in self.in_flight if not run.checkpoint.resumable)

    def summary(self) -> str:
        return f"{len(self.in_flight)} in-flight runs, {len(self.stranded)} cannot be resumed by this build"

    def to_json(self) -> dict[str, Any]:
        return {
            "graphHash": self.graph_hash,
            "inFlight": len(self.in_flight),
            "examined": self.examined,
            "cannotResume": [run.to_json() for run in self.stranded],
            "resumable": [run.to_json() for run in self.in_flight if run.checkpoint.resumable],
            "summary": self.summary(),
        }


def candidates(store: DocumentStore) -> tuple[dict[str, Case | None], dict[str, Document]]:
    """The cases that may have a run in flight (id -> the case when already read, ``None``: read it), and
    the marks found (by case id)."""
    found: dict[str, Case | None] = {}
    marks: dict[str, Document] = {}
    for doc in walk(store, CHECKPOINTS, Query(equals={"kind": run_marker.KIND_RUN_MARKER})):  # across partitions
        case_id = doc.body.get("caseId")
        if isinstance(case_id, str) and case_id:
            found.setdefault(case_id, None)
            marks[case_id] = doc
    for doc in walk(store, CASES, Query(equals={"status": str(Status.AWAITING_APPROVAL)})):
        found[doc.id] = Case.from_document(doc)
    return found, marks


def _superseded(mark: Document, records: list[CheckpointRecord]) -> bool:
    """The checkpoint the mark was written for is stored and a later one is the newest: the marking run is
    over. (A mark whose checkpoint is not stored yet belongs to a run writing it right now: kept.)"""
    marked = mark.body.get("checkpointId")
    return any(r.checkpoint_id == marked for r in records) and records[-1].checkpoint_id != marked


def _drop_stale_mark(store: DocumentStore, mark: Document) -> None:
    """Remove a mark whose case has no run in flight (a paused run a new fact replaced). Conditional on the
    mark as read: a run that marked the case again meanwhile keeps its mark."""
    with contextlib.suppress(ConcurrencyConflict):
        store.delete(CHECKPOINTS, mark.partition, mark.id, etag=mark.etag)


def check(store: DocumentStore, graph_hash: str, allowed_types: frozenset[str]) -> DrainReport:
    """Every in-flight run, judged against the build with ``graph_hash`` and ``allowed_types``.

    Store failures propagate (``StoreError``): "the store is down" is not "nothing in flight"."""
    in_flight: list[InFlightRun] = []
    found, marks = candidates(store)
    for case_id in sorted(found):
        case = found[case_id]
        if case is None:
            doc = store.read(CASES, case_id, case_id)
            if doc is None:
                continue  # checkpoints of a deleted case: no event can resume them
            case = Case.from_document(doc)
        storage = CaseCheckpointStorage(store, case.id, allowed_types)
        records = storage.records(WORKFLOW_NAME)  # what latest_record reads, oldest first
        if not records:
            continue
        view = inspect_checkpoint(store, storage, records[-1], graph_hash)
        if view.in_flight:
            in_flight.append(InFlightRun(case.id, case.status, case.version, view))
        elif case_id in marks and _superseded(marks[case_id], records):
            _drop_stale_mark(store, marks[case_id])
    return DrainReport(graph_hash, tuple(in_flight), examined=len(found))
