"""The workflow graph: intake -> propose -> approval gate -> commit, under one stable name.

The graph's shape is part of every checkpoint (``graph_signature_hash``: executor ids and classes,
edges, start). Changing it strands in-flight runs on deploy: they are rebuilt from the case document
(rule R8), and ``casekeeper drain check`` lists them beforehand.
"""

from __future__ import annotations

from agent_framework import Workflow, WorkflowBuilder

from shared.workflow.deps import WorkflowDeps
from shared.workflow.executors import ApprovalGate, Commit, Intake, Propose

WORKFLOW_NAME = "casekeeper-invoice-review"


def build_workflow(deps: WorkflowDeps) -> Workflow:
    """A new workflow object. A ``Workflow`` keeps state between runs and runs one at a time: the case worker
    lends each run an object of its own and reuses it only once reset (:mod:`shared.workflow.reuse`)."""
    intake, propose, gate, commit = Intake(deps), Propose(deps), ApprovalGate(deps), Commit(deps)
    return (
        WorkflowBuilder(name=WORKFLOW_NAME, start_executor=intake, max_iterations=20)
        .add_edge(intake, propose)
        .add_edge(intake, gate)  # an approval answer rebuilt without its checkpoint goes straight to the gate
        .add_edge(propose, gate)
        .add_edge(gate, commit)
        .build()
    )
