"""The entry point: :meth:`CaseWorker.handle` handles one case event. The case worker function (a
Service Bus session trigger, one case at a time) and the local host both call it.

What it does with an event:

1. If the case's newest checkpoint is of a run that stopped mid-superstep (the process died), that
   run is resumed first, if this build can resume it; otherwise it is noted as rebuilt (R8) and the
   event below rebuilds the decision from the case document (R9).
2. Fact events (``invoice.received``, ``po.updated``, ``credit_note.issued``) change the case with a
   conditional write; then the case is investigated if its status asks for it.
3. ``approval.answered`` resumes the paused run with the answer, or rebuilds it without the
   checkpoint; the gate re-reads the case either way (R6).
4. An investigation that lost a race (``superseded``) re-reads and decides again, a bounded number
   of times.

Errors are the settlement signal (see ``shared.core.errors``): ``EffectInFlight`` (schedule a
re-check), ``InvalidEvent`` (set aside), any error whose ``retryable`` is set (retried with backoff).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_framework import Workflow

from shared.core.cases import Case
from shared.core.errors import CaseNotFound, ConcurrencyConflict, EffectInFlight, InvalidEvent
from shared.core.ports import DocumentStore
from shared.domain import events as ev
from shared.domain import transitions
from shared.domain.credit import CreditRequest
from shared.domain.invoice import INVESTIGABLE, InvoiceFacts, parse_amount
from shared.domain.transitions import FactPlan
from shared.workflow.actions import credit_requests
from shared.workflow.build import WORKFLOW_NAME, build_workflow
from shared.workflow.capture import capturing
from shared.workflow.checkpoints import (
    MAX_DOCUMENT_BYTES,
    CaseCheckpointStorage,
    CheckpointRecord,
    CheckpointUnusable,
)
from shared.workflow.executors import WorkflowDeps
from shared.workflow.messages import (
    ALLOWED_CHECKPOINT_TYPES,
    AnswerWithoutCheckpoint,
    ApprovalAnswer,
    Investigate,
    RunOutcome,
)

log = logging.getLogger("casekeeper.worker")

MAX_REDECISIONS = 3
MAX_FACT_RETRIES = 8
FACT_EVENTS = frozenset({ev.INVOICE_RECEIVED, ev.PO_UPDATED, ev.CREDIT_NOTE_ISSUED, ev.REQUEST_WITHDRAWN})
"""Events that record facts before they decide: their facts are written in arrival order, whatever waits."""
CHECKPOINTS_KEPT = 20


@dataclass(frozen=True)
class EventResult:
    """What handling one event did: one log line, and the body of a test's assertions."""

    case_id: str
    event_type: str
    outcome: str
    status: str | None
    version: int | None
    detail: str = ""
    steps: tuple[RunOutcome, ...] = field(default=())

    def log_fields(self) -> dict[str, Any]:
        return {
            "caseId": self.case_id,
            "eventType": self.event_type,
            "outcome": self.outcome,
            "status": self.status,
            "version": self.version,
        }


class CaseWorker:
    """Runs the invoice-review workflow for one event at a time, per case."""

    def __init__(
        self,
        deps: WorkflowDeps,
        store: DocumentStore,
        *,
        build: Callable[[WorkflowDeps], Workflow] = build_workflow,
        checkpoints_kept: int = CHECKPOINTS_KEPT,
        allowed_checkpoint_types: frozenset[str] = ALLOWED_CHECKPOINT_TYPES,
        checkpoint_max_bytes: int = MAX_DOCUMENT_BYTES,
    ) -> None:
        self._deps = deps
        self._allowed_types = allowed_checkpoint_types
        self._checkpoint_max_bytes = checkpoint_max_bytes
        self._store = store
        self._build = build
        self._checkpoints_kept = checkpoints_kept
        # The running build's graph hash, compared with a checkpoint's before resuming it.
        self.graph_hash: str = build(deps).graph_signature_hash

    async def handle(self, event: ev.CaseEvent) -> EventResult:
        with capturing(event.case_id, WORKFLOW_NAME):
            steps: list[RunOutcome] = []
            handler = self._handlers().get(event.type)
            if handler is None:
                raise InvalidEvent(f"unknown event type {event.type!r}", case_id=event.case_id)
            try:
                resumed = await self._finish_interrupted_run(event.case_id)
            except EffectInFlight as waiting:
                if event.type not in FACT_EVENTS:
                    raise
                # A fact is recorded when it arrives, in the session's order, even while an interrupted
                # run's call is in flight; only the decision waits. Deferring the whole event instead would
                # let events that arrive after the call's timeout overtake it (the stale PO would win).
                await self._record_then_wait(handler, event)
                raise waiting.after_facts() from None
            if resumed is not None:
                steps.append(resumed)
            if event.type in FACT_EVENTS:
                steps.extend(await self._record_then_wait(handler, event))
            else:
                steps.extend(await handler(event))
        last = steps[-1]
        result = EventResult(
            event.case_id, event.type, last.outcome, last.status, last.version, last.detail, tuple(steps)
        )
        log.debug(
            "case %s: %s -> %s (%s v%s)",
            result.case_id,
            result.event_type,
            result.outcome,
            result.status,
            result.version,
            extra=result.log_fields(),
        )
        return result

    async def _record_then_wait(self, handler: Callable[[ev.CaseEvent], Any], event: ev.CaseEvent) -> list[RunOutcome]:
        """Run a fact event's handler; a wait for an effect in flight raised after its facts were written
        says so, so that the copy the queue brings back only decides."""
        try:
            steps: list[RunOutcome] = await handler(event)
        except EffectInFlight as waiting:
            raise waiting.after_facts() from None
        return steps

    def _handlers(self) -> Mapping[str, Callable[[ev.CaseEvent], Any]]:
        return {
            ev.INVOICE_RECEIVED: self._invoice_received,
            ev.PO_UPDATED: self._po_updated,
            ev.CREDIT_NOTE_ISSUED: self._credit_note_issued,
            ev.CASE_INVESTIGATE: self._case_investigate,
            ev.APPROVAL_ANSWERED: self._approval_answered,
            ev.REQUEST_WITHDRAWN: self._request_withdrawn,
        }

    # --- fact events ---------------------------------------------------------------------------

    async def _invoice_received(self, event: ev.CaseEvent) -> list[RunOutcome]:
        data = event.data
        facts = InvoiceFacts(
            invoice_id=data["invoiceId"],
            supplier_id=data["supplierId"],
            po_number=data["poNumber"],
            invoice_amount=parse_amount(data["invoiceAmount"], "invoiceAmount"),
            po_amount=parse_amount(data["poAmount"], "poAmount"),
            currency=data["currency"],
        )
        cases = self._deps.cases
        case, created = await asyncio.to_thread(cases.create_if_absent, event.case_id, facts.to_dict())
        if not created:
            known = InvoiceFacts.from_dict(case.facts)
            if (known.invoice_id, known.invoice_amount, known.currency) != (
                facts.invoice_id,
                facts.invoice_amount,
                facts.currency,
            ):
                raise InvalidEvent(
                    f"case {event.case_id} already exists for invoice {known.invoice_id} "
                    f"({known.invoice_amount} {known.currency}); this event describes another invoice",
                    case_id=event.case_id,
                )
        return await self._investigate(event.case_id, "invoice received")

    async def _po_updated(self, event: ev.CaseEvent) -> list[RunOutcome]:
        po_amount = parse_amount(event.data["poAmount"], "poAmount")

        def plan(case: Case, requests: tuple[CreditRequest, ...]) -> FactPlan:
            return transitions.po_updated(case.status, InvoiceFacts.from_dict(case.facts), po_amount)

        return await self._apply_facts(event.case_id, plan, ev.PO_UPDATED, needs_requests=False)

    async def _credit_note_issued(self, event: ev.CaseEvent) -> list[RunOutcome]:
        credit_id = str(event.data["creditNoteId"])
        amount = parse_amount(event.data["amount"], "amount")
        rules = self._deps.rules

        def plan(case: Case, requests: tuple[CreditRequest, ...]) -> FactPlan:
            facts = InvoiceFacts.from_dict(case.facts)
            return transitions.credit_note_issued(
                case.status, facts, credit_note_id=credit_id, amount=amount, requests=requests, rules=rules
            )

        return await self._apply_facts(event.case_id, plan, ev.CREDIT_NOTE_ISSUED, needs_requests=True)

    async def _request_withdrawn(self, event: ev.CaseEvent) -> list[RunOutcome]:
        """A person takes an outstanding credit-note request off the books (recorded with who and why)."""
        d = event.data
        key, by, why, at = str(d["effectKey"]), str(d["by"]), str(d["why"]), float(d["at"])

        def plan(case: Case, requests: tuple[CreditRequest, ...]) -> FactPlan:
            facts = InvoiceFacts.from_dict(case.facts)
            try:
                return transitions.request_withdrawn(
                    case.status, facts, requests, effect_key=key, by=by, why=why, at=at
                )
            except transitions.NotWithdrawable as exc:
                raise InvalidEvent(str(exc), case_id=case.id, fields={"effectKey": str(exc)}) from exc

        return await self._apply_facts(event.case_id, plan, ev.REQUEST_WITHDRAWN, needs_requests=True)

    async def _apply_facts(
        self,
        case_id: str,
        plan: Callable[[Case, tuple[CreditRequest, ...]], FactPlan],
        event_type: str,
        *,
        needs_requests: bool,
    ) -> list[RunOutcome]:
        """Apply ``plan`` (a rule of ``shared.domain.transitions``) with a conditional write, re-planning on
        a lost race; then decide again if it says so. A change withdraws a pending approval: it was asked on
        facts that no longer hold. Facts already recorded (a redelivery) still get their follow-up: the
        first delivery may have died between writing them and deciding."""
        cases, ledger = self._deps.cases, self._deps.ledger
        for _ in range(MAX_FACT_RETRIES):
            case = await asyncio.to_thread(self._require, case_id)
            requests = credit_requests(await asyncio.to_thread(ledger.for_case, case_id)) if needs_requests else ()
            planned = plan(case, requests)
            if not planned.changes:
                unchanged = RunOutcome(case_id, "nothing_to_do", case.status, case.version, planned.reason)
                if not planned.investigate:
                    return [unchanged]
                return [unchanged, *await self._investigate(case_id, f"{event_type} (facts already recorded)")]
            data = {"pendingApproval": None} if case.data.get("pendingApproval") else None
            after = await asyncio.to_thread(
                cases.update_facts,
                case_id,
                case.version,
                planned.changes,
                reason=f"{event_type}: {planned.reason}",
                new_status=planned.new_status,
                data=data,
                expected=case,
            )
            if after is not None:
                changed = RunOutcome(case_id, "facts_changed", after.status, after.version, planned.reason)
                if not planned.investigate or after.status not in INVESTIGABLE:
                    return [changed]
                return [changed, *await self._investigate(case_id, event_type)]
        raise ConcurrencyConflict(f"case {case_id} kept changing while applying {event_type}", doc_id=case_id)

    # --- investigation and approvals ---------------------------------------------------------------

    async def _case_investigate(self, event: ev.CaseEvent) -> list[RunOutcome]:
        await asyncio.to_thread(self._require, event.case_id)
        return await self._investigate(event.case_id, "investigation requested")

    async def _investigate_if_open(self, case_id: str, reason: str) -> list[RunOutcome]:  # approvals
        case = await asyncio.to_thread(self._require, case_id)
        if case.status not in INVESTIGABLE:
            return []
        return await self._investigate(case_id, reason)

    async def _investigate(self, case_id: str, reason: str) -> list[RunOutcome]:
        steps: list[RunOutcome] = []
        for _ in range(MAX_REDECISIONS):
            outcome = await self._run(case_id, message=Investigate(case_id, reason))
            steps.append(outcome)
            if outcome.outcome != "superseded":
                return steps
            reason = f"re-decided after: {outcome.detail}"
        return steps

    async def _approval_answered(self, event: ev.CaseEvent) -> list[RunOutcome]:
        d = event.data
        answer = ApprovalAnswer(d["requestId"], d["decision"], int(d["caseVersion"]), d["approver"], d.get("reason"))
        storage = self._checkpoints(event.case_id)
        record = await asyncio.to_thread(storage.latest_record, WORKFLOW_NAME)
        outcome: RunOutcome | None = None
        if record is not None and answer.request_id in record.pending_request_ids:
            try:
                await asyncio.to_thread(self._check_resumable, storage, record)
                outcome = await self._run(
                    event.case_id, checkpoint_id=record.checkpoint_id, responses={answer.request_id: answer}
                )
            except CheckpointUnusable as exc:
                await self._note_rebuilt(event.case_id, exc)
        if outcome is None:
            outcome = await self._run(event.case_id, message=AnswerWithoutCheckpoint(event.case_id, answer))
        steps = [outcome]
        if outcome.outcome == "stale_answer":
            steps.extend(await self._investigate_if_open(event.case_id, "approval answered on an older version"))
        return steps

    # --- running the workflow ------------------------------------------------------------------

    def _checkpoints(self, case_id: str) -> CaseCheckpointStorage:
        return CaseCheckpointStorage(
            self._store, case_id, self._allowed_types, max_document_bytes=self._checkpoint_max_bytes
        )

    def _check_resumable(self, storage: CaseCheckpointStorage, record: CheckpointRecord) -> None:
        """Raises ``CheckpointUnusable`` unless this build can restore ``record``."""
        storage.try_decode(record, expected_graph_hash=self.graph_hash)

    async def _finish_interrupted_run(self, case_id: str) -> RunOutcome | None:
        """Resume a run that died mid-superstep, so its decision is not lost (and its model calls are
        not repeated). Its effects and commits are idempotent, so replaying the superstep is safe.

        A finished run's last checkpoint holds no pending messages; a paused one holds only pending
        requests (answered by ``approval.answered``). Anything else was interrupted.
        """
        storage = self._checkpoints(case_id)
        record = await asyncio.to_thread(storage.latest_record, WORKFLOW_NAME)
        if record is None or record.pending_request_ids:
            return None
        try:
            checkpoint = await asyncio.to_thread(storage.try_decode, record)
        except CheckpointUnusable as exc:
            await self._note_rebuilt(case_id, exc)
            return None
        if not any(checkpoint.messages.values()):
            return None
        if checkpoint.graph_signature_hash != self.graph_hash:
            reason = "the workflow graph changed since this checkpoint was saved"
            await self._note_rebuilt(
                case_id,
                CheckpointUnusable(reason, case_id=case_id, checkpoint_id=record.checkpoint_id, kind="graph_changed"),
            )
            return None
        log.info(
            "case %s: resuming interrupted run from checkpoint %s",
            case_id,
            record.checkpoint_id,
            extra={"caseId": case_id, "checkpointId": record.checkpoint_id},
        )
        return await self._run(case_id, checkpoint_id=record.checkpoint_id)

    async def _note_rebuilt(self, case_id: str, exc: CheckpointUnusable) -> None:
        """Say on the case that its run is rebuilt from the case document (rule R8), once per checkpoint."""
        log.warning(
            "case %s: checkpoint %s unusable (%s); rebuilding from the case document",
            case_id,
            exc.checkpoint_id,
            exc.reason,
            extra={"caseId": case_id, "checkpointId": exc.checkpoint_id},
        )
        case = await asyncio.to_thread(self._deps.cases.get, case_id)
        if case is None or any(n.get("checkpointId") == exc.checkpoint_id for n in case.notes):
            return
        await asyncio.to_thread(
            self._deps.cases.note,
            case_id,
            "run rebuilt from the case document",
            reason=exc.reason,
            checkpointId=exc.checkpoint_id,
            kind=exc.kind,
        )

    async def _run(
        self,
        case_id: str,
        *,
        message: object | None = None,
        checkpoint_id: str | None = None,
        responses: dict[str, Any] | None = None,
    ) -> RunOutcome:
        storage = self._checkpoints(case_id)
        workflow = self._build(self._deps)
        attributes = {
            "casekeeper.case_id": case_id,
            "casekeeper.resumed_from": checkpoint_id,
            "casekeeper.message": type(message).__name__ if message is not None else None,
        }
        with self._deps.telemetry.span("workflow.run", attributes):
            if message is not None:
                result = await workflow.run(message, checkpoint_storage=storage)
            else:
                result = await workflow.run(
                    checkpoint_id=checkpoint_id, responses=responses, checkpoint_storage=storage
                )
        outputs = [o for o in result.get_outputs() if isinstance(o, RunOutcome)]
        await asyncio.to_thread(storage.prune, self._checkpoints_kept)
        if not outputs:
            case = await asyncio.to_thread(self._deps.cases.get, case_id)
            return RunOutcome(
                case_id,
                "nothing_to_do",
                case.status if case else None,
                case.version if case else None,
                f"run ended {result.get_final_state().value} without an outcome",
            )
        return outputs[-1]

    def _require(self, case_id: str) -> Case:
        try:
            return self._deps.cases.require(case_id)
        except CaseNotFound as exc:
            raise InvalidEvent(f"unknown case {case_id!r}", case_id=case_id) from exc
