"""The API's and the pages' handlers take the few parts they use (issue 27), not the ten-field
``Operations`` bundle: here they are given a store, its case repository and ledger, a clock and what each page
names, and nothing else (no supplier client, no worker, no reconciler, no dead-letter queue, no workflow),
and they serve the case, the health check and the case page as the app does. A part a page uses is the one
the composition root hands it: the operations page's drain check asks the ``graph_hash`` it was given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from casekeeper import Guard
from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.ledger import Ledger
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.app.alerts import Alerter
from shared.app.telemetry import Telemetry
from shared.handlers import http, pages
from shared.handlers.ingress import Ingress
from shared.messaging.local import LocalDeadLetters, LocalQueueEventSender
from shared.messaging.sqlite_queue import LocalSessionQueue
from shared.views.case import CaseRecords
from shared.views.resolution import Settler
from shared.web.identity import APPROVER_ROLE, OPERATOR_ROLE, PRINCIPAL_HEADER, encode_principal

PLATFORM = {"EASY_AUTH_ENABLED": "true", "WEBSITE_SITE_NAME": "casekeeper", "WEBSITE_AUTH_ENABLED": "true"}


@pytest.fixture
def records(tmp_path: Path) -> Iterator[CaseRecords]:
    store = SqliteDocumentStore(tmp_path / "casekeeper.sqlite")
    cases = CaseRepository(store, ManualClock())
    yield CaseRecords(store=store, cases=cases, ledger=Ledger(store, cases))
    store.close()


def ingress(tmp_path: Path, records: CaseRecords) -> Ingress:
    sender = LocalQueueEventSender(LocalSessionQueue(tmp_path / "queue.sqlite"), "case-events")
    return Ingress(("secret",), sender, ManualClock(), store=records.store)


def headers(*roles: str) -> dict[str, str]:
    principal = encode_principal("olga@example.com", roles, auth_type="aad", object_id="oid-olga")
    return {PRINCIPAL_HEADER: principal, "Accept": "text/html"}


def test_the_api_serves_a_case_and_its_health_from_the_parts_it_is_given(tmp_path: Path, records: CaseRecords) -> None:
    records.cases.create("C-1", {"invoiceId": "C-1"})
    deps = http.ApiDeps(
        ingress=ingress(tmp_path, records),
        records=records,
        clock=ManualClock(),
        telemetry=Telemetry(),
        backends={"store": "sqlite", "queue": "local"},
    )
    response = http.get_case(deps, "C-1")
    assert response.status == 200
    assert response.body["case"]["id"] == "C-1" and response.body["history"] == []
    assert http.get_case(deps, "C-2").status == 404
    assert http.health(deps).body == {"status": "ok", "store": "sqlite", "queue": "local"}


def test_the_pages_are_served_from_the_parts_they_are_given(tmp_path: Path, records: CaseRecords) -> None:
    records.cases.create("C-1", {"invoiceId": "C-1"})
    asked: list[str] = []

    def graph_hash() -> str:
        asked.append("graph hash")
        return "f" * 64

    reconciler = Guard.from_parts(records.store, records.cases, records.ledger).reconciler
    deps = pages.PageDeps(
        records=records,
        clock=ManualClock(),
        ingress=ingress(tmp_path, records),
        ops_page=pages.OpsPageDeps(
            alerts=Alerter(records.store, ManualClock()),
            dead_letters=LocalDeadLetters(LocalSessionQueue(tmp_path / "queue.sqlite"), "case-events"),
            graph_hash=graph_hash,
            resolver=Settler(clock=ManualClock(), cases=records.cases, ledger=records.ledger, reconciler=reconciler),
        ),
        webhook_secrets=("secret",),
        store_option="--data .casekeeper/dev",
        platform=PLATFORM,
    )
    page = pages.case_page(deps, headers(APPROVER_ROLE), "C-1")
    assert page.status == 200 and b"C-1" in page.body
    listing = pages.approvals_list(deps, headers(APPROVER_ROLE))
    assert listing.status == 200
    ops = pages.ops_page(deps, headers(OPERATOR_ROLE))
    assert ops.status == 200
    assert asked == ["graph hash"]  # the drain check asked the page's own part, once per page
    assert b'id="drain-summary">0 in-flight runs' in ops.body
