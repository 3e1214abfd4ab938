"""Money asked beyond what the newest facts owe always reaches a person (docs/design.md#money), on every backend.

Driven through the indexed functions as the host calls them (the signed webhook, the session-queue trigger)
on the app as the composition root builds it, against the supplier stub over real HTTP. Whatever path makes
requested (done + unknown + late) exceed what the facts owe, a PO edit after the request, an external credit
note on top of an outstanding request, a PO edit that lands while the call is in flight, or a late outcome, one
``over_requested`` alert names the case, the amount owed, the amount requested and the excess, once per excess.

A call that stalls inside the HTTP client is the one thing the stub cannot be told to do (its faults act on the
server side, where a held reply is a reply the client gives up on): :class:`StalledSupplier` holds the app's own
supplier client before it sends, until the test lets it go, and then sends for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from casekeeper import EffectInFlight, EffectStatus, effect_key
from casekeeper.core.ports import DocumentStore
from devhost.supplier_stub import SupplierStub
from shared.app.alerts import Alert
from shared.app.bootstrap import Services
from shared.domain.events import CaseEvent
from shared.messaging.sqlite_queue import LocalSessionQueue, to_service_bus_message
from shared.views.resolution import resolve
from tests.support.supplier import posts
from tests.triggers.conftest import QUEUE, deliver_next, on_the_local_queue, settings_for, signed_request, user_function

CALL_TIMEOUT = 2.0
INVOICE = {
    "invoiceId": "INV-7",
    "supplierId": "S-1",
    "poNumber": "PO-7",
    "invoiceAmount": "1100.00",
    "poAmount": "1000.00",
    "currency": "EUR",
}
"""Over-billed by 100.00, under the approval threshold: one credit-note request of 100.00."""
ACTION = "request_credit_note"


@pytest.fixture
def world(tmp_path: Path, supplier: SupplierStub, store: DocumentStore) -> Iterator[tuple[Services, LocalSessionQueue]]:
    # A short call timeout, so that an outcome becomes unknown by the store's own clock (Cosmos DB's too).
    settings = settings_for(
        tmp_path, supplier.url, CALL_TIMEOUT_SECONDS=str(CALL_TIMEOUT), SUPPLIER_TIMEOUT_SECONDS="0.4"
    )
    with on_the_local_queue(settings, store=store) as (svc, queue):
        yield svc, queue


def post(functions: dict[str, Any], event_type: str, delivery: str, **data: str) -> None:
    body = json.dumps({"type": event_type, "caseId": "C-7", "data": data}).encode()
    response = user_function(functions, "events")(signed_request(body, delivery=delivery))
    assert response.status_code == 202, response.get_body()


def deliver_all(functions: dict[str, Any], queue: LocalSessionQueue) -> None:
    for _ in range(20):
        if not queue.peek(QUEUE):
            return
        assert deliver_next(functions, queue) == "completed"
    raise AssertionError("the queue never drained")


def over_requested(svc: Services) -> list[Alert]:
    return sorted((a for a in svc.alerts.recent() if a.alert_kind == "over_requested"), key=lambda a: a.at)


def numbers(alert: Alert) -> tuple[str, str, str, str]:
    return alert.fields["caseId"], alert.fields["owed"], alert.fields["requested"], alert.fields["excess"]


def created(supplier: SupplierStub) -> list[str]:
    """The amounts of the credit notes the supplier created, in order."""
    return [str(p["body"]["amount"]) for p in posts(supplier) if p.get("created")]


def requested_100(functions: dict[str, Any], svc: Services, queue: LocalSessionQueue, supplier: SupplierStub) -> None:
    post(functions, "invoice.received", "d-1", **INVOICE)
    deliver_all(functions, queue)
    assert svc.cases.require("C-7").status == "credit_requested"
    assert created(supplier) == ["100.00"]
    assert over_requested(svc) == []


def test_a_po_edit_after_a_request_raises_one_over_requested_alert_per_excess(
    functions: dict[str, Any], world: tuple[Services, LocalSessionQueue], supplier: SupplierStub
) -> None:
    """100.00 requested and recorded, then the PO goes to 1080.00: 20.00 owed, 80.00 over-requested. The case
    goes to a person, and an alert says so; another write of the case (a note, a redelivery) raises nothing
    more; a second edit that changes the excess raises a second alert."""
    svc, queue = world
    requested_100(functions, svc, queue, supplier)
    post(functions, "po.updated", "d-2", poAmount="1080.00")
    deliver_all(functions, queue)
    assert svc.cases.require("C-7").status == "needs_review"
    [alert] = over_requested(svc)
    assert numbers(alert) == ("C-7", "20.00", "100.00", "80.00")
    assert alert.fields["currency"] == "EUR" and "80.00 over-requested" in alert.message
    svc.cases.note("C-7", "a person looks")
    post(functions, "po.updated", "d-2", poAmount="1080.00")  # the same delivery again
    post(functions, "case.investigate", "d-3")
    deliver_all(functions, queue)
    assert len(over_requested(svc)) == 1
    post(functions, "po.updated", "d-4", poAmount="1090.00")
    deliver_all(functions, queue)
    assert [numbers(a) for a in over_requested(svc)] == [
        ("C-7", "20.00", "100.00", "80.00"),
        ("C-7", "10.00", "100.00", "90.00"),
    ]
    assert created(supplier) == ["100.00"]  # nothing more was asked


def test_an_external_credit_note_on_top_of_an_outstanding_request_raises_over_requested(
    functions: dict[str, Any], world: tuple[Services, LocalSessionQueue], supplier: SupplierStub
) -> None:
    """100.00 requested and outstanding; the supplier then credits 100.00 of its own accord (a note that answers
    none of our requests): nothing is owed any more, and the 100.00 asked is over-requested."""
    svc, queue = world
    requested_100(functions, svc, queue, supplier)
    post(functions, "credit_note.issued", "d-2", creditNoteId="CN-EXT-1", amount="100.00")
    deliver_all(functions, queue)
    assert svc.cases.require("C-7").status == "needs_review"
    [alert] = over_requested(svc)
    assert numbers(alert) == ("C-7", "0", "100.00", "100.00")


class Killed(BaseException):
    """kill -9 of the worker's process: nothing after it runs (a ``BaseException``, so nothing in the app catches
    it, and the message it was handling is never settled)."""


class StalledSupplier:
    """The app's supplier client, its first call held before it sends until :meth:`release`: a call stalled
    inside the HTTP client (a slow DNS answer, a frozen connection pool) past the call timeout, which then
    goes through."""

    def __init__(self, svc: Services) -> None:
        self.kill_after_send = False
        """Set: the process is killed (kill -9) once the supplier has answered, before the reply is read (F3)."""
        self._portal = svc.ops.supplier
        self._send = self._portal.request_credit_note
        self._go = threading.Event()
        self.stalled = threading.Event()
        self.answered = threading.Event()
        self._portal.request_credit_note = self._stall  # type: ignore[method-assign]

    def _stall(self, key: str, **kwargs: Any) -> Any:
        if self.stalled.is_set():  # only the first call stalls; later ones go through at once
            return self._send(key, **kwargs)
        self.stalled.set()
        assert self._go.wait(30), "never released"
        try:
            answer = self._send(key, **kwargs)
        finally:
            self.answered.set()
        if self.kill_after_send:
            raise Killed("kill -9 at F3: the supplier made the note, its reply is never read")
        return answer

    def release(self) -> None:
        self._go.set()
        assert self.answered.wait(30)

    def restore(self) -> None:
        self._portal.request_credit_note = self._send  # type: ignore[method-assign]


def invoice_with_a_stalled_call(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> tuple[StalledSupplier, threading.Thread, list[BaseException]]:
    """The invoice's decision claims its request and its call stalls, on a thread as the host's worker."""
    stalled = StalledSupplier(svc)
    post(functions, "invoice.received", "d-1", **INVOICE)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            assert deliver_next(functions, queue) == "completed"
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    assert stalled.stalled.wait(30)
    time.sleep(CALL_TIMEOUT + 1.5)  # past the call timeout by the store's clock (whole seconds on Cosmos DB)
    return stalled, worker, errors


def test_a_late_success_over_a_person_failed_entry_is_recorded_done_and_alerted(
    functions: dict[str, Any], world: tuple[Services, LocalSessionQueue], supplier: SupplierStub
) -> None:
    """The call stalls past the call timeout; a person, finding no note at the supplier, resolves the effect
    failed; then the stalled call creates the note. The record says it happened (done, late), a late_outcome
    alert names the amount, and the next decision counts it: nothing is asked twice."""
    svc, queue = world
    stalled, worker, errors = invoice_with_a_stalled_call(functions, svc, queue)
    key = effect_key("C-7", ACTION, 1)
    assert created(supplier) == []  # the supplier has no note: the person is right, for now
    resolved = resolve(svc.ops, key, result=None, reason="no note at the supplier", by="ana", why="checked the portal")
    assert resolved["effect"]["status"] == "failed"
    stalled.release()
    worker.join(30)
    stalled.restore()
    assert errors == []
    effect = svc.ledger.get("C-7", key)
    assert effect is not None and effect.status is EffectStatus.DONE and "late outcome" in (effect.reason or "")
    late = [a for a in svc.alerts.recent() if a.alert_kind == "late_outcome"]
    assert [(a.fields["effectKey"], a.fields["amount"], a.fields["closedAs"]) for a in late] == [
        (key, "100.00", "failed")
    ]
    post(functions, "case.investigate", "d-2")
    deliver_all(functions, queue)
    assert created(supplier) == ["100.00"]  # asked once, not twice
    assert over_requested(svc) == []  # 100.00 requested, 100.00 owed


def test_a_late_success_whose_process_died_at_f3_is_found_by_the_late_watch(
    functions: dict[str, Any], world: tuple[Services, LocalSessionQueue], supplier: SupplierStub
) -> None:
    """The call stalls past the call timeout, a person resolves it failed, the stalled call makes the note and
    the process is killed before it reads the reply (F3). The invoice's message comes back when its lock
    expires and the case, on what it knows, asks again. The person's ``failed`` does not end the guard's
    interest: the change feed sees the watched entry and schedules a lookup by key into the case's session; the
    lookup finds the note and records it done (late) with the late_outcome alert, and the money rule names
    the 100.00 asked twice. The note is never asked for again by the guard (a lookup, no retry)."""
    svc, queue = world
    queue.lock_duration = CALL_TIMEOUT  # the killed invocation's lock expires as Service Bus's would
    stalled, worker, errors = invoice_with_a_stalled_call(functions, svc, queue)
    stalled.kill_after_send = True
    key = effect_key("C-7", ACTION, 1)
    resolve(svc.ops, key, result=None, reason="no note at the supplier", by="ana", why="checked the portal")
    stalled.release()
    worker.join(30)
    stalled.restore()
    assert [type(e) for e in errors] == [Killed]
    assert created(supplier) == ["100.00"]
    failed = svc.ledger.get("C-7", key)
    assert failed is not None and failed.status is EffectStatus.FAILED and failed.watching
    # The change feed delivers the case as the person's resolve left it.
    doc = svc.store.read("cases", "C-7", "C-7")
    assert doc is not None and doc.body["openEffects"] is True
    raw = {**doc.body, "_ts": doc.ts, "_etag": doc.etag}
    user_function(functions, "reconciler")(func.DocumentList([func.Document.from_dict(raw)]))
    deadline = time.monotonic() + CALL_TIMEOUT + 20
    while time.monotonic() < deadline:
        effect = svc.ledger.get("C-7", key)
        assert effect is not None
        if effect.status is EffectStatus.DONE:
            break
        msg = queue.receive(QUEUE, timeout=1.0)  # the redelivered invoice, then the watch's lookup when due
        if msg is not None:
            asyncio.run(user_function(functions, "case_worker")(to_service_bus_message(msg)))
            queue.complete(msg)
    assert effect.status is EffectStatus.DONE and "late outcome" in (effect.reason or ""), effect
    assert not effect.watching
    assert effect.history[-1]["source"] == "reconciler-lookup-late"
    late = [a for a in svc.alerts.recent() if a.alert_kind == "late_outcome"]
    assert [(a.fields["effectKey"], a.fields["amount"], a.fields["closedAs"]) for a in late] == [
        (key, "100.00", "failed")
    ]
    assert created(supplier) == ["100.00", "100.00"]  # the redelivered invoice asked again, on what it knew
    [alert] = over_requested(svc)
    assert numbers(alert) == ("C-7", "100.00", "200.00", "100.00")
    post(functions, "case.investigate", "d-2")
    deliver_all(functions, queue)
    assert created(supplier) == ["100.00", "100.00"]  # the late note counts: nothing more is asked
    after = svc.store.read("cases", "C-7", "C-7")
    assert after is not None and after.body["openEffects"] is False  # no longer watched


def test_a_late_success_after_the_case_asked_again_raises_over_requested(
    functions: dict[str, Any], world: tuple[Services, LocalSessionQueue], supplier: SupplierStub
) -> None:
    """As above, but the person's resolution is followed by a new decision before the stalled call lands:
    the case asks again (correctly, on what it knew), then the late note makes [100.00, 100.00] for 100.00
    owed. The late outcome's write is judged like any other: an over_requested alert names the 100.00."""
    svc, queue = world
    stalled, worker, errors = invoice_with_a_stalled_call(functions, svc, queue)
    key = effect_key("C-7", ACTION, 1)
    resolve(svc.ops, key, result=None, reason="no note at the supplier", by="ana", why="checked the portal")
    # The stalled invocation still holds the case's session; another instance decides (rule R10: safety does
    # not rest on the session).
    asyncio.run(svc.ops.worker.handle(CaseEvent("case.investigate", "C-7", {})))
    assert created(supplier) == ["100.00"] and over_requested(svc) == []
    stalled.release()
    worker.join(30)
    stalled.restore()
    assert errors == []
    assert created(supplier) == ["100.00", "100.00"]
    [alert] = over_requested(svc)
    assert numbers(alert) == ("C-7", "100.00", "200.00", "100.00")
    assert any(a.alert_kind == "late_outcome" for a in svc.alerts.recent())


def test_a_po_edit_during_the_call_raises_the_same_over_requested_alert_as_after_it(
    functions: dict[str, Any], world: tuple[Services, LocalSessionQueue], supplier: SupplierStub
) -> None:
    """The alert depends on money, not timing: the PO edit to 1080.00 lands while the call is in flight (its
    request counts, its outcome unknown), and the alert names the same numbers as an edit after it."""
    svc, queue = world
    stalled = StalledSupplier(svc)
    post(functions, "invoice.received", "d-1", **INVOICE)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            assert deliver_next(functions, queue) == "completed"
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    assert stalled.stalled.wait(30)
    # The edit's own event is handled by another instance while the call is held (the session is busy).
    edit = CaseEvent("po.updated", "C-7", {"poAmount": "1080.00"}, delivery_id="d-2", accepted_at=time.time())
    with contextlib.suppress(EffectInFlight):  # the facts are written; only the decision waits for the call
        asyncio.run(svc.ops.worker.handle(edit))
    [alert] = over_requested(svc)
    assert numbers(alert) == ("C-7", "20.00", "100.00", "80.00")
    stalled.release()
    worker.join(30)
    stalled.restore()
    assert errors == []
    assert [numbers(a) for a in over_requested(svc)] == [("C-7", "20.00", "100.00", "80.00")]
    assert svc.cases.require("C-7").status == "needs_review"
