"""The invoice-review workflow's executors: intake -> propose -> approval gate -> commit.

The model proposes, code commits. Every executor may be replayed after a crash (a resume replays the
whole superstep that was running), so each one is written to be safe to run twice:

- intake and propose only read;
- the gate's "awaiting approval" commit is conditional on the version, and a replay that finds it
  already applied asks again with the same deterministic request id;
- commit runs its effect through the ledger (a replay gets the recorded result) and its status
  change is conditional (a replay finds it already applied).

Store and supplier calls are synchronous; they run in a thread so that the Functions worker's event
loop keeps serving other sessions meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Never

from agent_framework import Executor, WorkflowContext, handler, response_handler

from shared.core.cases import Case, CaseRepository
from shared.core.errors import EffectFailed, EffectInFlight, InvalidProposal, NeedsReconciliation, StaleDecision
from shared.core.keys import approval_request_id, effect_key
from shared.core.ledger import OPEN_STATUSES, Effect, EffectOutcome, EffectStatus, Ledger
from shared.domain.invoice import (
    INVESTIGABLE,
    Action,
    InvoiceFacts,
    Proposal,
    Rules,
    Status,
    needs_approval,
    validate,
)
from shared.telemetry import Telemetry
from shared.workflow.actions import credit_request_data
from shared.workflow.messages import (
    AnswerWithoutCheckpoint,
    ApprovalAnswer,
    ApprovalRequest,
    CaseSnapshot,
    CommitOrder,
    Investigate,
    Proposed,
    RebuiltAnswer,
    RunOutcome,
)
from shared.workflow.proposers import Proposer

CREDIT_NOTE_ACTION = Action.REQUEST_CREDIT_NOTE.value


class SupplierCalls:
    """What the commit step needs from the supplier portal (``shared.supplier.portal.SupplierPortal``)."""

    def request_credit_note(
        self, key: str, *, case_id: str, invoice_id: str, supplier_id: str, amount: Decimal, currency: str
    ) -> dict[str, Any]:
        raise NotImplementedError


@dataclass
class WorkflowDeps:
    cases: CaseRepository
    ledger: Ledger
    supplier: Any  # SupplierCalls-shaped; typed loosely so a test can hand in the real portal or a stub
    proposer: Proposer
    rules: Rules
    probe: Callable[[str], None] = lambda point: None
    """Called at named points (``F5``, ``F6``); the crash tests kill the process there."""
    telemetry: Telemetry = field(default_factory=Telemetry)


class Intake(Executor):
    """Load the case and its facts; stop early when there is nothing to decide."""

    def __init__(self, deps: WorkflowDeps, id: str = "intake") -> None:
        super().__init__(id=id)
        self._deps = deps

    @handler
    async def on_investigate(self, msg: Investigate, ctx: WorkflowContext[CaseSnapshot, RunOutcome]) -> None:
        case = await asyncio.to_thread(self._deps.cases.get, msg.case_id)
        if case is None:
            await ctx.yield_output(RunOutcome(msg.case_id, "ignored", detail="no such case"))
            return
        if case.status not in INVESTIGABLE:
            await ctx.yield_output(
                RunOutcome(
                    case.id,
                    "nothing_to_do",
                    status=case.status,
                    version=case.version,
                    detail=f"case is {case.status}; only open or needs_review cases are investigated",
                )
            )
            return
        # An effect whose outcome nobody knows yet may have happened: deciding again would act a second
        # time under a new key. Reconciliation (or a person) settles it first (rules R3, R4).
        effects = await asyncio.to_thread(self._deps.ledger.for_case, case.id)
        unsettled = [e for e in effects if e.status in OPEN_STATUSES or _done_but_uncommitted(e, case)]
        for effect in unsettled:
            if effect.status is EffectStatus.STARTED:
                age = await asyncio.to_thread(self._deps.ledger.age, effect)
                if age < self._deps.ledger.call_timeout:
                    # Mid-call in another attempt: look again when it has had its time (the caller
                    # reschedules; R3).
                    raise EffectInFlight(
                        key=effect.key,
                        case_id=effect.case_id,
                        action=effect.action,
                        retry_after=self._deps.ledger.call_timeout - age,
                    )
        if unsettled:
            effect = unsettled[0]
            detail = (
                f"effect {effect.action} ({effect.key[:12]}, decided on v{effect.case_version}) is "
                f"{effect.status.value}: it is settled before the case is decided again"
            )
            await ctx.yield_output(
                RunOutcome(case.id, "waiting_for_reconciliation", case.status, case.version, detail, effect.key)
            )
            return
        await ctx.send_message(CaseSnapshot(case.id, case.version, case.status, case.facts))

    @handler
    async def on_answer(self, msg: AnswerWithoutCheckpoint, ctx: WorkflowContext[RebuiltAnswer, RunOutcome]) -> None:
        case = await asyncio.to_thread(self._deps.cases.get, msg.case_id)
        pending = case.data.get("pendingApproval") if case is not None else None
        if case is None or not pending:
            await ctx.yield_output(_not_pending(msg.case_id, case, msg.answer))
            return
        await ctx.send_message(RebuiltAnswer(ApprovalRequest.from_json(pending), msg.answer))


class Propose(Executor):
    """Ask the proposer (rules or model), then validate the proposal against the facts."""

    def __init__(self, deps: WorkflowDeps, id: str = "propose") -> None:
        super().__init__(id=id)
        self._deps = deps

    @handler
    async def on_snapshot(self, snap: CaseSnapshot, ctx: WorkflowContext[Proposed]) -> None:
        proposer = self._deps.proposer
        try:
            facts = InvoiceFacts.from_dict(snap.facts)
            proposal = await proposer.propose(snap.case_id, facts, self._deps.rules)
            validate(proposal, case_id=snap.case_id, status=snap.status, facts=facts, rules=self._deps.rules)
        except InvalidProposal as exc:
            await ctx.send_message(Proposed(snap, "invalid", None, None, "", proposer.name, invalid_reason=exc.reason))
            return
        except (KeyError, ValueError) as exc:
            reason = f"the case's facts are incomplete: {exc}"
            await ctx.send_message(Proposed(snap, "invalid", None, None, "", proposer.name, invalid_reason=reason))
            return
        amount = str(proposal.amount) if proposal.amount is not None else None
        await ctx.send_message(
            Proposed(snap, proposal.action.value, amount, proposal.currency, proposal.rationale, proposer.name)
        )


class ApprovalGate(Executor):
    """Route the proposal; above the approval threshold, ask a person first (rule R6)."""

    def __init__(self, deps: WorkflowDeps, id: str = "approval-gate") -> None:
        super().__init__(id=id)
        self._deps = deps

    @handler
    async def on_proposed(self, p: Proposed, ctx: WorkflowContext[CommitOrder, RunOutcome]) -> None:
        snap = p.snapshot
        if p.invalid_reason is not None:
            reason = f"invalid proposal from {p.proposer}: {p.invalid_reason}"
            await ctx.send_message(CommitOrder(snap.case_id, snap.version, Status.NEEDS_REVIEW, reason))
        elif p.action == Action.APPROVE:
            await ctx.send_message(CommitOrder(snap.case_id, snap.version, Status.APPROVED, p.rationale))
        elif p.action == Action.NEEDS_REVIEW:
            await ctx.send_message(CommitOrder(snap.case_id, snap.version, Status.NEEDS_REVIEW, p.rationale))
        elif not needs_approval(_proposal_amount(p), self._deps.rules):
            order = CommitOrder(
                snap.case_id,
                snap.version,
                Status.CREDIT_REQUESTED,
                p.rationale,
                CREDIT_NOTE_ACTION,
                p.amount,
                p.currency,
            )
            await ctx.send_message(order)
        else:
            await self._ask(p, ctx)

    async def _ask(self, p: Proposed, ctx: WorkflowContext[CommitOrder, RunOutcome]) -> None:
        snap = p.snapshot
        asked_on = snap.version + 1  # the version the case will have while it waits: what the approver sees
        request = ApprovalRequest(
            case_id=snap.case_id,
            case_version=asked_on,
            request_id=approval_request_id(snap.case_id, p.action, asked_on),
            action=p.action,
            amount=p.amount or "0",
            currency=p.currency or "",
            facts=snap.facts,
            rationale=p.rationale,
        )
        cases = self._deps.cases
        committed = await asyncio.to_thread(
            cases.commit_status,
            snap.case_id,
            snap.version,
            Status.AWAITING_APPROVAL,
            reason=f"approval requested for {request.amount} {request.currency}",
            data={"pendingApproval": request.to_json()},
        )
        if not committed:
            case = await asyncio.to_thread(cases.require, snap.case_id)
            pending = case.data.get("pendingApproval") or {}
            if pending.get("requestId") != request.request_id or case.status != Status.AWAITING_APPROVAL:
                self._deps.telemetry.lost_commit("approval-gate")
                await ctx.yield_output(_superseded(case, f"case moved on from v{snap.version} before asking"))
                return
            # A replay after the commit: ask again with the same id; the framework dedupes nothing,
            # but the answer handler accepts only the pending request, once.
        await ctx.request_info(request, ApprovalAnswer, request_id=request.request_id)
        await ctx.yield_output(
            RunOutcome(
                snap.case_id,
                "awaiting_approval",
                status=Status.AWAITING_APPROVAL,
                version=asked_on,
                detail=f"approval {request.request_id} requested",
                extra={"requestId": request.request_id},
            )
        )

    @response_handler
    async def on_answer(
        self, original_request: ApprovalRequest, answer: ApprovalAnswer, ctx: WorkflowContext[CommitOrder, RunOutcome]
    ) -> None:
        await self._decide(original_request, answer, ctx)

    @handler
    async def on_rebuilt_answer(self, msg: RebuiltAnswer, ctx: WorkflowContext[CommitOrder, RunOutcome]) -> None:
        await self._decide(msg.request, msg.answer, ctx)

    async def _decide(
        self, request: ApprovalRequest, answer: ApprovalAnswer, ctx: WorkflowContext[CommitOrder, RunOutcome]
    ) -> None:
        # Re-read before doing anything: the answer may be days old (rule R6).
        case = await asyncio.to_thread(self._deps.cases.require, request.case_id)
        pending = case.data.get("pendingApproval") or {}
        extra = _answer_extra(answer)
        if case.status != Status.AWAITING_APPROVAL or pending.get("requestId") != answer.request_id:
            await ctx.yield_output(_not_pending(case.id, case, answer))
            return
        if answer.case_version != case.version or request.case_version != case.version:
            detail = f"answer given on v{answer.case_version}, case is at v{case.version}: nothing committed"
            await ctx.yield_output(RunOutcome(case.id, "stale_answer", case.status, case.version, detail, extra=extra))
            return
        who = answer.approver
        if answer.decision == "approve":
            order = CommitOrder(
                case.id,
                case.version,
                Status.CREDIT_REQUESTED,
                f"approved by {who}",
                CREDIT_NOTE_ACTION,
                request.amount,
                request.currency,
                clear_pending_approval=True,
            )
        else:
            order = CommitOrder(
                case.id, case.version, Status.NEEDS_REVIEW, f"rejected by {who}", clear_pending_approval=True
            )
        await ctx.send_message(order)


class Commit(Executor):
    """Run the effect through the ledger, then commit the status conditionally (rules R2-R5)."""

    def __init__(self, deps: WorkflowDeps, id: str = "commit") -> None:
        super().__init__(id=id)
        self._deps = deps

    @handler
    async def on_order(self, order: CommitOrder, ctx: WorkflowContext[Never, RunOutcome]) -> None:
        deps = self._deps
        data: dict[str, Any] = {"pendingApproval": None} if order.clear_pending_approval else {}
        key: str | None = None
        expected: Case | None = None
        target, reason = order.target_status, order.reason
        if order.action is not None:
            key = effect_key(order.case_id, order.action, order.decided_on_version)
            try:
                with deps.telemetry.span(
                    f"effect {order.action}",
                    {
                        "casekeeper.case_id": order.case_id,
                        "casekeeper.effect_key": key,
                        "casekeeper.case_version": order.decided_on_version,
                    },
                ):
                    outcome = await asyncio.to_thread(self._run_effect, order)
            except StaleDecision as exc:
                case = await asyncio.to_thread(deps.cases.require, order.case_id)
                await ctx.yield_output(_superseded(case, str(exc), effect_key=key))
                return
            except NeedsReconciliation as exc:
                case = await asyncio.to_thread(deps.cases.require, order.case_id)
                await ctx.yield_output(
                    RunOutcome(case.id, "waiting_for_reconciliation", case.status, case.version, exc.reason, key)
                )
                return
            except EffectFailed as exc:
                target, reason, outcome = Status.NEEDS_REVIEW, f"credit-note request refused: {exc.reason}", None
            if outcome is not None:
                expected = outcome.case
                data.update(credit_request_data(key, outcome.result, order.amount, order.currency))
        deps.probe("F5")
        with deps.telemetry.span(
            "commit_status",
            {
                "casekeeper.case_id": order.case_id,
                "casekeeper.case_version": order.decided_on_version,
                "casekeeper.status": target,
            },
        ) as span:
            committed = await asyncio.to_thread(
                deps.cases.commit_status,
                order.case_id,
                order.decided_on_version,
                target,
                reason=reason,
                effect_key=key,
                data=data,
                expected=expected,
            )
            span.set_attribute("casekeeper.committed", committed)
        deps.probe("F6")
        case = await asyncio.to_thread(deps.cases.require, order.case_id)
        if committed:
            await ctx.yield_output(RunOutcome(case.id, "committed", case.status, case.version, reason, key))
            return
        done = case.transition_from(order.decided_on_version)
        if done is not None and done.status == target and done.effect_key == key:
            detail = f"already committed: {target} on v{order.decided_on_version}"
            await ctx.yield_output(RunOutcome(case.id, "already_applied", case.status, case.version, detail, key))
            return
        deps.telemetry.lost_commit("commit")
        if key is not None:
            effect = await asyncio.to_thread(deps.ledger.get, order.case_id, key)
            if effect is not None and effect.status is EffectStatus.DONE:
                # The effect happened, but the case moved on before its commit: deciding again would act
                # a second time under a new key. A person looks instead (rule R4).
                reason = (
                    f"effect {effect.action} ({key[:12]}) happened on v{order.decided_on_version} but the case "
                    f"moved to v{case.version} before it was committed"
                )
                await asyncio.to_thread(deps.cases.escalate, order.case_id, Status.NEEDS_REVIEW, reason, effect_key=key)
                after = await asyncio.to_thread(deps.cases.require, order.case_id)
                await ctx.yield_output(RunOutcome(after.id, "needs_review", after.status, after.version, reason, key))
                return
        await ctx.yield_output(
            _superseded(case, f"another writer moved the case from v{order.decided_on_version}", key)
        )

    def _run_effect(self, order: CommitOrder) -> EffectOutcome:
        deps = self._deps
        case = deps.cases.require(order.case_id)
        facts = InvoiceFacts.from_dict(case.facts)
        amount = Decimal(order.amount or "0")
        currency = order.currency or facts.currency
        # Everything a reconciler needs to look the effect up, retry it with the same key, and finish
        # the status commit, without re-running the workflow.
        request = {
            "amount": str(amount),
            "currency": currency,
            "invoiceId": facts.invoice_id,
            "supplierId": facts.supplier_id,
            "commit": {
                "status": order.target_status,
                "reason": order.reason,
                "clearPendingApproval": order.clear_pending_approval,
            },
        }

        def call(key: str) -> dict[str, Any]:
            result: dict[str, Any] = deps.supplier.request_credit_note(
                key,
                case_id=order.case_id,
                invoice_id=facts.invoice_id,
                supplier_id=facts.supplier_id,
                amount=amount,
                currency=currency,
            )
            return result

        return deps.ledger.run(
            case_id=order.case_id,
            action=order.action or CREDIT_NOTE_ACTION,
            decided_on_version=order.decided_on_version,
            call=call,
            request=request,
        )


def _proposal_amount(p: Proposed) -> Proposal:
    return Proposal(Action(p.action), amount=Decimal(p.amount) if p.amount else None, currency=p.currency)


def _done_but_uncommitted(effect: Effect, case: Case) -> bool:
    """A ``done`` effect that no transition of the case records: its commit has not landed (yet).

    Effects older than the case's (bounded) history are taken as settled: their transitions are gone.
    """
    if effect.status is not EffectStatus.DONE:
        return False
    if case.history and effect.case_version < case.history[0].from_version:
        return False
    return not any(t.effect_key == effect.key for t in case.history)


def _superseded(case: Case, detail: str, effect_key: str | None = None) -> RunOutcome:
    return RunOutcome(case.id, "superseded", case.status, case.version, detail, effect_key)


def _not_pending(case_id: str, case: Case | None, answer: ApprovalAnswer) -> RunOutcome:
    where = f"case is {case.status} at v{case.version}" if case is not None else "no such case"
    pending = (case.data.get("pendingApproval") or {}).get("requestId") if case is not None else None
    now = f"the pending request is {pending}" if pending else "no approval is pending"
    detail = f"approval {answer.request_id} is not pending ({now}; {where}): nothing changed"
    status, version = (case.status, case.version) if case is not None else (None, None)
    return RunOutcome(case_id, "ignored", status, version, detail, extra=_answer_extra(answer))


def _answer_extra(answer: ApprovalAnswer) -> dict[str, Any]:
    return {"requestId": answer.request_id, "decision": answer.decision, "approver": answer.approver}
