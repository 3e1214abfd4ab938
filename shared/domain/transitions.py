"""How each fact event moves an invoice case: pure functions from (status, facts, event) to a plan.

================================  ==============================  ==========================================
event                             status before                   then
================================  ==============================  ==========================================
``po.updated``                    ``closed``                      the PO is recorded; nothing else
                                  ``approved``,                   ``open``, decided again (a pending
                                  ``awaiting_approval``,          approval is withdrawn: it was asked on
                                  ``credit_requested``            other facts); the money rule counts what
                                                                  was already requested
                                  ``open``, ``needs_review``      decided again
``credit_note.issued``            ``credit_requested``            recorded; a note carrying the id of one of
                                                                  our requests settles it. Then: nothing
                                                                  outstanding and within tolerance ->
                                                                  ``closed``; still outstanding and covered
                                                                  -> stays; otherwise ``needs_review``
                                  ``closed``                      recorded; nothing else
                                  ``approved``,                   ``open``, decided again
                                  ``awaiting_approval``
                                  ``open``, ``needs_review``      recorded, decided again
request withdrawn by a person     any but ``closed``              recorded; ``needs_review`` (the person
                                                                  decides when to investigate again)
``po.updated``,                   no case yet, or                 held: ``awaiting_invoice``, by its order as
``credit_note.issued``            ``awaiting_invoice``            any fact; nothing decided
``invoice.received``              ``awaiting_invoice``            the invoice, then each held fact by its
                                                                  order (:func:`fold_held`); ``open``,
                                                                  decided on every fact held
                                  any other (the same invoice)    a report of the PO amount, as
                                                                  ``po.updated`` (:func:`invoice_po`)
================================  ==============================  ==========================================

An event whose facts are already recorded (a redelivery) changes nothing, but still asks for the
follow-up decision when the status is investigable: the first delivery may have died between writing
the facts and deciding, and deciding again at the same version is idempotent.

Every fact is applied by its order (docs/design.md#fact-order): the case keeps, in ``factOrder``, the
order of the report each fact came from (the PO amount; each credit note by its id), and a report applies
only if it is newer. An older one changes nothing and is recorded as superseded (:class:`FactPlan`'s
``superseded``), with what it said and what the case holds instead; it still asks for the follow-up
decision like a redelivery. A newer report of a credit note already recorded with another amount is a
correction: the amount is replaced, old and new in the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from shared.domain.credit import CreditRequest, RequestState, position
from shared.domain.invoice import INVESTIGABLE, Credit, InvoiceFacts, Rules, Status, Withdrawal
from shared.domain.money import amount_text, parse_amount
from shared.domain.order import FactOrder, describe

_REDECIDE = frozenset({Status.APPROVED, Status.AWAITING_APPROVAL, Status.CREDIT_REQUESTED})


@dataclass(frozen=True)
class FactPlan:
    """What a fact event does: facts to set (JSON values; empty: nothing changes), maybe a new status,
    the reason for the history, and whether to decide again afterwards."""

    changes: dict[str, Any]
    new_status: str | None
    reason: str
    investigate: bool
    order: dict[str, Any] | None = None
    """The case's new ``factOrder`` (``None``: unchanged), written with the facts, or alone when a newer
    report repeated the value the case holds."""
    superseded: dict[str, Any] | None = None
    """The record of a report older than the one the case holds: never applied, kept on the case."""


class NotWithdrawable(ValueError):
    """A withdrawal that the case's requests do not allow (unknown key, received, already withdrawn...)."""


PO_AMOUNT = "poAmount"
CREDITS = "credits"
INVOICE = "invoice"
"""The keys of ``factOrder``: ``{"invoice": order, "poAmount": order, "credits": {creditNoteId: order}}``."""


def po_updated(
    status: str,
    facts: InvoiceFacts,
    po_amount: Decimal,
    *,
    order: FactOrder | None = None,
    orders: Mapping[str, Any] | None = None,
    event_type: str = "po.updated",
    why: str = "",
) -> FactPlan:
    """``order``: the report's; ``orders``: the case's ``factOrder``. Without ``order`` (a caller that keeps
    none), the report is taken as the newest. ``event_type``: the event that reported the amount, named in a
    superseded record; ``why``: said after a change (see :func:`invoice_po`)."""
    orders = orders or {}
    held = FactOrder.from_json(orders.get(PO_AMOUNT))
    if order is not None and not order.newer_than(held):
        if order.same_as(held):
            return _unchanged(status, f"PO amount {po_amount} already recorded from this report")
        return _superseded(
            status,
            event_type,
            order,
            held,
            fact=PO_AMOUNT,
            value=amount_text(po_amount),
            held_value=amount_text(facts.po_amount),
            what=f"PO amount {po_amount}",
        )
    new_orders = {**orders, PO_AMOUNT: order.to_json()} if order is not None else None
    if facts.po_amount == po_amount:
        return replace(_unchanged(status, f"PO amount already {po_amount}"), order=new_orders)
    change = {"poAmount": amount_text(po_amount)}
    reason = f"PO amount {facts.po_amount} -> {po_amount}{why}"
    if status == Status.CLOSED:
        return FactPlan(change, None, f"{reason} on a closed case: recorded only", False, new_orders)
    if status in _REDECIDE:
        return FactPlan(change, Status.OPEN, f"{reason}: the decision is made again", True, new_orders)
    return FactPlan(change, None, reason, True, new_orders)


def invoice_po(
    status: str,
    facts: InvoiceFacts,
    po_amount: Decimal,
    *,
    order: FactOrder | None = None,
    orders: Mapping[str, Any] | None = None,
) -> FactPlan:
    """An ``invoice.received`` on a case its invoice already opened (the same invoice: the caller refuses
    another): a report of the PO amount like any ``po.updated``, judged by its order, so that the PO is that
    of the newest report of it, whichever report arrived first (docs/design.md#fact-order). A copy of the
    report that opened the case changes nothing; a newer report applies the invoice's PO amount; an older one
    is superseded. ``order`` and ``orders`` as for :func:`po_updated`."""
    orders = orders or {}
    if order is not None and order.same_as(FactOrder.from_json(orders.get(INVOICE))):
        return _unchanged(status, f"invoice already recorded from this report (PO amount {po_amount})")
    why = f": a newer report of the invoice's PO ({describe(order)})" if order is not None else ""
    return po_updated(status, facts, po_amount, order=order, orders=orders, event_type="invoice.received", why=why)


def credit_note_issued(
    status: str,
    facts: InvoiceFacts,
    *,
    credit_note_id: str,
    amount: Decimal,
    requests: tuple[CreditRequest, ...],
    rules: Rules,
    order: FactOrder | None = None,
    orders: Mapping[str, Any] | None = None,
) -> FactPlan:
    """A credit note received, or reported again. ``order`` and ``orders`` as for :func:`po_updated`; the
    order is kept per credit-note id."""
    orders = orders or {}
    credit_orders = dict(orders.get(CREDITS) or {})
    held = FactOrder.from_json(credit_orders.get(credit_note_id))
    known = next((c.amount for c in facts.credits if c.credit_note_id == credit_note_id), None)
    new_orders: dict[str, Any] | None = None
    if order is not None:
        if known is not None and not order.newer_than(held):
            if order.same_as(held):
                return _unchanged(status, f"credit note {credit_note_id} already recorded from this report")
            return _superseded(
                status,
                "credit_note.issued",
                order,
                held,
                fact=CREDITS,
                value=amount_text(amount),
                held_value=amount_text(known),
                what=f"credit note {credit_note_id} for {amount}",
                credit_note_id=credit_note_id,
            )
        new_orders = {**orders, CREDITS: {**credit_orders, credit_note_id: order.to_json()}}
    if known == amount:
        return replace(_unchanged(status, f"credit note {credit_note_id} already recorded"), order=new_orders)
    credit = Credit(credit_note_id, amount)
    if known is None:
        credits = (*facts.credits, credit)
    else:
        credits = tuple(credit if c.credit_note_id == credit_note_id else c for c in facts.credits)
    updated = replace(facts, credits=credits)
    change = {"credits": updated.to_dict()["credits"]}
    settles = next((r for r in requests if r.credit_note_id == credit_note_id), None)
    what = f"answers request {settles.effect_key[:12]} for {settles.amount}" if settles else "external credit"
    if known is None:
        received = f"credit note {credit_note_id} for {amount} received ({what})"
    else:
        received = f"credit note {credit_note_id} corrected from {known} to {amount} ({what}; {describe(order)})"
    if status == Status.CREDIT_REQUESTED:
        target, why = _after_credit(updated, requests, rules)
        return FactPlan(change, target, f"{received}; {why}", False, new_orders)
    if status == Status.CLOSED:
        return FactPlan(change, None, f"{received} on a closed case: recorded only", False, new_orders)
    if status in _REDECIDE:
        return FactPlan(change, Status.OPEN, f"{received}: the decision is made again", True, new_orders)
    return FactPlan(change, None, received, True, new_orders)


def held_po(
    facts: Mapping[str, Any], po_amount: Decimal, *, order: FactOrder | None, orders: Mapping[str, Any]
) -> FactPlan:
    """A PO amount reported before the case's invoice (``awaiting_invoice``): held, by its order as on any
    case (an older report than the one held is superseded). ``facts``: the held facts (``poAmount`` and
    ``credits``, each maybe absent)."""
    held = FactOrder.from_json(orders.get(PO_AMOUNT))
    held_value = facts.get(PO_AMOUNT)
    if held_value is not None and order is not None and not order.newer_than(held):
        if order.same_as(held):
            return _unchanged(Status.AWAITING_INVOICE, f"PO amount {po_amount} already held from this report")
        return _superseded(
            Status.AWAITING_INVOICE,
            "po.updated",
            order,
            held,
            fact=PO_AMOUNT,
            value=amount_text(po_amount),
            held_value=str(held_value),
            what=f"PO amount {po_amount}",
        )
    new_orders = {**orders, PO_AMOUNT: order.to_json()} if order is not None else None
    if held_value is not None and parse_amount(held_value, PO_AMOUNT) == po_amount:
        return replace(_unchanged(Status.AWAITING_INVOICE, f"PO amount {po_amount} already held"), order=new_orders)
    before = f"{held_value} -> " if held_value is not None else ""
    reason = f"PO amount {before}{po_amount} held until the invoice comes"
    return FactPlan({PO_AMOUNT: amount_text(po_amount)}, None, reason, False, new_orders)


def held_credit(
    facts: Mapping[str, Any],
    *,
    credit_note_id: str,
    amount: Decimal,
    order: FactOrder | None,
    orders: Mapping[str, Any],
) -> FactPlan:
    """A credit note reported before the case's invoice: held as :func:`held_po` holds a PO amount, by its
    order per credit-note id."""
    credits = [dict(c) for c in facts.get(CREDITS) or ()]
    credit_orders = dict(orders.get(CREDITS) or {})
    held = FactOrder.from_json(credit_orders.get(credit_note_id))
    known = next((str(c["amount"]) for c in credits if c.get("creditNoteId") == credit_note_id), None)
    if known is not None and order is not None and not order.newer_than(held):
        if order.same_as(held):
            return _unchanged(Status.AWAITING_INVOICE, f"credit note {credit_note_id} already held from this report")
        return _superseded(
            Status.AWAITING_INVOICE,
            "credit_note.issued",
            order,
            held,
            fact=CREDITS,
            value=amount_text(amount),
            held_value=known,
            what=f"credit note {credit_note_id} for {amount}",
            credit_note_id=credit_note_id,
        )
    new_orders = {**orders, CREDITS: {**credit_orders, credit_note_id: order.to_json()}} if order is not None else None
    if known is not None and parse_amount(known, "amount") == amount:
        held_already = _unchanged(Status.AWAITING_INVOICE, f"credit note {credit_note_id} already held")
        return replace(held_already, order=new_orders)
    entry = {"creditNoteId": credit_note_id, "amount": amount_text(amount)}
    if known is None:
        credits.append(entry)
        reason = f"credit note {credit_note_id} for {amount} held until the invoice comes"
    else:
        credits = [entry if c.get("creditNoteId") == credit_note_id else c for c in credits]
        reason = f"credit note {credit_note_id} corrected from {known} to {amount}, held until the invoice comes"
    return FactPlan({CREDITS: credits}, None, reason, False, new_orders)


@dataclass(frozen=True)
class Folded:
    """The invoice with the facts held before it (:func:`fold_held`): the facts to open the case on, their
    orders, the held reports that were older than what the invoice said (superseded), and what happened."""

    facts: InvoiceFacts
    orders: dict[str, Any]
    superseded: tuple[dict[str, Any], ...]
    reasons: tuple[str, ...]


def fold_held(
    invoice: InvoiceFacts,
    invoice_order: FactOrder | None,
    held: Mapping[str, Any],
    held_orders: Mapping[str, Any],
    rules: Rules,
) -> Folded:
    """The invoice's facts with the facts held before it applied by their order, as they would have been had
    the invoice come first: the held PO amount replaces the invoice's only if its report is newer than the
    invoice's (an older one is superseded); each held credit note is added. ``held``, ``held_orders``: the
    ``awaiting_invoice`` case's facts and ``factOrder``."""
    orders: dict[str, Any] = (
        {INVOICE: invoice_order.to_json(), PO_AMOUNT: invoice_order.to_json()} if invoice_order is not None else {}
    )
    facts = invoice
    superseded: list[dict[str, Any]] = []
    reasons: list[str] = []
    if held.get(PO_AMOUNT) is not None:
        plan = po_updated(
            Status.OPEN,
            facts,
            parse_amount(held[PO_AMOUNT], PO_AMOUNT),
            order=FactOrder.from_json(held_orders.get(PO_AMOUNT)),
            orders=orders,
        )
        facts, orders = _folded(facts, orders, plan, superseded, reasons)
    credit_orders = held_orders.get(CREDITS) or {}
    for credit in held.get(CREDITS) or ():
        credit_id = str(credit["creditNoteId"])
        plan = credit_note_issued(
            Status.OPEN,
            facts,
            credit_note_id=credit_id,
            amount=parse_amount(credit["amount"], "amount"),
            requests=(),
            rules=rules,
            order=FactOrder.from_json(credit_orders.get(credit_id)),
            orders=orders,
        )
        facts, orders = _folded(facts, orders, plan, superseded, reasons)
    return Folded(facts, orders, tuple(superseded), tuple(reasons))


def _folded(
    facts: InvoiceFacts,
    orders: dict[str, Any],
    plan: FactPlan,
    superseded: list[dict[str, Any]],
    reasons: list[str],
) -> tuple[InvoiceFacts, dict[str, Any]]:
    reasons.append(plan.reason)
    if plan.superseded is not None:
        superseded.append(plan.superseded)
    if plan.changes:
        facts = InvoiceFacts.from_dict({**facts.to_dict(), **plan.changes})
    return facts, plan.order if plan.order is not None else orders


def request_withdrawn(
    status: str,
    facts: InvoiceFacts,
    requests: tuple[CreditRequest, ...],
    *,
    effect_key: str,
    by: str,
    why: str,
    at: float,
) -> FactPlan:
    """A person takes an outstanding request off the books. Raises ``NotWithdrawable`` unless the request
    is outstanding: known to the supplier, its note not received, not withdrawn already. (A request whose
    outcome is unknown is settled with ``effects resolve`` first.)"""
    pos = position(facts, requests)
    line = next((line for line in pos.lines if line.request.effect_key == effect_key), None)
    if line is None:
        raise NotWithdrawable(f"the case has no credit-note request {effect_key}")
    if line.state is RequestState.WITHDRAWN:
        return FactPlan({}, None, f"request {effect_key[:12]} already withdrawn", investigate=False)
    if line.state is not RequestState.OUTSTANDING:
        raise NotWithdrawable(f"request {effect_key[:12]} is {line.state.value}, not outstanding")
    withdrawn = (*facts.withdrawn, Withdrawal(effect_key, by, why, at))
    change = {"withdrawn": replace(facts, withdrawn=withdrawn).to_dict()["withdrawn"]}
    reason = f"request {effect_key[:12]} for {line.request.amount} withdrawn by {by}: {why}"
    if status == Status.CLOSED:
        return FactPlan(change, None, f"{reason} (closed case)", investigate=False)
    return FactPlan(change, Status.NEEDS_REVIEW, reason, investigate=False)


def _after_credit(facts: InvoiceFacts, requests: tuple[CreditRequest, ...], rules: Rules) -> tuple[Status, str]:
    """Where a ``credit_requested`` case goes once a note arrived."""
    pos = position(facts, requests)
    if pos.outstanding > 0 and pos.remaining < 0:
        return Status.NEEDS_REVIEW, f"requested and received exceed the over-billing by {pos.excess}"
    if abs(pos.remaining) <= rules.tolerance:
        if pos.outstanding > 0:
            return Status.CREDIT_REQUESTED, f"{pos.outstanding} still outstanding"
        return Status.CLOSED, f"remaining variance {pos.remaining}"
    if pos.remaining > 0:
        return Status.NEEDS_REVIEW, f"{pos.remaining} over-billing not covered (a partial credit?)"
    return Status.NEEDS_REVIEW, f"over-credited by {-pos.remaining}"


def _unchanged(status: str, reason: str) -> FactPlan:
    return FactPlan({}, None, reason, investigate=status in INVESTIGABLE)


def _superseded(
    status: str,
    event_type: str,
    order: FactOrder,
    held: FactOrder | None,
    *,
    fact: str,
    value: str,
    held_value: str,
    what: str,
    credit_note_id: str | None = None,
) -> FactPlan:
    """A report older than the one the case holds: nothing changes; the record says what it said, what
    the case holds instead, and both orders. It still asks for the follow-up decision, as a redelivery
    does: the case's own newest facts decide."""
    reason = (
        f"{what} ({describe(order)}) is older than the {held_value} the case holds ({describe(held)}): "
        "superseded, not applied"
    )
    record = {
        "type": event_type,
        "deliveryId": order.delivery_id,
        "fact": fact,
        **({"creditNoteId": credit_note_id} if credit_note_id is not None else {}),
        "value": value,
        "order": order.to_json(),
        "heldValue": held_value,
        "heldOrder": held.to_json() if held is not None else None,
        "reason": reason,
    }
    return FactPlan({}, None, reason, investigate=status in INVESTIGABLE, superseded=record)
