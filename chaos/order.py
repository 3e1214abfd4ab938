"""The source order of a case's facts, from what the driver sent, and what it says a case must show.

A fact event (``invoice.received``, ``po.updated``, ``credit_note.issued``) stands at a place in its
source's order: its ``data.occurredAt`` (RFC 3339 with an offset) when it carries one, else the time
Casekeeper first accepted its delivery id (the driver's first 202 for it; a re-send with the same
delivery id keeps that place, a copy under a new delivery id takes its own). The rule checked: a case
applies a fact only if it is newer than the one it holds, per fact (the PO amount; each credit note by
its id), so that

- the case's final PO amount is that of the newest accepted report of it, a ``po.updated`` or an
  ``invoice.received`` (every invoice report carries the invoice's PO amount); each credit note's final
  amount is that of its newest report;
- every PO change and credit change in the history applied a fact newer than the one held before it
  (:func:`walk`); and the facts that were true at each version, for the money rule, are the newest
  the case had seen by then, not what it showed if it applied an older fact over a newer one.

Two reports of one fact compare as the product compares them (``shared.domain.order``): by
``(occurredAt or first acceptance, first acceptance, delivery id)``, so two deliveries are never equal.

Events set aside (``rejectedEvents``, with a reason) are not facts of the case. A report older than the
fact the case holds is recorded in the case's ``supersededEvents`` (:func:`superseded_record`), not in
its history.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from chaos.evidence import Sent

INVOICE = "invoice.received"
PO = "po.updated"
CREDIT = "credit_note.issued"
FACT_EVENTS = (INVOICE, PO, CREDIT)
OCCURRED_AT = "occurredAt"


@dataclass(frozen=True)
class Report:
    """One fact as its source ordered it: ``key`` is epoch seconds (``occurredAt``, or first acceptance);
    ``accepted``: its first acceptance (the driver's first 202 for the delivery)."""

    key: float
    amount: Decimal
    delivery: str
    occurred_at: str | None = None
    accepted: float = 0.0

    @property
    def rank(self) -> tuple[float, float, str]:
        """Where it stands: ``(key, accepted, delivery)``, the product's comparison key."""
        return self.key, self.accepted, self.delivery

    def describe(self) -> str:
        where = f"occurredAt {self.occurred_at}" if self.occurred_at else "by acceptance order"
        return f"{self.amount} ({self.delivery}, {where})"


@dataclass
class SourceOrder:
    """A case's accepted facts in source order."""

    invoice: Report | None = None
    po: list[Report] = field(default_factory=list)
    credits: dict[str, list[Report]] = field(default_factory=dict)

    def newest_po(self) -> Report | None:
        return max([*self.po, *([self.invoice] if self.invoice else [])], key=lambda r: r.rank, default=None)

    def newest_credit(self, note_id: str) -> Report | None:
        return max(self.credits.get(note_id) or (), key=lambda r: r.rank, default=None)

    def report_for(self, delivery: str) -> Report | None:
        everything = [*self.po, *(r for rs in self.credits.values() for r in rs)]
        return next((r for r in everything if r.delivery == delivery), None)

    def credit_of(self, delivery: str) -> str | None:
        """The credit-note id a delivery reported, if it is a credit report."""
        return next((note_id for note_id, rs in self.credits.items() if any(r.delivery == delivery for r in rs)), None)

    def older_than_newest(self, delivery: str) -> bool:
        """Whether the delivery's report is older in source order than the newest report of its fact (the
        PO amount, or its credit note): a report the case must record as superseded if it came last."""
        report = self.report_for(delivery)
        if report is None:
            return False
        note_id = self.credit_of(delivery)
        newest = self.newest_credit(note_id) if note_id is not None else self.newest_po()
        return newest is not None and report.rank < newest.rank


def occurred_at(data: dict[str, Any]) -> float | None:
    """``data.occurredAt`` as epoch seconds; ``None`` when absent or not a timestamp with an offset."""
    raw = data.get(OCCURRED_AT)
    if not isinstance(raw, str):
        return None
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo is not None else None


def source_order(sent: Iterable[Sent], set_aside: set[str]) -> SourceOrder:
    """The case's accepted fact events (``sent``: the driver's records for one case), each delivery once,
    those set aside (their delivery ids in ``set_aside``) left out. The invoice is the oldest accepted invoice
    report; every other one (the same invoice sent again under another delivery id) is also a report of the PO
    amount, in its own place in the order, as a ``po.updated`` is."""
    accepted = [s for s in sent if s.accepted and s.accepted_at is not None and s.event_type in FACT_EVENTS]
    first_accepted: dict[str, float] = {}
    for s in accepted:
        first_accepted[s.delivery] = min(first_accepted.get(s.delivery, s.accepted_at or 0.0), s.accepted_at or 0.0)
    order = SourceOrder()
    invoices: list[Report] = []
    seen: set[str] = set()
    for s in sorted(accepted, key=lambda s: s.accepted_at or 0.0):
        if s.delivery in seen or s.delivery in set_aside:
            continue
        seen.add(s.delivery)
        stamp = occurred_at(s.data)
        key = stamp if stamp is not None else first_accepted[s.delivery]
        stamped = str(s.data[OCCURRED_AT]) if stamp is not None else None
        first = first_accepted[s.delivery]
        try:
            if s.event_type == INVOICE:
                invoices.append(Report(key, Decimal(str(s.data["poAmount"])), s.delivery, stamped, first))
            elif s.event_type == PO:
                order.po.append(Report(key, Decimal(str(s.data["poAmount"])), s.delivery, stamped, first))
            elif s.event_type == CREDIT:
                report = Report(key, Decimal(str(s.data["amount"])), s.delivery, stamped, first)
                order.credits.setdefault(str(s.data["creditNoteId"]), []).append(report)
        except (KeyError, InvalidOperation):
            continue  # an event the case could not read is the per-event check's to report
    if invoices:
        order.invoice = min(invoices, key=lambda r: r.rank)
        order.po.extend(r for r in invoices if r is not order.invoice)
    return order


@dataclass
class Walk:
    """What :func:`walk` found: the held facts per version, and each change that applied an older fact."""

    po: dict[int, Decimal] = field(default_factory=dict)
    """The PO amount of the newest PO fact the case had applied by each version."""
    credits: dict[int, dict[str, Decimal]] = field(default_factory=dict)
    """Per version, each credit note's amount from its newest report applied by then."""
    stale: list[str] = field(default_factory=list)


def walk(versions: list[tuple[int, Decimal, tuple[tuple[str, Decimal], ...]]], order: SourceOrder) -> Walk:
    """Follow the case's PO amount and credits version by version (``versions``: ``(v, po, credits)`` in
    order, from v1) and match each change to the accepted fact it applied: the oldest one newer than the
    fact held that carries the new amount. A change with no such fact applied an older fact over a newer
    one (or one never accepted): it is listed in ``stale``, and the held fact does not move."""
    result = Walk()
    if not versions or order.invoice is None:
        return result
    held_po: Report = order.invoice
    held_credit: dict[str, Report] = {}
    previous_po, previous_credits = versions[0][1], dict(versions[0][2])
    for version, po, credits in versions:
        if version > versions[0][0] and po != previous_po:
            newer = [r for r in order.po if r.amount == po and r.rank > held_po.rank]
            if newer:
                held_po = min(newer, key=lambda r: r.rank)
            else:
                result.stale.append(_stale(version, "PO amount", po, held_po, any(r.amount == po for r in order.po)))
        for note_id, amount in credits:
            reports = order.credits.get(note_id)
            if not reports or (previous_credits.get(note_id) == amount and version > versions[0][0]):
                continue
            held = held_credit.get(note_id)
            newer = [r for r in reports if r.amount == amount and (held is None or r.rank > held.rank)]
            if newer:
                held_credit[note_id] = min(newer, key=lambda r: r.rank)
            elif held is not None:
                known = any(r.amount == amount for r in reports)
                result.stale.append(_stale(version, f"credit {note_id}", amount, held, known))
        result.po[version] = held_po.amount
        result.credits[version] = {
            note_id: held_credit[note_id].amount if note_id in held_credit else amount for note_id, amount in credits
        }
        previous_po, previous_credits = po, dict(credits)
    return result


def _stale(version: int, what: str, amount: Decimal, held: Report, known: bool) -> str:
    if not known:
        return f"v{version}: {what} became {amount}, which no accepted fact event carries"
    return (
        f"v{version}: {what} became {amount}, an older fact than the one it held, {held.describe()}: "
        "a late fact overrode a newer one"
    )


def final_problems(order: SourceOrder, facts: dict[str, Any]) -> list[str]:
    """The last fact in source order must stand: the case's final PO amount and each reported credit
    note's final amount are those of the newest accepted report (``facts``: the case's ``facts``)."""
    problems = []
    newest = order.newest_po()
    try:
        po = Decimal(str(facts.get("poAmount")))
        credits = {str(c["creditNoteId"]): Decimal(str(c["amount"])) for c in facts.get("credits") or ()}
    except (InvalidOperation, KeyError, TypeError):
        return ["the case's facts are unreadable"]
    if newest is not None and po != newest.amount:
        problems.append(f"PO amount {po}, but the last PO in source order is {newest.describe()}")
    for note_id in sorted(order.credits):
        report = order.newest_credit(note_id)
        if report is not None and note_id in credits and credits[note_id] != report.amount:
            problems.append(
                f"credit {note_id} stands at {credits[note_id]}, but its last report in source order is "
                f"{report.describe()}"
            )
    return problems


SUPERSEDED = "supersededEvents"
"""The case view's list of reports older than the fact the case held when they came: each with ``type``,
``deliveryId``, ``fact`` (``poAmount`` or ``credits``), ``creditNoteId`` (credits), ``value``, ``order``,
``heldValue``, ``heldOrder``, ``reason``, ``at``, ``atVersion``."""
_FACT_OF = {INVOICE: "poAmount", PO: "poAmount", CREDIT: "credits"}


def superseded_record(view: dict[str, Any], sent: Sent) -> dict[str, Any] | None:
    """The case's record of ``sent`` (a report of the PO amount or of a credit note) as superseded: the
    ``supersededEvents`` entry with its delivery id, type and fact (and credit-note id), with a reason and
    the value it reported. ``None`` when the case recorded no such thing."""
    for record in view.get(SUPERSEDED) or ():
        if not isinstance(record, dict) or record.get("deliveryId") != sent.delivery:
            continue
        if record.get("type") != sent.event_type or record.get("fact") != _FACT_OF.get(sent.event_type):
            continue
        if sent.event_type == CREDIT and record.get("creditNoteId") != sent.data.get("creditNoteId"):
            continue
        field_name = "amount" if sent.event_type == CREDIT else "poAmount"
        try:
            same_value = Decimal(str(record.get("value"))) == Decimal(str(sent.data.get(field_name)))
        except InvalidOperation:
            same_value = False
        if same_value and str(record.get("reason") or "").strip():
            return dict(record)
    return None


def refused_with_occurred_at(sent: Iterable[Sent]) -> list[Sent]:
    """Fact events carrying ``occurredAt`` that no host accepted and one refused (4xx): the field is part
    of the documented event, so a refusal loses the fact (the sender cannot send it any other way)."""
    by_delivery: dict[str, list[Sent]] = {}
    for s in sent:
        if s.event_type in FACT_EVENTS and OCCURRED_AT in s.data and s.delivery:
            by_delivery.setdefault(s.delivery, []).append(s)
    return [
        records[0]
        for records in by_delivery.values()
        if not any(r.accepted for r in records) and any(r.status is not None and 400 <= r.status < 500 for r in records)
    ]


def set_aside_delivery(rejected: dict[str, Any]) -> str | None:
    """The delivery id of an event set aside: from the message body it kept (a copy rescheduled with
    its own message id still carries it), else from a ``webhook:<delivery>`` message id."""
    try:
        body = json.loads(str(rejected.get("body") or ""))
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("deliveryId"):
        return str(body["deliveryId"])
    message_id = str(rejected.get("messageId") or rejected.get("id") or "")
    if not message_id.startswith("webhook:"):
        return None
    # A delayed copy's message id is the first one's, with "@<its acceptance in ms>" when it had one, and
    # ":retry:<n>" (or ":recheck:<n>", ":redrive:<n>") after it.
    return _COPY_SUFFIX.sub("", message_id.removeprefix("webhook:"))


def set_aside_unapplied(rejected: Iterable[dict[str, Any]], view: dict[str, Any] | None) -> set[str]:
    """The delivery ids set aside (``rejected``: the case's set-aside records) that no transition of the case
    applied. A report set aside while its case did not exist yet (the invoice still in the dead-letter queue)
    and sent again by the sender under the same id once the case exists is applied then, in the order of its
    first acceptance: it counts as an accepted fact like any other. Only one never applied is left out."""
    applied = {str(t["deliveryId"]) for t in (view or {}).get("history") or () if t.get("deliveryId")}
    aside = {d for d in (set_aside_delivery(r) for r in rejected) if d is not None}
    return aside - applied


_COPY_SUFFIX = re.compile(r"(?:@[0-9]+)?(?::(?:retry|recheck|redrive):[0-9]+)+$")
