"""Store operations per case event, counted in process on the invoice -> credit-note path.

For each case, one ``invoice.received`` event goes through the indexed functions of ``function_app``
as the Functions host (or ``casekeeper dev``) would run them: the signed webhook (``events``, an
``HttpRequest``), the session-queue trigger (``case_worker``, a ``ServiceBusMessage`` from the local
session queue) for every message the event leads to, and, on SQLite, the cases change feed
(``reconciler``, a ``DocumentList``) for what the event's writes put on it. The Cosmos DB test server
has no change feed: there the reconciler's share is not counted (in Azure it reads the same changes
and, on this path, writes nothing; the SQLite row shows what it does).

Every :class:`~casekeeper.core.ports.DocumentStore` call is counted by :class:`CountingStore` (one call is
one round trip: one SQL transaction, one Cosmos DB request), by phase, container and method, with the
JSON size of what was read and written. The change feed's own reads (the lease and the feed, which
the trigger does, not the app) are not port calls and are not counted. A few warm-up cases come first
and are not counted. Each counted case is checked: one credit-note request at the supplier, status
``credit_requested``, one ``done`` effect.

The composition root is touched in one place only, :func:`counted_services`, so this can follow it
when it changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.guarded_effect import CountingStore, Tally, open_backend
from benchmarks.processes import SECRET, Supplier
from casekeeper.core.ports import CONTAINERS, DocumentStore

QUEUE = "case-events"
PHASES = ("webhook", "case_worker", "reconciler")
METHODS = ("create", "read", "replace", "update_if", "upsert", "delete", "query", "count", "now")
CLOCK = "-"
"""The container :class:`CountingStore` files ``now()`` under (on Cosmos DB an upsert to ``health``)."""


@dataclass
class OpsResult:
    """One backend's counts over ``events`` counted case events."""

    backend: str
    events: int
    by_phase: dict[str, Tally] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    change_feed: bool = True

    def total(self) -> Tally:
        tally = Tally()
        for phase in self.by_phase.values():
            tally.add(phase)
        return tally

    def per_event(self) -> float:
        return self.total().total() / self.events if self.events else 0.0

    def to_json(self) -> dict[str, Any]:
        total = self.total()
        containers = [*CONTAINERS, CLOCK]
        return {
            "backend": self.backend,
            "events": self.events,
            "changeFeedCounted": self.change_feed,
            "opsPerEvent": self.per_event(),
            "byContainer": {c: total.by_container()[c] / self.events for c in containers},
            "byMethod": {m: total.by_method()[m] / self.events for m in METHODS},
            "byContainerAndMethod": {
                c: {m: total.calls[(c, m)] / self.events for m in METHODS if total.calls[(c, m)]} for c in containers
            },
            "byPhase": {p: t.total() / self.events for p, t in self.by_phase.items()},
            "bytesReadPerEvent": {c: total.bytes_read[c] / self.events for c in containers},
            "bytesWrittenPerEvent": {c: total.bytes_written[c] / self.events for c in containers},
            "problems": self.problems,
        }


def counted_services(settings: Any, store: DocumentStore, queue: Any) -> Any:
    """The app's services as a host builds them, on ``store`` (a counting one) and the local session
    ``queue``, started and installed for the indexed functions, as ``casekeeper dev`` does. The
    benchmark's only use of the composition root."""
    from shared.app import bootstrap
    from shared.messaging.local import LocalDeadLetters, LocalQueueEventSender

    services = bootstrap.build(
        settings,
        store=store,
        sender=LocalQueueEventSender(queue, QUEUE),
        dead_letters=LocalDeadLetters(queue, QUEUE),
    )
    bootstrap.start(services)  # what a process that runs workflows does next (checkpoint-failure capture)
    bootstrap.use(services)
    return services


def _uninstall(services: Any) -> None:
    from casekeeper.capture import uninstall
    from shared.app import bootstrap

    bootstrap.use(None)
    uninstall()
    services.supplier.close()


def _functions() -> dict[str, Callable[..., Any]]:
    import function_app

    return {str(f.get_function_name()): f.get_user_function() for f in function_app.create_app().get_functions()}


@contextlib.contextmanager
def _world(backend: str, supplier_url: str) -> Iterator[tuple[CountingStore, DocumentStore, Any, Any]]:
    """(counting store, the store it wraps, queue, services) on a fresh store of ``backend``."""
    from shared.app.settings import Settings
    from shared.messaging.sqlite_queue import LocalSessionQueue

    with open_backend(backend) as inner, tempfile.TemporaryDirectory(prefix="casekeeper-bench-ops-") as tmp:
        counting = CountingStore(inner)
        queue = LocalSessionQueue(Path(tmp) / "queue.sqlite")
        settings = Settings.from_mapping(
            {
                "CASEKEEPER_STORE": "sqlite",  # the store is passed in; this only names it
                "CASEKEEPER_SQLITE_PATH": str(Path(tmp) / "unused.sqlite"),
                "CASEKEEPER_QUEUE": "local",
                "CASEKEEPER_LOCAL_QUEUE_PATH": str(Path(tmp) / "queue.sqlite"),
                "WEBHOOK_SECRET": SECRET,
                "SUPPLIER_PORTAL_URL": supplier_url,
            }
        )
        services = counted_services(settings, counting, queue)
        try:
            yield counting, inner, queue, services
        finally:
            _uninstall(services)
            queue.close()


def invoice_event(case_id: str) -> dict[str, Any]:
    """The benchmark's case event: over-billed by 100.00, above the tolerance and below the approval
    threshold, so the rules request one credit note of 100.00 without asking a person."""
    return {
        "type": "invoice.received",
        "caseId": case_id,
        "data": {
            "invoiceId": case_id,
            "supplierId": "SUP-1",
            "poNumber": f"PO-{case_id}",
            "invoiceAmount": "1100.00",
            "poAmount": "1000.00",
            "currency": "EUR",
        },
    }


def measure(backend: str, supplier: Supplier, *, events: int, warmup: int = 2) -> OpsResult:
    """Count the store operations of ``events`` invoice cases on a fresh store of ``backend``."""
    import azure.functions as func

    from casekeeper.stores.sqlite import SqliteDocumentStore
    from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign
    from shared.localhost.changefeed import LocalChangeFeed, to_document_list
    from shared.messaging.sqlite_queue import to_service_bus_message

    functions = _functions()
    result = OpsResult(backend, events, {phase: Tally() for phase in PHASES})
    run = uuid.uuid4().hex[:6]
    with _world(backend, supplier.url) as (counting, inner, queue, services):
        feed = LocalChangeFeed(inner, "cases", "bench:cases") if isinstance(inner, SqliteDocumentStore) else None
        result.change_feed = feed is not None

        def webhook(case_id: str) -> None:
            body = json.dumps(invoice_event(case_id)).encode()
            headers = {
                "Content-Type": "application/json",
                SIGNATURE_HEADER: sign(SECRET, body, int(time.time()), f"ops-{case_id}"),
                DELIVERY_HEADER: f"ops-{case_id}",
            }
            request = func.HttpRequest(method="POST", url="http://localhost/api/events", headers=headers, body=body)
            response = functions["events"](request)
            if response.status_code != 202:
                result.problems.append(f"{backend} {case_id}: webhook answered {response.status_code}")

        def deliver() -> None:
            while (msg := queue.receive(QUEUE)) is not None:
                try:
                    asyncio.run(functions["case_worker"](to_service_bus_message(msg)))
                except Exception:
                    queue.abandon(msg)
                    raise
                queue.complete(msg)

        def follow_feed() -> None:
            if feed is None:
                return
            batch = feed.poll()
            if batch.documents:
                functions["reconciler"](to_document_list(batch))
                feed.commit(batch)

        try:
            for i in range(warmup + events):
                case_id = f"OPS{run}-{i:04d}"
                counting.take_tally()
                for phase, step in (
                    ("webhook", lambda c=case_id: webhook(c)),
                    ("case_worker", deliver),
                    ("reconciler", follow_feed),
                ):
                    step()
                    taken = counting.take_tally()
                    if i >= warmup:
                        result.by_phase[phase].add(taken)
                if i >= warmup:
                    result.problems.extend(_check_case(backend, services, supplier, case_id))
        finally:
            if feed is not None:
                feed.close()
    return result


def _check_case(backend: str, services: Any, supplier: Supplier, case_id: str) -> list[str]:
    case = services.cases.get(case_id)
    effects = services.ledger.for_case(case_id)
    posts = supplier.credit_note_posts({case_id})
    problems = []
    if case is None or case.status != "credit_requested":
        problems.append(f"{backend} {case_id}: status {getattr(case, 'status', None)}, not credit_requested")
    if len(effects) != 1 or effects[0].status.value != "done":
        problems.append(f"{backend} {case_id}: effects {[(e.key, e.status.value) for e in effects]}, not one done")
    if len(posts) != 1:
        problems.append(f"{backend} {case_id}: {len(posts)} credit-note requests at the supplier, not 1")
    return problems
