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

**Enumeration** (:mod:`shared.views.drain`): the cases whose runs marked them when they wrote a checkpoint
mid-run, and the cases waiting for an approval, each read a page at a time; then each one's newest
checkpoint. The cost follows the runs in flight, not the cases stored.

Exit codes: 0 every in-flight run can be resumed, 1 some cannot, 2 usage or store selection error.
Reads only, but for one repair: a run's in-flight mark left behind by a run that no longer is in flight is
removed (:mod:`shared.views.drain`).

``casekeeper drain schemas [--against FILE]`` needs no store: it compares this build's checkpointed state
types with the schemas another build wrote (:mod:`shared.workflow.state_schemas`), for CI before a merge.
"""

from __future__ import annotations

import argparse

from shared.app.operations import Operations
from shared.operator.context import (
    common_arguments,
    print_json,
    run_with_operations,
)
from shared.views.drain import DrainReport, InFlightRun, check
from shared.views.runs import Build, graph_hash_of
from shared.workflow import state_schemas
from shared.workflow.build import build_workflow
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES

__all__ = ["DrainReport", "InFlightRun", "build_parser", "check", "main"]

PROG = "casekeeper drain"


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
    report = check(ops.store, graph_hash_of(build, ops.workflow), allowed_types)
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
