"""The drain check's view: the in-flight runs, judged against a build (rule R8). Shown by
``casekeeper drain check`` and the operations page.

**What it reads** is bounded by the runs a deploy could strand, not by the cases that exist: the cases
marked by their runs (:mod:`shared.workflow.run_marker`, one indexed question across partitions) and the
cases waiting for an approval (indexed on ``status``: a run paused before the marks existed is found there),
both read a page at a time; then, for each such case, the case and its newest checkpoint, exactly as the
worker chooses it (``CaseCheckpointStorage.latest_record``). A marked case whose newest checkpoint is of a
finished run (a stale mark) is read and not reported.

A run is **in flight** when its case's newest checkpoint is not of a finished run (:mod:`.runs`). An
in-flight run **cannot be resumed** when its checkpoint's graph hash is not the build's, a state type it
holds changed incompatibly, it does not decode under the build's allow-list, or it vanished while read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.core.cases import CASES, Case
from shared.core.ports import DocumentStore, Query, walk
from shared.domain.invoice import Status
from shared.views.runs import CheckpointView, inspect_checkpoint
from shared.workflow import run_marker
from shared.workflow.build import WORKFLOW_NAME
from shared.workflow.checkpoints import CHECKPOINTS, CaseCheckpointStorage

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


def candidates(store: DocumentStore) -> dict[str, Case | None]:
    """The cases that may have a run in flight: id -> the case when already read (``None``: read it)."""
    found: dict[str, Case | None] = {}
    for doc in walk(store, CHECKPOINTS, run_marker.MARKED):
        case_id = doc.body.get("caseId")
        if isinstance(case_id, str) and case_id:
            found.setdefault(case_id, None)
    for doc in walk(store, CASES, Query(equals={"status": str(Status.AWAITING_APPROVAL)})):
        found[doc.id] = Case.from_document(doc)
    return found


def check(store: DocumentStore, graph_hash: str, allowed_types: frozenset[str]) -> DrainReport:
    """Every in-flight run, judged against the build with ``graph_hash`` and ``allowed_types``.

    Store failures propagate (``StoreError``): "the store is down" is not "nothing in flight"."""
    in_flight: list[InFlightRun] = []
    found = candidates(store)
    for case_id in sorted(found):
        case = found[case_id]
        if case is None:
            doc = store.read(CASES, case_id, case_id)
            if doc is None:
                continue  # checkpoints of a deleted case: no event can resume them
            case = Case.from_document(doc)
        storage = CaseCheckpointStorage(store, case.id, allowed_types)
        record = storage.latest_record(WORKFLOW_NAME)
        if record is None:
            continue
        view = inspect_checkpoint(store, storage, record, graph_hash)
        if view.in_flight:
            in_flight.append(InFlightRun(case.id, case.status, case.version, view))
    return DrainReport(graph_hash, tuple(in_flight), examined=len(found))
