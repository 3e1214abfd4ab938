"""An accepted event is never lost to a transient fault (the store down, throttled, a write that keeps
losing): the case worker, invoked as the host would, with the local session queue's real redelivery and
dead-lettering around it.

The store outage is a thin wrapper around the real SQLite store that refuses every call while ``down``
is set: the fault under test is "the store is unreachable", which a real store cannot be told to do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from casekeeper.core.clock import ManualClock
from casekeeper.errors import StoreUnavailable
from casekeeper.stores.sqlite import SqliteDocumentStore
from devhost.supplier_stub import SupplierStub
from shared.app.bootstrap import Services
from shared.domain.events import CaseEvent
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.support.outage import ALL, OutageStore
from tests.triggers.conftest import INVOICE, QUEUE, deliver_next, on_the_local_queue, settings_for


@pytest.fixture
def world(
    tmp_path: Path, supplier: SupplierStub, clock: ManualClock
) -> Iterator[tuple[Services, OutageStore, LocalSessionQueue]]:
    settings = settings_for(tmp_path, supplier.url, RETRY_BASE_SECONDS="0.02", RETRY_MAX_DELAY_SECONDS="60")
    store = OutageStore(SqliteDocumentStore(settings.sqlite_path))
    with on_the_local_queue(settings, clock, store) as (svc, queue):  # type: ignore[arg-type]
        yield svc, store, queue


def test_a_store_outage_longer_than_every_redelivery_loses_nothing(
    functions: dict[str, Any],
    world: tuple[Services, OutageStore, LocalSessionQueue],
    clock: ManualClock,
    supplier: SupplierStub,
) -> None:
    """Down for 40 attempts (ten immediate redeliveries would have dead-lettered it after 10): each attempt
    completes the message and schedules a delayed copy under a new id; after recovery the copy is handled."""
    svc, store, queue = world
    svc.sender.send(CaseEvent("invoice.received", "C-1", INVOICE, delivery_id="d-1"), message_id="webhook:d-1")
    store.down = ALL
    ids: list[str] = []
    for _ in range(40):
        [pending] = queue.peek(QUEUE)
        ids.append(pending.message_id)
        clock.advance(max(0.0, pending.enqueued_time - clock.now()) + 0.001)
        assert deliver_next(functions, queue) == "completed"  # the delivery count is never burned
    assert store.refused >= 40
    assert len(set(ids)) == 40, "every copy has a message id of its own, or duplicate detection eats it"
    [copy] = queue.peek(QUEUE)
    body = json.loads(copy.body)
    assert body["retry"] == 40 and body["rootMessageId"] == "webhook:d-1"
    assert copy.enqueued_time - clock.now() <= 60 * 1.01  # backoff capped at RETRY_MAX_DELAY_SECONDS
    store.down = frozenset()
    clock.advance(copy.enqueued_time - clock.now() + 0.001)
    assert deliver_next(functions, queue) == "completed"
    assert svc.cases.require("C-1").status == "credit_requested"
    assert len([r for r in supplier.requests if r["method"] == "POST"]) == 1
    assert queue.counts(QUEUE) == {"active": 0, "scheduled": 0, "locked": 0, "dead_lettered": 0}


def test_past_the_retry_window_the_error_goes_to_the_broker_and_its_dead_letter_queue(
    functions: dict[str, Any], world: tuple[Services, OutageStore, LocalSessionQueue], clock: ManualClock
) -> None:
    svc, store, queue = world
    svc.sender.send(CaseEvent("invoice.received", "C-2", INVOICE), message_id="webhook:d-2")
    store.down = ALL
    assert deliver_next(functions, queue) == "completed"  # deferred once
    clock.advance(3601 + 1)  # RETRY_FOR_SECONDS (3600) after the first failure
    outcomes = [deliver_next(functions, queue) for _ in range(10)]
    assert outcomes == ["abandoned"] * 10
    assert queue.receive(QUEUE) is None
    [letter] = svc.dead_letters.peek()
    assert letter.session_id == "C-2" and letter.message_id == "webhook:d-2:retry:1"
    store.down = frozenset()
    assert [m.message_id for m in svc.dead_letters.redrive(None)] == ["webhook:d-2:retry:1"]
    assert deliver_next(functions, queue) == "completed"
    assert svc.cases.require("C-2").status == "credit_requested"


def test_a_blip_is_ridden_out_in_place_without_leaving_the_session_order(
    functions: dict[str, Any], world: tuple[Services, OutageStore, LocalSessionQueue]
) -> None:
    """A store that fails twice and recovers: the event is handled in the same delivery (short waits in
    place), so the next event of the case is not overtaken."""
    svc, store, queue = world
    svc.sender.send(CaseEvent("invoice.received", "C-3", INVOICE), message_id="webhook:d-3")
    svc.sender.send(CaseEvent("po.updated", "C-3", {"poAmount": "1050.00"}), message_id="webhook:d-4")
    calls = {"n": 0}
    inner_create = store.inner.create

    def flaky_create(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise StoreUnavailable("429 throttled")
        return inner_create(*args, **kwargs)

    store.inner.create = flaky_create  # type: ignore[method-assign]
    assert deliver_next(functions, queue) == "completed"
    assert [m.message_id for m in queue.peek(QUEUE)] == ["webhook:d-4"]  # no copy: handled in place
    assert svc.cases.require("C-3").status == "credit_requested"
    assert deliver_next(functions, queue) == "completed"
    assert svc.cases.require("C-3").facts["poAmount"] == "1050.00"
