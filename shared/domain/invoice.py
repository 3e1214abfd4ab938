"""The worked domain: invoice variance review (DESIGN.md section 4). Pure rules, no I/O.

A case is one supplier invoice matched against its purchase order. The variance is
``invoice amount - PO amount - credits received``. Within tolerance the invoice is approved;
over-billed beyond it, a credit note is requested for the variance (a person approves first above
the approval threshold); under-billed beyond it, a person reviews.

Whoever proposes (these rules or a model), :func:`validate` checks the proposal against the facts
before anything happens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from shared.core.errors import InvalidProposal

CENT = Decimal("0.01")


class Status(StrEnum):
    OPEN = "open"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    CREDIT_REQUESTED = "credit_requested"
    NEEDS_REVIEW = "needs_review"
    CLOSED = "closed"


class Action(StrEnum):
    APPROVE = "approve"
    REQUEST_CREDIT_NOTE = "request_credit_note"
    NEEDS_REVIEW = "needs_review"


INVESTIGABLE = frozenset({Status.OPEN, Status.NEEDS_REVIEW})
"""Statuses in which an investigation may decide something."""

REINVESTIGATE_ON_FACT_CHANGE = frozenset({Status.OPEN, Status.APPROVED, Status.AWAITING_APPROVAL, Status.NEEDS_REVIEW})
"""Statuses whose decision is re-made when the facts change (a PO edit, an unexpected credit)."""


@dataclass(frozen=True)
class Rules:
    """``VARIANCE_TOLERANCE`` and ``APPROVAL_THRESHOLD``, as amounts."""

    tolerance: Decimal = Decimal("5.00")
    approval_threshold: Decimal = Decimal("1000.00")


@dataclass(frozen=True)
class Credit:
    credit_note_id: str
    amount: Decimal


@dataclass(frozen=True)
class InvoiceFacts:
    invoice_id: str
    supplier_id: str
    po_number: str
    invoice_amount: Decimal
    po_amount: Decimal
    currency: str
    credits: tuple[Credit, ...] = field(default=())

    @property
    def credits_total(self) -> Decimal:
        return sum((c.amount for c in self.credits), Decimal("0"))

    @property
    def variance(self) -> Decimal:
        return self.invoice_amount - self.po_amount - self.credits_total

    @classmethod
    def from_dict(cls, facts: dict[str, Any]) -> InvoiceFacts:
        """From the case document's ``facts`` (amounts as decimal strings)."""
        return cls(
            invoice_id=str(facts["invoiceId"]),
            supplier_id=str(facts["supplierId"]),
            po_number=str(facts["poNumber"]),
            invoice_amount=parse_amount(facts["invoiceAmount"], "invoiceAmount"),
            po_amount=parse_amount(facts["poAmount"], "poAmount"),
            currency=str(facts["currency"]),
            credits=tuple(
                Credit(str(c["creditNoteId"]), parse_amount(c["amount"], "amount")) for c in facts.get("credits") or ()
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "invoiceId": self.invoice_id,
            "supplierId": self.supplier_id,
            "poNumber": self.po_number,
            "invoiceAmount": str(self.invoice_amount),
            "poAmount": str(self.po_amount),
            "currency": self.currency,
            "credits": [{"creditNoteId": c.credit_note_id, "amount": str(c.amount)} for c in self.credits],
        }

    def has_credit(self, credit_note_id: str) -> bool:
        return any(c.credit_note_id == credit_note_id for c in self.credits)


@dataclass(frozen=True)
class Proposal:
    """What a proposer suggests. ``amount`` and ``currency`` only for a credit-note request."""

    action: Action
    amount: Decimal | None = None
    currency: str | None = None
    rationale: str = ""


_AMOUNT = re.compile(r"^-?[0-9]+(\.[0-9]{1,2})?$")


def parse_amount(value: object, name: str) -> Decimal:
    """A decimal amount from a JSON string like ``"1250.40"``: digits, an optional ``-``, at most two
    decimals. Numbers are refused (a float is not exact), and so are exponents, signs like ``+``,
    separators like ``_`` and surrounding spaces, which ``Decimal()`` would accept."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a decimal string, got {type(value).__name__}")
    if not _AMOUNT.match(value):
        if re.match(r"^-?[0-9]+\.[0-9]{3,}$", value):
            raise ValueError(f"{name} has more than two decimal places: {value!r}")
        raise ValueError(f"{name} is not a decimal amount like '1250.40': {value!r}")
    try:
        return Decimal(value)
    except InvalidOperation:  # unreachable after the pattern; kept so a bad edit fails loudly
        raise ValueError(f"{name} is not a decimal amount: {value!r}") from None


def propose(facts: InvoiceFacts, rules: Rules) -> Proposal:
    """The deterministic proposer: the rules of section 4, applied to the facts."""
    variance = facts.variance
    if abs(variance) <= rules.tolerance:
        return Proposal(Action.APPROVE, rationale=f"variance {variance} within tolerance {rules.tolerance}")
    if variance > 0:
        return Proposal(
            Action.REQUEST_CREDIT_NOTE,
            amount=variance,
            currency=facts.currency,
            rationale=f"over-billed by {variance} {facts.currency}",
        )
    return Proposal(Action.NEEDS_REVIEW, rationale=f"under-billed by {-variance} {facts.currency}")


def validate(proposal: Proposal, *, case_id: str, status: str, facts: InvoiceFacts, rules: Rules) -> Proposal:
    """Check a proposal against the facts and the status; return it, or raise ``InvalidProposal``.

    Allowed only in an investigable status; approve only within tolerance; a credit-note request
    only for a positive amount at most the variance, in the invoice's currency.
    """
    detail = {"action": str(proposal.action), "amount": str(proposal.amount), "currency": proposal.currency}

    def invalid(reason: str) -> InvalidProposal:
        return InvalidProposal(reason, case_id=case_id, proposal=detail)

    if status not in INVESTIGABLE:
        raise invalid(f"no action is allowed while the case is {status}")
    variance = facts.variance
    if proposal.action is Action.APPROVE:
        if abs(variance) > rules.tolerance:
            raise invalid(f"approve proposed but variance {variance} exceeds tolerance {rules.tolerance}")
    elif proposal.action is Action.REQUEST_CREDIT_NOTE:
        if proposal.amount is None or proposal.amount <= 0:
            raise invalid("a credit-note request needs a positive amount")
        if proposal.amount > variance:
            raise invalid(f"amount {proposal.amount} exceeds the variance {variance}")
        if proposal.currency != facts.currency:
            raise invalid(f"currency {proposal.currency} does not match the invoice's {facts.currency}")
    return proposal


def needs_approval(proposal: Proposal, rules: Rules) -> bool:
    return (
        proposal.action is Action.REQUEST_CREDIT_NOTE
        and proposal.amount is not None
        and proposal.amount > rules.approval_threshold
    )


def status_after_credit(facts: InvoiceFacts, rules: Rules) -> Status:
    """Where a ``credit_requested`` case goes once a credit note arrives."""
    return Status.CLOSED if abs(facts.variance) <= rules.tolerance else Status.NEEDS_REVIEW
