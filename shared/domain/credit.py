"""The money rule: a case never asks a supplier for more than it was over-billed.

Terminology (amounts in the invoice's currency):

over-billed
    invoice amount - PO amount, at the case's current facts.
received
    every credit note the supplier issued for the invoice, at the amount issued: notes that answer one
    of our requests and notes from elsewhere ("external") alike. Each counts once.
outstanding
    credit notes we requested (the effect is ``done``, or its outcome is not known yet) that have not
    been received and that no person withdrew. A received note settles the request whose credit note id
    it carries.
remaining
    over-billed - received - outstanding: **the most a decision may request**. Negative means the credit
    notes requested and received already exceed what the facts justify: the excess.
requested
    what we asked for and a person did not withdraw: each request at its received note's amount once the
    note arrived, else at the amount asked (``done``, unknown, or done late over a closed entry alike).
owed
    what the newest facts say the supplier owes in credit beyond what it gave uninvited: over-billed -
    external credits (notes answering none of our requests), never below zero.
over-requested
    requested - owed, when positive: money asked for that the facts no longer justify. Whatever path
    made it so (a PO edit after a request, an external note on top of one, an outcome recorded late), a
    person must hear of it: :func:`over_requested` is what the app's watch raises an alert on.

A decision never requests while a request's outcome is unknown (the workflow's intake waits for
reconciliation first), and never requests more than ``remaining``. So at every request::

    received + outstanding + this request <= invoice amount - PO amount    (at the version decided on)

which is the invariant the property tests check over random event sequences. Every sum and difference
here is exact (:mod:`shared.domain.money`): one that would round raises instead.

:func:`decide` is the deterministic proposer; :func:`validate` checks any proposal, a model's included,
against the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from shared.domain import money
from shared.domain.invoice import INVESTIGABLE, Action, InvoiceFacts, Proposal, Rules, Status
from shared.errors import InvalidProposal

ZERO = Decimal("0")


class RequestState(StrEnum):
    """What became of a credit note we asked for."""

    UNKNOWN = "unknown"
    """The call's outcome is not known yet (in flight, or waiting for reconciliation): counted outstanding."""
    OUTSTANDING = "outstanding"
    """The supplier has the request; its credit note has not arrived."""
    RECEIVED = "received"
    """Its credit note arrived: counted in ``received``, at the amount issued."""
    WITHDRAWN = "withdrawn"
    """A person took it off the books; it no longer counts."""


@dataclass(frozen=True)
class CreditRequest:
    """One credit-note request as the effect ledger knows it (refused or never-called ones are not requests)."""

    effect_key: str
    amount: Decimal
    decided_on_version: int
    known: bool
    """``True`` once the supplier's answer is recorded (effect ``done``)."""
    credit_note_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "effectKey": self.effect_key,
            "amount": money.amount_text(self.amount),
            "decidedOnVersion": self.decided_on_version,
            "known": self.known,
            "creditNoteId": self.credit_note_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CreditRequest:
        return cls(
            effect_key=str(data["effectKey"]),
            amount=money.parse_amount(data["amount"], "amount"),
            decided_on_version=int(data["decidedOnVersion"]),
            known=bool(data["known"]),
            credit_note_id=data.get("creditNoteId"),
        )


@dataclass(frozen=True)
class RequestLine:
    """A request with what became of it."""

    request: CreditRequest
    state: RequestState
    received_amount: Decimal | None = None


@dataclass(frozen=True)
class Position:
    """Where a case's money stands (see the module docstring for the terms)."""

    currency: str
    invoice_amount: Decimal
    po_amount: Decimal
    received: Decimal
    outstanding: Decimal
    lines: tuple[RequestLine, ...]

    @property
    def over_billed(self) -> Decimal:
        return money.sub(self.invoice_amount, self.po_amount)

    @property
    def remaining(self) -> Decimal:
        """The most a decision may request now (negative: the excess)."""
        return money.sub(money.sub(self.over_billed, self.received), self.outstanding)

    @property
    def excess(self) -> Decimal:
        """How far requested and received credit exceeds what the facts justify (zero when it does not)."""
        return max(ZERO, money.neg(self.remaining))

    @property
    def requested(self) -> Decimal:
        """Every request a person did not withdraw: at its received note's amount, else at the amount asked."""
        counted = [
            line.received_amount if line.received_amount is not None else line.request.amount
            for line in self.lines
            if line.state is not RequestState.WITHDRAWN
        ]
        return money.total(counted)

    @property
    def asked(self) -> Decimal:
        """Every request a person did not withdraw, at the amount asked: what the approval threshold sums."""
        return money.total(line.request.amount for line in self.lines if line.state is not RequestState.WITHDRAWN)

    @property
    def owed(self) -> Decimal:
        """Over-billed less the credits that answer none of our requests (external), never below zero."""
        ours = money.total(line.received_amount or ZERO for line in self.lines)
        external = money.sub(self.received, ours)
        return max(ZERO, money.sub(self.over_billed, external))

    @property
    def unknown(self) -> tuple[CreditRequest, ...]:
        return tuple(line.request for line in self.lines if line.state is RequestState.UNKNOWN)

    def to_json(self) -> dict[str, Any]:
        """The API's and the approval page's view: every number of the computation, and each request."""
        return {
            "currency": self.currency,
            "invoiceAmount": money.amount_text(self.invoice_amount),
            "poAmount": money.amount_text(self.po_amount),
            "overBilled": money.amount_text(self.over_billed),
            "received": money.amount_text(self.received),
            "outstanding": money.amount_text(self.outstanding),
            "remaining": money.amount_text(self.remaining),
            "excess": money.amount_text(self.excess),
            "requested": money.amount_text(self.requested),
            "asked": money.amount_text(self.asked),
            "owed": money.amount_text(self.owed),
            "requests": [
                {
                    **line.request.to_json(),
                    "state": line.state.value,
                    "receivedAmount": money.amount_text(line.received_amount)
                    if line.received_amount is not None
                    else None,
                }
                for line in self.lines
            ],
        }


def position(facts: InvoiceFacts, requests: Iterable[CreditRequest]) -> Position:
    """Match requests against received notes and withdrawals; sum what is outstanding."""
    received_by_id = {c.credit_note_id: c.amount for c in facts.credits}
    lines: list[RequestLine] = []
    outstanding = ZERO
    for request in sorted(requests, key=lambda r: (r.decided_on_version, r.effect_key)):
        if facts.is_withdrawn(request.effect_key):
            lines.append(RequestLine(request, RequestState.WITHDRAWN))
        elif request.credit_note_id is not None and request.credit_note_id in received_by_id:
            lines.append(RequestLine(request, RequestState.RECEIVED, received_by_id[request.credit_note_id]))
        else:
            lines.append(RequestLine(request, RequestState.OUTSTANDING if request.known else RequestState.UNKNOWN))
            outstanding = money.add(outstanding, request.amount)
    return Position(
        currency=facts.currency,
        invoice_amount=facts.invoice_amount,
        po_amount=facts.po_amount,
        received=facts.credits_total,
        outstanding=outstanding,
        lines=tuple(lines),
    )


def decide(facts: InvoiceFacts, pos: Position, rules: Rules) -> Proposal:
    """The deterministic proposer, in this order:

    1. requested + received exceed the over-billing while a request is outstanding: a person reviews
       (nothing more is requested, ever, until a person withdraws a request or the facts change);
    2. more than the tolerance remains: request exactly that;
    3. under-billed (or over-credited) beyond the tolerance: a person reviews;
    4. within tolerance: wait for outstanding notes if there are any, else approve.
    """
    remaining, currency = pos.remaining, facts.currency
    if pos.outstanding > 0 and remaining < 0:
        return Proposal(
            Action.NEEDS_REVIEW,
            rationale=(
                f"credit notes requested ({pos.outstanding} outstanding) and received ({pos.received}) exceed "
                f"the over-billing of {pos.over_billed} by {pos.excess} {currency}: nothing more is requested "
                "until a person withdraws a request"
            ),
        )
    if remaining > rules.tolerance:
        detail = f" ({pos.outstanding} already requested)" if pos.outstanding else ""
        return Proposal(
            Action.REQUEST_CREDIT_NOTE,
            amount=remaining,
            currency=currency,
            rationale=f"over-billed by {remaining} {currency}{detail}",
        )
    if remaining < -rules.tolerance:
        what = "over-credited" if pos.received > 0 and pos.over_billed >= 0 else "under-billed"
        return Proposal(Action.NEEDS_REVIEW, rationale=f"{what} by {money.neg(remaining)} {currency}")
    if pos.outstanding > 0:
        return Proposal(
            Action.AWAIT_CREDIT,
            rationale=f"{pos.outstanding} {currency} requested and outstanding covers the over-billing",
        )
    return Proposal(Action.APPROVE, rationale=f"variance {remaining} within tolerance {rules.tolerance}")


def validate(proposal: Proposal, *, case_id: str, status: str, pos: Position, rules: Rules) -> Proposal:
    """Check a proposal against the money rule and the status; return it, or raise ``InvalidProposal``.

    Allowed only in an investigable status; a credit-note request only for a positive amount of at most
    ``remaining``, in the invoice's currency; approve only within tolerance with nothing outstanding;
    awaiting credit only while requests are outstanding and cover the over-billing. A person's review is
    always allowed."""
    detail = {"action": str(proposal.action), "amount": str(proposal.amount), "currency": proposal.currency}

    def invalid(reason: str) -> InvalidProposal:
        return InvalidProposal(reason, case_id=case_id, proposal=detail)

    if status not in INVESTIGABLE:
        raise invalid(f"no action is allowed while the case is {status}")
    remaining = pos.remaining
    if proposal.action is Action.APPROVE:
        if money.magnitude(remaining) > rules.tolerance or pos.outstanding > 0:
            raise invalid(
                f"approve proposed but {remaining} remains (tolerance {rules.tolerance}) "
                f"with {pos.outstanding} outstanding"
            )
    elif proposal.action is Action.AWAIT_CREDIT:
        if pos.outstanding <= 0 or not ZERO <= remaining <= rules.tolerance:
            raise invalid(f"nothing to wait for: {pos.outstanding} outstanding, {remaining} remaining")
    elif proposal.action is Action.REQUEST_CREDIT_NOTE:
        if proposal.amount is None or proposal.amount <= 0:
            raise invalid("a credit-note request needs a positive amount")
        if proposal.amount > remaining:
            raise invalid(
                f"amount {proposal.amount} exceeds what may still be requested, {remaining} "
                f"(over-billed {pos.over_billed} - received {pos.received} - outstanding {pos.outstanding})"
            )
        if proposal.currency != pos.currency:
            raise invalid(f"currency {proposal.currency} does not match the invoice's {pos.currency}")
    return proposal


@dataclass(frozen=True)
class OverRequest:
    """Requested exceeds owed (see the module docstring): the numbers a person is told."""

    owed: Decimal
    requested: Decimal
    excess: Decimal
    currency: str


def over_requested(pos: Position) -> OverRequest | None:
    """What was requested beyond what the newest facts owe, or ``None`` when requested is within it."""
    requested, owed = pos.requested, pos.owed
    if requested <= owed:
        return None
    return OverRequest(owed, requested, money.sub(requested, owed), pos.currency)


def needs_approval(proposal: Proposal, rules: Rules, *, asked: Decimal) -> bool:
    """A person approves a credit-note request when the case's total asked (``asked``: every earlier
    request not withdrawn, done or outstanding) plus this one would cross the threshold: the threshold is
    cumulative, so splitting a request never avoids it."""
    if proposal.action is not Action.REQUEST_CREDIT_NOTE or proposal.amount is None:
        return False
    return money.add(asked, proposal.amount) > rules.approval_threshold


def status_for(action: Action) -> Status:
    """The status an allowed decision commits (a credit-note request commits it after the call)."""
    return {
        Action.APPROVE: Status.APPROVED,
        Action.REQUEST_CREDIT_NOTE: Status.CREDIT_REQUESTED,
        Action.AWAIT_CREDIT: Status.CREDIT_REQUESTED,
        Action.NEEDS_REVIEW: Status.NEEDS_REVIEW,
    }[action]
