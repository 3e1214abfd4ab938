"""The functions as the Functions host calls them: indexed from ``function_app``, invoked with
``azure.functions`` objects, wired to a real SQLite store, the local session queue and the supplier stub."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

import function_app
from casekeeper.capture import uninstall
from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import DocumentStore
from shared.app import bootstrap
from shared.app.bootstrap import Services
from shared.app.settings import Settings
from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign
from shared.localhost.supplier_stub import SupplierStub
from shared.messaging.local import LocalDeadLetters, LocalQueueEventSender
from shared.messaging.sqlite_queue import LocalSessionQueue, to_service_bus_message

SECRET = "test-secret-one"
QUEUE = "case-events"
INVOICE = {
    "invoiceId": "INV-1",
    "supplierId": "S-1",
    "poNumber": "PO-1",
    "invoiceAmount": "1100.00",
    "poAmount": "1000.00",
    "currency": "EUR",
}
"""An invoice over-billed by 100.00, under the approval threshold: one credit-note request."""


def settings_for(tmp_path: Path, supplier_url: str, **overrides: str) -> Settings:
    env = {
        "CASEKEEPER_STORE": "sqlite",
        "CASEKEEPER_SQLITE_PATH": str(tmp_path / "store.sqlite"),
        "CASEKEEPER_QUEUE": "local",
        "CASEKEEPER_LOCAL_QUEUE_PATH": str(tmp_path / "queue.sqlite"),
        "WEBHOOK_SECRET": f"old-secret,{SECRET}",
        "SUPPLIER_PORTAL_URL": supplier_url,
        "CALL_TIMEOUT_SECONDS": "120",
        **overrides,
    }
    return Settings.from_mapping(env)


@pytest.fixture
def svc(tmp_path: Path, supplier: SupplierStub) -> Iterator[Services]:
    services = bootstrap.start(bootstrap.build(settings_for(tmp_path, supplier.url)))
    bootstrap.use(services)
    try:
        yield services
    finally:
        bootstrap.use(None)
        uninstall()
        services.close()


@pytest.fixture
def queue(svc: Services) -> LocalSessionQueue:
    return LocalSessionQueue(svc.settings.local_queue_path)


@pytest.fixture(scope="session")
def functions() -> dict[str, Any]:
    """The indexed functions by name (``get_functions()`` may run once per app instance)."""
    return {f.get_function_name(): f for f in function_app.create_app().get_functions()}


def user_function(functions: dict[str, Any], name: str) -> Callable[..., Any]:
    return functions[name].get_user_function()  # type: ignore[no-any-return]


def _deliver_one(functions: dict[str, Any], queue: LocalSessionQueue) -> tuple[Any, Exception | None]:
    msg = queue.receive(QUEUE)
    assert msg is not None, "nothing to deliver"
    try:
        result = asyncio.run(user_function(functions, "case_worker")(to_service_bus_message(msg)))
    except Exception as exc:
        queue.abandon(msg)
        return None, exc
    queue.complete(msg)
    return result, None


def deliver(functions: dict[str, Any], queue: LocalSessionQueue) -> Any:
    """Receive the next message as the host would, invoke the worker, settle it as autoComplete does:
    completed when the function returns, abandoned (and the error raised) when it raises."""
    result, error = _deliver_one(functions, queue)
    if error is not None:
        raise error
    return result


def deliver_next(functions: dict[str, Any], queue: LocalSessionQueue) -> str:
    """One delivery as :func:`deliver` makes it: ``"completed"``, or ``"abandoned"`` when the function raised."""
    return "completed" if _deliver_one(functions, queue)[1] is None else "abandoned"


@pytest.fixture
def clock() -> ManualClock:
    """The manual clock the queue, the store and the services share: a test moves time to a delayed copy."""
    return ManualClock(time.time())


@contextmanager
def on_the_local_queue(
    settings: Settings, clock: ManualClock | None = None, store: DocumentStore | None = None
) -> Iterator[tuple[Services, LocalSessionQueue]]:
    """The services as a host starts them (``bootstrap.start``: checkpoint failures captured), sending to and
    dead-lettering on the local session queue (ten deliveries), all under ``clock`` (the system's, without
    one); ``store`` replaces the configured one (an :class:`~tests.support.outage.OutageStore`)."""
    queue = LocalSessionQueue(settings.local_queue_path, clock=clock.now if clock else time.time)
    svc = bootstrap.build(
        settings,
        store=store,
        sender=LocalQueueEventSender(queue, QUEUE),
        dead_letters=LocalDeadLetters(queue, QUEUE),
        clock=clock,
    )
    bootstrap.use(bootstrap.start(svc))
    try:
        yield svc, queue
    finally:
        bootstrap.use(None)
        uninstall()
        svc.close()
        queue.close()


def signed_request(
    body: bytes,
    *,
    delivery: str | None = "d-1",
    secret: str = SECRET,
    at: float | None = None,
    content_type: str = "application/json",
    signature: str | None = None,
) -> func.HttpRequest:
    headers = {"Content-Type": content_type}
    if signature is not None:
        headers[SIGNATURE_HEADER] = signature
    elif secret:
        headers[SIGNATURE_HEADER] = sign(secret, body, int(at if at is not None else time.time()), delivery or "")
    if delivery is not None:
        headers[DELIVERY_HEADER] = delivery
    return func.HttpRequest(method="POST", url="http://localhost/api/events", headers=headers, body=body)


@pytest.fixture
def behind_easy_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    """App Service with Authentication in front: the only place the principal header is trusted in Azure."""
    monkeypatch.setenv("EASY_AUTH_ENABLED", "true")
    monkeypatch.setenv("WEBSITE_SITE_NAME", "casekeeper")
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "true")
