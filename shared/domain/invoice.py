"""The worked domain: invoice variance review. The facts, the statuses and the actions; pure, no I/O.

A case is one supplier invoice matched against its purchase order. Its facts: the invoice and PO
amounts, the currency, the credit notes received from the supplier, and the requests a person withdrew
by hand. What may be asked of the supplier is computed from those facts and the credit notes already
requested (:mod:`shared.domain.credit`, the money rule); how each fact event moves a case is in
:mod:`shared.domain.transitions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

from shared.domain import money
from shared.domain.money import amount_text

# Re-exported (the "as" form is what a type checker reads as an export): the workflow imports it from here.
from shared.domain.money import parse_amount as parse_amount  # noqa: PLC0414

CENT = Decimal("0.01")


class Status(StrEnum):
    AWAITING_INVOICE = "awaiting_invoice"
    """Facts (a PO edit, a credit note) came before the case's ``invoice.received``: they are held, nothing
    is decided until the invoice comes (docs/design.md#facts-before-their-case)."""
    OPEN = "open"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    CREDIT_REQUESTED = "credit_requested"
    NEEDS_REVIEW = "needs_review"
    CLOSED = "closed"


class Action(StrEnum):
    APPROVE = "approve"
    REQUEST_CREDIT_NOTE = "request_credit_note"
    AWAIT_CREDIT = "await_credit"
    """Nothing more to ask: the credit notes already requested cover the over-billing; wait for them."""
    NEEDS_REVIEW = "needs_review"


AWAITING_INVOICE = Status.AWAITING_INVOICE

INVESTIGABLE = frozenset({Status.OPEN, Status.NEEDS_REVIEW})
"""Statuses in which an investigation may decide something."""


@dataclass(frozen=True)
class Rules:
    """``VARIANCE_TOLERANCE`` and ``APPROVAL_THRESHOLD``, as amounts."""

    tolerance: Decimal = Decimal("5.00")
    approval_threshold: Decimal = Decimal("1000.00")


@dataclass(frozen=True)
class Credit:
    """A credit note received from the supplier, for its amount as issued."""

    credit_note_id: str
    amount: Decimal


@dataclass(frozen=True)
class Withdrawal:
    """A credit-note request a person took off the books (settled by hand, cancelled with the supplier)."""

    effect_key: str
    by: str
    why: str
    at: float


@dataclass(frozen=True)
class InvoiceFacts:
    invoice_id: str
    supplier_id: str
    po_number: str
    invoice_amount: Decimal
    po_amount: Decimal
    currency: str
    credits: tuple[Credit, ...] = field(default=())
    withdrawn: tuple[Withdrawal, ...] = field(default=())

    @property
    def credits_total(self) -> Decimal:
        return money.total(c.amount for c in self.credits)

    @property
    def over_billed(self) -> Decimal:
        """Invoice minus PO: what the facts justify asking back in all (negative when under-billed)."""
        return money.sub(self.invoice_amount, self.po_amount)

    @property
    def variance(self) -> Decimal:
        """Over-billing not yet credited (ignores credit notes requested and not received: see
        :mod:`shared.domain.credit` for what may still be requested)."""
        return money.sub(self.over_billed, self.credits_total)

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
            withdrawn=tuple(
                Withdrawal(str(w["effectKey"]), str(w.get("by", "")), str(w.get("why", "")), float(w.get("at", 0)))
                for w in facts.get("withdrawn") or ()
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "invoiceId": self.invoice_id,
            "supplierId": self.supplier_id,
            "poNumber": self.po_number,
            "invoiceAmount": amount_text(self.invoice_amount),
            "poAmount": amount_text(self.po_amount),
            "currency": self.currency,
            "credits": [{"creditNoteId": c.credit_note_id, "amount": amount_text(c.amount)} for c in self.credits],
            "withdrawn": [{"effectKey": w.effect_key, "by": w.by, "why": w.why, "at": w.at} for w in self.withdrawn],
        }

    def has_credit(self, credit_note_id: str) -> bool:
        return any(c.credit_note_id == credit_note_id for c in self.credits)

    def is_withdrawn(self, effect_key: str) -> bool:
        return any(w.effect_key == effect_key for w in self.withdrawn)


@dataclass(frozen=True)
class Proposal:
    """What a proposer suggests. ``amount`` and ``currency`` only for a credit-note request."""

    action: Action
    amount: Decimal | None = None
    currency: str | None = None
    rationale: str = ""
