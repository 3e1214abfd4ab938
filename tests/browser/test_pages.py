"""The approval and operations pages in a real browser, against a real local host and supplier stub.

Each test uses its own case, so they share one host (and one browser) and stay fast.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips, or fails under CI, with the reason
    expect = None

from casekeeper.core.keys import effect_key
from devhost.supplier_stub import SupplierStub
from shared.web.identity import APPROVER_ROLE, PRINCIPAL_HEADER, encode_principal
from tests.browser.conftest import APPROVER, DEAD_CASE, DOCS, OPERATOR
from tests.support.dev_host import DevHost

OVER_THRESHOLD = {"supplierId": "SUP-9", "poNumber": "PO-88", "invoiceAmount": "3400.00", "poAmount": "2000.00"}


def send_invoice(host: DevHost, case_id: str, **overrides: str) -> dict[str, Any]:
    """An invoice over-billed by 1400.00 EUR: above the approval threshold, so it waits for a person."""
    data = {"invoiceId": case_id, **OVER_THRESHOLD, "currency": "EUR", **overrides}
    assert host.post_event("invoice.received", case_id, data).status_code == 202
    return host.wait_for(case_id, lambda v: v["case"]["status"] == "awaiting_approval")


def credit_posts(supplier: SupplierStub, case_id: str, version: int) -> list[dict[str, Any]]:
    key = effect_key(case_id, "request_credit_note", version)
    return [r for r in supplier.requests if r["method"] == "POST" and r["idempotencyKey"] == key]


def open_from_list(page: Any, host: DevHost, case_id: str) -> None:
    page.goto(f"{host.url}/api/approvals")
    page.locator(f'tr[data-case="{case_id}"] a.request').click()
    page.wait_for_selector("#case-id")
    assert page.locator("#case-id").inner_text() == case_id


def test_list_open_approve_and_the_case_moves_with_one_supplier_request(
    page: Any, host: DevHost, supplier: SupplierStub
) -> None:
    view = send_invoice(host, "INV-B1")
    assert view["pendingApproval"]["caseVersion"] == 2
    page.goto(f"{host.url}/api/approvals")
    row = page.locator('tr[data-case="INV-B1"]')
    assert "1400.00 EUR" in row.inner_text() and "SUP-9" in row.inner_text() and "v2" in row.inner_text()
    assert "local identity" in page.locator("header").inner_text() and APPROVER in page.locator("header").inner_text()
    open_from_list(page, host, "INV-B1")
    computation = page.locator("#computation").inner_text()
    assert "3400.00" in computation and "2000.00" in computation and "1400.00 EUR" in computation
    assert page.locator("#asked-on").inner_text() == "v2"
    page.screenshot(path=str(DOCS / "approval-page.png"), full_page=True)

    page.locator("#approve").click()
    page.wait_for_selector("#answered")
    # The page refreshes itself until the case has moved.
    expect(page.locator("#case-status")).to_have_text("credit_requested", timeout=20_000)
    assert "approved by ana@example.com" in page.locator("#history").inner_text()
    moved = host.case("INV-B1")
    assert moved is not None and (moved["case"]["status"], moved["case"]["version"]) == ("credit_requested", 3)
    assert len(credit_posts(supplier, "INV-B1", 2)) == 1
    # Back in the list, it is gone.
    page.goto(f"{host.url}/api/approvals")
    assert page.locator('tr[data-case="INV-B1"]').count() == 0


def test_a_stale_request_says_so_and_cannot_be_answered(page: Any, host: DevHost, supplier: SupplierStub) -> None:
    first = send_invoice(host, "INV-B2")["pendingApproval"]
    open_from_list(page, host, "INV-B2")
    assert page.locator("#approve").is_visible()
    # The PO changes while the page is open: the case is decided again and asks anew on v4.
    assert host.post_event("po.updated", "INV-B2", {"poAmount": "2100.00"}).status_code == 202
    second = host.wait_for(
        "INV-B2", lambda v: (v["pendingApproval"] or {}).get("requestId") not in (None, first["requestId"])
    )["pendingApproval"]
    assert second["caseVersion"] == 4

    page.locator("#approve").click()  # the old form, answered on v2
    stale = page.locator("#stale")
    stale.wait_for()
    assert "no longer pending" in stale.inner_text()
    assert "Not recorded" in stale.inner_text()  # one banner says it all
    assert page.locator(".banner:visible").count() == 1
    assert page.locator("#approve").count() == 0
    page.locator("#current-request").click()
    page.wait_for_selector("#approve")
    assert page.locator("#asked-on").inner_text() == "v4" and "1300.00 EUR" in page.locator("#amount").inner_text()
    view = host.case("INV-B2")
    assert view is not None and (view["case"]["status"], view["case"]["version"]) == ("awaiting_approval", 4)
    assert credit_posts(supplier, "INV-B2", 2) == [] and credit_posts(supplier, "INV-B2", 4) == []


def test_reject_needs_a_reason(page: Any, host: DevHost, supplier: SupplierStub) -> None:
    send_invoice(host, "INV-B3")
    open_from_list(page, host, "INV-B3")
    page.locator("#reject").click()
    assert "A reason is required to reject" in page.locator("#error").inner_text()
    view = host.case("INV-B3")
    assert view is not None and view["case"]["status"] == "awaiting_approval"

    page.locator("#reason").fill("the PO was raised by phone; ticket 4411")
    page.locator("#reject").click()
    expect(page.locator("#case-status")).to_have_text("needs_review", timeout=20_000)
    history = page.locator("#history").inner_text()
    # Recorded by the local identity's id, with its name for reading.
    assert f"rejected by {APPROVER} <dev:{APPROVER}> (reason: the PO was raised by phone; ticket 4411)" in history
    assert credit_posts(supplier, "INV-B3", 2) == []


def test_an_operator_who_is_not_an_approver_gets_403(page: Any, host: DevHost, operator_host: DevHost) -> None:
    send_invoice(host, "INV-B4")
    open_from_list(page, operator_host, "INV-B4")
    assert OPERATOR in page.locator("header").inner_text()
    assert page.locator("#approve").count() == 0
    assert "may look but not answer" in page.locator("#no-role").inner_text()
    # Posting an answer anyway, from the page itself, is refused with the reason.
    path = page.evaluate("location.pathname")
    status, body = page.evaluate(
        """async (path) => {
            const r = await fetch(path, {method: "POST", body: new URLSearchParams({decision: "approve",
                caseVersion: "2", csrf: "0"})});
            return [r.status, await r.text()];
        }""",
        path,
    )
    assert status == 403 and "needs the app role Casekeeper.Approver" in body
    view = host.case("INV-B4")
    assert view is not None and view["case"]["status"] == "awaiting_approval"


def test_the_local_identity_replaces_whatever_principal_a_client_sends(host: DevHost) -> None:
    forged = {PRINCIPAL_HEADER: encode_principal("mallory@example.com", [APPROVER_ROLE], auth_type="aad")}
    page = httpx.get(f"{host.url}/api/approvals", headers=forged, timeout=10)
    assert page.status_code == 200 and APPROVER in page.text and "mallory" not in page.text


def test_facts_are_shown_as_text_never_run(page: Any, host: DevHost) -> None:
    hostile = {
        "supplierId": "<script>alert('supplier')",
        "poNumber": '"><img src=x onerror=alert("po")>',
        "invoiceId": "<script>alert('invoice')",
    }
    send_invoice(host, "INV-B5", **hostile)
    for url in (f"{host.url}/api/approvals", None):
        if url is None:
            open_from_list(page, host, "INV-B5")
        else:
            page.goto(url)
        text = page.locator("main").inner_text()
        for value in hostile.values():
            assert value in text
        assert page.locator("main img").count() == 0
        scripts = page.locator("script")
        for i in range(scripts.count()):  # only the page's own refresh script, if any
            assert "Refresh the page's content" in scripts.nth(i).inner_text()
    page.wait_for_timeout(300)
    assert page.dialogs == []


def test_the_ops_page(page: Any, host: DevHost, escalated_key: str) -> None:
    below = {"invoiceId": "INV-B6", **OVER_THRESHOLD, "invoiceAmount": "2250.00", "currency": "EUR"}
    assert host.post_event("invoice.received", "INV-B6", below).status_code == 202
    host.wait_for("INV-B6", lambda v: v["case"]["status"] == "credit_requested")
    page.goto(f"{host.url}/api/ops")
    table = page.locator("#cases-by-status")
    counts = {
        row.get_attribute("data-status"): int(row.locator("td.num").inner_text())
        for row in table.locator("tbody tr").all()
    }
    assert set(counts) == {
        "awaiting_invoice",
        "open",
        "awaiting_approval",
        "approved",
        "credit_requested",
        "needs_review",
        "closed",
    }
    assert counts["credit_requested"] >= 1
    assert "INV-B6" in table.locator('tr[data-status="credit_requested"]').inner_text()
    assert re.search(
        r"\d+ in-flight runs, \d+ cannot be resumed by this build", page.locator("#drain-summary").inner_text()
    )
    main = page.locator("main").inner_text()
    assert "casekeeper drain check --data" in main
    # The seeded escalation, with the command that settles it, signed by who is looking.
    assert (
        f"casekeeper effects resolve {escalated_key} --done" in main and f"--by '{APPROVER} <dev:{APPROVER}>'" in main
    )
    assert "three lookups failed" in page.locator("#pending-effects").inner_text()
    # The seeded dead letter, and the alert the timer raised for it.
    assert DEAD_CASE in page.locator("#dead-letters").inner_text()
    for _ in range(40):  # the timer raises it within a couple of seconds of starting
        if page.locator("#alerts").count() and "dead_lettered" in page.locator("#alerts").inner_text():
            break
        page.wait_for_timeout(500)
        page.reload()
    assert "dead_lettered" in page.locator("#alerts").inner_text()
    page.screenshot(path=str(DOCS / "ops-page.png"), full_page=True)

    page.locator("#dead-letters button").first.click()
    expect(page.locator("#notice")).to_contain_text(f"Put back into their case's session by {APPROVER}")
    assert page.locator("#dead-letters").count() == 0
    assert "No dead-lettered events" in page.locator("main").inner_text()

    # The escalation, settled from its form as the signed-in operator.
    form = page.locator("form.resolve")
    form.locator('input[name="creditNoteId"]').fill("CN-4242")
    form.locator('input[name="why"]').fill("confirmed by phone, ticket 4411")
    form.locator("button").click()
    expect(page.locator("#notice")).to_contain_text(f"Recorded done for effect {escalated_key[:12]}")
    assert f"by {APPROVER}" in page.locator("#notice").inner_text()
    assert "Nothing escalated to a person" in page.locator("main").inner_text()
