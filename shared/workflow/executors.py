"""The invoice-review workflow's executors: intake -> propose -> approval gate -> commit.

The model proposes, code commits. Every executor may be replayed after a crash (a resume replays the
whole superstep that was running), so each one is written to be safe to run twice:

- intake only reads (and waits while an earlier effect's outcome is unknown);
- propose only reads;
- the gate's "awaiting approval" commit is conditional on the version, and a replay that finds it
  already applied asks again with the same deterministic request id;
- commit runs its effect through the ledger (a replay gets the recorded result) and its status
  change is conditional (a replay finds it already applied).

Store and supplier calls are synchronous; they run in a thread so that the Functions worker's event
loop keeps serving other sessions meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Never

from agent_framework import Executor, WorkflowContext, handler, response_handler

from casekeeper import (
    Answer,
    Case,
    EffectFailed,
    EffectResult,
    NeedsReconciliation,
    StaleDecision,
    approval_request_id,
    asked_on,
    effect_key,
)
from shared.domain.credit import CreditRequest, needs_approval, position, status_for, validate
from shared.domain.invoice import INVESTIGABLE, Action, InvoiceFacts, Proposal, Status
from shared.domain.money import parse_amount
from shared.errors import InvalidProposal
from shared.workflow.actions import REQUEST_CREDIT_NOTE, CreditNoteCall, credit_requests
from shared.workflow.approval import pending_request
from shared.workflow.deps import WorkflowDeps
from shared.workflow.messages import (
    PENDING_APPROVAL,
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
from shared.workflow.unsettled import settle_first


class Intake(Executor):
    """Load the case and its effects; stop early when there is nothing to decide, or nothing safe to."""

    def __init__(self, deps: WorkflowDeps, id: str = "intake") -> None:
        super().__init__(id=id)
        self._deps = deps

    @handler
    async def on_investigate(self, msg: Investigate, ctx: WorkflowContext[CaseSnapshot, RunOutcome]) -> None:
        deps = self._deps
        known = deps.known_case
        case = known if known is not None and known.id == msg.case_id else None
        if case is None:
            case = await asyncio.to_thread(deps.cases.get, msg.case_id)
        if case is None:
            await ctx.yield_output(RunOutcome(msg.case_id, "ignored", detail="no such case"))
            return
        if case.status not in INVESTIGABLE:
            await ctx.yield_output(_not_investigable(case))
            return
        # A case this event created has no effects yet: its ledger is not read.
        effects = [] if case is known and deps.new_case else await asyncio.to_thread(deps.ledger.effects_for, case)
        stop = await settle_first(deps, case, effects)
        if stop is not None:
            await ctx.yield_output(stop)
            return
        requests = [r.to_json() for r in credit_requests(effects)]
        await ctx.send_message(CaseSnapshot(case.id, case.version, case.status, case.facts, requests))

    @handler
    async def on_answer(self, msg: AnswerWithoutCheckpoint, ctx: WorkflowContext[RebuiltAnswer, RunOutcome]) -> None:
        case = await asyncio.to_thread(self._deps.cases.get, msg.case_id)
        # Read as the type this build's gate makes (a release may have changed it, rule R8).
        pending = pending_request(case, ApprovalRequest) if case is not None else None
        if case is None or pending is None:
            await ctx.yield_output(_not_pending(msg.case_id, case, msg.answer))
            return
        await ctx.send_message(RebuiltAnswer(pending, msg.answer))


class Propose(Executor):
    """Ask the proposer (rules or model), then validate the proposal against the money rule."""

    def __init__(self, deps: WorkflowDeps, id: str = "propose") -> None:
        super().__init__(id=id)
        self._deps = deps

    @handler
    async def on_snapshot(self, snap: CaseSnapshot, ctx: WorkflowContext[Proposed]) -> None:
        proposer, rules = self._deps.proposer, self._deps.rules
        try:
            facts = InvoiceFacts.from_dict(snap.facts)
            pos = position(facts, [CreditRequest.from_json(r) for r in snap.requests])
        except (KeyError, ValueError) as exc:
            reason = f"the case's facts are incomplete: {exc}"
            await ctx.send_message(
                Proposed(
                    snap, "invalid", None, None, "", proposer.name, invalid_reason=reason, proposed_by=proposer.label
                )
            )
            return
        basis = pos.to_json()
        try:
            attributes = {"casekeeper.proposer": proposer.name, "casekeeper.case_id": snap.case_id}
            with self._deps.telemetry.span("propose", attributes):
                proposal = await proposer.propose(snap.case_id, facts, pos, rules)
            validate(proposal, case_id=snap.case_id, status=snap.status, pos=pos, rules=rules)
        except InvalidProposal as exc:
            invalid = Proposed(
                snap,
                "invalid",
                None,
                None,
                "",
                proposer.name,
                invalid_reason=exc.reason,
                basis=basis,
                proposed_by=proposer.label,
            )
            await ctx.send_message(invalid)
            return
        await ctx.send_message(
            Proposed(
                snap,
                proposal.action.value,
                proposal.amount,
                proposal.currency,
                proposal.rationale,
                proposer.name,
                basis=basis,
                proposed_by=proposer.label,
            )
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
            order = CommitOrder(snap.case_id, snap.version, Status.NEEDS_REVIEW, reason, proposed_by=p.proposed_by)
            await ctx.send_message(order)
            return
        action = Action(p.action)
        if action is not Action.REQUEST_CREDIT_NOTE:
            order = CommitOrder(snap.case_id, snap.version, status_for(action), p.rationale, proposed_by=p.proposed_by)
            await ctx.send_message(order)
        elif (asked := _asked(p.basis)) is None or needs_approval(
            Proposal(action, amount=p.amount, currency=p.currency), self._deps.rules, asked=asked
        ):
            await self._ask(p, ctx)
        else:
            # The proposer's step parsed these facts (and would have sent an invalid proposal had they not
            # parsed); the order needs three of their strings, read without parsing them again.
            await ctx.send_message(
                _credit_order(
                    snap.case_id,
                    snap.version,
                    snap.facts,
                    p.amount,
                    p.rationale,
                    basis=p.basis,
                    proposed_by=p.proposed_by,
                )
            )

    async def _ask(self, p: Proposed, ctx: WorkflowContext[CommitOrder, RunOutcome]) -> None:
        snap = p.snapshot
        on = asked_on(snap.version)  # the version the case will have while it waits: what the approver sees
        request = ApprovalRequest(
            case_id=snap.case_id,
            case_version=on,
            request_id=approval_request_id(snap.case_id, p.action, on),
            action=p.action,
            amount=p.amount or Decimal("0"),
            currency=p.currency or "",
            facts=snap.facts,
            rationale=p.rationale,
            basis=p.basis,
        )
        cases = self._deps.cases
        committed = await asyncio.to_thread(
            cases.commit_status,
            snap.case_id,
            snap.version,
            Status.AWAITING_APPROVAL,
            reason=f"approval requested for {request.amount} {request.currency}",
            data={PENDING_APPROVAL: request.to_json()},
            proposed_by=p.proposed_by,
        )
        if committed is None:
            case = await asyncio.to_thread(cases.require, snap.case_id)
            pending = pending_request(case)
            if pending is None or pending.request_id != request.request_id or case.status != Status.AWAITING_APPROVAL:
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
                version=on,
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
        # Decide on the case as it is now, never as the answer saw it: the answer may be days old (rule R6).
        # The case this event read before resuming is that (every commit below is conditional on its
        # version); otherwise it is read here.
        deps = self._deps
        known = deps.known_case
        case = known if known is not None and known.id == request.case_id else None
        if case is None:
            case = await asyncio.to_thread(deps.cases.require, request.case_id)
        pending = pending_request(case)
        extra = _answer_extra(answer)
        if case.status != Status.AWAITING_APPROVAL or pending is None or pending.request_id != answer.request_id:
            await ctx.yield_output(_not_pending(case.id, case, answer))
            return
        if answer.case_version != case.version or request.case_version != case.version:
            detail = f"answer given on v{answer.case_version}, case is at v{case.version}: nothing committed"
            await ctx.yield_output(RunOutcome(case.id, "stale_answer", case.status, case.version, detail, extra=extra))
            return
        # An answer never commits while an effect of the case is unsettled: an approved call whose reply was
        # lost is still this request's answer, and a second answer (a rejection) must not commit past it.
        # In flight: raises EffectInFlight, and the answer comes back later; unknown: waits for reconciliation.
        effects = await asyncio.to_thread(deps.ledger.effects_for, case)
        stop = await settle_first(deps, case, effects)
        if stop is not None:
            await ctx.yield_output(stop)
            return
        who = answer.approver
        # Who decided what, on which version: a field of the transition the order commits, never prose to
        # parse back (the reasons below are for people).
        answered = Answer(answer.request_id, answer.decision == "approve", who, answer.case_version, answer.reason)
        if not answered.approved:
            why = f" (reason: {answer.reason})" if answer.reason else ""
            order = CommitOrder(
                case.id,
                case.version,
                Status.NEEDS_REVIEW,
                f"rejected by {who}{why}",
                clear_pending_approval=True,
                answer=answered.to_json(),
            )
            await ctx.send_message(order)
            return
        # The money rule once more, on the case as it is now: the approver saw these facts, but a request
        # must never exceed what may still be requested at the version it is made on.
        facts = InvoiceFacts.from_dict(case.facts)
        # This answer's own request, if a run of it already claimed it (a crash after the claim, then this
        # answer redelivered), is not an earlier request to subtract: it is this one, and the ledger replays
        # it (in flight, reconciled, or done) when the order reaches it. Counting it would send an approved,
        # already-made request to review as exceeding itself.
        own = effect_key(case.id, REQUEST_CREDIT_NOTE, case.version)
        pos = position(facts, credit_requests([e for e in effects if e.key != own]))
        if request.amount > pos.remaining:
            reason = f"approved by {who}, but {request.amount} exceeds what may still be requested ({pos.remaining})"
            await ctx.send_message(
                CommitOrder(
                    case.id,
                    case.version,
                    Status.NEEDS_REVIEW,
                    reason,
                    clear_pending_approval=True,
                    answer=answered.to_json(),
                )
            )
            return
        order = _credit_order(
            case.id, case.version, facts, request.amount, f"approved by {who}", basis=pos.to_json(), answer=answered
        )
        await ctx.send_message(order)


class Commit(Executor):
    """Run the effect through the ledger, then commit the status conditionally (rules R2-R5)."""

    def __init__(self, deps: WorkflowDeps, id: str = "commit") -> None:
        super().__init__(id=id)
        self._deps = deps

    @handler
    async def on_order(self, order: CommitOrder, ctx: WorkflowContext[Never, RunOutcome]) -> None:
        if order.action is None:
            await ctx.yield_output(await self._commit(order))
            return
        deps = self._deps
        try:
            # The guard traces the call (``effect <action>``) and the commit after it (``commit_status``).
            done = await asyncio.to_thread(self._run_effect, order)
        except StaleDecision as exc:
            case = await asyncio.to_thread(deps.cases.require, order.case_id)
            await ctx.yield_output(_superseded(case, str(exc), effect_key=exc.key))
            return
        except NeedsReconciliation as exc:
            case = await asyncio.to_thread(deps.cases.require, order.case_id)
            await ctx.yield_output(
                RunOutcome(case.id, "waiting_for_reconciliation", case.status, case.version, exc.reason, exc.key)
            )
            return
        except EffectFailed as exc:
            refused = CommitOrder(
                order.case_id,
                order.decided_on_version,
                Status.NEEDS_REVIEW,
                f"credit-note request refused: {exc.reason}",
                clear_pending_approval=order.clear_pending_approval,
                answer=order.answer,
            )
            await ctx.yield_output(await self._commit(refused, effect_key=exc.key))
            return
        await ctx.yield_output(await self._outcome(order, done))

    def _run_effect(self, order: CommitOrder) -> EffectResult:
        """The credit-note request through the guard: at most once per decision, only while the case is at
        the decided-on version, then its commit (the guard calls the probe at F5 and F6)."""
        assert order.amount is not None and order.invoice_id and order.supplier_id and order.currency
        call = CreditNoteCall(order.case_id, order.invoice_id, order.supplier_id, order.amount, order.currency)
        _, credit_note = self._deps.guarded
        return credit_note.run_on(
            order.case_id,
            order.decided_on_version,
            call.args(basis=order.basis),
            reason=order.reason,
            proposed_by=order.proposed_by,
            answer=Answer.from_json(order.answer) if order.answer else None,
            # Read by the commit data (and a person's resolution): the commit withdraws the pending request.
            commit_fields={"clearPendingApproval": order.clear_pending_approval},
            case=self._deps.known_case,
        )

    async def _outcome(self, order: CommitOrder, done: EffectResult) -> RunOutcome:
        case = done.case
        if case is None:
            case = await asyncio.to_thread(self._deps.cases.require, order.case_id)
        if done.commit == "committed":
            return RunOutcome(case.id, "committed", case.status, case.version, order.reason, done.key)
        if done.commit == "already":
            detail = f"already committed: {order.target_status} on v{order.decided_on_version}"
            return RunOutcome(case.id, "already_applied", case.status, case.version, detail, done.key)
        self._deps.telemetry.lost_commit("commit")
        detail = f"effect {done.key[:12]} happened on v{order.decided_on_version}; the case moved on: a person decides"
        return RunOutcome(case.id, "needs_review", case.status, case.version, detail, done.key)

    async def _commit(self, order: CommitOrder, *, effect_key: str | None = None) -> RunOutcome:
        """A status change without an effect (or after a refused one), conditional on the version."""
        deps = self._deps
        data = {PENDING_APPROVAL: None} if order.clear_pending_approval else {}
        attributes = {"casekeeper.case_id": order.case_id, "casekeeper.case_version": order.decided_on_version}
        with deps.telemetry.span("commit_status", attributes) as span:
            committed = await asyncio.to_thread(
                deps.cases.commit_status,
                order.case_id,
                order.decided_on_version,
                order.target_status,
                reason=order.reason,
                effect_key=effect_key,
                data=data,
                proposed_by=order.proposed_by,
                answer=Answer.from_json(order.answer) if order.answer else None,
            )
            span.set_attribute("casekeeper.committed", "committed" if committed is not None else "lost")
        if committed is not None:
            return RunOutcome(committed.id, "committed", committed.status, committed.version, order.reason, effect_key)
        case = await asyncio.to_thread(deps.cases.require, order.case_id)
        done = case.transition_from(order.decided_on_version)
        if done is not None and done.status == order.target_status and done.effect_key == effect_key:
            detail = f"already committed: {order.target_status} on v{order.decided_on_version}"
            return RunOutcome(case.id, "already_applied", case.status, case.version, detail, effect_key)
        deps.telemetry.lost_commit("commit")
        return _superseded(case, f"another writer moved the case from v{order.decided_on_version}", effect_key)


def _credit_order(
    case_id: str,
    version: int,
    facts: InvoiceFacts | Mapping[str, Any],
    amount: Decimal | None,
    reason: str,
    *,
    basis: dict[str, Any],
    answer: Answer | None = None,
    proposed_by: str | None = None,
) -> CommitOrder:
    """The credit-note order; ``facts`` parsed, or the case's facts as stored (only three strings are read)."""
    if isinstance(facts, InvoiceFacts):
        currency, invoice_id, supplier_id = facts.currency, facts.invoice_id, facts.supplier_id
    else:
        currency, invoice_id, supplier_id = str(facts["currency"]), str(facts["invoiceId"]), str(facts["supplierId"])
    return CommitOrder(
        case_id,
        version,
        Status.CREDIT_REQUESTED,
        reason,
        REQUEST_CREDIT_NOTE,
        amount,
        currency,
        clear_pending_approval=answer is not None,
        invoice_id=invoice_id,
        supplier_id=supplier_id,
        basis=basis,
        proposed_by=proposed_by,
        answer=answer.to_json() if answer is not None else None,
    )


def _not_investigable(case: Case) -> RunOutcome:
    detail = f"case is {case.status}; only open or needs_review cases are investigated"
    return RunOutcome(case.id, "nothing_to_do", status=case.status, version=case.version, detail=detail)


def _superseded(case: Case, detail: str, effect_key: str | None = None) -> RunOutcome:
    return RunOutcome(case.id, "superseded", case.status, case.version, detail, effect_key)


def _not_pending(case_id: str, case: Case | None, answer: ApprovalAnswer) -> RunOutcome:
    where = f"case is {case.status} at v{case.version}" if case is not None else "no such case"
    pending = pending_request(case) if case is not None else None
    now = f"the pending request is {pending.request_id}" if pending else "no approval is pending"
    detail = f"approval {answer.request_id} is not pending ({now}; {where}): nothing changed"
    status, version = (case.status, case.version) if case is not None else (None, None)
    return RunOutcome(case_id, "ignored", status, version, detail, extra=_answer_extra(answer))


def _answer_extra(answer: ApprovalAnswer) -> dict[str, Any]:
    extra = {"requestId": answer.request_id, "decision": answer.decision, "approver": answer.approver}
    if answer.reason:
        extra["reason"] = answer.reason
    return extra


def _asked(basis: dict[str, Any] | None) -> Decimal | None:
    """The case's total asked before this proposal (``asked`` of the money rule's numbers the proposal was
    validated against): what the cumulative approval threshold adds the proposal to. ``None`` when the
    numbers do not say: then a person is asked, never the threshold skipped."""
    if not basis or basis.get("asked") is None:
        return None
    return parse_amount(basis["asked"], "asked")
