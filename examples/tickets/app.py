"""Support-ticket refund on Agent Framework, guarded by ``casekeeper``: two lines per ticket, one approval.

    ticket.opened -> triage (decide on the pinned ticket version: the lines not refunded yet) -> above 150
    in all, ask a person -> refund each line once (one effect per line, named by ``part``) -> "refunded"

A ticket is a case: ``customer`` and ``lines`` (line id -> the amount to refund). Each line is its own
effect of the one action ``refund`` in the one decision, named by its line id (``part=``): its own
idempotency key, its own payment, and a second run of the decision replays both. The last line's commit
moves the ticket to ``refunded``; the lines before it to ``refunding``, so a run stopped between two lines
is finished by the next from the lines still left.

Above the threshold a person approves the lines left. While the request waits, the guard refuses any
refund of the ticket that does not carry the approval; a change of the ticket's facts closes the request
(the ticket goes back to ``open``) and an answer to it is stale. An answer starts a new run from the case,
so no run waits inside the workflow. Lines a person approved stay approved at their amounts: a run stopped
after the approval finishes them without asking again.

Only the package face is used: ``casekeeper`` (and the payments stand-in of ``examples/refund``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Never

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler

from casekeeper import AlreadyExists, CaseError, Decision, DocumentStore, DownstreamError, EffectError, Guard
from examples.refund.payments import Payments

THRESHOLD = Decimal("150")
"""A ticket whose lines left come to more than this needs a person's approval."""
OPEN, REFUNDING, REFUNDED, AWAITING = "open", "refunding", "refunded", "awaiting_approval"
WORKFLOW_NAME = "ticket-refund-example"


@dataclass
class TicketOpened:
    """Start (or redo) the decision for one ticket."""

    ticket_id: str


@dataclass
class TicketAnswered:
    """A person's answer to an approval request, given on ticket version ``on_version``."""

    ticket_id: str
    request_id: str
    approve: bool
    by: str
    on_version: int


@dataclass
class Plan:
    """The lines to refund (line id -> amount), decided on a pinned ticket version (``decision``:
    ``Decision.to_json()``, plain JSON)."""

    ticket_id: str
    decision: dict[str, Any]
    lines: dict[str, str]


@dataclass
class Cleared:
    """A plan cleared to refund: under the threshold, or approved by a person."""

    plan: Plan


@dataclass
class Outcome:
    """What a run did: ``refunded``, ``awaiting_approval`` (``detail``: the request id), ``waiting`` (an
    earlier outcome is unknown, or another run is mid-call), ``stale`` (the ticket changed: decide again),
    ``stale_approval`` (answered after the facts changed: ``detail`` names the change), ``refused``,
    ``rejected``, ``ignored``, ``nothing_to_do``, ``mismatch`` (a line run with other arguments)."""

    ticket_id: str
    outcome: str
    detail: str = ""
    lines: list[str] = field(default_factory=list)
    replayed: bool = False


class TicketApp:
    """The example's composition: one guard over ``store``, the line refund declared once."""

    def __init__(self, store: DocumentStore, payments: Payments, **guard_options: Any) -> None:
        self.payments = payments
        self.guard = Guard(store, **guard_options)
        self.refund_line = self.guard.register(
            "refund", self.pay, commit=after_line, lookup=payments.find, retry_same_key=True
        )

    def pay(self, key: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The guarded call: ``key`` (one per ticket version and line) is the payment's idempotency key."""
        return self.payments.pay(key, args["ticketId"], args["amount"])

    def open_ticket(self, ticket_id: str, customer: str, lines: Mapping[str, str]) -> bool:
        """Record a new ticket; ``False`` when this very ticket was recorded already (a redelivery). Raises
        ``AlreadyExists`` for another ticket under an id in use: its lines are never silently dropped."""
        facts = {"customer": customer, "lines": dict(lines)}
        try:
            self.guard.create(ticket_id, facts, status=OPEN)
        except AlreadyExists:
            existing = self.guard.get(ticket_id)
            if existing is not None and existing.facts == facts:
                return False
            raise
        return True

    def workflow(self) -> Workflow:
        """A new workflow object (one per run: a ``Workflow`` keeps state between runs)."""
        intake, gate, refund = Intake(self), Gate(self), Refund(self)
        return (
            WorkflowBuilder(name=WORKFLOW_NAME, start_executor=intake, max_iterations=10)
            .add_edge(intake, gate)
            .add_edge(intake, refund)  # an approved answer, or lines already approved, go straight to refund
            .add_edge(gate, refund)
            .build()
        )

    async def handle(self, message: TicketOpened | TicketAnswered) -> Outcome:
        """Run the workflow for one event; returns the run's outcome."""
        result = await self.workflow().run(message)
        outcomes = [o for o in result.get_outputs() if isinstance(o, Outcome)]
        return outcomes[-1] if outcomes else Outcome(message.ticket_id, "nothing_to_do", "the run gave no outcome")


def after_line(args: Mapping[str, Any]) -> str:
    """The status a line's refund commits: ``refunded`` for the last line of its plan, else ``refunding``."""
    return REFUNDED if args["last"] else REFUNDING


def approved_lines(decision: Decision) -> dict[str, str]:
    """The lines (and amounts) a person approved on this ticket: the guard's record of the last answer."""
    answered = decision.case.data.get("approval") or {}
    return dict((answered.get("details") or {}).get("lines") or {}) if answered.get("approved") else {}


OUTCOME_OF = {
    "StaleDecision": "stale",
    "EffectFailed": "refused",
    "StaleApproval": "stale_approval",
    "ApprovalNotPending": "ignored",
    "ApprovalPending": "awaiting_approval",
    "ArgumentsMismatch": "mismatch",
}
"""The run's outcome for each refusal of the guard; any other (an outcome not known yet) is ``waiting``."""


class _Step(Executor):
    def __init__(self, app: TicketApp) -> None:
        super().__init__(id=type(self).__name__.lower())
        self.app = app

    async def refused(self, exc: Exception, ticket_id: str, ctx: WorkflowContext[Any, Outcome]) -> None:
        await ctx.yield_output(Outcome(ticket_id, OUTCOME_OF.get(type(exc).__name__, "waiting"), str(exc)))


class Intake(_Step):
    """Pin the decision to the ticket's version (settling what a crash left first), or take an answer."""

    @handler
    async def on_ticket(self, msg: TicketOpened, ctx: WorkflowContext[Plan | Cleared, Outcome]) -> None:
        try:
            decision = await self.app.guard.adecide(msg.ticket_id)
        except (EffectError, CaseError) as exc:
            return await self.refused(exc, msg.ticket_id, ctx)
        status = decision.case.status
        if status == AWAITING:
            pending = decision.case.data.get("pendingApproval") or {}
            await ctx.yield_output(Outcome(msg.ticket_id, AWAITING, str(pending.get("requestId"))))
            return None
        if status not in (OPEN, REFUNDING):
            await ctx.yield_output(Outcome(msg.ticket_id, "nothing_to_do", f"ticket is {status}"))
            return None
        done = {effect.part for effect in decision.done("refund")}
        left = {line: amount for line, amount in decision.facts["lines"].items() if line not in done}
        if not left:
            await ctx.yield_output(Outcome(msg.ticket_id, "nothing_to_do", "every line is refunded"))
            return None
        plan = Plan(msg.ticket_id, decision.to_json(), left)
        approved = approved_lines(decision)
        if all(approved.get(line) == amount for line, amount in left.items()):
            await ctx.send_message(Cleared(plan))  # a person approved these lines at these amounts
        else:
            await ctx.send_message(plan)
        return None

    @handler
    async def on_answer(self, msg: TicketAnswered, ctx: WorkflowContext[Cleared, Outcome]) -> None:
        answer = {"approve": msg.approve, "by": msg.by, "on_version": msg.on_version}
        try:
            decision = await self.app.guard.aanswer(msg.ticket_id, msg.request_id, **answer, approved_status=REFUNDING)
        except (EffectError, CaseError) as exc:
            return await self.refused(exc, msg.ticket_id, ctx)
        if decision is None:
            await ctx.yield_output(Outcome(msg.ticket_id, "rejected", f"rejected by {msg.by}"))
            return None
        lines = approved_lines(decision)
        await ctx.send_message(Cleared(Plan(msg.ticket_id, decision.to_json(), lines)))
        return None


class Gate(_Step):
    """Above the threshold, ask a person (on the ticket's version) instead of refunding."""

    @handler
    async def on_plan(self, plan: Plan, ctx: WorkflowContext[Cleared, Outcome]) -> None:
        total = sum((Decimal(amount) for amount in plan.lines.values()), Decimal(0))
        if total <= THRESHOLD:
            await ctx.send_message(Cleared(plan))
            return None
        details = {"lines": plan.lines, "total": str(total)}
        try:
            request = await self.app.guard.aask(plan.decision, "refund", details)
        except EffectError as exc:
            return await self.refused(exc, plan.ticket_id, ctx)
        await ctx.yield_output(Outcome(plan.ticket_id, AWAITING, request.request_id))
        return None


class Refund(Executor):
    """Refund each line of a cleared plan once: one effect per line of the one decision, named by part."""

    def __init__(self, app: TicketApp) -> None:
        super().__init__(id="refund")
        self.app = app

    @handler
    async def on_cleared(self, msg: Cleared, ctx: WorkflowContext[Never, Outcome]) -> None:
        plan, replayed = msg.plan, []
        lines = sorted(plan.lines.items())
        for n, (line, amount) in enumerate(lines, start=1):
            args = {"ticketId": plan.ticket_id, "line": line, "amount": amount, "last": n == len(lines)}
            try:
                done = await self.app.refund_line.arun(plan.decision, args, part=line)
            except (EffectError, DownstreamError) as exc:
                outcome = OUTCOME_OF.get(type(exc).__name__, "waiting")
                await ctx.yield_output(Outcome(plan.ticket_id, outcome, str(exc), [line]))
                return
            replayed.append(done.replayed)
        await ctx.yield_output(Outcome(plan.ticket_id, REFUNDED, "", [line for line, _ in lines], all(replayed)))
