"""Case events: the one JSON shape that the ingress accepts and the case worker handles.

``{"type": ..., "caseId": ..., "data": {...}}``, validated per type. Amounts are decimal strings.
:func:`parse_event` rejects a bad event whole, naming every offending field, so a webhook is either
accepted as it is or refused with the reason; nothing is half-accepted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from casekeeper.stores import id_problem
from shared.domain.money import parse_amount
from shared.domain.order import FactOrder, occurred_at_problem
from shared.errors import InvalidEvent

INVOICE_RECEIVED = "invoice.received"
PO_UPDATED = "po.updated"
CREDIT_NOTE_ISSUED = "credit_note.issued"
CASE_INVESTIGATE = "case.investigate"
APPROVAL_ANSWERED = "approval.answered"
REQUEST_WITHDRAWN = "request.withdrawn"
EFFECT_RECHECK = "effect.recheck"

_CURRENCY = re.compile(r"^[A-Z]{3}$")


@dataclass(frozen=True)
class CaseEvent:
    """A validated event. ``delivery_id`` is the webhook delivery (the Service Bus message id)."""

    type: str
    case_id: str
    data: dict[str, Any] = field(default_factory=dict)
    delivery_id: str | None = None
    envelope: dict[str, Any] = field(default_factory=dict)
    """Transport fields carried beside the event (a retry count, the original message id)."""
    accepted_at: float | None = None
    """When Casekeeper first accepted the event (epoch seconds, the store's clock at the door): stamped
    once, carried by every copy."""
    body_sha256: str | None = None
    """The digest of the webhook body it came in (``shared.handlers.door.body_digest``); ``None`` for an
    event that came in no webhook (Casekeeper's own, a test's direct call)."""

    def order(self) -> FactOrder:
        """Where this fact stands in its source's order (docs/design.md#fact-order): ``data.occurredAt`` if
        the sender gave one, else when Casekeeper accepted it. Raises ``ValueError`` if never stamped."""
        if self.accepted_at is None:
            raise ValueError(f"{self.type} for case {self.case_id} was never stamped with its acceptance time")
        occurred = self.data.get("occurredAt")
        return FactOrder(occurred if isinstance(occurred, str) else None, self.accepted_at, self.delivery_id)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "caseId": self.case_id, "data": self.data}


Check = Callable[[object], str | None]


def _identifier(value: object) -> str | None:
    # One rule for every id, on every backend (casekeeper.core.ids): what is accepted here can be stored.
    return id_problem(value)


def _text(value: object) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return "must be a non-empty string"
    return "must be at most 200 characters" if len(value) > 200 else None


def _amount(*, positive: bool) -> Check:
    def check(value: object) -> str | None:
        try:
            amount = parse_amount(value, "amount")
        except ValueError as exc:
            return str(exc).replace("amount ", "", 1) if str(exc).startswith("amount ") else str(exc)
        if amount < 0 or (positive and amount == 0):
            return "must be positive" if positive else "must not be negative"
        return None

    return check


def _currency(value: object) -> str | None:
    return None if isinstance(value, str) and _CURRENCY.match(value) else "must be a three-letter ISO code like EUR"


def _decision(value: object) -> str | None:
    return None if value in ("approve", "reject") else "must be approve or reject"


def _timestamp(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return "must be seconds since the epoch"
    return None


def _version(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return "must be a positive integer"
    return None


SCHEMAS: dict[str, dict[str, Check]] = {
    INVOICE_RECEIVED: {
        "invoiceId": _identifier,
        "supplierId": _identifier,
        "poNumber": _identifier,
        "invoiceAmount": _amount(positive=False),
        "poAmount": _amount(positive=False),
        "currency": _currency,
    },
    PO_UPDATED: {"poAmount": _amount(positive=False)},
    CREDIT_NOTE_ISSUED: {"creditNoteId": _identifier, "amount": _amount(positive=True)},
    CASE_INVESTIGATE: {},
    APPROVAL_ANSWERED: {"requestId": _identifier, "decision": _decision, "caseVersion": _version, "approver": _text},
    REQUEST_WITHDRAWN: {"effectKey": _identifier, "by": _text, "why": _text, "at": _timestamp},
    EFFECT_RECHECK: {"key": _identifier},
}
OPTIONAL: dict[str, dict[str, Check]] = {
    APPROVAL_ANSWERED: {"reason": _text},
    INVOICE_RECEIVED: {"occurredAt": occurred_at_problem},
    PO_UPDATED: {"occurredAt": occurred_at_problem},
    CREDIT_NOTE_ISSUED: {"occurredAt": occurred_at_problem},
}
"""Fields a type may carry but need not: a rejection's reason (the approval page requires one); a fact's
``occurredAt``, its time in the sender's source (``shared.domain.order``)."""
ORDERED_TYPES = (INVOICE_RECEIVED, PO_UPDATED, CREDIT_NOTE_ISSUED)
"""Fact events applied by their order (docs/design.md#fact-order): an older report never replaces a newer."""
PUBLIC_TYPES = (INVOICE_RECEIVED, PO_UPDATED, CREDIT_NOTE_ISSUED, CASE_INVESTIGATE)
"""Types a webhook may send; approvals, withdrawals and re-checks come from Casekeeper's own functions."""


def parse_event(
    raw: object, *, allowed_types: tuple[str, ...] | None = None, delivery_id: str | None = None
) -> CaseEvent:
    """Validate ``raw``; raises ``InvalidEvent`` whose ``fields`` maps each bad field to what is wrong."""
    if not isinstance(raw, Mapping):
        raise InvalidEvent("the event must be a JSON object", fields={"": "must be an object"})
    problems: dict[str, str] = {}
    unknown = set(raw) - {"type", "caseId", "data"}
    for name in sorted(unknown):
        problems[name] = "unknown field"
    event_type = raw.get("type")
    types = allowed_types or tuple(SCHEMAS)
    if event_type not in types:
        problems["type"] = "must be one of " + ", ".join(types)
    case_id = raw.get("caseId")
    if (problem := _identifier(case_id)) is not None:
        problems["caseId"] = problem
    data = raw.get("data", {})
    if not isinstance(data, Mapping):
        problems["data"] = "must be an object"
        data = {}
    schema = SCHEMAS.get(event_type, {}) if isinstance(event_type, str) else {}
    if "type" not in problems:
        for name, check in schema.items():
            if name not in data:
                problems[f"data.{name}"] = "is required"
            elif (problem := check(data[name])) is not None:
                problems[f"data.{name}"] = problem
        optional = OPTIONAL.get(event_type, {}) if isinstance(event_type, str) else {}
        for name, check in optional.items():
            if name in data and (problem := check(data[name])) is not None:
                problems[f"data.{name}"] = problem
        for name in sorted(set(data) - set(schema) - set(optional)):
            problems[f"data.{name}"] = "unknown field"
    if problems:
        summary = "; ".join(f"{k or 'body'} {v}" for k, v in problems.items())
        raise InvalidEvent(
            f"invalid event: {summary}", case_id=case_id if isinstance(case_id, str) else None, fields=problems
        )
    assert isinstance(event_type, str) and isinstance(case_id, str)
    return CaseEvent(type=event_type, case_id=case_id, data=dict(data), delivery_id=delivery_id)
