"""Facts are applied by their order (docs/design.md#fact-order), on every backend: the case worker against
the real store (SQLite, and the Cosmos DB test server) and the supplier stub over HTTP.

The property: however reports of one case's facts are delayed, reordered or repeated, the case ends with
the facts of the newest report of each (in the sender's order), every report older than one already
applied is recorded as superseded with its delivery id, and the money rule held at every request. Then
the examples the issue names: a credit note corrected, an invoice re-sent with other facts, a fact the
case holds no order for.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import DocumentStore
from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.domain.events import CaseEvent
from shared.errors import InvalidEvent
from shared.handlers.door import HEALTH, KIND_DELIVERY
from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, Ingress, sign
from shared.messaging import decode, encode
from tests.support.app import Harness, make_harness
from tests.support.invoices import invoice
from tests.support.money import money_violations

_ids = itertools.count()
T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
ACCEPTED = 1_800_000_000.0
SECRET = "fact-order-secret"


def at(minutes: int, offset_hours: int = 0) -> str:
    """An ``occurredAt``, ``minutes`` after T0, written in another offset to show instants compare."""
    zone = timezone(timedelta(hours=offset_hours))
    return (T0 + timedelta(minutes=minutes)).astimezone(zone).isoformat()


def handle(app: Harness, type_: str, case_id: str, delivery: str, accepted: float, **data: Any) -> Any:
    event = CaseEvent(type_, case_id, data, delivery_id=delivery, accepted_at=accepted)
    return asyncio.run(app.worker.handle(event))


def shown(app: Harness, case_id: str) -> dict[str, Any]:
    return app.cases.require(case_id).data


def posts(supplier: SupplierStub, case_id: str) -> list[dict[str, Any]]:
    return [
        r
        for r in supplier.requests
        if r["method"] == "POST" and isinstance(r.get("body"), dict) and r["body"].get("caseId") == case_id
    ]


amounts = st.integers(90_000, 130_000).map(lambda c: str((Decimal(c) / 100).quantize(Decimal("0.01"))))


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[str], list[int]]:
    """PO amounts in the sender's order, and the order in which their reports arrive: any permutation,
    some delivered again (a redelivery, a redriven dead letter)."""
    source = draw(st.lists(amounts, min_size=1, max_size=6))
    arrival = draw(st.permutations(range(len(source))))
    again = draw(st.lists(st.integers(0, len(source) - 1), max_size=3))
    spots = [draw(st.integers(0, len(arrival))) for _ in again]
    order = list(arrival)
    for index, spot in zip(again, spots, strict=True):
        order.insert(spot, index)
    return source, order


def check_property(
    app: Harness, supplier: SupplierStub, source: list[str], arrival: list[int], *, sender: bool
) -> None:
    """``sender``: the sender gives ``occurredAt`` and each report is stamped when it first arrives;
    otherwise each report carries only its acceptance stamp, made in source order before the delays.
    A report delivered again carries the stamp of its first delivery, as every copy does."""
    case_id = f"P-{next(_ids)}"
    initial = invoice("1150.00", "1000.00")
    handle(
        app,
        ev.INVOICE_RECEIVED,
        case_id,
        f"{case_id}-inv",
        ACCEPTED,
        **initial,
        **({"occurredAt": at(0)} if sender else {}),
    )
    first_arrival = {index: arrival.index(index) for index in set(arrival)}
    held = -1  # the invoice's report: older than every PO report
    superseded: set[str] = set()
    applied: set[str] = set()
    current = initial["poAmount"]
    for index in arrival:
        delivery = f"{case_id}-po-{index}"
        stamp = ACCEPTED + 10 + (first_arrival[index] if sender else index)
        extra = {"occurredAt": at(index + 1, offset_hours=index % 3)} if sender else {}
        handle(app, ev.PO_UPDATED, case_id, delivery, stamp, poAmount=source[index], **extra)
        if index > held:
            if source[index] != current:
                applied.add(delivery)  # it changed the facts: the history names its delivery
            held, current = index, source[index]
        elif index < held and delivery not in applied:
            superseded.add(delivery)  # a copy of a report that changed the facts before is old news
    case = app.cases.require(case_id)
    assert case.facts["poAmount"] == source[-1]
    records = case.data.get("supersededEvents") or []
    assert sorted(r["deliveryId"] for r in records) == sorted(superseded), "each late report recorded once"
    for record in records:
        late = int(record["deliveryId"].rsplit("-", 1)[1])
        assert record["type"] == "po.updated" and record["value"] == source[late] and record["reason"]
    problems = money_violations(initial, case, app.ledger.for_case(case_id), posts(supplier, case_id))
    assert problems == [], problems


@pytest.mark.parametrize("sender", [True, False], ids=["occurredAt", "acceptedAt"])
def test_the_newest_report_of_a_fact_stands_whatever_the_arrival_order(
    store: DocumentStore, supplier: SupplierStub, store_spec: Any, sender: bool
) -> None:
    app = make_harness(store, supplier.url)

    @settings(
        max_examples=25 if store_spec.kind == "sqlite" else 4,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(deliveries())
    def run(drawn: tuple[list[str], list[int]]) -> None:
        source, arrival = drawn
        check_property(app, supplier, source, arrival, sender=sender)

    run()


def test_a_corrected_credit_note_is_applied_by_its_order_and_an_older_report_is_superseded(
    app: Harness, supplier: SupplierStub
) -> None:
    """CN-1 40.00, then CN-1 100.00: the correction is applied (old and new amount in the history), so when
    the PO drops by 100.00 the 100.00 received covers it and nothing is asked (kept at 40.00, the case
    would ask for another 60.00). The first report, delivered again under a new delivery id, is older and
    changes nothing."""

    def credit(delivery: str, stamp: float, amount: str, minute: int) -> None:
        extra = {"creditNoteId": "CN-1", "amount": amount, "occurredAt": at(minute)}
        handle(app, ev.CREDIT_NOTE_ISSUED, "C-1", delivery, stamp, **extra)

    handle(app, ev.INVOICE_RECEIVED, "C-1", "d-1", ACCEPTED, **invoice("1100.00", "1100.00"), occurredAt=at(0))
    credit("d-2", ACCEPTED + 1, "40.00", 1)
    credit("d-3", ACCEPTED + 2, "100.00", 2)
    case = app.cases.require("C-1")
    assert case.facts["credits"] == [{"creditNoteId": "CN-1", "amount": "100.00"}]
    reasons = [t.reason or "" for t in case.history]
    assert any("CN-1 corrected from 40.00 to 100.00" in r for r in reasons), reasons
    handle(app, ev.PO_UPDATED, "C-1", "d-4", ACCEPTED + 3, poAmount="1000.00", occurredAt=at(3))
    credit("d-5", ACCEPTED + 4, "40.00", 1)  # the first report again, late
    case = app.cases.require("C-1")
    assert case.facts["credits"] == [{"creditNoteId": "CN-1", "amount": "100.00"}]
    [late] = case.data["supersededEvents"]
    assert (late["type"], late["deliveryId"], late["creditNoteId"], late["value"], late["heldValue"]) == (
        "credit_note.issued",
        "d-5",
        "CN-1",
        "40.00",
        "100.00",
    )
    assert posts(supplier, "C-1") == [], "asked for credit that the corrected note already covers"


def test_a_credit_note_reported_twice_is_recorded_once(app: Harness) -> None:
    handle(app, ev.INVOICE_RECEIVED, "C-1", "d-1", ACCEPTED, **invoice("1000.00", "1000.00"))
    handle(app, ev.CREDIT_NOTE_ISSUED, "C-1", "d-2", ACCEPTED + 1, creditNoteId="CN-1", amount="40.00")
    version = app.cases.require("C-1").version
    handle(app, ev.CREDIT_NOTE_ISSUED, "C-1", "d-2", ACCEPTED + 1, creditNoteId="CN-1", amount="40.00")  # redelivery
    case = app.cases.require("C-1")
    assert case.version >= version and "supersededEvents" not in case.data
    assert case.facts["credits"] == [{"creditNoteId": "CN-1", "amount": "40.00"}]


@pytest.mark.parametrize(
    ("field", "value"),
    [("poAmount", "999.00"), ("supplierId", "SUP-OTHER"), ("poNumber", "PO-OTHER"), ("invoiceAmount", "1.00")],
)
def test_an_invoice_that_disagrees_with_the_case_is_refused_naming_the_field(
    app: Harness, field: str, value: str
) -> None:
    handle(app, ev.INVOICE_RECEIVED, "C-1", "d-1", ACCEPTED, **invoice("1000.00"))
    before = app.cases.require("C-1")
    with pytest.raises(InvalidEvent) as refused:
        handle(app, ev.INVOICE_RECEIVED, "C-1", "d-2", ACCEPTED + 1, **{**invoice("1000.00"), field: value})
    assert f"data.{field}" in refused.value.fields and "another invoice" in refused.value.reason
    after = app.cases.require("C-1")
    assert (after.version, after.facts) == (before.version, before.facts)


def test_the_same_invoice_again_after_a_po_change_is_not_a_conflict_but_a_report_of_its_po(app: Harness) -> None:
    """The PO amount is compared with the invoice's own, not with the PO as a later po.updated left it. The
    same invoice sent again is a report of its PO amount, judged by its order as a po.updated is: a copy of
    the delivery that opened the case changes nothing; one sent under a new delivery id after the PO edit is
    the newest report of the PO, and one dated before it is superseded."""
    handle(app, ev.INVOICE_RECEIVED, "C-1", "d-1", ACCEPTED, **invoice("1000.00"))
    handle(app, ev.PO_UPDATED, "C-1", "d-2", ACCEPTED + 1, poAmount="990.00")
    handle(app, ev.INVOICE_RECEIVED, "C-1", "d-1", ACCEPTED, **invoice("1000.00"))  # redelivered
    case = app.cases.require("C-1")
    assert case.facts["poAmount"] == "990.00" and not case.data.get("supersededEvents")
    handle(app, ev.INVOICE_RECEIVED, "C-1", "d-9", ACCEPTED + 2, **invoice("1000.00"))  # re-sent, same invoice
    case = app.cases.require("C-1")
    assert case.facts["poAmount"] == "1000.00"
    assert any(t.delivery_id == "d-9" and "a newer report of the invoice's PO" in t.reason for t in case.history)
    handle(app, ev.PO_UPDATED, "C-1", "d-3", ACCEPTED + 3, poAmount="980.00")
    handle(app, ev.INVOICE_RECEIVED, "C-1", "d-9", ACCEPTED + 2, **invoice("1000.00"))  # redelivered: one report
    assert app.cases.require("C-1").facts["poAmount"] == "980.00"


def test_a_fact_the_case_holds_no_order_for_takes_any_report_then_keeps_its_order(
    app: Harness, store: DocumentStore
) -> None:
    facts = dict(invoice("1000.00"))
    app.cases.create("C-old", {**facts, "credits": [{"creditNoteId": "CN-1", "amount": "5.00"}], "withdrawn": []})
    handle(app, ev.PO_UPDATED, "C-old", "d-2", ACCEPTED + 5, poAmount="990.00")
    handle(app, ev.CREDIT_NOTE_ISSUED, "C-old", "d-3", ACCEPTED + 5, creditNoteId="CN-1", amount="6.00")
    case = app.cases.require("C-old")
    assert case.facts["poAmount"] == "990.00"
    assert case.facts["credits"] == [{"creditNoteId": "CN-1", "amount": "6.00"}]
    handle(app, ev.PO_UPDATED, "C-old", "d-1", ACCEPTED + 1, poAmount="980.00")  # older than d-2
    case = app.cases.require("C-old")
    assert case.facts["poAmount"] == "990.00"
    assert [r["deliveryId"] for r in case.data["supersededEvents"]] == ["d-1"]
    # An unstamped report (handed over without its acceptance time) leaves no order: the next is taken as it comes.
    asyncio.run(app.worker.handle(CaseEvent(ev.PO_UPDATED, "C-old", {"poAmount": "970.00"})))
    assert app.cases.require("C-old").facts["poAmount"] == "970.00"


def test_a_delivery_posted_again_after_the_duplicate_window_is_still_the_one_report(app: Harness) -> None:
    """The broker forgets a message id after its duplicate window; a sender retrying that late gets a new
    acceptance stamp. The delivery id says it is the report already judged."""
    handle(app, ev.INVOICE_RECEIVED, "C-1", "d-1", ACCEPTED, **invoice("1000.00"))
    handle(app, ev.PO_UPDATED, "C-1", "d-2", ACCEPTED + 1, poAmount="900.00")
    handle(app, ev.PO_UPDATED, "C-1", "d-3", ACCEPTED + 2, poAmount="1100.00")
    handle(app, ev.PO_UPDATED, "C-1", "d-2", ACCEPTED + 900, poAmount="900.00")
    handle(app, ev.PO_UPDATED, "C-1", "d-4", ACCEPTED + 0.5, poAmount="950.00")  # late: superseded
    handle(app, ev.PO_UPDATED, "C-1", "d-4", ACCEPTED + 950, poAmount="950.00")  # and posted again, later
    case = app.cases.require("C-1")
    assert case.facts["poAmount"] == "1100.00"
    assert [r["deliveryId"] for r in case.data["supersededEvents"]] == ["d-4"]


class Captured:
    """The queue as the ingress sees it: keeps each event as the message body would carry it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def send(self, event: CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        self.bodies.append(encode(event))


def through_the_door(app: Harness, clock: ManualClock, delivery: str, type_: str, **data: Any) -> None:
    """POST the event to the webhook (with the door on the harness's store), then hand the message the
    ingress enqueued to the worker as the queue trigger would: its acceptance stamp read from the body."""
    sender = Captured()
    ingress = Ingress([SECRET], sender, clock, store=app.store)  # type: ignore[arg-type]
    body = json.dumps({"type": type_, "caseId": "C-door", "data": data}).encode()
    headers = {
        "Content-Type": "application/json",
        DELIVERY_HEADER: delivery,
        SIGNATURE_HEADER: sign(SECRET, body, int(clock.now()), delivery),
    }
    assert ingress.accept_event(headers, body).status == 202
    raw = json.loads(sender.bodies[-1])
    fields, delivery_id, envelope = decode(raw)
    event = ev.parse_event(fields, delivery_id=delivery_id)
    asyncio.run(app.worker.handle(replace(event, accepted_at=envelope.accepted_at)))


def test_a_delivery_posted_again_keeps_the_stamp_of_its_first_acceptance(app: Harness) -> None:
    """d-2 repeats the PO amount the case holds (newer, same value: nothing changes, only its order is
    kept), then d-3 changes it. d-2 posted again after the broker's duplicate window is still the report
    older than d-3: the door gives it its first stamp (the store's clock at its record, not the host's clock,
    here 900 s on), so it cannot replace d-3's PO amount."""
    clock = ManualClock(ACCEPTED)
    through_the_door(app, clock, "d-1", ev.INVOICE_RECEIVED, **invoice("1300.00"))
    clock.advance(1)
    through_the_door(app, clock, "d-2", ev.PO_UPDATED, poAmount="1000.00")
    clock.advance(1)
    through_the_door(app, clock, "d-3", ev.PO_UPDATED, poAmount="1100.00")
    clock.advance(900)
    through_the_door(app, clock, "d-2", ev.PO_UPDATED, poAmount="1000.00")
    case = app.cases.require("C-door")
    assert case.facts["poAmount"] == "1100.00"
    assert case.data["factOrder"]["poAmount"]["deliveryId"] == "d-3"
    [superseded] = case.data["supersededEvents"]
    first = app.store.read(HEALTH, KIND_DELIVERY, "d-2")
    assert first is not None
    assert superseded["deliveryId"] == "d-2" and superseded["order"]["acceptedAt"] == first.body["acceptedAt"]
