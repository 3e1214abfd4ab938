"""A case at its size bound refuses what would pass it: the event is set aside with the reason, visible in the
case's ``rejectedEvents``, and the case keeps what it holds (docs/design.md#case-bounds). Through the indexed
functions (the signed webhook, the session-queue trigger, ``GET /api/cases``), on SQLite and on the Cosmos DB
test server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from casekeeper.core.cases import MAX_CASE_BYTES, reserved_bytes
from devhost.supplier_stub import SupplierStub
from shared.app.bootstrap import Services
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.conftest import StoreSpec
from tests.triggers.conftest import (
    INVOICE,
    QUEUE,
    deliver,
    on_the_local_queue,
    settings_for,
    signed_request,
    user_function,
)


@pytest.fixture
def on_backend(
    store_spec: StoreSpec, tmp_path: Path, supplier: SupplierStub
) -> Iterator[tuple[Services, LocalSessionQueue]]:
    settings = settings_for(tmp_path, supplier.url)
    with on_the_local_queue(settings, store=store_spec.open()) as world:
        yield world


def post(functions: dict[str, Any], delivery: str, event_type: str, **data: str) -> None:
    body = json.dumps({"type": event_type, "caseId": "C-full", "data": data}).encode()
    response = user_function(functions, "events")(signed_request(body, delivery=delivery))
    assert response.status_code == 202, response.get_body()


def test_an_event_that_would_pass_the_bound_is_set_aside_and_shown_on_the_case(
    functions: dict[str, Any], on_backend: tuple[Services, LocalSessionQueue], supplier: SupplierStub
) -> None:
    svc, queue = on_backend
    post(functions, "d-invoice", "invoice.received", **{**INVOICE, "poAmount": INVOICE["invoiceAmount"]})
    deliver(functions, queue)
    case = svc.cases.require("C-full")
    assert case.status == "approved"
    # The case grew to just under its bound (bookkeeping the bound let through).
    room = MAX_CASE_BYTES - reserved_bytes(replace(case, data={**case.data, "filler": ""}).to_body()) - 50
    assert svc.cases.annotate("C-full", case.version, lambda data: {**data, "filler": "f" * room}, expected=case)

    post(functions, "d-credit", "credit_note.issued", creditNoteId="CN-1", amount="10.00")
    deliver(functions, queue)  # completes: set aside, never redelivered

    assert all(count == 0 for count in queue.counts(QUEUE).values())
    after = svc.cases.require("C-full")
    assert after.version == case.version
    assert not after.facts.get("credits")
    request = func.HttpRequest(
        method="GET", url="http://localhost/api/cases/C-full", body=b"", route_params={"caseId": "C-full"}
    )
    shown = json.loads(user_function(functions, "get_case")(request).get_body())
    [rejected] = shown["rejectedEvents"]
    assert f"over its bound of {MAX_CASE_BYTES} bytes" in rejected["reason"]
    assert "CN-1" in json.dumps(rejected)
    assert supplier.requests == []
