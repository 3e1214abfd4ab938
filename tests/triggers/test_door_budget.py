"""The door answers within 5 s, store outage or throttling included (docs/design.md#door-budget): 503 with
``Retry-After`` when it cannot make the event durable in time, 202 once it is enqueued.

Through the indexed functions (``events``, ``approvals``) as the host calls them, with the services built
from settings as in Azure (the door opens its own store and sender with their short budgets), on:

- SQLite, held by another connection's write transaction (a real lock: the door's busy timeout runs out);
- the Cosmos DB test server, made slow or throttling for this test's database (devhost/cosmos_server.js
  holds each request, or answers 429 with ``x-ms-retry-after-ms``, as Cosmos DB throttles);
- the local queue, held the same way as the SQLite store.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from casekeeper.capture import uninstall
from casekeeper.clock import SystemClock as _SystemClock
from devhost.supplier_stub import SupplierStub
from shared.app import bootstrap
from shared.app.bootstrap import Services
from shared.app.settings import Settings
from shared.handlers.door import ANSWER_SECONDS, RETRY_AFTER_SECONDS
from shared.messaging.local import LocalQueueEventSender
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.support.locks import write_lock
from tests.triggers.conftest import INVOICE, QUEUE, SECRET, deliver, signed_request, user_function


@dataclass
class Door:
    svc: Services
    queue: LocalSessionQueue
    hold_store: Callable[[], contextlib.AbstractContextManager[None]]
    """Makes the store stall for the door while it is entered."""


def _settings(tmp_path: Path, supplier_url: str, **env: str) -> Settings:
    return Settings.from_mapping(
        {
            "CASEKEEPER_STORE": "sqlite",
            "CASEKEEPER_SQLITE_PATH": str(tmp_path / "store.sqlite"),
            "CASEKEEPER_QUEUE": "local",
            "CASEKEEPER_LOCAL_QUEUE_PATH": str(tmp_path / "queue.sqlite"),
            "WEBHOOK_SECRET": SECRET,
            "SUPPLIER_PORTAL_URL": supplier_url,
            **env,
        }
    )


@contextlib.contextmanager
def _services(settings: Settings) -> Iterator[tuple[Services, LocalSessionQueue]]:
    queue = LocalSessionQueue(settings.local_queue_path)
    svc = bootstrap.start(
        bootstrap.build(
            settings,
            sender=LocalQueueEventSender(queue, QUEUE),
            door_sender=bootstrap.open_door_sender(settings),
        )
    )
    bootstrap.use(svc)
    try:
        yield svc, queue
    finally:
        bootstrap.use(None)
        uninstall()
        svc.close()
        queue.close()


@pytest.fixture(params=["sqlite", pytest.param("cosmos", marks=pytest.mark.cosmos)])
def door(request: pytest.FixtureRequest, tmp_path: Path, supplier: SupplierStub) -> Iterator[Door]:
    if request.param == "sqlite":
        settings = _settings(tmp_path, supplier.url)
        with _services(settings) as (svc, queue):
            yield Door(svc, queue, lambda: write_lock(settings.sqlite_path))
        return
    from devhost.cosmos_server import make_cosmos_store

    server = request.getfixturevalue("cosmos_server")
    database = f"t{uuid.uuid4().hex[:12]}"
    make_cosmos_store(server, database).close()
    settings = Settings.from_mapping(
        {
            "CASEKEEPER_STORE": "cosmos",
            "CosmosDBConnection__accountEndpoint": server.endpoint,
            "COSMOS_KEY": server.key,
            "COSMOS_DATABASE": database,
            "CASEKEEPER_QUEUE": "local",
            "CASEKEEPER_LOCAL_QUEUE_PATH": str(tmp_path / "queue.sqlite"),
            "WEBHOOK_SECRET": SECRET,
            "SUPPLIER_PORTAL_URL": supplier.url,
        }
    )

    @contextlib.contextmanager
    def stalled() -> Iterator[None]:
        server.set_faults(database, delay=30.0)
        try:
            yield
        finally:
            server.set_faults(database)

    with _services(settings) as (svc, queue):
        yield Door(svc, queue, stalled)


def post_event(functions: dict[str, Any], delivery: str, **data: str) -> tuple[func.HttpResponse, float]:
    body = json.dumps({"type": "invoice.received", "caseId": "C-door", "data": data or INVOICE}).encode()
    started = time.monotonic()
    response = user_function(functions, "events")(signed_request(body, delivery=delivery))
    return response, time.monotonic() - started


def assert_retry_later(response: func.HttpResponse, took: float) -> None:
    assert response.status_code == 503, response.get_body()
    assert response.headers.get("Retry-After") == str(RETRY_AFTER_SECONDS)
    assert took < ANSWER_SECONDS, f"answered after {took:.1f}s"
    assert "retry" in json.loads(response.get_body())["error"]


def test_a_webhook_during_a_store_outage_is_answered_503_within_5_s_and_202_once_it_is_enqueued(
    functions: dict[str, Any], door: Door
) -> None:
    with door.hold_store():
        response, took = post_event(functions, "d-1")
        assert_retry_later(response, took)
        assert door.queue.peek(QUEUE) == []  # nothing enqueued

    # The sender's retry, once the store answers again: accepted (its record may have landed: the same body).
    response, took = post_event(functions, "d-1")
    assert response.status_code == 202, response.get_body()
    assert took < ANSWER_SECONDS
    [message] = door.queue.peek(QUEUE)
    assert message.message_id == "webhook:d-1"
    deliver(functions, door.queue)
    assert door.svc.cases.require("C-door").facts["invoiceId"] == INVOICE["invoiceId"]


def test_an_approval_during_a_store_outage_is_answered_503_within_5_s(functions: dict[str, Any], door: Door) -> None:
    post_event(functions, "d-2", **{**INVOICE, "invoiceAmount": "2500.00"})
    deliver(functions, door.queue)
    case = door.svc.cases.require("C-door")
    assert case.status == "awaiting_approval"
    request_id = case.data["pendingApproval"]["requestId"]
    body = json.dumps({"decision": "approve", "caseVersion": case.version, "approver": "ops-bot"}).encode()

    def answer() -> tuple[func.HttpResponse, float]:
        req = func.HttpRequest(
            method="POST",
            url=f"http://localhost/api/cases/C-door/approvals/{request_id}",
            headers={"Content-Type": "application/json"},
            body=body,
            route_params={"caseId": "C-door", "requestId": request_id},
        )
        started = time.monotonic()
        return user_function(functions, "approvals")(req), time.monotonic() - started

    with door.hold_store():
        assert_retry_later(*answer())
    response, _ = answer()
    assert response.status_code == 202, response.get_body()


@pytest.mark.cosmos
@pytest.mark.parametrize("retry_after_ms", [500, 30_000])
def test_a_webhook_while_cosmos_throttles_is_answered_503_within_5_s(
    functions: dict[str, Any], tmp_path: Path, supplier: SupplierStub, cosmos_server: Any, retry_after_ms: int
) -> None:
    """429s: the door retries once, for at most a second (the SDK's default: nine retries over up to 30 s)."""
    from devhost.cosmos_server import make_cosmos_store

    database = f"t{uuid.uuid4().hex[:12]}"
    make_cosmos_store(cosmos_server, database).close()
    settings = Settings.from_mapping(
        {
            "CASEKEEPER_STORE": "cosmos",
            "CosmosDBConnection__accountEndpoint": cosmos_server.endpoint,
            "COSMOS_KEY": cosmos_server.key,
            "COSMOS_DATABASE": database,
            "CASEKEEPER_QUEUE": "local",
            "CASEKEEPER_LOCAL_QUEUE_PATH": str(tmp_path / "queue.sqlite"),
            "WEBHOOK_SECRET": SECRET,
            "SUPPLIER_PORTAL_URL": supplier.url,
        }
    )
    with _services(settings) as (_svc, queue):
        cosmos_server.set_faults(database, throttle_ms=retry_after_ms)
        try:
            response, took = post_event(functions, "d-3")
        finally:
            cosmos_server.set_faults(database)
        assert_retry_later(response, took)
        assert "429" in json.loads(response.get_body())["error"]
        assert queue.peek(QUEUE) == []
        response, _ = post_event(functions, "d-3")
        assert response.status_code == 202


def test_a_webhook_while_the_queue_is_held_is_answered_503_within_5_s(
    functions: dict[str, Any], tmp_path: Path, supplier: SupplierStub
) -> None:
    settings = _settings(tmp_path, supplier.url)
    with _services(settings) as (_svc, queue):
        with write_lock(settings.local_queue_path):
            response, took = post_event(functions, "d-4")
        assert_retry_later(response, took)
        assert "enqueue" in json.loads(response.get_body())["error"]
        response, _ = post_event(functions, "d-4")
        assert response.status_code == 202
        assert [m.message_id for m in queue.peek(QUEUE)] == ["webhook:d-4"]


class _SlowStore:
    """The real store, each call taking ``seconds`` on the door's clock: a store slower than the budget its
    client was given (the one way to make a step overrun without waiting for it)."""

    def __init__(self, inner: Any, clock: list[float]) -> None:
        self.inner = inner
        self.clock = clock
        self.seconds = 0.0
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            self.clock[0] += self.seconds
            return attribute(*args, **kwargs)

        return call


def test_the_door_starts_no_step_that_would_not_fit_its_budget(tmp_path: Path, supplier: SupplierStub) -> None:
    """Each store call overruns its budget (1.6 s of the door's clock): after the first, what is left of the
    4 s cannot hold another call and the send, so the door answers 503 without starting them."""
    from casekeeper.stores.sqlite import SqliteDocumentStore
    from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, Ingress, sign

    now = [0.0]
    store = _SlowStore(SqliteDocumentStore(tmp_path / "store.sqlite"), now)
    queue = LocalSessionQueue(tmp_path / "queue.sqlite")
    ingress = Ingress(
        [SECRET], LocalQueueEventSender(queue, QUEUE), _SystemClock(), store=store, monotonic=lambda: now[0]
    )  # type: ignore[arg-type]
    body = json.dumps({"type": "invoice.received", "caseId": "C-slow", "data": INVOICE}).encode()

    def post() -> Any:
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(SECRET, body, int(time.time()), "d-slow"),
            DELIVERY_HEADER: "d-slow",
        }
        return ingress.accept_event(headers, body)

    assert post().status == 202  # a copy now takes the fact clock's read and write, a create and a read
    store.seconds = 1.6
    store.calls.clear()
    response = post()
    assert response.status == 503 and response.headers == {"Retry-After": str(RETRY_AFTER_SECONDS)}
    assert "budget of 4s" in response.body["error"]
    assert store.calls == ["read"]  # the fact clock's write, the delivery's create and read, and the send never started
    assert [m.message_id for m in queue.peek(QUEUE)] == ["webhook:d-slow"]
    queue.close()
