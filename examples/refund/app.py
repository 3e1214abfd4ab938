"""Customer refund on Agent Framework, guarded by ``casekeeper``.

    refund.requested -> decide (pinned record version) -> propose an amount -> above the threshold, ask a
    person -> call the payments service once -> commit "refunded"

Messages are routed by type: ``Proposal`` only reaches the gate, ``Payable`` only the payment.

A record per refund request holds the facts (``paid``: what the customer paid, ``requested``: what they
ask back). The amount is what was requested, capped by what was paid less what was already refunded.
An answer to an approval starts a new run from the record (the record holds the pending request), so a
run never waits inside the workflow and a deploy never strands one.

The guard's lines are the ones that name ``guard``, ``refund_payment``, ``RecordCheckpoints`` or
``capturing``; ``tests/examples/test_refund.py`` counts them (see README.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Never

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler

from casekeeper import (
    ApprovalNotPending,
    DocumentStore,
    EffectFailed,
    EffectInFlight,
    Guard,
    NeedsReconciliation,
    OutcomeUnknown,
    StaleApproval,
    StaleDecision,
)
from casekeeper.agent import RecordCheckpoints, capturing, checkpoint_types
from examples.refund.payments import Payments

THRESHOLD = Decimal("100")
"""Refunds above this need a person's approval."""
WORKFLOW_NAME = "refund-example"
REQUESTED, REFUNDED = "requested", "refunded"


@dataclass
class RefundRequested:
    """Start (or redo) the decision for one refund record."""

    record_id: str


@dataclass
class ApprovalAnswered:
    """A person's answer to an approval request, given on record version ``on_version``."""

    record_id: str
    request_id: str
    approve: bool
    by: str
    on_version: int


@dataclass
class Proposal:
    """An amount decided on ``version`` of the record; ``approval`` when a person approved it."""

    record_id: str
    version: int
    amount: str
    approval: dict[str, Any] | None = None


@dataclass
class Payable:
    """A proposal cleared to pay: under the threshold, or approved by a person."""

    proposal: Proposal


@dataclass
class Outcome:
    """What a run did: ``refunded``, ``awaiting_approval``, ``waiting`` (an earlier outcome is unknown),
    ``stale`` (the record changed: decide again), ``refused``, ``rejected``, ``ignored``, ``nothing_to_do``."""

    record_id: str
    outcome: str
    detail: str = ""
    replayed: bool = False


class RefundApp:
    """The example's composition: one guard over ``store``, the refund effect declared once."""

    def __init__(self, store: DocumentStore, payments: Payments, **guard_options: Any) -> None:
        self.payments = payments
        self.guard = Guard(store, **guard_options)
        self.refund_payment = self.guard.register(
            "refund",
            lambda key, args: payments.pay(key, args["recordId"], args["amount"]),
            commit=REFUNDED,
            lookup=payments.find,
            retry_same_key=True,
        )

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
        """Run the workflow for one event, with the record's checkpoints; returns the run's outcome."""
        storage = RecordCheckpoints(self.guard.store, message.record_id, CHECKPOINT_TYPES)
        with capturing(message.record_id, WORKFLOW_NAME):
            result = await self.workflow().run(message, checkpoint_storage=storage)
        outcomes = [o for o in result.get_outputs() if isinstance(o, Outcome)]
        return outcomes[-1] if outcomes else Outcome(message.record_id, "nothing_to_do", "the run gave no outcome")


CHECKPOINT_TYPES = checkpoint_types(RefundRequested, ApprovalAnswered, Proposal, Payable, Outcome)


class _Step(Executor):
    def __init__(self, app: RefundApp) -> None:
        super().__init__(id=type(self).__name__.lower())
        self.app = app


class Intake(_Step):
    """Pin the decision to the record's version (settling what a crash left first), or take an answer."""

    @handler
    async def on_request(self, msg: RefundRequested, ctx: WorkflowContext[Proposal, Outcome]) -> None:
        try:
            decision = await self.app.guard.adecide(msg.record_id)
        except (EffectInFlight, NeedsReconciliation) as exc:
            await ctx.yield_output(Outcome(msg.record_id, "waiting", str(exc)))
            return
        if decision.record.status != REQUESTED:
            await ctx.yield_output(Outcome(msg.record_id, "nothing_to_do", f"record is {decision.record.status}"))
            return
        refunded = sum((Decimal(e.request["args"]["amount"]) for e in decision.done("refund")), Decimal(0))
        facts = decision.facts
        amount = min(Decimal(facts["requested"]), Decimal(facts["paid"]) - refunded)
        await ctx.send_message(Proposal(msg.record_id, decision.version, str(amount)))

    @handler
    async def on_answer(self, msg: ApprovalAnswered, ctx: WorkflowContext[Payable, Outcome]) -> None:
        try:
            decision = await self.app.guard.aanswer(
                msg.record_id, msg.request_id, approve=msg.approve, by=msg.by, on_version=msg.on_version
            )
        except (StaleApproval, ApprovalNotPending) as exc:
            await ctx.yield_output(Outcome(msg.record_id, "ignored", str(exc)))
            return
        if decision is None:
            await ctx.yield_output(Outcome(msg.record_id, "rejected", f"rejected by {msg.by}"))
            return
        assert decision.approval is not None
        amount = str(decision.approval["details"]["amount"])
        await ctx.send_message(Payable(Proposal(msg.record_id, decision.version, amount, decision.approval)))


class Propose(_Step):
    """Propose nothing when nothing is left to refund; otherwise pass the amount on."""

    @handler
    async def on_proposal(self, p: Proposal, ctx: WorkflowContext[Proposal, Outcome]) -> None:
        if Decimal(p.amount) <= 0:
            await ctx.yield_output(Outcome(p.record_id, "nothing_to_do", "nothing left to refund"))
            return
        await ctx.send_message(p)


class Gate(_Step):
    """Above the threshold, ask a person (on the record's version) instead of paying."""

    @handler
    async def on_proposal(self, p: Proposal, ctx: WorkflowContext[Payable, Outcome]) -> None:
        if Decimal(p.amount) <= THRESHOLD:
            await ctx.send_message(Payable(p))
            return
        guard = self.app.guard
        try:
            request = await guard.aask(guard.pinned(p.record_id, p.version), "refund", {"amount": p.amount})
        except StaleDecision as exc:
            await ctx.yield_output(Outcome(p.record_id, "stale", str(exc)))
            return
        await ctx.yield_output(Outcome(p.record_id, "awaiting_approval", request.request_id))


class Pay(_Step):
    """Pay once, through the guard, then the record is committed ``refunded``."""

    @handler
    async def on_payable(self, msg: Payable, ctx: WorkflowContext[Never, Outcome]) -> None:
        p = msg.proposal
        decision = self.app.guard.pinned(p.record_id, p.version, approval=p.approval)
        outcome: Callable[[str, str], Outcome] = lambda name, detail: Outcome(p.record_id, name, detail)  # noqa: E731
        try:
            done = await self.app.refund_payment.arun(decision, {"recordId": p.record_id, "amount": p.amount})
        except StaleDecision as exc:
            await ctx.yield_output(outcome("stale", str(exc)))
        except EffectFailed as exc:
            await ctx.yield_output(outcome("refused", exc.reason))
        except (EffectInFlight, NeedsReconciliation, OutcomeUnknown) as exc:
            await ctx.yield_output(outcome("waiting", str(exc)))
        else:
            await ctx.yield_output(Outcome(p.record_id, REFUNDED, done.commit, done.replayed))
