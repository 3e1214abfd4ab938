"""The order of facts itself (``shared.domain.order``) and the pure rules that use it
(``shared.domain.transitions``): properties over any reports, no store."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.domain import events as ev
from shared.domain import transitions
from shared.domain.invoice import Credit, InvoiceFacts, Rules, Status
from shared.domain.order import FactOrder, instant, occurred_at_problem
from shared.errors import InvalidEvent

moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC))
offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
orders = st.builds(
    FactOrder,
    st.none() | moments.map(lambda d: d.isoformat()),
    st.floats(1e9, 3e9, allow_nan=False),
    st.none() | st.text("abcd-0123", min_size=1, max_size=4),
)


@given(moments, offsets)
def test_one_instant_written_in_any_offset_is_the_same_instant(moment: datetime, offset: timezone) -> None:
    assert instant(moment.isoformat()) == instant(moment.astimezone(offset).isoformat())
    assert instant(moment.isoformat().replace("+00:00", "Z")) == instant(moment.isoformat())


@given(moments, st.integers(1, 10**6))
def test_a_later_occurred_at_is_newer_whatever_was_accepted_when(moment: datetime, micros: int) -> None:
    early = FactOrder(moment.isoformat(), 2e9, "z")
    late = FactOrder((moment + timedelta(microseconds=micros)).isoformat(), 1e9, "a")
    assert late.newer_than(early) and not early.newer_than(late)


def test_fractions_beyond_microseconds_still_order() -> None:
    a = FactOrder("2026-12-03T10:00:00.12345678Z", 1.0, "x")
    b = FactOrder("2026-12-03T11:00:00.123456780+01:00", 1.0, "x")
    assert a.same_as(b)
    assert FactOrder("2026-12-03T10:00:00.1234567Z", 1.0, "a").newer_than(
        FactOrder("2026-12-03T10:00:00.123456Z", 1.0, "b")
    )


@given(orders, orders, orders)
def test_the_order_is_total_and_transitive(a: FactOrder, b: FactOrder, c: FactOrder) -> None:
    assert sum([a.newer_than(b), b.newer_than(a), a.same_as(b)]) == 1
    if a.delivery_id is not None and a.delivery_id == b.delivery_id:
        assert a.same_as(b)  # one delivery is one report, whatever its stamp
    if a.newer_than(b) and b.newer_than(c) and a.delivery_id != c.delivery_id:
        assert a.newer_than(c)
    assert a.newer_than(None) and not a.same_as(None)
    assert FactOrder.from_json(a.to_json()) == a


@given(moments, st.floats(1e9, 3e9), st.text(min_size=1, max_size=5), st.text(min_size=1, max_size=5))
def test_two_deliveries_are_never_equal_and_one_delivery_always_equals_itself(
    moment: datetime, accepted: float, d1: str, d2: str
) -> None:
    a, b = FactOrder(moment.isoformat(), accepted, d1), FactOrder(moment.isoformat(), accepted, d2)
    assert a.same_as(FactOrder(moment.isoformat(), accepted, d1))
    assert (d1 == d2) == a.same_as(b)


@pytest.mark.parametrize(
    "value",
    ["2026-12-03T19:05:34", "2026-12-03", "2026-13-03T19:05:34Z", "2026-02-30T10:00:00Z", "19:05:34Z", "", 5, None],
)
def test_occurred_at_needs_rfc_3339_with_an_offset(value: object) -> None:
    assert occurred_at_problem(value) is not None
    with pytest.raises(InvalidEvent) as refused:
        ev.parse_event({"type": ev.PO_UPDATED, "caseId": "C-1", "data": {"poAmount": "1.00", "occurredAt": value}})
    assert set(refused.value.fields) == {"data.occurredAt"}


@pytest.mark.parametrize("value", ["2026-12-03T19:05:34Z", "2026-12-03t19:05:34.5+01:00", "2026-12-03 19:05:34-00:30"])
def test_occurred_at_is_accepted_on_every_fact_event(value: str) -> None:
    assert occurred_at_problem(value) is None
    event = ev.parse_event(
        {
            "type": ev.CREDIT_NOTE_ISSUED,
            "caseId": "C-1",
            "data": {"creditNoteId": "N", "amount": "1", "occurredAt": value},
        }
    )
    assert event.data["occurredAt"] == value


FACTS = InvoiceFacts("I", "S", "P", Decimal("1100.00"), Decimal("1000.00"), "EUR")
reports = st.lists(
    st.tuples(st.integers(0, 50), st.integers(1, 5000).map(lambda c: Decimal(c) / 100)), min_size=1, max_size=8
)


@given(reports, st.randoms(use_true_random=False), st.sampled_from([Status.OPEN, Status.CLOSED, Status.APPROVED]))
def test_credit_note_reports_in_any_order_leave_the_newest_amount(
    reports: list[tuple[int, Decimal]], rnd: random.Random, status: Status
) -> None:
    """Reports of one credit note (its order, its amount), applied in any arrival order by the pure rule,
    leave the amount of the newest; each one older than the one held is superseded, none is lost."""
    numbered = [(FactOrder(None, 1e9 + minute, f"d-{i}"), amount) for i, (minute, amount) in enumerate(reports)]
    arrival = list(numbered)
    rnd.shuffle(arrival)
    facts, held_orders, superseded = FACTS, {}, []  # type: ignore[var-annotated]
    for order, amount in arrival:
        plan = transitions.credit_note_issued(
            status,
            facts,
            credit_note_id="CN-1",
            amount=amount,
            requests=(),
            rules=Rules(),
            order=order,
            orders=held_orders,
        )
        if plan.superseded is not None:
            superseded.append(plan.superseded["deliveryId"])
            assert not plan.changes and plan.order is None
            continue
        if plan.order is not None:
            held_orders = plan.order
        if plan.changes:
            facts = InvoiceFacts.from_dict({**facts.to_dict(), **plan.changes})
    newest = max(numbered, key=lambda r: r[0].key())
    assert facts.credits == (Credit("CN-1", newest[1]),)
    assert len(superseded) == len(set(superseded))
    applied_after = {o.delivery_id for o, _ in arrival} - set(superseded)
    assert newest[0].delivery_id in applied_after


@given(st.floats(1e9, 3e9, allow_nan=False), st.integers(0, 60))
def test_the_acceptance_stamp_survives_the_wire_format_and_every_copy(stamp: float, retries: int) -> None:
    """Both senders write the body with ``encode`` and the worker reads it with ``decode``; a delayed copy
    is made from the envelope read back, so the stamp of the first acceptance is what every copy carries."""
    import json
    from dataclasses import replace as copy_of

    from shared.messaging import Envelope, decode, encode

    event = ev.CaseEvent(ev.PO_UPDATED, "C-1", {"poAmount": "1.00"}, "d-1", Envelope(accepted_at=stamp).fields())
    for number in range(1, retries + 1):
        _, delivery, envelope = decode(json.loads(encode(event)))
        again = copy_of(envelope, retry=number, root=envelope.root_or("webhook:d-1"))
        event = ev.CaseEvent(event.type, event.case_id, event.data, delivery, again.fields())
    _, delivery, envelope = decode(json.loads(encode(event)))
    assert (delivery, envelope.accepted_at, envelope.retry) == ("d-1", stamp, retries)
