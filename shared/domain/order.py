"""The order of facts (docs/design.md#fact-order): which of two reports of the same fact is the newer.

A fact event (``invoice.received``, ``po.updated``, ``credit_note.issued``) carries its place in its
source's order in one of two ways:

- ``data.occurredAt``, an RFC 3339 timestamp with an offset, given by the sender: when the fact became
  true in the sender's own system (the ERP's PO edit, the supplier's note);
- otherwise ``acceptedAt``, when Casekeeper first accepted the event: the store's time of the case's fact
  clock at the door (``shared.handlers.door.fact_clock``; one clock for every ingress host, and no two
  reports of one case on the same stamp), written once into the message and carried unchanged by every
  delayed copy, redelivery and redrive.

:class:`FactOrder` is that order, stamped once. Two orders compare by the key
``(occurredAt or acceptedAt, acceptedAt, deliveryId)``: the fact's time first, then, between facts of the
same time, the one Casekeeper accepted later, then the delivery id, so that no two different deliveries
are ever equal. One delivery id is one report: its copies are equal to it, whatever their stamps. Times
compare as exact instants (UTC, every fractional digit the sender gave).

Pure: no clock, no I/O. The ingress and the case worker supply the times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

_RFC3339 = re.compile(
    # ASCII digits only: Python's \d also matches other scripts' digits, which no sender means.
    r"^(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ](?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.(?P<fraction>[0-9]{1,9}))?"
    r"(?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


def occurred_at_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a ``data.occurredAt``; ``None`` when it is a valid RFC 3339
    timestamp with an offset (``Z`` or ``+hh:mm``), like ``2026-12-03T19:05:34.120+01:00``."""
    if not isinstance(value, str):
        return "must be an RFC 3339 timestamp string like 2026-12-03T19:05:34Z"
    try:
        instant(value)
    except ValueError:
        return "must be an RFC 3339 timestamp with an offset, like 2026-12-03T19:05:34Z or 2026-12-03T20:05:34+01:00"
    return None


def instant(value: str) -> Decimal:
    """``value`` (RFC 3339 with offset) as exact seconds since the epoch. Raises ``ValueError``."""
    match = _RFC3339.match(value)
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp with an offset: {value!r}")
    offset = "+00:00" if match["offset"] in ("Z", "z") else match["offset"]
    whole = datetime.fromisoformat(f"{match['date']}T{match['time']}{offset}")  # raises on 2026-02-30
    fraction = Decimal("0." + match["fraction"]) if match["fraction"] else Decimal(0)
    return Decimal(int(whole.timestamp())) + fraction


@dataclass(frozen=True)
class FactOrder:
    """Where a fact stands in its source's order. ``occurred_at``: the sender's ``data.occurredAt`` as
    given (``None`` when it sent none); ``accepted_at``: when Casekeeper first accepted the event (epoch
    seconds); ``delivery_id``: the webhook delivery that carried it."""

    occurred_at: str | None
    accepted_at: float
    delivery_id: str | None

    def key(self) -> tuple[Decimal, Decimal, str]:
        """The comparison key: ``(occurredAt or acceptedAt, acceptedAt, deliveryId)``."""
        accepted = Decimal(repr(self.accepted_at))
        when = instant(self.occurred_at) if self.occurred_at is not None else accepted
        return when, accepted, self.delivery_id or ""

    def newer_than(self, held: FactOrder | None) -> bool:
        """Whether a fact of this order replaces one of order ``held``. A fact the case holds no order for
        (``held`` is ``None``: it came in a report without an acceptance time, or was written by a direct call)
        is replaced by any; the report ``held`` came from replaces nothing."""
        return held is None or (not self.same_as(held) and self.key() > held.key())

    def same_as(self, held: FactOrder | None) -> bool:
        """Whether this is the very report ``held`` came from (a redelivery, a copy, a redrive): the same
        order, or the same delivery id (a delivery the sender posted again after the broker's duplicate
        window has a later stamp, and is still the one report)."""
        if held is None:
            return False
        return self.key() == held.key() or (self.delivery_id is not None and self.delivery_id == held.delivery_id)

    def to_json(self) -> dict[str, Any]:
        return {"occurredAt": self.occurred_at, "acceptedAt": self.accepted_at, "deliveryId": self.delivery_id}

    @classmethod
    def from_json(cls, raw: Any) -> FactOrder | None:
        """From :meth:`to_json`; ``None`` when no order is held (no report of the fact has been applied:
        any report is newer)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("acceptedAt"), int | float):
            return None
        occurred = raw.get("occurredAt")
        if occurred is not None and occurred_at_problem(occurred) is not None:
            return None
        delivery = raw.get("deliveryId")
        return cls(occurred, float(raw["acceptedAt"]), str(delivery) if delivery is not None else None)


def describe(order: FactOrder | None) -> str:
    """A person's reading of an order, for reasons in the history."""
    if order is None:
        return "no recorded order"
    if order.occurred_at is not None:
        return f"occurred at {order.occurred_at}"
    stamp = datetime.fromtimestamp(order.accepted_at, tz=UTC).isoformat(timespec="milliseconds")
    return f"accepted at {stamp}"
