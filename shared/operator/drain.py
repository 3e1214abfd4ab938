"""``casekeeper drain check``: before a deploy, the in-flight runs this build could not resume (rule R8).

Run it with the build about to be deployed, against the store it will run on. A run is **in flight**
when its case's newest checkpoint is not of a finished run (:mod:`.runs`): it is paused for an approval
(pending request ids) or was interrupted mid-superstep (pending messages), or that cannot be told. An
in-flight run **cannot be resumed** when its checkpoint's graph hash is not this build's
(``graph changed``), a state type it holds gained a field without a plain default, lost or retyped one
(``state type changed``, naming the type and the field: ``shared.workflow.state_schemas``), it does not
decode under this build's allow-list (``type would not load``), or it vanished while being read
(``missing``). Finished runs do not count: the next event starts a new run.

Nothing is lost if such a run is deployed over anyway: the worker rebuilds it from the case document
(its model calls repeat, its effects do not, R1-R2). The check says where that will happen, so a deploy
can wait for approvals to be answered, or go ahead knowingly.

**Enumeration.** Cases first, then each case's newest checkpoint, rather than one cross-partition query
of the ``checkpoints`` container. The storage port has no projection, so that query would return every
stored checkpoint body of every case (each up to 1.5 MB) in one list; per case, the work is a
single-partition query bounded by the worker's pruning (at most 15 checkpoints), and "newest" is chosen exactly
as the worker chooses it (``CaseCheckpointStorage.latest_record``). The case query reads small documents
of every status: an interrupted run can belong to a case in any status (it may have died just after its
commit). Checkpoints left by a case document that was deleted are not seen; no event can resume them.

Exit codes: 0 every in-flight run can be resumed, 1 some cannot, 2 usage or store selection error.
Reads only.

``casekeeper drain schemas [--against FILE]`` needs no store: it compares this build's checkpointed state
types with the schemas another build wrote (:mod:`shared.workflow.state_schemas`), for CI before a merge.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from shared.app.operations import Operations
from shared.core.cases import CASES, Case
from shared.core.ports import Query
from shared.operator.context import (
    common_arguments,
    print_json,
    run_with_operations,
)
from shared.operator.runs import Build, CheckpointView, graph_hash_of, inspect_checkpoint
from shared.workflow import state_schemas
from shared.workflow.build import WORKFLOW_NAME, build_workflow
from shared.workflow.checkpoints import CaseCheckpointStorage
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES

PROG = "casekeeper drain"


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

    @property
    def stranded(self) -> tuple[InFlightRun, ...]:
        return tuple(run for run in self.in_flight if not run.checkpoint.resumable)

    def summary(self) -> str:
        return f"{len(self.in_flight)} in-flight runs, {len(self.stranded)} cannot be resumed by this build"

    def to_json(self) -> dict[str, Any]:
        return {
            "graphHash": self.graph_hash,
            "inFlight": len(self.in_flight),
            "cannotResume": [run.to_json() for run in self.stranded],
            "resumable": [run.to_json() for run in self.in_flight if run.checkpoint.resumable],
            "summary": self.summary(),
        }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Checks to run before a deploy (rule R8).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "check",
        parents=[common_arguments()],
        help="list the in-flight runs this build could not resume",
        description="List the in-flight runs (paused for approval, or interrupted) whose newest checkpoint "
        "this build could not resume: graph changed, a state type changed, a type would not load, or "
        "missing. Exits 1 if any.",
    )
    schemas = commands.add_parser(
        "schemas",
        help="compare this build's checkpointed state types with another build's manifest (CI)",
        description="Compare the fields of every checkpointed state type with a manifest of the schemas another "
        "build wrote (default: the committed shared/workflow/state_schemas.json). Exits 1 when checkpoints "
        "that build wrote could not be resumed (naming the type, the field and the fix) or the manifest is "
        "out of date, 0 when they are the same. Reads no store.",
    )
    schemas.add_argument("--against", metavar="FILE", help="the other build's manifest")
    schemas.add_argument("--write", action="store_true", help="write this build's schemas to FILE instead")
    return parser


def main(
    argv: list[str] | None = None,
    *,
    build: Build = build_workflow,
    allowed_types: frozenset[str] = ALLOWED_CHECKPOINT_TYPES,
) -> int:
    """``build`` and ``allowed_types`` stand for the build to check (tests pass a changed one)."""
    args = build_parser().parse_args(argv)
    if args.command == "schemas":
        forwarded = [*(["--against", args.against] if args.against else []), *(["--write"] if args.write else [])]
        return state_schemas.main(forwarded, allowed_types=allowed_types)
    return run_with_operations(PROG, args, lambda ops: _report(ops, args, build, allowed_types))


def _report(ops: Operations, args: argparse.Namespace, build: Build, allowed_types: frozenset[str]) -> int:
    report = check(ops, graph_hash_of(build, ops), allowed_types)
    if args.json:
        print_json(report.to_json())
    else:
        for run in report.stranded:
            cp = run.checkpoint
            why = "; ".join(p.text() for p in cp.problems)
            print(
                f"{run.case_id}  {run.case_status} v{run.case_version}  run {cp.run}  "
                f"checkpoint {cp.record.checkpoint_id} (seq {cp.record.seq}): {why}"
            )
        if report.stranded:
            print("these runs will be rebuilt from the case document after the deploy (model calls repeat)")
        print(report.summary())
    return 1 if report.stranded else 0


def check(ops: Operations, graph_hash: str, allowed_types: frozenset[str]) -> DrainReport:
    """Every in-flight run, judged against the build with ``graph_hash`` and ``allowed_types``."""
    in_flight: list[InFlightRun] = []
    for doc in ops.store.query(CASES, Query()):
        case = Case.from_document(doc)
        storage = CaseCheckpointStorage(ops.store, case.id, allowed_types)
        record = storage.latest_record(WORKFLOW_NAME)
        if record is None:
            continue
        view = inspect_checkpoint(ops.store, storage, record, graph_hash)
        if view.in_flight:
            in_flight.append(InFlightRun(case.id, case.status, case.version, view))
    in_flight.sort(key=lambda run: run.case_id)
    return DrainReport(graph_hash, tuple(in_flight))
