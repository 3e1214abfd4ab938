"""Fact events: ``invoice.received``, ``po.updated``, ``credit_note.issued``, ``request.withdrawn``.

Each one records facts on the case with a conditional write and then, if the domain's rule says so,
has the case decided again. What a fact does in each status is decided by the pure rules of
``shared.domain.transitions``; this module only reads the case (and, where the rule needs them, its
credit-note requests), applies the rule's plan, and re-plans when it loses a race.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from casekeeper import Case, ConcurrencyConflict, EffectInFlight
from casekeeper.checkpoints import CaseCheckpointStorage
from shared.domain import events as ev
from shared.domain import transitions
from shared.domain.credit import CreditRequest
from shared.domain.invoice import AWAITING_INVOICE, INVESTIGABLE, InvoiceFacts, Status, parse_amount
from shared.domain.order import FactOrder
from shared.domain.transitions import FactPlan
from shared.errors import InvalidEvent
from shared.workflow.actions import credit_requests
from shared.workflow.deps import WorkflowDeps
from shared.workflow.messages import PENDING_APPROVAL, RunOutcome

MAX_FACT_RETRIES = 8
FACT_EVENTS = frozenset({ev.INVOICE_RECEIVED, ev.PO_UPDATED, ev.CREDIT_NOTE_ISSUED, ev.REQUEST_WITHDRAWN})
"""Events that record facts before they decide: their facts are written in arrival order, whatever waits."""


class Investigate(Protocol):
    def __call__(
        self, storage: CaseCheckpointStorage, reason: str, *, known: Case | None = None, new_case: bool = False
    ) -> Awaitable[list[RunOutcome]]: ...


Plan = Callable[[Case, tuple[CreditRequest, ...]], FactPlan]


FinishInterrupted = Callable[[CaseCheckpointStorage], Awaitable[RunOutcome | None]]


class FactEvents:
    """The fact events' handlers. ``require(case_id)`` reads a case or raises ``InvalidEvent``;
    ``investigate(storage, reason, known=case)`` has it decided again (``known``: the case as just
    written, which spares the decision a read). ``finish_interrupted(storage)`` resumes a run a crash
    stopped: ``invoice.received`` calls it once it knows the case existed before the event (the worker
    calls it for every other event before the handler)."""

    def __init__(
        self,
        deps: WorkflowDeps,
        require: Callable[[str], Case],
        investigate: Investigate,
        finish_interrupted: FinishInterrupted | None = None,
    ) -> None:
        self._deps = deps
        self._require = require
        self._investigate = investigate
        self._finish_interrupted = finish_interrupted

    def handlers(self) -> dict[str, Callable[[ev.CaseEvent, CaseCheckpointStorage], Awaitable[list[RunOutcome]]]]:
        return {
            ev.INVOICE_RECEIVED: self.invoice_received,
            ev.PO_UPDATED: self.po_updated,
            ev.CREDIT_NOTE_ISSUED: self.credit_note_issued,
            ev.REQUEST_WITHDRAWN: self.request_withdrawn,
        }

    async def invoice_received(self, event: ev.CaseEvent, storage: CaseCheckpointStorage) -> list[RunOutcome]:
        """Create the case, its facts' orders starting at this report's; a report of the same case that
        describes another invoice is set aside with each difference named (``InvalidEvent``). On a case its
        invoice already opened, the report is one of the PO amount, judged by its order as a ``po.updated``
        is (``transitions.invoice_po``): the PO follows the newest report, whichever arrived first.

        A case this event created holds no checkpoint: none is read (``storage.assume_empty``), and a run
        that ends writes none. A case that existed is first checked for an interrupted run, as every other
        event's case is, before the report is judged."""
        data = event.data
        facts = InvoiceFacts(
            invoice_id=data["invoiceId"],
            supplier_id=data["supplierId"],
            po_number=data["poNumber"],
            invoice_amount=parse_amount(data["invoiceAmount"], "invoiceAmount"),
            po_amount=parse_amount(data["poAmount"], "poAmount"),
            currency=data["currency"],
        )
        order = self._order(event)
        orders = {transitions.INVOICE: order.to_json(), transitions.PO_AMOUNT: order.to_json()} if order else {}
        received = {k: v for k, v in facts.to_dict().items() if k in _INVOICE_FIELDS}
        first = {FACT_ORDER: orders, INVOICE_AS_RECEIVED: received, **_remembered({}, event)}
        case, created = await asyncio.to_thread(
            self._deps.cases.create_if_absent, event.case_id, facts.to_dict(), data=first
        )
        if created:
            storage.assume_empty()
            return await self._investigate(storage, "invoice received", known=case, new_case=True)
        _refuse_reused_delivery(case, event)
        if case.status == AWAITING_INVOICE:
            opened = await self._open_held(event, case, facts, order, received)
            if opened is None:
                # The case was opened meanwhile (it moved on while this fold was written): judged as any
                # invoice on an existing case, below.
                case = await asyncio.to_thread(self._require, event.case_id)
            else:
                # No run ever decided a case that awaited its invoice: it holds no checkpoint to read.
                storage.assume_empty()
                step = RunOutcome(event.case_id, "facts_changed", opened.status, opened.version, "held facts folded in")
                return [step, *await self._investigate(storage, "invoice received", known=opened, new_case=True)]
        _refuse_another_invoice(case, received)

        def plan(case: Case, requests: tuple[CreditRequest, ...]) -> FactPlan:
            if case.status == AWAITING_INVOICE:
                # A case leaves awaiting_invoice only for good: one read as such above was opened since.
                raise ConcurrencyConflict(f"case {case.id} awaits its invoice", doc_id=case.id)
            _refuse_another_invoice(case, received)
            current = InvoiceFacts.from_dict(case.facts)
            return transitions.invoice_po(case.status, current, facts.po_amount, order=order, orders=_orders(case))

        try:
            resumed = await self._finish_interrupted(storage) if self._finish_interrupted is not None else None
        except EffectInFlight:
            # As for every fact event (shared.workflow.worker): the report is judged when it arrives, even
            # while an interrupted run's call is in flight; only the decision waits, and the copy the queue
            # brings back only decides: the report is judged first, then the wait is raised.
            await self._apply(storage, plan, event, needs_requests=False)
            raise
        judged = await self._apply(storage, plan, event, needs_requests=False)
        return judged if resumed is None else [resumed, *judged]

    async def _open_held(
        self,
        event: ev.CaseEvent,
        case: Case,
        facts: InvoiceFacts,
        order: FactOrder | None,
        received: dict[str, Any],
    ) -> Case | None:
        """Open a case that held facts before its invoice: the invoice, then each held fact by its order
        (``transitions.fold_held``), written at once with status ``open``. ``None`` when the case is no longer
        ``awaiting_invoice`` (another writer opened it)."""
        for _ in range(MAX_FACT_RETRIES):
            if case.status != AWAITING_INVOICE:
                return None
            folded = transitions.fold_held(facts, order, case.facts, _orders(case), self._deps.rules)
            held = "; ".join(folded.reasons) if folded.reasons else "no fact held"
            reason = f"invoice.received: invoice {facts.invoice_id} opens the case on the facts held before it: {held}"
            earlier = [r for r in case.data.get(SUPERSEDED) or () if isinstance(r, dict)]
            now = self._deps.cases.now()
            late = [{**r, "at": now, "atVersion": case.version} for r in folded.superseded]
            data: dict[str, Any] = {
                FACT_ORDER: folded.orders,
                INVOICE_AS_RECEIVED: received,
                **_remembered(case.data, event),
                **({SUPERSEDED: [*earlier, *late][-MAX_SUPERSEDED:]} if late else {}),
            }
            after = await asyncio.to_thread(
                self._deps.cases.update_facts,
                case.id,
                case.version,
                folded.facts.to_dict(),
                reason=reason,
                new_status=Status.OPEN,
                data=data,
                expected=case,
                delivery_id=event.delivery_id,
            )
            if after is not None:
                return after
            case = await asyncio.to_thread(self._require, case.id)
        raise ConcurrencyConflict(f"case {case.id} kept changing while its invoice was applied", doc_id=case.id)

    async def po_updated(self, event: ev.CaseEvent, storage: CaseCheckpointStorage) -> list[RunOutcome]:
        po_amount = parse_amount(event.data["poAmount"], "poAmount")
        order = self._order(event)

        def plan(case: Case, requests: tuple[CreditRequest, ...]) -> FactPlan:
            if case.status == AWAITING_INVOICE:
                return transitions.held_po(case.facts, po_amount, order=order, orders=_orders(case))
            facts = InvoiceFacts.from_dict(case.facts)
            return transitions.po_updated(case.status, facts, po_amount, order=order, orders=_orders(case))

        return await self._apply(storage, plan, event, needs_requests=False, holds=True)

    async def credit_note_issued(self, event: ev.CaseEvent, storage: CaseCheckpointStorage) -> list[RunOutcome]:
        credit_id = str(event.data["creditNoteId"])
        amount = parse_amount(event.data["amount"], "amount")
        rules = self._deps.rules
        order = self._order(event)

        def plan(case: Case, requests: tuple[CreditRequest, ...]) -> FactPlan:
            if case.status == AWAITING_INVOICE:
                return transitions.held_credit(
                    case.facts, credit_note_id=credit_id, amount=amount, order=order, orders=_orders(case)
                )
            facts = InvoiceFacts.from_dict(case.facts)
            return transitions.credit_note_issued(
                case.status,
                facts,
                credit_note_id=credit_id,
                amount=amount,
                requests=requests,
                rules=rules,
                order=order,
                orders=_orders(case),
            )

        return await self._apply(storage, plan, event, needs_requests=True, holds=True)

    async def request_withdrawn(self, event: ev.CaseEvent, storage: CaseCheckpointStorage) -> list[RunOutcome]:
        """A person takes an outstanding credit-note request off the books (recorded with who and why)."""
        d = event.data
        key, by, why, at = str(d["effectKey"]), str(d["by"]), str(d["why"]), float(d["at"])

        def plan(case: Case, requests: tuple[CreditRequest, ...]) -> FactPlan:
            if case.status == AWAITING_INVOICE:
                reason = f"case {case.id} awaits its invoice: it has made no credit-note request to withdraw"
                raise InvalidEvent(reason, case_id=case.id, fields={"effectKey": reason})
            facts = InvoiceFacts.from_dict(case.facts)
            try:
                return transitions.request_withdrawn(
                    case.status, facts, requests, effect_key=key, by=by, why=why, at=at
                )
            except transitions.NotWithdrawable as exc:
                raise InvalidEvent(str(exc), case_id=case.id, fields={"effectKey": str(exc)}) from exc

        return await self._apply(storage, plan, event, needs_requests=True)

    async def _apply(
        self,
        storage: CaseCheckpointStorage,
        plan: Plan,
        event: ev.CaseEvent,
        *,
        needs_requests: bool,
        holds: bool = False,
    ) -> list[RunOutcome]:
        """Apply ``plan`` (a rule of ``shared.domain.transitions``) with a conditional write, re-planning on
        a lost race; then decide again if it says so. A change withdraws a pending approval: it was asked on
        facts that no longer hold. Facts already recorded (a redelivery) still get their follow-up: the
        first delivery may have died between writing them and deciding. ``holds``: a fact that may come
        before its case's invoice; for a case that does not exist yet, one is created ``awaiting_invoice``
        to hold it (docs/design.md#facts-before-their-case)."""
        cases, ledger = self._deps.cases, self._deps.ledger
        case_id = storage.case_id
        event_type, delivery_id = event.type, event.delivery_id
        for _ in range(MAX_FACT_RETRIES):
            case = await asyncio.to_thread(self._held_or_require if holds else self._require, case_id)
            _refuse_reused_delivery(case, event)
            requests = credit_requests(await asyncio.to_thread(ledger.effects_for, case)) if needs_requests else ()
            planned = plan(case, requests)
            writes = planned.changes or planned.superseded is not None or planned.order is not None
            if writes and _judged_before(case, delivery_id):
                # One delivery is one report, judged once: a copy of one that changed the facts when it first
                # came (its decision failed, say) and was replaced since is old news, and so is a copy of one
                # already recorded as superseded, even if posted again with a later stamp; nor does a copy
                # move the order of the report it repeats.
                why = f"delivery {delivery_id} was judged when it first came; a copy changes nothing"
                planned = FactPlan({}, None, why, investigate=case.status in INVESTIGABLE)
            if not planned.changes:
                if _needs_bookkeeping(case, planned):
                    now = cases.now()
                    written = await asyncio.to_thread(
                        cases.annotate,
                        case_id,
                        case.version,
                        functools.partial(_bookkept, planned=planned, version=case.version, at=now, event=event),
                        expected=case,
                    )
                    if written is None:
                        continue  # the case moved on: judge the report again against what it holds now
                    case = written
                outcome = "fact_superseded" if planned.superseded is not None else "nothing_to_do"
                unchanged = RunOutcome(case_id, outcome, case.status, case.version, planned.reason)
                if not planned.investigate:
                    return [unchanged]
                reason = f"{event_type} (facts already recorded)"
                return [unchanged, *await self._investigate(storage, reason, known=case)]
            # A change of facts withdraws the pending approval: the approver would answer on facts the
            # case has left (rule R6).
            data: dict[str, Any] = {PENDING_APPROVAL: None} if case.data.get(PENDING_APPROVAL) else {}
            if planned.order is not None:
                data[FACT_ORDER] = planned.order
            data.update(_remembered(case.data, event))
            after = await asyncio.to_thread(
                cases.update_facts,
                case_id,
                case.version,
                planned.changes,
                reason=f"{event_type}: {planned.reason}",
                new_status=planned.new_status,
                data=data or None,
                expected=case,
                delivery_id=delivery_id,
            )
            if after is not None:
                changed = RunOutcome(case_id, "facts_changed", after.status, after.version, planned.reason)
                if not planned.investigate or after.status not in INVESTIGABLE:
                    return [changed]
                return [changed, *await self._investigate(storage, event_type, known=after)]
        raise ConcurrencyConflict(f"case {case_id} kept changing while applying {event_type}", doc_id=case_id)

    def _held_or_require(self, case_id: str) -> Case:
        """The case; one ``awaiting_invoice`` with no facts yet when there is none (a fact came first)."""
        case = self._deps.cases.get(case_id)
        if case is not None:
            return case
        return self._deps.cases.create_if_absent(case_id, {}, status=AWAITING_INVOICE)[0]

    @staticmethod
    def _order(event: ev.CaseEvent) -> FactOrder | None:
        """The report's order; ``None`` for an event handed over without its acceptance time (a direct call,
        not the queue, which stamps every message): it is taken as the newest, as it was handed over."""
        return event.order() if event.accepted_at is not None else None


FACT_ORDER = "factOrder"
"""The case ``data`` field that holds each fact's order: ``{"invoice": order, "poAmount": order, "credits":
{creditNoteId: order}}``, each order ``{"occurredAt", "acceptedAt", "deliveryId"}``."""
SUPERSEDED = "supersededEvents"
"""The case ``data`` field listing the reports that arrived after a newer one (see ``FactPlan.superseded``)."""
INVOICE_AS_RECEIVED = "invoice"
"""The case ``data`` field with the invoice as its ``invoice.received`` said it (the PO amount may change later)."""
MAX_SUPERSEDED = 100
DELIVERIES = "deliveries"
"""The case ``data`` field that remembers, for every delivery that changed the case or was held or superseded
on it, its body's digest: ``{deliveryId: digest}``. A delivery id the case knows, with another body, is set
aside (:func:`_refuse_reused_delivery`), however long after the door's own record of it expired. Each entry
is the id and :data:`DIGEST_CHARS` hex characters; the case's size bound counts them."""
DIGEST_CHARS = 32
"""The digest's first 128 bits: ample to tell two bodies apart, half the size on the case."""
_INVOICE_FIELDS = ("invoiceId", "supplierId", "poNumber", "invoiceAmount", "poAmount", "currency")


def _orders(case: Case) -> dict[str, Any]:
    orders = case.data.get(FACT_ORDER)
    return dict(orders) if isinstance(orders, dict) else {}


def _judged_before(case: Case, delivery_id: str | None) -> bool:
    """Whether the case already judged this delivery: it remembers it (``data.deliveries``: every delivery
    that changed it, was held or superseded on it, or repeated a value it held), or shows it (a change of
    facts it made, its superseded record). Called once the body was found the same
    (:func:`_refuse_reused_delivery`), so a copy whatever its stamp: posted again after the door forgot the
    id, a copy takes a new, later stamp, which must not make an old report the newest."""
    if delivery_id is None:
        return False
    known = case.data.get(DELIVERIES)
    if isinstance(known, dict) and delivery_id in known:
        return True
    recorded = case.data.get(SUPERSEDED) or ()
    return any(t.delivery_id == delivery_id for t in case.history) or any(
        isinstance(r, dict) and r.get("deliveryId") == delivery_id for r in recorded
    )


def _needs_bookkeeping(case: Case, planned: FactPlan) -> bool:
    """Whether an unchanged-facts plan still has something to write: a newer order, or a superseded report
    not yet recorded (a redelivery of one is recorded once)."""
    if planned.superseded is not None:
        return not any(_same_report(r, planned.superseded) for r in case.data.get(SUPERSEDED) or ())
    return planned.order is not None and planned.order != _orders(case)


def _same_report(a: Any, b: dict[str, Any]) -> bool:
    return isinstance(a, dict) and all(a.get(k) == b.get(k) for k in ("type", "deliveryId", "fact", "creditNoteId"))


def _bookkept(
    data: dict[str, Any], *, planned: FactPlan, version: int, at: float, event: ev.CaseEvent | None = None
) -> dict[str, Any]:
    if event is not None:
        data.update(_remembered(data, event))
    if planned.order is not None:
        data[FACT_ORDER] = planned.order
    record = planned.superseded
    if record is not None:
        earlier = [r for r in data.get(SUPERSEDED) or () if not _same_report(r, record)]
        data[SUPERSEDED] = [*earlier, {**record, "at": at, "atVersion": version}][-MAX_SUPERSEDED:]
    return data


def _remembered(data: Mapping[str, Any], event: ev.CaseEvent) -> dict[str, Any]:
    """The ``data`` update that remembers ``event``'s delivery with its body's digest (empty: it came in no
    webhook, so there is nothing to remember it by)."""
    if event.delivery_id is None or event.body_sha256 is None:
        return {}
    known = data.get(DELIVERIES)
    known = dict(known) if isinstance(known, dict) else {}
    digest = event.body_sha256[:DIGEST_CHARS]
    if known.get(event.delivery_id) == digest:
        return {}
    return {DELIVERIES: {**known, event.delivery_id: digest}}


def _refuse_reused_delivery(case: Case, event: ev.CaseEvent) -> None:
    """Raise ``InvalidEvent`` (set aside with the reason, shown in the case's ``rejectedEvents``) when the case
    remembers ``event``'s delivery id with another body: a new event sent under a used id, which would
    otherwise be taken for a copy of the report the case already judged (the door's record of the id may
    have expired: ``shared.handlers.door``)."""
    if event.delivery_id is None or event.body_sha256 is None:
        return
    known = case.data.get(DELIVERIES)
    digest = known.get(event.delivery_id) if isinstance(known, dict) else None
    if digest is None or digest == event.body_sha256[:DIGEST_CHARS]:
        return
    reason = (
        f"delivery id {event.delivery_id!r} already reported a fact to case {case.id} with another body; this "
        f"{event.type} differs from it, so it is not a copy: set aside, nothing changed (a new event needs a new "
        "delivery id)"
    )
    raise InvalidEvent(reason, case_id=case.id, fields={"deliveryId": "already used with another body"})


def _refuse_another_invoice(case: Case, received: dict[str, Any]) -> None:
    """Raise ``InvalidEvent`` (the event is set aside with the reason) when ``received`` is not the invoice
    the case was opened with. The PO amount is compared with the invoice's own, not with the case's
    current one (a ``po.updated`` may have changed that since); a case opened before the invoice was kept
    is compared on what its facts still show."""
    recorded = case.data.get(INVOICE_AS_RECEIVED)
    if not isinstance(recorded, dict):
        recorded = {k: v for k, v in case.facts.items() if k in _INVOICE_FIELDS and k != "poAmount"}
    differs = {}
    for name, held in recorded.items():
        given = received.get(name)
        if name.endswith("Amount"):
            same = parse_amount(str(given), name) == parse_amount(str(held), name)
        else:
            same = given == held
        if not same:
            differs[f"data.{name}"] = f"is {given}, but the case's invoice has {held}"
    if differs:
        summary = "; ".join(f"{k.removeprefix('data.')} {v}" for k, v in differs.items())
        raise InvalidEvent(
            f"case {case.id} already exists for invoice {recorded.get('invoiceId', '?')}; this event describes "
            f"another invoice ({summary}): set aside, nothing changed",
            case_id=case.id,
            fields=differs,
        )
