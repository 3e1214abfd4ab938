"""A tiny, real Agent Framework workflow for checkpoint tests: intake -> gate (asks a person) -> commit.

The payload types are module-level dataclasses so their pickle keys are stable
(``tests.support.tiny_workflow:Name``) and a test can leave one out of the allow-list on purpose:

- ``CaseStarted`` is the run's input, so it is inside the *entry* checkpoint (written before the first
  superstep) as well as every later one: leaving it out makes every save fail.
- ``CaseNote`` is put in shared state by intake (a pickled dataclass in ``checkpoint.state``).
- ``ApprovalRequest`` / ``Decision`` are the human-in-the-loop request and its answer.

Build a fresh workflow for every run (``build_workflow()``): executors and ``Workflow`` objects carry
state between runs, and a fresh one is what a new process would have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Never

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler, response_handler

WORKFLOW_NAME = "tiny-review"


@dataclass
class CaseStarted:
    """The run's input message."""

    case_id: str
    version: int = 1


@dataclass
class CaseNote:
    """What intake keeps in shared state (committed at the end of its superstep)."""

    case_id: str
    text: str


@dataclass
class ApprovalRequest:
    """What the gate asks a person; carries the case version the approver sees."""

    case_id: str
    version: int


@dataclass
class Decision:
    """A person's answer."""

    approved: bool
    reviewer: str


def type_key(cls: type) -> str:
    """The ``module:qualname`` key checkpoint decoding uses for ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


ALL_TYPES: frozenset[str] = frozenset(type_key(c) for c in (CaseStarted, CaseNote, ApprovalRequest, Decision))
"""Every custom type this workflow puts in a checkpoint."""


def request_id_for(case_id: str, version: int = 1) -> str:
    """The gate's deterministic request id (used verbatim as the key of ``responses=``)."""
    return f"approve:{case_id}:v{version}"


class Intake(Executor):
    @handler
    async def on_start(self, started: CaseStarted, ctx: WorkflowContext[ApprovalRequest]) -> None:
        ctx.set_state("note", CaseNote(started.case_id, f"intake saw {started.case_id}"))
        await ctx.send_message(ApprovalRequest(started.case_id, started.version))


class Gate(Executor):
    @handler
    async def on_request(self, request: ApprovalRequest, ctx: WorkflowContext) -> None:
        await ctx.request_info(request, Decision, request_id=request_id_for(request.case_id, request.version))

    @response_handler
    async def on_decision(
        self, original_request: ApprovalRequest, decision: Decision, ctx: WorkflowContext[str]
    ) -> None:
        verdict = "approved" if decision.approved else "rejected"
        await ctx.send_message(f"{original_request.case_id} {verdict} by {decision.reviewer}")


class Commit(Executor):
    @handler
    async def on_verdict(self, verdict: str, ctx: WorkflowContext[Never, str]) -> None:
        note = ctx.get_state("note")
        await ctx.yield_output(f"committed: {verdict}; note={note.text if note else None}")


def build_workflow(name: str = WORKFLOW_NAME) -> Workflow:
    """A fresh workflow (fresh executors) with a fixed name; no storage: pass it per run."""
    intake, gate, commit = Intake(id="intake"), Gate(id="gate"), Commit(id="commit")
    return WorkflowBuilder(name=name, start_executor=intake).add_edge(intake, gate).add_edge(gate, commit).build()
