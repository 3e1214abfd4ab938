"""Synthetic evidence for the checks' tests: a case, what was sent to it, what the supplier logged.

A :class:`Story` is written in the order things happened; it numbers versions and supplier records as
the real system would, so a test states only what matters to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chaos.evidence import Evidence, Sent


def key(name: str) -> str:
    return (name * 64)[:64]


@dataclass
class Story:
    case_id: str = "C-1"
    invoice: str = "1300.00"
    po: str = "1000.00"
    evidence: Evidence = field(default_factory=Evidence)
    history: list[dict[str, Any]] = field(default_factory=list)
    effects: list[dict[str, Any]] = field(default_factory=list)
    credits: list[dict[str, str]] = field(default_factory=list)
    status: str = "open"
    pending: dict[str, Any] | None = None
    rejected: list[dict[str, Any]] = field(default_factory=list)
    superseded: list[dict[str, Any]] = field(default_factory=list)
    _clock: float = 1000.0
    _notes: int = 0

    def __post_init__(self) -> None:
        # self.po is the case's PO amount as it stands; it moves only with a PO change the case applied.
        data = {"invoiceId": "INV-1", "supplierId": "S", "poNumber": "P", "invoiceAmount": self.invoice}
        self.send("invoice.received", {**data, "poAmount": self.po, "currency": "EUR"}, "d-invoice")

    @property
    def version(self) -> int:
        return len(self.history) + 1

    def tick(self) -> float:
        self._clock += 1.0
        return self._clock

    # --- what the driver sent -----------------------------------------------------------------------

    def send(self, event_type: str, data: dict[str, Any], delivery: str, *, status: int = 202) -> Sent:
        sent = Sent(len(self.evidence.sent), "event", self.case_id, event_type, data, delivery, status=status)
        sent.accepted_at = self.tick() if status == 202 else None
        self.evidence.sent.append(sent)
        return sent

    # --- what the case shows ------------------------------------------------------------------------

    def transition(self, status: str, reason: str, *, effect: str | None = None, **extra: Any) -> None:
        self.history.append(
            {"fromVersion": self.version, "status": status, "reason": reason, "effectKey": effect, **extra}
        )
        self.status = status

    def supersede(self, sent: Sent, held_value: str) -> None:
        """The case records ``sent`` as older than the fact it holds (``held_value``), as the product does: an
        entry in ``supersededEvents``, no transition, no version."""
        credit = sent.event_type == "credit_note.issued"
        value = sent.data["amount"] if credit else sent.data["poAmount"]
        order = {"occurredAt": sent.data.get("occurredAt"), "acceptedAt": sent.accepted_at, "deliveryId": sent.delivery}
        self.superseded.append(
            {
                "type": sent.event_type,
                "deliveryId": sent.delivery,
                "fact": "credits" if credit else "poAmount",
                **({"creditNoteId": sent.data["creditNoteId"]} if credit else {}),
                "value": value,
                "order": order,
                "heldValue": held_value,
                "heldOrder": None,
                "reason": f"{value} is older than the {held_value} the case holds: superseded, not applied",
                "at": self.tick(),
                "atVersion": self.version,
            }
        )

    def request(self, name: str, amount: str, *, created: bool = True, status: int = 201) -> dict[str, Any]:
        """The case decides on its current version and the supplier gets the request; done, committed."""
        self._notes += 1
        note_id = f"CN-{self._notes}"
        record = self.post(name, amount, created=created, status=status, note_id=note_id)
        self.effects.append(
            {
                "key": key(name),
                "action": "request_credit_note",
                "status": "done",
                "caseVersion": self.version,
                "result": record["note"] if created else None,
                "reason": None,
                "attempts": 1,
            }
        )
        self.transition("credit_requested", f"over-billed by {amount} EUR", effect=key(name))
        return record

    def post(
        self, name: str, amount: str, *, created: bool, status: int | None = 201, note_id: str = "CN-x"
    ) -> dict[str, Any]:
        body = {"caseId": self.case_id, "invoiceId": "INV-1", "supplierId": "S", "amount": amount, "currency": "EUR"}
        record: dict[str, Any] = {
            "seq": len(self.evidence.supplier) + 1,
            "method": "POST",
            "path": "/credit-notes",
            "idempotencyKey": key(name),
            "body": body,
            "status": status,
            "creditNoteId": note_id if created else None,
            "created": created,
            "faults": [],
        }
        if created:
            record["note"] = {"creditNoteId": note_id, "idempotencyKey": key(name), **body}
        self.evidence.supplier.append(record)
        return record

    def lookup(self, name: str, status: int) -> None:
        self.evidence.supplier.append(
            {
                "seq": len(self.evidence.supplier) + 1,
                "method": "GET",
                "path": "/credit-notes",
                "idempotencyKey": key(name),
                "status": status,
                "created": False,
                "faults": [],
            }
        )

    def po_updated(self, amount: str, delivery: str, *, status_after: str, changes: bool = False) -> None:
        self.send("po.updated", {"poAmount": amount}, delivery)
        self.po = amount
        extra = {"changes": {"poAmount": amount}} if changes else {}
        self.transition(status_after, "po.updated: PO changed", **extra)

    def credit(self, note_id: str, amount: str, delivery: str, *, status_after: str) -> None:
        self.send("credit_note.issued", {"creditNoteId": note_id, "amount": amount}, delivery)
        self.credits.append({"creditNoteId": note_id, "amount": amount})
        self.transition(status_after, f"credit_note.issued: credit note {note_id} for {amount} received")

    def done(self) -> Evidence:
        """The evidence, with the case's final view as the API would show it."""
        facts = {"invoiceId": "INV-1", "invoiceAmount": self.invoice, "currency": "EUR", "credits": self.credits}
        view = {
            "case": {
                "id": self.case_id,
                "status": self.status,
                "version": self.version,
                "facts": {**facts, "poAmount": self.po},
            },
            "effects": self.effects,
            "pendingApproval": self.pending,
            "history": self.history,
            "notes": [],
            "rejectedEvents": self.rejected,
            "supersededEvents": self.superseded,
            "factOrder": None,
        }
        self.evidence.cases[self.case_id] = {"status": 200, "body": view}
        self.evidence.quiescence = {"reached": True, "waited": 3.0, "detail": "quiet"}
        self.evidence.queue = {
            "counts": {"active": 0, "scheduled": 0, "locked": 0, "dead_lettered": 0},
            "deadLetters": [],
        }
        return self.evidence
