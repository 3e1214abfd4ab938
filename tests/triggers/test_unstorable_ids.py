"""Ids a store refuses, as the case worker meets them on the queue, on SQLite and on the Cosmos test server.

The door refuses such ids with a 400 (``casekeeper.core.ids``), so on the queue they come only from
outside that rule: a message sent before it, or a delivery id, which is the message's id and is not
stored as it is. Whatever the cause, the event is set aside with its reason and the message completed:
an id the store cannot hold is never redelivered until it is dead-lettered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from casekeeper.core.ids import id_problem
from casekeeper.core.ports import Query
from devhost.supplier_stub import SupplierStub
from shared.app.bootstrap import Services
from shared.domain import events as ev
from shared.domain.events import CaseEvent
from shared.handlers.rejected import rejected_events
from shared.messaging import encode
from shared.messaging.sqlite_queue import LocalSessionQueue, to_service_bus_message
from tests.conftest import StoreSpec
from tests.triggers.conftest import INVOICE, QUEUE, deliver, on_the_local_queue, settings_for, user_function


@pytest.fixture
def on_backend(
    store_spec: StoreSpec, tmp_path: Path, supplier: SupplierStub
) -> Iterator[tuple[Services, LocalSessionQueue]]:
    """The functions wired to the backend under test (``store_spec``: sqlite, cosmos) and the local queue."""
    settings = settings_for(tmp_path, supplier.url)
    with on_the_local_queue(settings, store=store_spec.open()) as world:
        yield world


def settled(queue: LocalSessionQueue) -> bool:
    """Nothing left to deliver, nothing held, nothing dead-lettered."""
    return all(count == 0 for count in queue.counts(QUEUE).values())


def test_a_case_id_the_store_refuses_is_set_aside_with_the_reason_and_the_message_completed(
    functions: dict[str, Any],
    on_backend: tuple[Services, LocalSessionQueue],
    supplier: SupplierStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A message from outside today's door rule (the rule turned off here, as before it existed): the
    store's own check refuses the id (``InvalidDocumentId``), and the worker sets the event aside."""
    svc, queue = on_backend
    monkeypatch.setattr(ev, "id_problem", lambda value, **kwargs: None)
    case_id = "INV/2026/0042"
    event = CaseEvent(ev.INVOICE_RECEIVED, case_id, INVOICE, delivery_id="d-42")
    queue.send(QUEUE, encode(event), session_id=case_id, message_id="webhook:d-42")
    deliver(functions, queue)  # returns: the message completes
    assert settled(queue)
    [rejected] = rejected_events(svc.store, case_id)
    assert rejected["messageId"] == rejected["id"] == "webhook:d-42"
    assert rejected["reason"].startswith("an id the store cannot hold: ")
    assert "must not contain /" in rejected["reason"]
    assert rejected["deliveryCount"] == 1
    assert supplier.requests == []


def test_a_delivery_id_with_a_slash_still_lets_a_bad_event_be_set_aside(
    functions: dict[str, Any], on_backend: tuple[Services, LocalSessionQueue]
) -> None:
    """The record of a set-aside event is keyed by the message id; one with ``/`` (a webhook's delivery
    id, which Service Bus accepts) gets a stable digest as its document id and keeps the id it had."""
    svc, queue = on_backend
    message_id = "webhook:2026/05/d?1#x"
    assert id_problem(message_id) is not None  # the store could not hold it as a document id
    body = b'{"type": "po.updated", "caseId": "C-9", "data": {"poAmount": 1.5}}'
    queue.send(QUEUE, body, session_id="C-9", message_id=message_id)
    first = queue.receive(QUEUE)
    assert first is not None
    asyncio.run(user_function(functions, "case_worker")(to_service_bus_message(first)))
    queue.abandon(first)  # as if its completion were lost: the broker delivers it again
    deliver(functions, queue)
    assert settled(queue)
    [rejected] = rejected_events(svc.store, "C-9")
    assert rejected["messageId"] == message_id
    assert rejected["id"].startswith("h-") and id_problem(rejected["id"], max_length=255) is None
    assert "data.poAmount" in rejected["fields"] and rejected["deliveryCount"] == 2
    assert len(svc.store.query("health", Query(partition="rejected_event"))) == 1  # one record, rewritten


def test_a_valid_event_whose_delivery_id_has_a_slash_is_handled(
    functions: dict[str, Any], on_backend: tuple[Services, LocalSessionQueue], supplier: SupplierStub
) -> None:
    svc, queue = on_backend
    event = CaseEvent(ev.INVOICE_RECEIVED, "C-1", INVOICE, delivery_id="2026/05/d-1")
    queue.send(QUEUE, encode(event), session_id="C-1", message_id="webhook:2026/05/d-1")
    deliver(functions, queue)
    assert svc.cases.require("C-1").status == "credit_requested"
    assert [r["method"] for r in supplier.requests] == ["POST"]
    assert rejected_events(svc.store) == []
