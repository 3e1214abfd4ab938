"""Facts in any order, on one clock (docs/design.md#facts-before-their-case, #fact-order), driven through the
indexed functions as the host calls them (the signed webhook, the session-queue trigger, the timer, the case
API), on SQLite and on the Cosmos DB test server.

- A PO edit or a credit note that comes before its invoice is held on an ``awaiting_invoice`` case, and the
  invoice opens the case on every fact held: the supplier is asked for what the newest facts owe (50.00),
  not for what the invoice alone says (500.00).
- A case that holds facts and never gets its invoice is told to a person: one ``invoice_missing`` alert,
  from the timer, ``INVOICE_WAIT_SECONDS`` after its last fact.
- The order of acceptance is the store's clock at the door's record: two ingress hosts whose clocks
  disagree by 3 s order two PO edits as they came, and the older one is superseded.
- A delivery id that already changed a case, sent again with another body once the door's record of it
  is gone (its retention ran), is set aside with the reason on the case, not taken for a copy.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import Document, DocumentStore, Query
from devhost.schedule import timer_request
from devhost.supplier_stub import SupplierStub
from shared.app import bootstrap
from shared.app.bootstrap import Services
from shared.handlers.door import HEALTH, KIND_DELIVERY
from shared.messaging.local import LocalQueueEventSender
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.conftest import StoreSpec
from tests.support.outage import ALL, OutageStore
from tests.support.supplier import posts
from tests.triggers.conftest import QUEUE, deliver_next, on_the_local_queue, settings_for, signed_request, user_function
from tests.triggers.test_pages import OLGA, get, text

CASE = "C-first"
INVOICE = {
    "invoiceId": "INV-77",
    "supplierId": "S-1",
    "poNumber": "PO-77",
    "invoiceAmount": "1500.00",
    "poAmount": "1000.00",
    "currency": "EUR",
}
"""Over-billed by 500.00 on the PO it names; under the approval threshold, so asked at once."""


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).isoformat()


@pytest.fixture
def world(
    store_spec: StoreSpec, tmp_path: Path, supplier: SupplierStub, clock: ManualClock
) -> Iterator[tuple[Services, OutageStore, LocalSessionQueue]]:
    """The functions on the backend under test, behind an outage switch (to delay one message as a store
    outage does), with quick retries. ``clock`` is the hosts' and the queue's (moved by the tests: to a
    delayed copy, past the broker's duplicate window); the store keeps its own, the one that orders facts."""
    settings = settings_for(tmp_path, supplier.url, RETRY_BASE_SECONDS="0.01", RETRY_MAX_DELAY_SECONDS="1")
    store = OutageStore(store_spec.open())
    with on_the_local_queue(settings, clock, store) as (svc, queue):  # type: ignore[arg-type]
        yield svc, store, queue


def post(
    functions: dict[str, Any], clock: ManualClock, event_type: str, delivery: str, **data: str
) -> func.HttpResponse:
    body = json.dumps({"type": event_type, "caseId": CASE, "data": data}).encode()
    request = signed_request(body, delivery=delivery, at=clock.now())
    response: func.HttpResponse = user_function(functions, "events")(request)
    return response


def accepted(functions: dict[str, Any], clock: ManualClock, event_type: str, delivery: str, **data: str) -> None:
    response = post(functions, clock, event_type, delivery, **data)
    assert response.status_code == 202, response.get_body()


def deliver_all(functions: dict[str, Any], queue: LocalSessionQueue, clock: ManualClock) -> None:
    """Deliver until the queue is empty, moving the hosts' clock to each scheduled copy."""
    for _ in range(50):
        pending = queue.peek(QUEUE)
        if not pending:
            return
        clock.advance(max(0.0, min(p.enqueued_time for p in pending) - clock.now()) + 0.001)
        deliver_next(functions, queue)
    raise AssertionError("the queue never drained")


def case_json(functions: dict[str, Any]) -> dict[str, Any]:
    req = func.HttpRequest(
        method="GET", url=f"http://localhost/api/cases/{CASE}", body=b"", route_params={"caseId": CASE}
    )
    response = user_function(functions, "get_case")(req)
    assert response.status_code == 200, response.get_body()
    body: dict[str, Any] = json.loads(response.get_body())
    return body


def asked(supplier: SupplierStub) -> list[str]:
    """The amounts of the credit notes the supplier was asked for on the case."""
    return [str(p["body"]["amount"]) for p in posts(supplier) if p["body"].get("caseId") == CASE]


@pytest.mark.usefixtures("behind_easy_auth")  # the page believes the signed-in operator only behind Easy Auth
def test_a_po_edit_that_overtakes_its_invoice_is_held_and_the_first_decision_asks_what_the_newest_facts_owe(
    functions: dict[str, Any],
    clock: ManualClock,
    world: tuple[Services, OutageStore, LocalSessionQueue],
    supplier: SupplierStub,
) -> None:
    """invoice.received (1500.00 on PO 1000.00), then po.updated (PO 1450.00), both dated by the sender, but
    delivered the other way round: 50.00 is owed, and 50.00 is asked."""
    _, _, queue = world
    sent = time.time()
    accepted(functions, clock, "po.updated", "d-po", poAmount="1450.00", occurredAt=iso(sent - 60))
    deliver_all(functions, queue, clock)
    held = case_json(functions)
    assert held["case"]["status"] == "awaiting_invoice", held["rejectedEvents"]
    assert held["case"]["facts"] == {"poAmount": "1450.00"}
    assert held["credit"] is None and held["effects"] == [] and held["rejectedEvents"] == []
    assert held["factOrder"]["poAmount"]["deliveryId"] == "d-po"
    assert held["awaitingInvoice"]["deliveries"] == ["d-po"]
    assert asked(supplier) == []
    page = get(functions, "case_page", f"/api/cases/{CASE}/page", OLGA, caseId=CASE)
    assert page.status_code == 200
    assert "Waiting for the invoice" in html.unescape(text(page)) and "1450.00" in text(page)

    accepted(functions, clock, "invoice.received", "d-inv", **INVOICE, occurredAt=iso(sent - 120))
    deliver_all(functions, queue, clock)
    shown = case_json(functions)
    assert shown["case"]["status"] == "credit_requested", shown["history"]
    assert shown["case"]["facts"]["poAmount"] == "1450.00"
    assert asked(supplier) == ["50.00"], "the first decision did not see the PO edit held before the invoice"
    opened = next(t for t in shown["history"] if t["deliveryId"] == "d-inv")
    assert opened["status"] == "open" and "PO amount 1000.00 -> 1450.00" in opened["reason"]
    assert shown["rejectedEvents"] == [] and shown["supersededEvents"] == [] and shown["awaitingInvoice"] is None


def test_a_credit_note_that_overtakes_its_invoice_counts_in_the_first_decision(
    functions: dict[str, Any],
    clock: ManualClock,
    world: tuple[Services, OutageStore, LocalSessionQueue],
    supplier: SupplierStub,
) -> None:
    """A credit note of 450.00 handled before its invoice (over-billed by 500.00): 50.00 is asked, not 500.00."""
    _, _, queue = world
    accepted(functions, clock, "credit_note.issued", "d-cn", creditNoteId="CN-1", amount="450.00")
    deliver_all(functions, queue, clock)
    assert case_json(functions)["case"]["facts"] == {"credits": [{"creditNoteId": "CN-1", "amount": "450.00"}]}
    accepted(functions, clock, "invoice.received", "d-inv", **INVOICE)
    deliver_all(functions, queue, clock)
    shown = case_json(functions)
    assert shown["case"]["facts"]["credits"] == [{"creditNoteId": "CN-1", "amount": "450.00"}]
    assert asked(supplier) == ["50.00"]
    assert shown["credit"]["received"] == "450.00"


def test_a_held_po_edit_older_than_the_invoice_is_superseded_by_the_invoices_own_po(
    functions: dict[str, Any],
    clock: ManualClock,
    world: tuple[Services, OutageStore, LocalSessionQueue],
    supplier: SupplierStub,
) -> None:
    """The held report is dated before the invoice: the invoice's PO amount is the newer fact, and the held
    one is recorded as superseded, visibly, never applied."""
    _, _, queue = world
    sent = time.time()
    accepted(functions, clock, "po.updated", "d-old", poAmount="1450.00", occurredAt=iso(sent - 600))
    accepted(functions, clock, "invoice.received", "d-inv", **INVOICE, occurredAt=iso(sent - 60))
    deliver_all(functions, queue, clock)
    shown = case_json(functions)
    assert shown["case"]["facts"]["poAmount"] == "1000.00"
    [late] = shown["supersededEvents"]
    assert (late["deliveryId"], late["value"], late["heldValue"]) == ("d-old", "1450.00", "1000.00")
    assert asked(supplier) == ["500.00"]


def test_two_ingress_hosts_with_skewed_clocks_order_facts_by_the_stores_clock(
    functions: dict[str, Any],
    clock: ManualClock,
    world: tuple[Services, OutageStore, LocalSessionQueue],
    supplier: SupplierStub,
) -> None:
    """Invoice 1000.00 on PO 1000.00 (nothing owed). PO 900.00 is accepted by a host whose clock runs 3 s
    fast, PO 1100.00 a second later by another; the 900.00 message is then delayed (a store outage while it
    is handled), so 1100.00 is handled first. By the store's clock 900.00 is the older report: superseded,
    and nothing is asked. (By the hosts' clocks it was the newer, and 100.00 was asked.)"""
    svc, store, queue = world
    accepted(functions, clock, "invoice.received", "d-inv", **{**INVOICE, "invoiceAmount": "1000.00"})
    deliver_all(functions, queue, clock)
    assert case_json(functions)["case"]["status"] == "approved"
    with other_host(svc, clock, ahead=3.0):
        accepted(functions, clock, "po.updated", "d-900", poAmount="900.00")
    time.sleep(1.05)  # a second later, by any clock (Cosmos DB's _ts has whole seconds)
    clock.advance(1.05)
    accepted(functions, clock, "po.updated", "d-1100", poAmount="1100.00")
    store.down = ALL
    assert deliver_next(functions, queue) == "completed"  # 900.00: waits in place ran out, a delayed copy
    store.down = frozenset()
    assert queue.peek(QUEUE)[0].message_id == "webhook:d-1100"
    deliver_all(functions, queue, clock)
    shown = case_json(functions)
    assert shown["case"]["facts"]["poAmount"] == "1100.00", shown["history"]
    [late] = shown["supersededEvents"]
    assert late["deliveryId"] == "d-900"
    assert asked(supplier) == [], "money followed the report a fast host clock put last"


@pytest.mark.parametrize("invoice_delayed", [False, True], ids=["in-order", "invoice-delayed"])
def test_an_invoice_sent_again_under_a_new_delivery_id_is_a_report_of_the_po_whichever_invoice_arrives_first(
    functions: dict[str, Any],
    clock: ManualClock,
    world: tuple[Services, OutageStore, LocalSessionQueue],
    invoice_delayed: bool,
) -> None:
    """An undated sender: invoice.received (PO 1000.00, d-5), then a PO edit (1450.00), then the same invoice
    again under a new delivery id (d-22), accepted last, so the newest report of the PO is the invoice's
    own. Delivered in order, or with d-5 held up (a store outage) until after d-22: the case ends on PO
    1000.00 either way, and shows the report it did not apply as superseded."""
    _, store, queue = world
    accepted(functions, clock, "invoice.received", "d-5", **INVOICE)
    if invoice_delayed:
        store.down = ALL
        assert deliver_next(functions, queue) == "completed"  # waits in place ran out: a delayed copy
        store.down = frozenset()
    accepted(functions, clock, "po.updated", "d-po", poAmount="1450.00")
    assert deliver_next(functions, queue) == "completed"
    if not invoice_delayed:
        deliver_next(functions, queue)
    assert case_json(functions)["case"]["facts"]["poAmount"] == "1450.00"
    accepted(functions, clock, "invoice.received", "d-22", **INVOICE)
    assert queue.peek(QUEUE)[0].message_id == "webhook:d-22"
    deliver_all(functions, queue, clock)
    shown = case_json(functions)
    assert shown["case"]["facts"]["poAmount"] == "1000.00", shown["history"]
    assert shown["rejectedEvents"] == []
    superseded = {r["deliveryId"]: r for r in shown["supersededEvents"]}
    if invoice_delayed:
        # d-22 opened the case, the held PO edit older than it; d-5, older still, came last.
        assert sorted(superseded) == ["d-5", "d-po"]
        assert (superseded["d-5"]["type"], superseded["d-5"]["value"]) == ("invoice.received", "1000.00")
        assert superseded["d-5"]["heldOrder"]["deliveryId"] == "d-22"
    else:
        assert superseded == {}
        applied = next(t for t in shown["history"] if t["deliveryId"] == "d-22")
        assert "PO amount 1450.00 -> 1000.00: a newer report of the invoice's PO" in applied["reason"]


@contextmanager
def other_host(svc: Services, clock: ManualClock, *, ahead: float) -> Iterator[None]:
    """The functions served, for a while, by a second host on the same store and queue whose clock runs
    ``ahead`` seconds fast."""
    queue = LocalSessionQueue(svc.settings.local_queue_path)
    fast = bootstrap.build(
        svc.settings,
        store=svc.store,
        sender=LocalQueueEventSender(queue, QUEUE),
        clock=ManualClock(clock.now() + ahead),
    )
    bootstrap.use(fast)
    try:
        yield
    finally:
        bootstrap.use(svc)
        fast.ops.supplier.close()  # the store is the first host's, closed with it
        queue.close()


def test_a_delivery_id_reused_with_another_body_after_the_doors_record_expired_is_set_aside_on_the_case(
    functions: dict[str, Any],
    clock: ManualClock,
    world: tuple[Services, OutageStore, LocalSessionQueue],
    supplier: SupplierStub,
    store_spec: StoreSpec,
) -> None:
    """d-po changed the PO to 1050.00. Its door record is deleted (as its retention does); the same id with
    PO 1100.00 is accepted at the door (202), and the case, which remembers d-po's body, sets it aside with
    the reason instead of taking it for a copy of the PO edit it applied."""
    svc, _, queue = world
    accepted(functions, clock, "invoice.received", "d-inv", **{**INVOICE, "invoiceAmount": "1100.00"})
    accepted(functions, clock, "po.updated", "d-po", poAmount="1050.00")
    deliver_all(functions, queue, clock)
    assert asked(supplier) == ["100.00"]
    expire_door_record(svc.store, "d-po")
    clock.advance(svc.settings.retention.closed_case_days * 86400)  # the broker's duplicate window is long past
    accepted(functions, clock, "po.updated", "d-po", poAmount="1100.00")
    deliver_all(functions, queue, clock)
    shown = case_json(functions)
    assert shown["case"]["facts"]["poAmount"] == "1050.00"
    [aside] = shown["rejectedEvents"]
    assert "d-po" in aside["reason"] and "another body" in aside["reason"], aside
    # A copy of the report the case applied is still a copy: nothing set aside, nothing changed.
    expire_door_record(svc.store, "d-po")
    clock.advance(3600)
    accepted(functions, clock, "po.updated", "d-po", poAmount="1050.00")
    deliver_all(functions, queue, clock)
    assert len(case_json(functions)["rejectedEvents"]) == 1


def test_a_report_that_repeated_the_value_held_is_a_copy_when_posted_again_after_the_door_forgot_it(
    functions: dict[str, Any],
    clock: ManualClock,
    world: tuple[Services, OutageStore, LocalSessionQueue],
    supplier: SupplierStub,
) -> None:
    """d-same repeated the PO amount the case held (1000.00); d-new changed it to 1050.00 after. d-same posted
    again once the door forgot it takes a new stamp, newer than d-new's; the case remembers d-same and its
    body, so it is a copy: the PO stays 1050.00."""
    svc, _, queue = world
    accepted(functions, clock, "invoice.received", "d-inv", **{**INVOICE, "invoiceAmount": "1100.00"})
    accepted(functions, clock, "po.updated", "d-same", poAmount="1000.00")
    accepted(functions, clock, "po.updated", "d-new", poAmount="1050.00")
    deliver_all(functions, queue, clock)
    assert case_json(functions)["case"]["facts"]["poAmount"] == "1050.00"
    expire_door_record(svc.store, "d-same")
    clock.advance(svc.settings.retention.closed_case_days * 86400)  # the broker's duplicate window is long past
    accepted(functions, clock, "po.updated", "d-same", poAmount="1000.00")
    deliver_all(functions, queue, clock)
    shown = case_json(functions)
    assert shown["case"]["facts"]["poAmount"] == "1050.00", shown["history"][-1]
    assert shown["rejectedEvents"] == []


def test_two_acceptances_of_one_delivery_id_both_deferred_in_an_outage_are_two_messages_and_both_judged(
    functions: dict[str, Any],
    clock: ManualClock,
    world: tuple[Services, OutageStore, LocalSessionQueue],
) -> None:
    """d-po is accepted with PO 1050.00 and waits in the queue; the door forgets it, and the same id comes again
    with PO 1100.00. A store outage defers both: each leaves a delayed copy. The copies are two messages (the
    broker would drop the later of two copies under one id as a duplicate), so the case judges both: one
    applied, the other set aside with the reason, none dropped."""
    svc, store, queue = world
    accepted(functions, clock, "invoice.received", "d-inv", **{**INVOICE, "invoiceAmount": "1200.00"})
    deliver_all(functions, queue, clock)
    accepted(functions, clock, "po.updated", "d-po", poAmount="1050.00")
    expire_door_record(svc.store, "d-po")
    clock.advance(svc.settings.retention.closed_case_days * 86400)  # the broker's duplicate window is long past
    accepted(functions, clock, "po.updated", "d-po", poAmount="1100.00")
    store.down = ALL
    assert [deliver_next(functions, queue) for _ in range(2)] == ["completed", "completed"]  # each deferred
    store.down = frozenset()
    deliver_all(functions, queue, clock)
    shown = case_json(functions)
    assert shown["case"]["facts"]["poAmount"] == "1050.00"
    [aside] = shown["rejectedEvents"]
    assert "d-po" in aside["reason"] and "another body" in aside["reason"], aside


def expire_door_record(store: DocumentStore, delivery: str) -> None:
    """What the record's time to live does once it runs out."""
    record = store.read(HEALTH, KIND_DELIVERY, delivery)
    assert record is not None
    assert store.delete(HEALTH, KIND_DELIVERY, delivery)


def test_an_occurred_at_far_in_the_future_is_refused_at_the_door_naming_the_limit(
    functions: dict[str, Any], clock: ManualClock, world: tuple[Services, OutageStore, LocalSessionQueue]
) -> None:
    _, _, queue = world
    response = post(functions, clock, "po.updated", "d-future", poAmount="1.00", occurredAt=iso(time.time() + 3600))
    assert response.status_code == 400
    assert "FUTURE_SKEW_SECONDS=300" in json.loads(response.get_body())["error"]
    assert queue.peek(QUEUE) == []
    ok = post(functions, clock, "po.updated", "d-future", poAmount="1.00", occurredAt=iso(time.time() + 60))
    assert ok.status_code == 202, ok.get_body()


class AwaitingReads:
    """The real store, keeping the ids of the cases its ``awaiting_invoice`` queries return: what the timer's
    missing-invoice duty reads (the other duties' reads are theirs)."""

    def __init__(self, inner: DocumentStore) -> None:
        self.inner = inner
        self.returned: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def query(self, container: str, query: Query) -> list[Document]:
        docs = self.inner.query(container, query)
        if container == "cases" and query.equals.get("status") == "awaiting_invoice":
            self.returned.extend(d.id for d in docs)
        return docs


@pytest.fixture
def timed(
    tmp_path: Path, supplier: SupplierStub
) -> Iterator[tuple[Services, ManualClock, LocalSessionQueue, AwaitingReads]]:
    """SQLite under a manual clock (the store's too): the wait for an invoice passes without sleeping. The
    store counts the documents its queries return."""
    from casekeeper.stores.sqlite import SqliteDocumentStore

    clock = ManualClock(time.time())
    settings = settings_for(tmp_path, supplier.url, INVOICE_WAIT_SECONDS="3600")
    store = AwaitingReads(SqliteDocumentStore(settings.sqlite_path, clock=clock.now))
    with on_the_local_queue(settings, clock, store) as (svc, queue):  # type: ignore[arg-type]
        yield svc, clock, queue, store


def test_a_case_whose_invoice_never_comes_is_told_to_a_person_once_and_the_timer_reads_only_what_is_due(
    functions: dict[str, Any], timed: tuple[Services, ManualClock, LocalSessionQueue, AwaitingReads]
) -> None:
    """Three cases hold facts without an invoice; one is due after INVOICE_WAIT_SECONDS: one alert, for it.
    The timer's query reads the due case once, never the cases still within the wait, and nothing on the
    ticks after (it walks a window behind a cursor)."""
    svc, clock, queue, store = timed

    def hold(case_id: str) -> None:
        body = json.dumps({"type": "po.updated", "caseId": case_id, "data": {"poAmount": "900.00"}}).encode()
        request = signed_request(body, delivery=f"d-{case_id}", at=clock.now())
        assert user_function(functions, "events")(request).status_code == 202
        deliver_next(functions, queue)

    def missing() -> list[str]:
        return [a.fields["caseId"] for a in svc.ops.alerts.recent() if a.alert_kind == "invoice_missing"]

    def tick() -> list[str]:
        store.returned.clear()
        user_function(functions, "checkpoint_health")(timer_request(past_due=False, schedule_status=None))
        return list(store.returned)

    hold(CASE)
    clock.advance(3000)
    hold("C-later-1")
    hold("C-later-2")
    assert tick() == [] and missing() == []
    clock.advance(700)
    assert tick() == [CASE]
    assert tick() == [] and tick() == []
    [alert] = [a for a in svc.ops.alerts.recent() if a.alert_kind == "invoice_missing"]
    assert alert.fields["caseId"] == CASE and "INVOICE_WAIT_SECONDS=3600" in alert.message
    assert missing() == [CASE]
