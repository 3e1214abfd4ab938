""" "Next builds" of the workflow for deploy-safety tests (rule R8), one per kind of change a release makes:
an executor class renamed (:func:`build_v2`), an executor added between two others
(:func:`build_with_check`), and a state type changed (:func:`deploy_state_type`), in ways the checks before
a resume see and in one they cannot (:func:`deploy_request_summary`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler

from shared.workflow import executors, messages
from shared.workflow.build import WORKFLOW_NAME
from shared.workflow.deps import WorkflowDeps
from shared.workflow.executors import ApprovalGate, Commit, Intake, Propose
from shared.workflow.messages import Proposed, type_key


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


class Check(Executor):
    """A step the next build adds between ``propose`` and the gate (it passes the proposal on)."""

    def __init__(self, deps: WorkflowDeps, id: str = "check") -> None:
        super().__init__(id=id)
        self._deps = deps

    @handler
    async def on_proposed(self, p: Proposed, ctx: WorkflowContext[Proposed]) -> None:
        await ctx.send_message(p)


def build_with_check(deps: WorkflowDeps) -> Workflow:
    """The next build with an executor added between two others: the graph changes."""
    intake, propose, check, gate, commit = Intake(deps), Propose(deps), Check(deps), ApprovalGate(deps), Commit(deps)
    return (
        WorkflowBuilder(name=WORKFLOW_NAME, start_executor=intake, max_iterations=20)
        .add_edge(intake, propose)
        .add_edge(intake, gate)
        .add_edge(propose, check)
        .add_edge(check, gate)
        .add_edge(gate, commit)
        .build()
    )


# --- the next build's state types -------------------------------------------------------------------
#
# A state type's change is a change of the class that a pickle key names. Both builds run in one process
# here, so "deploying" one swaps the class: it is put into ``shared.workflow.messages`` under the key the
# next build pickles it as, and into every module that imported the old name. Each is a subclass of the
# old class, so the executors' handlers (registered with the old class) still accept it, as the real next
# build's would accept its own.


@dataclass
class ApprovalRequestWithApprovers(messages.ApprovalRequest):
    """``ApprovalRequest`` with a field added the way ``basis`` was: a ``default_factory`` (rule R8 says
    why that does not survive a checkpoint)."""

    approvers: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "approvers": list(self.approvers)}


ApprovalRequestWithApprovers.__qualname__ = ApprovalRequestWithApprovers.__name__ = "ApprovalRequest"
ApprovalRequestWithApprovers.__module__ = messages.__name__


@dataclass
class ApprovalRequestWithOptionalApprovers(messages.ApprovalRequest):
    """The same field with a plain default: a class attribute, which an old object reads."""

    approvers: list[str] | None = None


ApprovalRequestWithOptionalApprovers.__qualname__ = ApprovalRequestWithOptionalApprovers.__name__ = "ApprovalRequest"
ApprovalRequestWithOptionalApprovers.__module__ = messages.__name__


@dataclass
class ApprovalAsk(messages.ApprovalRequest):
    """``ApprovalRequest`` renamed."""


ApprovalAsk.__module__ = messages.__name__


def deploy_state_type(monkeypatch: pytest.MonkeyPatch, new: type, *, replaces: type) -> frozenset[str]:
    """Make ``new`` the state type ``replaces`` was, in this process; return the next build's allow-list.
    Undone by ``monkeypatch`` (the rollback)."""
    monkeypatch.setattr(executors, replaces.__name__, new)  # the code that makes one makes the new one
    if new.__qualname__ == replaces.__qualname__:
        monkeypatch.setattr(messages, replaces.__qualname__, new)
    else:  # a rename: the new name is there, the old one is gone
        monkeypatch.setattr(messages, new.__qualname__, new, raising=False)
        monkeypatch.delattr(messages, replaces.__qualname__)
    return (messages.ALLOWED_CHECKPOINT_TYPES - {type_key(replaces)}) | {type_key(new)}


def deploy_approvers_field(monkeypatch: pytest.MonkeyPatch) -> frozenset[str]:
    """The release that adds ``ApprovalRequest.approvers`` and reads it: when the request names approvers,
    only they may answer. Returns the allow-list (unchanged: the type kept its name)."""
    allowed = deploy_state_type(monkeypatch, ApprovalRequestWithApprovers, replaces=messages.ApprovalRequest)
    decide = executors.ApprovalGate._decide

    async def decide_if_listed(self: Any, request: Any, answer: Any, ctx: Any) -> None:
        if request.approvers and answer.approver not in request.approvers:
            raise AssertionError(f"{answer.approver} may not answer")  # not reached by these tests' answers
        await decide(self, request, answer, ctx)

    monkeypatch.setattr(executors.ApprovalGate, "_decide", decide_if_listed)
    return allowed


@dataclass
class ApprovalRequestWithSummary(messages.ApprovalRequest):
    """``ApprovalRequest`` with the same fields and a value computed when one is made (``__post_init__``):
    nothing a check before resuming compares changes, but an object restored from a checkpoint (no
    ``__init__`` runs) lacks the value."""

    def __post_init__(self) -> None:
        self.summary = f"{self.amount} {self.currency}"


ApprovalRequestWithSummary.__qualname__ = ApprovalRequestWithSummary.__name__ = "ApprovalRequest"
ApprovalRequestWithSummary.__module__ = messages.__name__


def deploy_request_summary(monkeypatch: pytest.MonkeyPatch) -> frozenset[str]:
    """The release that computes ``ApprovalRequest.summary`` when a request is made and reads it when an
    answer is decided. Returns the allow-list (unchanged: the type kept its name and fields)."""
    allowed = deploy_state_type(monkeypatch, ApprovalRequestWithSummary, replaces=messages.ApprovalRequest)
    decide = executors.ApprovalGate._decide

    async def decide_with_summary(self: Any, request: Any, answer: Any, ctx: Any) -> None:
        assert request.summary  # an AttributeError for a request restored from a checkpoint
        await decide(self, request, answer, ctx)

    monkeypatch.setattr(executors.ApprovalGate, "_decide", decide_with_summary)
    return allowed


def deploy_renamed_request(monkeypatch: pytest.MonkeyPatch) -> frozenset[str]:
    """The release that renames ``ApprovalRequest`` to ``ApprovalAsk``."""
    return deploy_state_type(monkeypatch, ApprovalAsk, replaces=messages.ApprovalRequest)
