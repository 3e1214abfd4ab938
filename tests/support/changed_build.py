"""A "next build" of the workflow for deploy-safety tests: one executor class differs, so the graph
signature does too (as a real refactor of an executor would)."""

from __future__ import annotations

from agent_framework import Workflow, WorkflowBuilder

from shared.workflow.build import WORKFLOW_NAME
from shared.workflow.deps import WorkflowDeps
from shared.workflow.executors import ApprovalGate, Commit, Intake, Propose


class GateV2(ApprovalGate):
    """The next build's gate: another class, so the graph signature changes."""


def build_v2(deps: WorkflowDeps) -> Workflow:
    intake, propose, gate, commit = Intake(deps), Propose(deps), GateV2(deps), Commit(deps)
    return (
        WorkflowBuilder(name=WORKFLOW_NAME, start_executor=intake)
        .add_edge(intake, propose)
        .add_edge(intake, gate)
        .add_edge(propose, gate)
        .add_edge(gate, commit)
        .build()
    )
