"""Fact events: ``invoice.received``, ``po.updated``, ``credit_note.issued``, ``request.withdrawn``.

Each one records facts on the case with a conditional write and then, if the domain's rule says so,
has the case decided again. What a fact does in each status is decided by the pure rules of
``shared.domain.transitions``; this module only reads the case (and, where the rule needs them, its
credit-note requests), applies the rule's plan, and re-plans when it loses a race.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from shared.core.cases import Case
from shared.core.errors import ConcurrencyConflict, InvalidEvent
from shared.domain import events as ev
from shared.domain import transitions
from shared.domain.credit import CreditRequest
from shared.domain.invoice import INVESTIGABLE, InvoiceFacts, parse_amount
from shared.domain.transitions import FactPlan
from shared.workflow.actions import credit_requests
from shared.workflow.checkpoints import CaseCheckpointStorage
from shared.workflow.deps import WorkflowDeps
from shared.workflow.messages import RunOutcome

MAX_FACT_RETRIES = 8
FACT_EVENTS = frozenset({ev.INVOICE_RECEIVED, ev.PO_UPDATED, ev.CREDIT_NOTE_ISSUED, ev.REQUEST_WITHDRAWN})
"""Events that record facts before they decide: their facts are written in arrival order, whatever waits."""


class Investigate(Protocol):
    def __call__(
        self, storage: CaseCheckpointStorage, reason: str, *, known: Case | None = None, new_case: bool = False
    ) -> Awaitable[list[RunOutcome]]: ...


Plan = Callable[[Case, tuple[CreditRequest, ...]], FactPlan]


class FactEvents:
    """The fact events' handlers. ``require(case_id)`` reads a case or raises ``InvalidEvent``;
    ``investigate(storage, reason, known=case)`` has it decided again (``known``: the case as just
    written, which spares the decision a read)."""

    def __init__(self, deps: WorkflowDeps, require: Callable[[str], Case], investigate: Investigate) -> None:
        self._deps = deps
        self._require = require
        self._investigate = investigate

    def handlers(self) -> dict[str, Callable[[ev.CaseEvent, CaseCheckpointStorage], Awaitable[list[RunOutcome]]]]:
        return {
            ev.INVOICE_RECEIVED: self.invoice_received,
            ev.PO_UPDATED: self.po_updated,
            ev.CREDIT_NOTE_ISSUED: self.credit_note_issued,
            ev.REQUEST_WITHDRAWN: self.request_withdrawn,
        }

    async def invoice_received(self, event: ev.CaseEvent, storage: CaseCheckpointStorage) -> list[RunOutcome]:
        data = event.data
        facts = InvoiceFacts(
            invoice_id=data["invoiceId"],
            supplier_id=data["supplierId"],
            po_number=data["poNumber"],
            invoice_amount=parse_amount(data["invoiceAmount"], "invoiceAmount"),
            po_amount=parse_amount(data["poAmount"], "poAmount"),
            currency=data["currency"],
        )
        case, created = await asyncio.to_thread(self._deps.cases.create_if_absent, event.case_id, facts.to_dict())
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
        return await self._investigate(storage, "invoice received", known=case, new_case=created)

    async def po_updated(self, event: ev.CaseEvent, storage: CaseCheckpointStorage) -> list[RunOutcome]:
        po_amount = parse_amount(event.data["poAmount"], "poAmount")

        def plan(case: Case, requests: tuple[CreditRequest, ...]) -> FactPlan:
            return transitions.po_updated(case.status, InvoiceFacts.from_dict(case.facts), po_amount)

        return await self._apply(storage, plan, ev.PO_UPDATED, needs_requests=False)

    async def credit_note_issued(self, event: ev.CaseEvent, storage: CaseCheckpointStorage) -> list[RunOutcome]:
        credit_id = str(event.data["creditNoteId"])
        amount = parse_amount(event.data["amount"], "amount")
        rules = self._deps.rules

        def plan(case: Case, requests: tuple[CreditRequest, ...]) -> FactPlan:
            facts = InvoiceFacts.from_dict(case.facts)
            return transitions.credit_note_issued(
                case.status, facts, credit_note_id=credit_id, amount=amount, requests=requests, rules=rules
            )

        return await self._apply(storage, plan, ev.CREDIT_NOTE_ISSUED, needs_requests=True)

    async def request_withdrawn(self, event: ev.CaseEvent, storage: CaseCheckpointStorage) -> list[RunOutcome]:
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

        return await self._apply(storage, plan, ev.REQUEST_WITHDRAWN, needs_requests=True)

    async def _apply(
        self, storage: CaseCheckpointStorage, plan: Plan, event_type: str, *, needs_requests: bool
    ) -> list[RunOutcome]:
        """Apply ``plan`` (a rule of ``shared.domain.transitions``) with a conditional write, re-planning on
        a lost race; then decide again if it says so. A change withdraws a pending approval: it was asked on
        facts that no longer hold. Facts already recorded (a redelivery) still get their follow-up: the
        first delivery may have died between writing them and deciding."""
        cases, ledger = self._deps.cases, self._deps.ledger
        case_id = storage.case_id
        for _ in range(MAX_FACT_RETRIES):
            case = await asyncio.to_thread(self._require, case_id)
            requests = credit_requests(await asyncio.to_thread(ledger.for_case, case_id)) if needs_requests else ()
            planned = plan(case, requests)
            if not planned.changes:
                unchanged = RunOutcome(case_id, "nothing_to_do", case.status, case.version, planned.reason)
                if not planned.investigate:
                    return [unchanged]
                reason = f"{event_type} (facts already recorded)"
                return [unchanged, *await self._investigate(storage, reason, known=case)]
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
                return [changed, *await self._investigate(storage, event_type, known=after)]
        raise ConcurrencyConflict(f"case {case_id} kept changing while applying {event_type}", doc_id=case_id)
