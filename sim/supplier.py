"""The supplier portal, in process: credit notes by idempotency key, behind httpx's ``MockTransport``.

Why a stand-in and not the supplier stub over HTTP (``devhost.supplier_stub``): a real socket brings a
second thread and real time (the stub's server, the client's timeouts), so a seed could not replay a
run exactly, and a call that hangs could not hang in the simulator's time. Here the app's own client
(``shared.supplier.portal.SupplierPortal``, its status mapping and JSON parsing) runs unchanged; only the
transport under it is in process. The stand-in keeps the journal the invariants read: every note made,
for which key, case and amount, and when.

Faults are armed one call at a time (:meth:`Supplier.arm`), each used by the next credit-note request:

- ``fail_before_create`` (503, nothing made), ``reject`` (422), ``fail_after_create`` (made, then 503),
  ``drop_after_create`` (made, then the connection drops), ``timeout_after_create`` (made, then the read
  times out), ``no_id`` (made, answered 201 without ``creditNoteId``);
- ``stall``: the call hangs past the call timeout before the note is made while the world acts (an
  operator may resolve the effect meanwhile); then the note is made and the answer comes back late;
- ``big``: the answer carries :data:`BIG_ANSWER_BYTES` of extra text (a supplier that echoes a document);
- ``odd_shape``: extra nested fields, the amount as a JSON number.

``lookup_down`` makes every lookup by key answer 503 until it is cleared.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

FAULTS = (
    "fail_before_create",
    "reject",
    "fail_after_create",
    "drop_after_create",
    "timeout_after_create",
    "no_id",
    "stall",
    "big",
    "odd_shape",
)
BIG_ANSWER_BYTES = 3 * 1024 * 1024
"""The size of a ``big`` answer: the issue's repro (3 MB), over Cosmos DB's 2 MB item limit."""


@dataclass
class Note:
    note_id: str
    key: str
    case_id: str
    amount: str
    body: dict[str, Any]


@dataclass
class Supplier:
    """The portal's state and journal; ``on_stall`` is what the world does while a call hangs."""

    on_stall: Callable[[], None]
    notes: dict[str, Note] = field(default_factory=dict)
    armed: list[str] = field(default_factory=list)
    lookup_down: bool = False
    journal: list[dict[str, Any]] = field(default_factory=list)

    def arm(self, fault: str) -> None:
        self.armed.append(fault)

    def clear(self) -> None:
        self.armed.clear()
        self.lookup_down = False

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def notes_for(self, case_id: str) -> list[Note]:
        return [n for n in self.notes.values() if n.case_id == case_id]

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            key = request.url.params.get("idempotencyKey", "")
            self.journal.append({"method": "GET", "key": key})
            if self.lookup_down:
                return httpx.Response(503, json={"error": "lookup unavailable"})
            note = self.notes.get(key)
            return httpx.Response(200, json=note.body) if note else httpx.Response(404, json={"error": "no such key"})
        key = request.headers.get("Idempotency-Key", "")
        body = json.loads(request.content)
        fault = self.armed.pop(0) if self.armed else None
        self.journal.append({"method": "POST", "key": key, "body": body, "fault": fault})
        if fault == "fail_before_create":
            return httpx.Response(503, json={"error": "unavailable"})
        if fault == "reject":
            return httpx.Response(422, json={"error": "refused by the supplier"})
        if fault == "stall":
            self.on_stall()
        note = self.notes.get(key)
        if note is not None and (note.amount, note.case_id) != (str(body["amount"]), str(body["caseId"])):
            return httpx.Response(422, json={"error": "idempotency key re-used with another body"})
        if note is None:
            note_id = f"CN-{len(self.notes) + 1}"
            answer: dict[str, Any] = {
                "creditNoteId": note_id,
                "caseId": body["caseId"],
                "amount": body["amount"],
                "currency": body["currency"],
                "status": "issued",
            }
            note = Note(note_id, key, str(body["caseId"]), str(body["amount"]), answer)
            self.notes[key] = note
        answer = dict(note.body)
        if fault == "fail_after_create":
            return httpx.Response(503, json={"error": "unavailable"})
        if fault == "drop_after_create":
            raise httpx.ReadError("connection dropped mid-reply", request=request)
        if fault == "timeout_after_create":
            raise httpx.ReadTimeout("the reply did not come", request=request)
        if fault == "no_id":
            return httpx.Response(201, json={"status": "accepted"})
        if fault == "big":
            answer["document"] = "x" * BIG_ANSWER_BYTES
        if fault == "odd_shape":
            answer = {**answer, "amount": float(answer["amount"]), "lines": [{"n": i} for i in range(50)]}
        return httpx.Response(201, json=answer)
