"""The facts of a case at each of its versions, rebuilt from outside: F(v).

Start from the invoice the driver sent (the facts at v1), then apply the case history's transitions in
order; transition ``fromVersion f`` makes version ``f + 1``. What a transition changed comes from:

1. its ``changes`` object (the facts it changed, e.g. ``{"poAmount": "900.00"}``; for a list, what it
   gained and lost: ``{"credits": {"added": [...]}}``), when the API has it;
2. otherwise its reason: ``po.updated: ...`` takes the next PO amount from the driver's record of the
   accepted ``po.updated`` events (distinct deliveries, in source order, skipping those set aside, those
   the case recorded as superseded, and those equal to the PO amount at the time, which change
   nothing), and ``credit_note.issued: credit note X for A received ...`` adds credit X for A.

A case whose facts came before its invoice starts ``awaiting_invoice`` (docs/design.md#facts-before-their-case):
its versions before the invoice hold no invoice and are left out; the timeline starts at the version the
invoice opened, with the facts held applied to the invoice's, then that transition's changes (the invoice
with every held fact folded in).

The rebuilt final facts are compared with the case's facts; a difference is reported (an event lost, or
applied that was never accepted). A report the case recorded as superseded (``supersededEvents``) has
no transition: it changed nothing.

``true_at[v]`` are the facts that were true at v: the newest in source order that the case had seen
by then (:func:`chaos.order.walk`). They equal ``at[v]`` unless the case applied an older fact
over a newer one; the money rule is judged on them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from chaos.evidence import Sent
from chaos.order import SUPERSEDED, SourceOrder, set_aside_delivery, source_order, walk

PO_REASON = "po.updated:"
CREDIT_REASON = "credit_note.issued:"
_CREDIT = re.compile(r"credit note (\S+) for (-?[0-9]+(?:\.[0-9]+)?) received")


@dataclass(frozen=True)
class Facts:
    invoice_amount: Decimal
    po_amount: Decimal
    credits: tuple[tuple[str, Decimal], ...] = ()
    withdrawn: tuple[str, ...] = ()
    """Keys of requests a person took off the books (settled by hand): no longer outstanding."""

    @property
    def justified(self) -> Decimal:
        """What an over-billing can justify asking for, in all: invoice amount - PO amount."""
        return self.invoice_amount - self.po_amount

    def credit(self, note_id: str) -> Decimal | None:
        return next((amount for cid, amount in self.credits if cid == note_id), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "invoiceAmount": str(self.invoice_amount),
            "poAmount": str(self.po_amount),
            "credits": [{"creditNoteId": c, "amount": str(a)} for c, a in self.credits],
            "withdrawn": list(self.withdrawn),
        }


@dataclass
class Timeline:
    """``at[v]``: the facts at version ``v``; ``source``: ``changes``, ``driver`` or ``mixed``."""

    at: dict[int, Facts] = field(default_factory=dict)
    source: str = "changes"
    problems: list[str] = field(default_factory=list)
    po_changes: int = 0
    """How many transitions changed the PO amount."""
    expected_po: list[Decimal] = field(default_factory=list)
    """The PO amounts the accepted ``po.updated`` events produce in acceptance order (the reason-only
    rebuild of builds without ``changes`` uses them)."""
    order: SourceOrder = field(default_factory=SourceOrder)
    true_at: dict[int, Facts] = field(default_factory=dict)
    """The facts that were true at each version (see the module's docstring)."""
    held: list[Facts] = field(default_factory=list)
    """The facts the case held before its invoice opened it (``awaiting_invoice``), one per held change,
    over the invoice's amounts as the driver sent them: not versions the money rule judges."""

    def every_held(self) -> list[Facts]:
        """The facts at every version and those held before the invoice: what the case ever showed."""
        return [*self.at.values(), *self.held]

    stale: list[str] = field(default_factory=list)
    """Changes that applied an older fact over a newer one."""


def is_facts_transition(transition: dict[str, Any]) -> bool:
    if transition.get("changes") or transition.get("factsChanged"):
        return True
    reason = str(transition.get("reason") or "")
    return reason.startswith((PO_REASON, CREDIT_REASON))


def rebuild(
    view: dict[str, Any], sent: list[Sent], rejected_ids: set[str], set_aside: set[str] | None = None
) -> Timeline:
    """F(v) for every version the history covers. ``sent``: the driver's records for this case;
    ``set_aside``: the delivery ids of its events set aside (default: from ``webhook:`` message ids)."""
    timeline = Timeline()
    if set_aside is None:
        set_aside = {d for d in (set_aside_delivery({"id": i}) for i in rejected_ids) if d}
    timeline.order = source_order(sent, set_aside)
    invoice = next((s for s in sent if s.event_type == "invoice.received" and s.accepted), None)
    if invoice is None:
        timeline.problems.append("no accepted invoice.received: the facts at v1 are unknown")
        return timeline
    try:
        facts = Facts(_amount(invoice.data["invoiceAmount"]), _amount(invoice.data["poAmount"]))
    except (KeyError, InvalidOperation) as exc:
        timeline.problems.append(f"the invoice's amounts are unreadable: {exc}")
        return timeline
    superseded = {str(r.get("deliveryId")) for r in view.get(SUPERSEDED) or () if isinstance(r, dict)}
    timeline.expected_po = _expected_po(facts.po_amount, timeline.order, superseded)
    history = sorted(view.get("history") or [], key=lambda t: int(t.get("fromVersion", 0)))
    if history and int(history[0].get("fromVersion", 1)) != 1:
        timeline.problems.append(f"history starts at v{history[0].get('fromVersion')}: earlier facts are unknown")
        return timeline
    version = 1
    held = 0
    waiting = facts
    while held < len(history) and history[held].get("status") == AWAITING_INVOICE:
        # Facts held before the invoice: no invoice, so no money rule, until it opened the case.
        waiting, _ = _apply(waiting, history[held], iter(()), timeline)
        timeline.held.append(waiting)
        held += 1
    if held:
        if held == len(history):
            return timeline  # still awaiting its invoice: nothing decided yet
        opening = history[held]
        version = int(opening["fromVersion"]) + 1
        # The opening transition records what the invoice changed of the facts held (a list as what it
        # gained and lost), so it applies to them.
        facts, _ = _apply(waiting, opening, iter(()), timeline)
        history = history[held + 1 :]
    timeline.at[version] = facts
    next_po = iter(timeline.expected_po)
    sources: set[str] = set()
    for transition in history:
        version = int(transition["fromVersion"]) + 1
        facts, source = _apply(facts, transition, next_po, timeline)
        if source:
            sources.add(source)
        timeline.at[version] = facts
    timeline.source = "mixed" if len(sources) > 1 else next(iter(sources), "changes")
    _compare_final(facts, view, timeline)
    _true_facts(timeline)
    return timeline


AWAITING_INVOICE = "awaiting_invoice"
"""A case that holds facts that came before its invoice (docs/design.md#facts-before-their-case)."""


def _true_facts(timeline: Timeline) -> None:
    versions = sorted(timeline.at)
    walked = walk([(v, timeline.at[v].po_amount, timeline.at[v].credits) for v in versions], timeline.order)
    timeline.stale = walked.stale
    for v in versions:
        shown = timeline.at[v]
        if v not in walked.po:  # no invoice in source order: nothing to hold the case to
            timeline.true_at[v] = shown
            continue
        credits = tuple((note_id, walked.credits[v].get(note_id, amount)) for note_id, amount in shown.credits)
        timeline.true_at[v] = Facts(shown.invoice_amount, walked.po[v], credits, shown.withdrawn)


def _apply(
    facts: Facts, transition: dict[str, Any], next_po: Iterator[Decimal], timeline: Timeline
) -> tuple[Facts, str]:
    changes = transition.get("changes")
    reason = str(transition.get("reason") or "")
    if isinstance(changes, dict) and changes:
        if "poAmount" in changes:
            timeline.po_changes += 1
        changed_po = _amount(changes["poAmount"]) if "poAmount" in changes else facts.po_amount
        credits = facts.credits
        if "credits" in changes:
            credits = _listed(credits, changes["credits"], lambda c: (str(c["creditNoteId"]), _amount(c["amount"])))
        withdrawn = facts.withdrawn
        if "withdrawn" in changes:
            withdrawn = _listed(withdrawn, changes["withdrawn"], lambda w: str(w["effectKey"]))
        return Facts(facts.invoice_amount, changed_po, credits, withdrawn), "changes"
    if reason.startswith(PO_REASON):
        timeline.po_changes += 1
        po = next(next_po, None)
        if po is None:
            timeline.problems.append(f"v{transition['fromVersion']}: a PO change with no accepted po.updated left")
            return facts, "driver"
        return Facts(facts.invoice_amount, po, facts.credits, facts.withdrawn), "driver"
    if reason.startswith(CREDIT_REASON):
        match = _CREDIT.search(reason)
        if match is None:
            timeline.problems.append(f"v{transition['fromVersion']}: cannot read the credit from {reason!r}")
            return facts, "driver"
        credit = (match.group(1), _amount(match.group(2)))
        return Facts(facts.invoice_amount, facts.po_amount, (*facts.credits, credit), facts.withdrawn), "driver"
    return facts, ""


def _listed(held: tuple[Any, ...], change: Any, item: Callable[[Any], Any]) -> tuple[Any, ...]:
    """A list fact after a transition's change of it: ``{"added": [...], "removed": [...]}`` (what the API
    shows), or the whole new list."""
    if isinstance(change, dict):
        items = list(held)
        for gone in change.get("removed") or ():
            if item(gone) in items:
                items.remove(item(gone))
        return (*items, *(item(new) for new in change.get("added") or ()))
    return tuple(item(c) for c in change or ())


def _expected_po(initial: Decimal, order: SourceOrder, superseded: set[str]) -> list[Decimal]:
    """The PO amounts the accepted reports of the PO produce (each ``po.updated``, and each ``invoice.received``
    but the oldest, which gives ``initial``): each distinct delivery once (``order``
    holds those not set aside), in source order (``occurredAt`` when given, else first acceptance), not
    those the case recorded as superseded, and only those that differ from the PO amount at the time.
    A case that applies a report only when it is newer than the one it holds applies exactly these."""
    current, expected = initial, []
    for report in sorted(order.po, key=lambda r: r.rank):
        if report.delivery in superseded:
            continue
        if report.amount != current:
            expected.append(report.amount)
            current = report.amount
    return expected


def _compare_final(facts: Facts, view: dict[str, Any], timeline: Timeline) -> None:
    actual = (view.get("case") or {}).get("facts") or {}
    try:
        po = _amount(actual.get("poAmount"))
        credits = {str(c["creditNoteId"]): _amount(c["amount"]) for c in actual.get("credits") or ()}
    except (InvalidOperation, KeyError, TypeError):
        timeline.problems.append("the case's facts are unreadable")
        return
    if po != facts.po_amount:
        timeline.problems.append(f"rebuilt PO amount {facts.po_amount} but the case shows {po}")
    if credits != dict(facts.credits):
        timeline.problems.append(f"rebuilt credits {dict(facts.credits)} but the case shows {credits}")


def _amount(value: Any) -> Decimal:
    return Decimal(str(value))
