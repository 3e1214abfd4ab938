"""Nothing blocks the worker's event loop: the Functions worker runs every session of an instance on one
loop, so a slow supplier for one case must not stall another case's event."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from casekeeper.capture import uninstall
from casekeeper.core.clock import ManualClock
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.app import bootstrap
from shared.domain.events import CaseEvent
from shared.localhost.supplier_stub import Faults, SupplierStub
from shared.messaging import encode
from shared.messaging.local import LocalDeadLetters, LocalQueueEventSender
from shared.messaging.sqlite_queue import LocalSessionQueue, to_service_bus_message
from tests.support.downstream import leave_started
from tests.triggers.conftest import INVOICE, QUEUE, settings_for, user_function

HOLD = 2.0


def test_a_slow_supplier_lookup_for_one_case_does_not_stall_another_case(
    functions: dict[str, Any], tmp_path: Path, supplier: SupplierStub
) -> None:
    clock = ManualClock(time.time())
    settings = settings_for(tmp_path, supplier.url)
    queue = LocalSessionQueue(settings.local_queue_path)
    svc = bootstrap.build(
        settings,
        store=SqliteDocumentStore(settings.sqlite_path, clock=clock.now),
        sender=LocalQueueEventSender(queue, QUEUE),
        dead_letters=LocalDeadLetters(queue, QUEUE),
    )
    bootstrap.use(svc)
    try:
        svc.cases.create("SLOW", INVOICE)
        request = {"amount": "100.00", "currency": "EUR", "invoiceId": "INV-1", "supplierId": "S-1"}
        effect = leave_started(svc.ledger, "SLOW", request=request)
        clock.advance(121)  # its outcome is unknown now: the re-check asks the supplier, who is slow
        supplier.set_faults(Faults(lookup_hold_seconds=HOLD))
        queue.send(
            QUEUE,
            encode(CaseEvent("effect.recheck", "SLOW", {"key": effect.key})),
            session_id="SLOW",
            message_id="recheck-1",
        )
        queue.send(QUEUE, encode(CaseEvent("invoice.received", "FAST", INVOICE)), session_id="FAST", message_id="m-2")
        messages = [queue.receive(QUEUE), queue.receive(QUEUE)]
        finished: list[str] = []
        worker = user_function(functions, "case_worker")

        async def handle(msg: Any) -> None:
            await worker(to_service_bus_message(msg))
            finished.append(msg.session_id)

        async def both() -> None:
            await asyncio.gather(*(handle(m) for m in messages))

        asyncio.run(both())
        # The fast case was handled while the slow lookup was still held: it finished first.
        assert finished == ["FAST", "SLOW"]
        assert svc.cases.require("FAST").status == "credit_requested"
        lookups = [r for r in supplier.requests if r["method"] == "GET"]
        assert len(lookups) == 1 and "lookup_hold_seconds" in lookups[0]["faults"]
    finally:
        supplier.set_faults(Faults())
        bootstrap.use(None)
        uninstall()
        svc.close()
        queue.close()
