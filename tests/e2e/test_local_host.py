"""The whole flow on ``casekeeper dev``, over real sockets: webhook in, supplier request out, case read back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from devhost.supplier_stub import Faults, SupplierStub
from shared.messaging.sqlite_queue import LocalSessionQueue
from shared.web.identity import APPROVER_ROLE, OPERATOR_ROLE, PRINCIPAL_HEADER, encode_principal
from tests.support.dev_host import DevHost
from tests.support.invoices import invoice
from tests.support.supplier import posts

pytestmark = pytest.mark.slow


def test_an_invoice_is_investigated_and_one_credit_note_requested(host: DevHost, supplier: SupplierStub) -> None:
    response = host.post_event("invoice.received", "INV-1", invoice("1250.00"), delivery="dlv-1")
    assert response.status_code == 202 and response.json() == {"accepted": True, "deliveryId": "dlv-1"}
    view = host.wait_for("INV-1", lambda v: v["case"]["status"] == "credit_requested")
    [effect] = view["effects"]
    assert effect["status"] == "done" and effect["result"]["creditNoteId"]
    [post] = posts(supplier)
    assert post["idempotencyKey"] == effect["key"] and post["body"]["amount"] == "250.00"
    host.wait_for_log("case INV-1: invoice.received -> committed (credit_requested v2)")


def test_casekeeper_dev_carries_one_trace_from_the_webhook_over_its_queue_to_the_supplier(
    host: DevHost, supplier: SupplierStub
) -> None:
    assert host.post_event("invoice.received", "INV-T", invoice("1250.00"), delivery="dlv-t").status_code == 202
    host.wait_for("INV-T", lambda v: v["case"]["status"] == "credit_requested")
    assert host.stop() == 0  # a clean stop flushes the console exporter into <data>/telemetry.jsonl
    spans = [json.loads(line) for line in (host.data / "telemetry.jsonl").read_text().splitlines() if line.strip()]
    spans = [s for s in spans if "context" in s and "name" in s]  # metrics share the file
    [webhook] = [s for s in spans if s["name"] == "webhook"]
    [case_event] = [s for s in spans if s["name"] == "case_event"]
    trace_id = webhook["context"]["trace_id"]  # "0x" + 32 hex digits
    assert case_event["context"]["trace_id"] == trace_id and case_event["parent_id"] == webhook["context"]["span_id"]
    [post] = posts(supplier)
    carrier = {"traceparent": post["traceparent"]}
    at_supplier = trace.get_current_span(TraceContextTextMapPropagator().extract(carrier)).get_span_context()
    assert at_supplier.is_valid and at_supplier.trace_id == int(trace_id, 16)


def test_duplicates_and_repeated_investigations_reach_the_supplier_once(host: DevHost, supplier: SupplierStub) -> None:
    for _ in range(3):
        assert host.post_event("invoice.received", "INV-2", invoice("1100.00"), delivery="same-dlv").status_code == 202
    for i in range(5):
        assert host.post_event("case.investigate", "INV-2", delivery=f"inv-{i}").status_code == 202
    host.wait_for("INV-2", lambda v: v["case"]["status"] == "credit_requested")
    time.sleep(2.0)  # let every queued investigation run
    assert len(posts(supplier)) == 1
    view = host.case("INV-2")
    assert view is not None and view["case"]["version"] == 2


def test_a_host_killed_while_the_supplier_holds_the_request_never_sends_twice(
    tmp_path: Path, supplier: SupplierStub
) -> None:
    supplier.set_faults(Faults(hold_seconds=3.0))
    first = DevHost(tmp_path / "data", supplier).start()
    first.post_event("invoice.received", "INV-3", invoice("1300.00"))
    deadline = time.monotonic() + 20
    while not posts(supplier) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(posts(supplier)) == 1  # the supplier has the request and is holding the reply
    first.kill()
    supplier.set_faults(Faults())

    second = DevHost(tmp_path / "data", supplier, port=first.port).start()
    try:
        # Redelivered when the lock expires; in flight until the call timeout; then reconciled by key.
        view = second.wait_for("INV-3", lambda v: v["case"]["status"] == "credit_requested", timeout=60)
        [effect] = view["effects"]
        assert effect["status"] == "done"
        assert len(posts(supplier)) == 1
        assert any(r["method"] == "GET" for r in supplier.requests)  # looked up by key, not re-sent
    finally:
        second.stop()


def test_a_stale_approval_commits_nothing(host: DevHost, supplier: SupplierStub) -> None:
    host.post_event("invoice.received", "INV-4", invoice("2500.00"))
    view = host.wait_for("INV-4", lambda v: v["pendingApproval"] is not None)
    old = view["pendingApproval"]
    assert (view["case"]["status"], old["caseVersion"], old["amount"]) == ("awaiting_approval", 2, "1500.00")
    host.post_event("po.updated", "INV-4", {"poAmount": "900.00"})
    view = host.wait_for("INV-4", lambda v: (v["pendingApproval"] or {}).get("caseVersion") == 4)
    stale = host.approve("INV-4", old["requestId"], "approve", old["caseVersion"])
    # Refused at the door with the reason, as the approval page refuses it; nothing is enqueued.
    assert stale.status_code == 409 and "no longer pending" in stale.json()["error"]
    time.sleep(1.5)
    after = host.case("INV-4")
    assert after is not None and after["case"]["status"] == "awaiting_approval" and after["case"]["version"] == 4
    assert posts(supplier) == []
    new = after["pendingApproval"]
    assert host.approve("INV-4", new["requestId"], "approve", new["caseVersion"]).status_code == 202
    done = host.wait_for("INV-4", lambda v: v["case"]["status"] == "credit_requested")
    assert len(posts(supplier)) == 1 and posts(supplier)[0]["body"]["amount"] == "1600.00"
    # A function-key caller (no signed-in identity) is recorded under the name it gave, as a key: read from
    # the answer the transition carries as data. (Its reason text may also say the reconciler, which saw the
    # effect done first, finished the commit: both writers commit the same transition, once.)
    answers = [(e["event"], e["by"]) for e in done["approvals"]["history"] if e["event"] != "requested"]
    assert answers == [("approved", "key:e2e")]
    committed = [t for t in done["history"] if t["status"] == "credit_requested"]
    assert len(committed) == 1 and committed[0]["reason"].startswith("approved by key:e2e")


def test_a_principal_a_client_sends_is_dropped_by_the_local_host(host: DevHost) -> None:
    """Without --as nobody is signed in, whatever header the client sends (Easy Auth drops them too)."""
    forged = {
        PRINCIPAL_HEADER: encode_principal("mallory@example.com", [APPROVER_ROLE, OPERATOR_ROLE], auth_type="aad")
    }
    for path in ("/api/approvals", "/api/ops"):
        response = httpx.get(host.url + path, headers=forged, timeout=10)
        assert response.status_code == 401 and "mallory" not in response.text
        assert response.headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"secret": "wrong"}, 401),
        ({"at": time.time() - 600}, 401),
        ({"delivery": None}, 400),
        ({"content_type": "text/plain"}, 415),
    ],
    ids=["bad-signature", "expired", "no-delivery", "not-json-type"],
)
def test_bad_requests_get_their_status_and_enqueue_nothing(
    host: DevHost, kwargs: dict[str, object], status: int
) -> None:
    body = json.dumps({"type": "invoice.received", "caseId": "BAD-1", "data": invoice("1.00")}).encode()
    delivery = kwargs.pop("delivery", "bad-dlv")
    assert host.post_raw(body, delivery=delivery, **kwargs).status_code == status  # type: ignore[arg-type]
    _assert_nothing_enqueued(host)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"x" * (256 * 1024 + 1), 413),
        (b"{nope", 415),
        (json.dumps({"type": "invoice.received", "caseId": "BAD-1", "data": {"invoiceId": "x"}}).encode(), 400),
    ],
    ids=["too-large", "not-json", "missing-fields"],
)
def test_bad_bodies_get_their_status_and_enqueue_nothing(host: DevHost, body: bytes, status: int) -> None:
    response = host.post_raw(body, delivery="bad-dlv")
    assert response.status_code == status
    assert response.json()["error"]
    _assert_nothing_enqueued(host)


def _assert_nothing_enqueued(host: DevHost) -> None:
    queue = LocalSessionQueue(host.data / "queue.sqlite")
    try:
        assert queue.counts("case-events") == {"active": 0, "scheduled": 0, "locked": 0, "dead_lettered": 0}
        # Nothing was sent, so the delivery id is still unused: the broker would accept it.
        assert queue.send("case-events", b"{}", session_id="probe", message_id="webhook:bad-dlv") is True
    finally:
        queue.close()
    assert host.case("BAD-1") is None
