"""The entry point: :meth:`CaseWorker.handle` handles one case event. The case worker function (a
Service Bus session trigger, one case at a time) and the local host both call it.

What it does with an event:

1. If the case's newest checkpoint is of a run that stopped mid-superstep (the process died), that
   run is resumed first, if this build can resume it; otherwise it is noted as rebuilt (R8) and the
   event below rebuilds the decision from the case document (R9). ``invoice.received`` looks only once it
   knows the case existed: a case the event created holds no checkpoint, and none is read.
2. Fact events (``invoice.received``, ``po.updated``, ``credit_note.issued``) change the case with a
   conditional write; then the case is investigated if its status asks for it. A PO edit or credit note
   that comes before its invoice is held on an ``awaiting_invoice`` case; the invoice folds them in.
3. ``approval.answered`` resumes the paused run with the answer, or rebuilds it without the
   checkpoint; the gate re-reads the case either way (R6).
4. An investigation that lost a race (``superseded``) re-reads and decides again, a bounded number
   of times.

Errors are the settlement signal (see ``casekeeper.core.errors``): ``EffectInFlight`` (schedule a
re-check), ``InvalidEvent`` (set aside), any error whose ``retryable`` is set (retried with backoff).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from casekeeper import Case, CaseNotFound, EffectInFlight
from casekeeper.capture import capturing
from casekeeper.checkpoints import CaseCheckpointStorage
from shared.domain import events as ev
from shared.domain.invoice import AWAITING_INVOICE, INVESTIGABLE
from shared.errors import InvalidEvent, ModelUnavailable
from shared.workflow.build import WORKFLOW_NAME
from shared.workflow.fact_events import FACT_EVENTS, FactEvents
from shared.workflow.messages import (
    AnswerWithoutCheckpoint,
    ApprovalAnswer,
    Investigate,
    RunOutcome,
)
from shared.workflow.runner import WorkflowRunner

log = logging.getLogger("casekeeper.worker")

MAX_REDECISIONS = 3

Handler = Callable[[ev.CaseEvent, CaseCheckpointStorage], Awaitable[list[RunOutcome]]]


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
    """Handles one event at a time, per case: dispatch, investigation and approvals here; the fact events
    in :mod:`shared.workflow.fact_events`; running and resuming the workflow in
    :mod:`shared.workflow.runner`."""

    def __init__(self, runner: WorkflowRunner) -> None:
        self._deps = runner.deps
        self._runner = runner
        self._facts = FactEvents(runner.deps, self._require, self._investigate, runner.finish_interrupted_run)
        self._handlers: Mapping[str, Handler] = {
            **self._facts.handlers(),
            ev.CASE_INVESTIGATE: self._case_investigate,
            ev.APPROVAL_ANSWERED: self._approval_answered,
        }

    @property
    def graph_hash(self) -> str:
        """The running build's graph hash (a checkpoint of another graph is not resumed)."""
        return self._runner.graph_hash

    async def handle(self, event: ev.CaseEvent) -> EventResult:
        with capturing(event.case_id, WORKFLOW_NAME):
            steps: list[RunOutcome] = []
            handler = self._handlers.get(event.type)
            if handler is None:
                raise InvalidEvent(f"unknown event type {event.type!r}", case_id=event.case_id)
            # One storage of the case's checkpoints for the whole event: the interrupted-run check reads
            # them, and that read numbers the event's saves.
            storage = self._runner.checkpoints(event.case_id)
            if event.type == ev.INVOICE_RECEIVED:
                # It may create the case, which then holds no checkpoint to read: its handler looks for an
                # interrupted run only once it knows the case existed.
                steps.extend(await self._record_then_wait(handler, event, storage))
                return self._result(event, steps)
            if event.type == ev.APPROVAL_ANSWERED:
                steps.extend(await self._approval_answered(event, storage))
                return self._result(event, steps)
            try:
                resumed = await self._runner.finish_interrupted_run(storage)
            except EffectInFlight as waiting:
                if event.type not in FACT_EVENTS:
                    raise
                # A fact is recorded when it arrives, in the session's order, even while an interrupted
                # run's call is in flight; only the decision waits. Deferring the whole event instead would
                # let events that arrive after the call's timeout overtake it (the stale PO would win).
                await self._record_then_wait(handler, event, storage)
                raise waiting.after_facts() from None
            if resumed is not None:
                steps.append(resumed)
            if event.type in FACT_EVENTS:
                steps.extend(await self._record_then_wait(handler, event, storage))
            else:
                steps.extend(await handler(event, storage))
        return self._result(event, steps)

    def _result(self, event: ev.CaseEvent, steps: list[RunOutcome]) -> EventResult:
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

    async def _record_then_wait(
        self, handler: Handler, event: ev.CaseEvent, storage: CaseCheckpointStorage
    ) -> list[RunOutcome]:
        """Run a fact event's handler; a wait for an effect in flight raised after its facts were written
        (or a model that could not answer) says so, so that the copy the queue brings back only decides."""
        try:
            return await handler(event, storage)
        except EffectInFlight as waiting:
            raise waiting.after_facts() from None
        except ModelUnavailable as unavailable:
            raise unavailable.after_facts() from unavailable.__cause__

    # --- investigation and approvals ---------------------------------------------------------------

    async def _case_investigate(self, event: ev.CaseEvent, storage: CaseCheckpointStorage) -> list[RunOutcome]:
        case = await asyncio.to_thread(self._require, event.case_id)
        if case.status == AWAITING_INVOICE:
            # Nothing to decide before the invoice: its arrival makes the first decision, on every fact held.
            why = "the case awaits its invoice; nothing is decided before it comes"
            return [RunOutcome(case.id, "nothing_to_do", case.status, case.version, why)]
        return await self._investigate(storage, "investigation requested", known=case)

    async def _investigate_if_open(self, storage: CaseCheckpointStorage, reason: str) -> list[RunOutcome]:
        case = await asyncio.to_thread(self._require, storage.case_id)
        if case.status not in INVESTIGABLE:
            return []
        return await self._investigate(storage, reason, known=case)

    async def _investigate(
        self, storage: CaseCheckpointStorage, reason: str, *, known: Case | None = None, new_case: bool = False
    ) -> list[RunOutcome]:
        """Decide the case; an investigation that lost a race (``superseded``) re-reads and decides again,
        a bounded number of times. ``known``: the case as this event just read or wrote it."""
        case_id = storage.case_id
        steps: list[RunOutcome] = []
        for _ in range(MAX_REDECISIONS):
            outcome = await self._runner.run(
                storage, message=Investigate(case_id, reason), known=known, new_case=new_case
            )
            steps.append(outcome)
            if outcome.outcome != "superseded":
                return steps
            reason = f"re-decided after: {outcome.detail}"
            known, new_case = None, False  # it lost a race: read the case as it is now
        return steps

    async def _approval_answered(self, event: ev.CaseEvent, storage: CaseCheckpointStorage) -> list[RunOutcome]:
        d = event.data
        answer = ApprovalAnswer(d["requestId"], d["decision"], int(d["caseVersion"]), d["approver"], d.get("reason"))
        # One read of the newest checkpoint serves both checks: an interrupted run is finished first; a run
        # paused for this answer leaves it the newest (finishing nothing saves nothing).
        latest = await asyncio.to_thread(storage.latest_record, WORKFLOW_NAME)
        steps: list[RunOutcome] = []
        resumed = await self._runner.finish_interrupted_run(storage, latest=latest)
        if resumed is not None:
            steps.append(resumed)
        paused = await self._runner.paused_on(
            storage, answer.request_id, **({"latest": latest} if resumed is None else {})
        )
        outcome = None
        if paused is not None:
            record, case = paused
            # The case as just read to check the checkpoint: the answer is decided on it (rule R6: its
            # commit stays conditional on that version, and a lost race re-reads).
            outcome = await self._runner.resume(storage, record, responses={answer.request_id: answer}, known=case)
        if outcome is None:  # no usable checkpoint, or resuming it failed: rebuilt from the case (R8)
            outcome = await self._runner.run(storage, message=AnswerWithoutCheckpoint(event.case_id, answer))
        steps.append(outcome)
        if outcome.outcome == "stale_answer":
            steps.extend(await self._investigate_if_open(storage, "approval answered on an older version"))
        return steps

    def _require(self, case_id: str) -> Case:
        try:
            return self._deps.cases.require(case_id)
        except CaseNotFound as exc:
            raise InvalidEvent(f"unknown case {case_id!r}", case_id=case_id) from exc
