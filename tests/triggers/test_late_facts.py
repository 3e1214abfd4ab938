"""A fact that arrives late never replaces a newer one, and no money follows it (docs/design.md#fact-order).

The three ways a fact comes late, driven through the indexed functions as the host calls them (the signed
webhook, the session-queue trigger), with the local session queue's real scheduling, redelivery and
dead-lettering: a delayed copy made during a store outage that outlasted the waits in place, a delayed
copy made when only the decision's claim failed (the facts were already written), and a dead letter put
back with ``casekeeper events redrive`` after a newer fact. In each, the PO goes 1099.00 -> 900.00 ->
1100.00 on an invoice of 1100.00: applying the stale 900.00 last would ask the supplier for 200.00 that
nobody owes.

The outage is a thin wrapper around the real SQLite store that refuses the calls on the containers named
in ``down``: the fault under test is "the store, or one of its containers, is unreachable", which a real
store cannot be told to be.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from casekeeper.core.clock import ManualClock
from casekeeper.stores.sqlite import SqliteDocumentStore
from devhost.supplier_stub import SupplierStub
from shared.app.bootstrap import Services
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.support.outage import ALL, OutageStore
from tests.support.supplier import posts
from tests.triggers.conftest import QUEUE, deliver_next, on_the_local_queue, settings_for, signed_request, user_function

INVOICE = {
    "invoiceId": "INV-9",
    "supplierId": "S-1",
    "poNumber": "PO-1",
    "invoiceAmount": "1100.00",
    "poAmount": "1099.00",
    "currency": "EUR",
}
"""Within tolerance of its PO: approved, nothing asked."""


@pytest.fixture
def world(
    tmp_path: Path, supplier: SupplierStub, clock: ManualClock
) -> Iterator[tuple[Services, OutageStore, LocalSessionQueue]]:
    settings = settings_for(tmp_path, supplier.url, RETRY_BASE_SECONDS="0.01", RETRY_MAX_DELAY_SECONDS="60")
    store = OutageStore(SqliteDocumentStore(settings.sqlite_path, clock=clock.now))
    with on_the_local_queue(settings, clock, store) as (svc, queue):  # type: ignore[arg-type]
        yield svc, store, queue


def post(functions: dict[str, Any], clock: ManualClock, event_type: str, delivery: str, **data: str) -> None:
    body = json.dumps({"type": event_type, "caseId": "C-9", "data": data}).encode()
    response = user_function(functions, "events")(signed_request(body, delivery=delivery, at=clock.now()))
    assert response.status_code == 202, response.get_body()
    clock.advance(0.5)  # the sender's next word comes a moment later


def deliver_all(functions: dict[str, Any], queue: LocalSessionQueue, clock: ManualClock) -> None:
    """Deliver until the queue is empty, moving time to each scheduled copy."""
    for _ in range(50):
        pending = queue.peek(QUEUE)
        if not pending:
            return
        clock.advance(max(0.0, min(p.enqueued_time for p in pending) - clock.now()) + 0.001)
        deliver_next(functions, queue)
    raise AssertionError("the queue never drained")


def view(functions: dict[str, Any]) -> dict[str, Any]:
    import azure.functions as func

    req = func.HttpRequest(method="GET", url="http://localhost/api/cases/C-9", body=b"", route_params={"caseId": "C-9"})
    response = user_function(functions, "get_case")(req)
    assert response.status_code == 200
    body: dict[str, Any] = json.loads(response.get_body())
    return body


def assert_the_newest_po_stands(functions: dict[str, Any], supplier: SupplierStub) -> None:
    shown = view(functions)
    assert shown["case"]["facts"]["poAmount"] == "1100.00", shown["history"]
    assert posts(supplier) == [], "money followed the stale PO amount"
    [late] = shown["supersededEvents"]
    assert (late["type"], late["deliveryId"], late["value"], late["heldValue"]) == (
        "po.updated",
        "d-2",
        "900.00",
        "1100.00",
    )
    assert "superseded" in late["reason"] and late["order"]["deliveryId"] == "d-2"
    assert not any("900.00" in str(t["changes"]) for t in shown["history"][-1:])


def test_a_copy_delayed_by_a_store_outage_does_not_replace_the_newer_po(
    functions: dict[str, Any],
    world: tuple[Services, OutageStore, LocalSessionQueue],
    clock: ManualClock,
    supplier: SupplierStub,
) -> None:
    svc, store, queue = world
    post(functions, clock, "invoice.received", "d-1", **INVOICE)
    deliver_all(functions, queue, clock)
    assert svc.cases.require("C-9").status == "approved"
    post(functions, clock, "po.updated", "d-2", poAmount="900.00")
    store.down = ALL
    assert deliver_next(functions, queue) == "completed"  # the waits in place ran out: a delayed copy
    [copy] = queue.peek(QUEUE)
    assert json.loads(copy.body)["retry"] == 1
    store.down = frozenset()
    post(functions, clock, "po.updated", "d-3", poAmount="1100.00")  # sent later; handled first
    assert queue.peek(QUEUE)[0].message_id == "webhook:d-3"
    assert deliver_next(functions, queue) == "completed"
    assert svc.cases.require("C-9").facts["poAmount"] == "1100.00"
    deliver_all(functions, queue, clock)  # the 900.00 copy comes back now
    assert_the_newest_po_stands(functions, supplier)


def test_a_fact_whose_decision_failed_is_not_written_again_over_a_newer_one(
    functions: dict[str, Any],
    world: tuple[Services, OutageStore, LocalSessionQueue],
    clock: ManualClock,
    supplier: SupplierStub,
) -> None:
    """Only the decision's claim fails (the write that adds its effect's entry to the case): the 900.00 is
    written, its decision cannot claim its effect, and the whole event is deferred; the 1100.00 arrives
    meanwhile. (The decision reads its effects from the case it already read; its first write of its own
    is the claim.)"""
    svc, store, queue = world
    post(functions, clock, "invoice.received", "d-1", **INVOICE)
    deliver_all(functions, queue, clock)
    post(functions, clock, "po.updated", "d-2", poAmount="900.00")

    def a_claim(container: str, method: str, args: tuple[Any, ...]) -> bool:
        body = args[2] if method == "replace" and len(args) > 2 else {}
        return container == "cases" and any(e.get("status") == "started" for e in body.get("effects") or ())

    store.refuse = a_claim
    assert deliver_next(functions, queue) == "completed"
    assert svc.cases.require("C-9").facts["poAmount"] == "900.00"  # facts first; the decision waits
    store.refuse = None
    post(functions, clock, "po.updated", "d-3", poAmount="1100.00")
    assert deliver_next(functions, queue) == "completed"
    deliver_all(functions, queue, clock)
    shown = view(functions)
    assert shown["case"]["facts"]["poAmount"] == "1100.00", shown["history"]
    assert posts(supplier) == [], "money followed the stale PO amount"
    # The 900.00 was the newest when it was written, and the history names its delivery; its copy, arriving
    # after the 1100.00, is old news, not a late report: it changes nothing and is not recorded as one.
    applied = [t["deliveryId"] for t in shown["history"] if t["changes"] and "poAmount" in t["changes"]]
    assert applied == ["d-2", "d-3"]
    assert shown["supersededEvents"] == []
    assert shown["case"]["status"] == "approved"


def test_a_redriven_dead_letter_does_not_replace_the_newer_po(
    functions: dict[str, Any],
    world: tuple[Services, OutageStore, LocalSessionQueue],
    clock: ManualClock,
    supplier: SupplierStub,
) -> None:
    svc, store, queue = world
    post(functions, clock, "invoice.received", "d-1", **INVOICE)
    deliver_all(functions, queue, clock)
    post(functions, clock, "po.updated", "d-2", poAmount="900.00")
    store.down = ALL
    assert deliver_next(functions, queue) == "completed"  # deferred once
    clock.advance(3600 + 2)  # RETRY_FOR_SECONDS (3600) past the first failure: the broker's turn
    assert [deliver_next(functions, queue) for _ in range(10)] == ["abandoned"] * 10
    [letter] = svc.dead_letters.peek()
    store.down = frozenset()
    post(functions, clock, "po.updated", "d-3", poAmount="1100.00")
    deliver_all(functions, queue, clock)
    assert svc.cases.require("C-9").facts["poAmount"] == "1100.00"
    assert [m.message_id for m in svc.dead_letters.redrive(None)] == [letter.message_id]  # as the alert says
    deliver_all(functions, queue, clock)
    assert_the_newest_po_stands(functions, supplier)


@pytest.mark.parametrize(
    "occurred", ["2026-12-03T19:05:34", "2026-12-03", "yesterday", "2026-02-30T10:00:00Z", 1764788734, ""]
)
def test_a_malformed_occurred_at_is_refused_at_the_door_naming_the_field(
    functions: dict[str, Any], world: tuple[Services, OutageStore, LocalSessionQueue], occurred: object
) -> None:
    _, _, queue = world
    body = json.dumps({"type": "po.updated", "caseId": "C-9", "data": {"poAmount": "1.00", "occurredAt": occurred}})
    response = user_function(functions, "events")(signed_request(body.encode(), delivery="d-bad"))
    assert response.status_code == 400
    assert "data.occurredAt" in json.loads(response.get_body())["fields"]
    assert queue.peek(QUEUE) == []


def test_the_acceptance_stamp_is_made_once_and_every_copy_carries_it(
    functions: dict[str, Any],
    world: tuple[Services, OutageStore, LocalSessionQueue],
    clock: ManualClock,
) -> None:
    svc, store, queue = world
    post(functions, clock, "invoice.received", "d-1", **INVOICE, occurredAt="2026-12-03T10:00:00+01:00")
    [message] = queue.peek(QUEUE)
    stamp = json.loads(message.body)["acceptedAt"]
    assert stamp == pytest.approx(clock.now() - 0.5)
    store.down = ALL
    for _ in range(3):  # a delayed copy of a delayed copy of ...
        deliver_all_once(functions, queue, clock)
    [copy] = queue.peek(QUEUE)
    body = json.loads(copy.body)
    assert body["retry"] == 3 and body["acceptedAt"] == stamp
    assert body["data"]["occurredAt"] == "2026-12-03T10:00:00+01:00"
    store.down = frozenset()
    deliver_all(functions, queue, clock)
    order = svc.cases.require("C-9").data["factOrder"]
    assert order["poAmount"] == {"occurredAt": "2026-12-03T10:00:00+01:00", "acceptedAt": stamp, "deliveryId": "d-1"}


def deliver_all_once(functions: dict[str, Any], queue: LocalSessionQueue, clock: ManualClock) -> None:
    [pending] = queue.peek(QUEUE)
    clock.advance(max(0.0, pending.enqueued_time - clock.now()) + 0.001)
    assert deliver_next(functions, queue) == "completed"


def test_an_invoice_resent_with_another_po_is_set_aside_and_shown_with_the_reason(
    functions: dict[str, Any],
    world: tuple[Services, OutageStore, LocalSessionQueue],
    clock: ManualClock,
) -> None:
    svc, _, queue = world
    post(functions, clock, "invoice.received", "d-1", **INVOICE)
    deliver_all(functions, queue, clock)
    before = svc.cases.require("C-9")
    post(functions, clock, "invoice.received", "d-2", **{**INVOICE, "poAmount": "900.00", "poNumber": "PO-2"})
    deliver_all(functions, queue, clock)
    shown = view(functions)
    assert shown["case"]["version"] == before.version and shown["case"]["facts"]["poAmount"] == "1099.00"
    [rejected] = shown["rejectedEvents"]
    assert rejected["id"] == "webhook:d-2"
    assert set(rejected["fields"]) == {"data.poAmount", "data.poNumber"}
    assert "another invoice" in rejected["reason"] and "poAmount is 900.00" in rejected["reason"]
