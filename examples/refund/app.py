"""Customer refund on Agent Framework, guarded by ``casekeeper``.

    refund.requested -> decide (pinned case version) -> propose an amount -> above the threshold, ask a
    person -> call the payments service once -> commit "refunded"

Messages are routed by type: ``Proposal`` only reaches the gate, ``Payable`` only the payment.

A case per refund request holds the facts (``paid``: what the customer paid, ``requested``: what they
ask back). The amount is what was requested, capped by what was paid less what was already refunded.
An answer to an approval starts a new run from the case (the case holds the pending request), so a
run never waits inside the workflow and a deploy never strands one.

The guard's lines are the statements that name the guard, the declared effect (``pay_once``) or anything
imported from ``casekeeper``, and the ``except`` clauses that catch its errors; ``tests/examples/test_refund.py``
counts them (see README.md here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Never

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler

from casekeeper import CaseError, DocumentStore, DownstreamError, EffectError, Guard
from casekeeper.agent import CaseCheckpointStorage, RunCheckpoints, capturing
from examples.refund.payments import Payments

THRESHOLD = Decimal("100")
"""Refunds above this need a person's approval."""
WORKFLOW_NAME = "refund-example"
REQUESTED, REFUNDED = "requested", "refunded"


@dataclass
class RefundRequested:
    """Start (or redo) the decision for one refund case."""

    case_id: str


@dataclass
class ApprovalAnswered:
    """A person's answer to an approval request, given on case version ``on_version``."""

    case_id: str
    request_id: str
    approve: bool
    by: str
    on_version: int


@dataclass
class Proposal:
    """An amount decided on a pinned case version (``decision``: ``Decision.to_json()``, plain JSON)."""

    case_id: str
    decision: dict[str, Any]
    amount: str


@dataclass
class Payable:
    """A proposal cleared to pay: under the threshold, or approved by a person."""

    proposal: Proposal


@dataclass
class Outcome:
    """What a run did: ``refunded``, ``awaiting_approval``, ``waiting`` (an earlier outcome is unknown),
    ``stale`` (the case changed: decide again), ``refused``, ``rejected``, ``ignored``, ``nothing_to_do``."""

    case_id: str
    outcome: str
    detail: str = ""
    replayed: bool = False


class RefundApp:
    """The example's composition: one guard over ``store``, the refund effect declared once."""

    def __init__(self, store: DocumentStore, payments: Payments, **guard_options: Any) -> None:
        self.payments = payments
        self.guard = Guard(store, **guard_options)
        self.pay_once = self.guard.register(
            "refund", self.pay, commit=REFUNDED, lookup=payments.find, retry_same_key=True
        )

    def pay(self, key: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The guarded call: ``key`` is forwarded as the payment's idempotency key."""
        return self.payments.pay(key, args["caseId"], args["amount"])

    def workflow(self) -> Workflow:
        """A new workflow object (one per run: a ``Workflow`` keeps state between runs)."""
        intake, propose, gate, pay = Intake(self), Propose(self), Gate(self), Pay(self)
        return (
            WorkflowBuilder(name=WORKFLOW_NAME, start_executor=intake, max_iterations=10)
            .add_edge(intake, propose)
            .add_edge(intake, pay)  # an approved answer goes straight to the payment
            .add_edge(propose, gate)
            .add_edge(gate, pay)
            .build()
        )

    async def handle(self, message: RefundRequested | ApprovalAnswered) -> Outcome:
        """Run the workflow for one event, with the case's checkpoints (written where they save work: the
        run never pauses inside the workflow, so only its end, and only over an older one); returns the
        run's outcome."""
        saves = RunCheckpoints(CaseCheckpointStorage(self.guard.store, message.case_id, (*MESSAGES, Outcome)))
        with capturing(message.case_id, WORKFLOW_NAME):
            result = await self.workflow().run(message, checkpoint_storage=saves)
            await saves.finish()  # the run's end, written only if it supersedes an older checkpoint
        outcomes = [o for o in result.get_outputs() if isinstance(o, Outcome)]
        return outcomes[-1] if outcomes else Outcome(message.case_id, "nothing_to_do", "the run gave no outcome")


MESSAGES = (RefundRequested, ApprovalAnswered, Proposal, Payable)
WAIT = {
    "StaleDecision": "stale",
    "EffectFailed": "refused",
    "StaleApproval": "ignored",
    "ApprovalNotPending": "ignored",
}
"""The run's outcome for each refusal of the guard; any other (an outcome not known yet) is ``waiting``."""


class _Step(Executor):
    def __init__(self, app: RefundApp) -> None:
        super().__init__(id=type(self).__name__.lower())
        self.app = app

    async def refused(self, exc: Exception, case_id: str, ctx: WorkflowContext[Any, Outcome]) -> None:
        await ctx.yield_output(Outcome(case_id, WAIT.get(type(exc).__name__, "waiting"), str(exc)))


class Intake(_Step):
    """Pin the decision to the case's version (settling what a crash left first), or take an answer."""

    @handler
    async def on_request(self, msg: RefundRequested, ctx: WorkflowContext[Proposal, Outcome]) -> None:
        try:
            decision = await self.app.guard.adecide(msg.case_id)
        except (EffectError, CaseError) as exc:
            return await self.refused(exc, msg.case_id, ctx)
        if decision.case.status != REQUESTED:
            await ctx.yield_output(Outcome(msg.case_id, "nothing_to_do", f"case is {decision.case.status}"))
            return None
        refunded = sum((Decimal(e.request["args"]["amount"]) for e in decision.done("refund")), Decimal(0))
        facts = decision.facts
        amount = min(Decimal(facts["requested"]), Decimal(facts["paid"]) - refunded)
        await ctx.send_message(Proposal(msg.case_id, decision.to_json(), str(amount)))
        return None

    @handler
    async def on_answer(self, msg: ApprovalAnswered, ctx: WorkflowContext[Payable, Outcome]) -> None:
        answer = {"approve": msg.approve, "by": msg.by, "on_version": msg.on_version}
        try:
            decision = await self.app.guard.aanswer(msg.case_id, msg.request_id, **answer)
        except (EffectError, CaseError) as exc:
            return await self.refused(exc, msg.case_id, ctx)
        if decision is None:
            await ctx.yield_output(Outcome(msg.case_id, "rejected", f"rejected by {msg.by}"))
            return None
        amount = str(decision.approval["details"]["amount"]) if decision.approval else "0"
        await ctx.send_message(Payable(Proposal(msg.case_id, decision.to_json(), amount)))
        return None


class Propose(_Step):
    """Propose nothing when nothing is left to refund; otherwise pass the amount on."""

    @handler
    async def on_proposal(self, p: Proposal, ctx: WorkflowContext[Proposal, Outcome]) -> None:
        if Decimal(p.amount) <= 0:
            await ctx.yield_output(Outcome(p.case_id, "nothing_to_do", "nothing left to refund"))
            return
        await ctx.send_message(p)


class Gate(_Step):
    """Above the threshold, ask a person (on the case's version) instead of paying."""

    @handler
    async def on_proposal(self, p: Proposal, ctx: WorkflowContext[Payable, Outcome]) -> None:
        if Decimal(p.amount) <= THRESHOLD:
            await ctx.send_message(Payable(p))
            return None
        try:
            request = await self.app.guard.aask(p.decision, "refund", {"amount": p.amount})
        except EffectError as exc:
            return await self.refused(exc, p.case_id, ctx)
        await ctx.yield_output(Outcome(p.case_id, "awaiting_approval", request.request_id))
        return None


class Pay(_Step):
    """Pay once, through the guard, then the case is committed ``refunded``."""

    @handler
    async def on_payable(self, msg: Payable, ctx: WorkflowContext[Never, Outcome]) -> None:
        p = msg.proposal
        try:
            done = await self.app.pay_once.arun(p.decision, {"caseId": p.case_id, "amount": p.amount})
        except (EffectError, DownstreamError) as exc:
            return await self.refused(exc, p.case_id, ctx)
        await ctx.yield_output(Outcome(p.case_id, REFUNDED, done.commit, done.replayed))
        return None
