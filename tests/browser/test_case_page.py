"""The case page, the approval page's states, and every page at a phone's width and a laptop's, in a real browser
against a real local host and supplier stub (the module's shared host: each test uses its own case)."""

from __future__ import annotations

from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips, or fails under CI, with the reason
    expect = None

from tests.browser.conftest import APPROVER, DOCS, ESCALATED_CASE
from tests.browser.test_pages import OVER_THRESHOLD, open_from_list, send_invoice
from tests.support.dev_host import DevHost

PHONE = {"width": 390, "height": 844}


def widest(page: Any) -> list[str]:
    """The elements that stick out to the right, for the failure message."""
    return list(
        page.evaluate(
            """() => Array.from(document.querySelectorAll("body *"))
                .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
                    && e.parentElement.getBoundingClientRect().right <= window.innerWidth + 1)
                .slice(0, 5).map(e => e.tagName + "." + e.className + ": " + (e.textContent || "").slice(0, 60))"""
        )
    )


def test_approve_shows_one_state_at_a_time_and_the_case_page_tells_the_story(page: Any, host: DevHost) -> None:
    send_invoice(host, "INV-C1")
    open_from_list(page, host, "INV-C1")
    page.locator("#approve").click()
    page.wait_for_selector("#answered")
    # While the answer is applied there is nothing to press twice, and one banner says where it stands.
    assert page.locator("#approve").count() == 0 and page.locator("#reject").count() == 0
    expect(page.locator("#case-status")).to_have_text("credit_requested", timeout=20_000)
    expect(page.locator("#answered")).to_contain_text("You approved this request")
    assert page.locator("main .banner:visible").count() == 1
    assert page.locator("#stale").count() == 0

    page.locator("#case-page").click()
    page.wait_for_selector("#timeline")
    assert page.locator("#case-id").inner_text() == "INV-C1"
    assert page.locator("#case-status").inner_text() == "credit_requested"
    assert "1400.00" in page.locator("#money").inner_text()
    effect = page.locator('#effects tr[data-status="done"]')
    assert effect.count() == 1 and "request_credit_note" in effect.inner_text()
    timeline = page.locator("#timeline").inner_text()
    assert f"approved by {APPROVER}" in timeline and "approval requested for 1400.00 EUR" in timeline
    assert "approved by" in page.locator("#approvals").inner_text()
    assert "waiting for the supplier's credit note" in page.locator("#next").inner_text()
    page.screenshot(path=str(DOCS / "case-page.png"), full_page=True)


def test_a_refresh_that_fails_says_so_and_keeps_what_was_read(page: Any, host: DevHost) -> None:
    send_invoice(host, "INV-C2")
    page.goto(f"{host.url}/api/cases/INV-C2/page")
    page.wait_for_selector("#timeline")
    # From now on the host's answer to this page is a 503, as when its store cannot be read (the page's own
    # script is what is tested here, so the failure is made at the network, not in the host).
    page.route(
        "**/api/cases/INV-C2/page",
        lambda route: route.fulfill(
            status=503,
            content_type="text/html",
            body='<main id="main"><p class="banner error">Could not read case INV-C2: StoreError</p></main>',
        ),
    )
    failed = page.locator("#refresh-failed")
    expect(failed).to_be_visible(timeout=15_000)
    assert "the host answered 503" in failed.inner_text() and "Could not read case INV-C2" in failed.inner_text()
    assert page.locator("#case-status").inner_text() == "awaiting_approval"  # not emptied
    page.unroute("**/api/cases/INV-C2/page")
    page.route("**/api/cases/INV-C2/page", lambda route: route.abort())
    expect(failed).to_contain_text("the host did not answer", timeout=15_000)
    page.unroute("**/api/cases/INV-C2/page")
    expect(failed).to_be_hidden(timeout=15_000)


DESKTOP = {"width": 1280, "height": 900}
FITS = "document.documentElement.scrollWidth <= window.innerWidth"


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390px", "1280px"])
def test_no_page_scrolls_sideways_and_what_happens_next_is_on_screen(
    browser: Any, host: DevHost, escalated_key: str, viewport: dict[str, int]
) -> None:
    """Every page at a phone's width and a laptop's: the document is never wider than the window (a wide table
    shows its rows as cards, long keys break), and on the ops page each pending effect's "what happens next"
    lies within the window's width, not in a column scrolled out of sight."""
    width = viewport["width"]
    waiting, requested = f"INV-W{width}", f"INV-R{width}"
    send_invoice(host, waiting)
    below = {"invoiceId": requested, **OVER_THRESHOLD, "invoiceAmount": "2250.00", "currency": "EUR"}
    assert host.post_event("invoice.received", requested, below).status_code == 202
    host.wait_for(requested, lambda v: v["case"]["status"] == "credit_requested")
    # Not is_mobile: a mobile viewport would zoom out to fit a too-wide page and hide the overflow.
    context = browser.new_context(viewport=viewport)
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        open_from_list(page, host, waiting)
        assert page.locator("#approve").is_visible()
        assert page.evaluate(FITS), f"the approval page scrolls sideways at {width} px: {widest(page)}"
        if width == PHONE["width"]:
            page.screenshot(path=str(DOCS / "approval-page-phone.png"), full_page=True)
        for path, picture in (
            ("/api/approvals", None),
            (f"/api/cases/{requested}/page", "case-page-phone.png"),
            (f"/api/cases/{ESCALATED_CASE}/page", None),
            ("/api/ops", "ops-page-phone.png"),
        ):
            page.goto(host.url + path)
            page.wait_for_selector("h1")
            assert page.evaluate(FITS), f"{path} scrolls sideways at {width} px: {widest(page)}"
            if picture and width == PHONE["width"]:
                page.screenshot(path=str(DOCS / picture), full_page=True)
        # The ops page is the last one open: the seeded escalation is among its effects without an outcome.
        window = int(page.evaluate("window.innerWidth"))
        cells = page.locator("#pending-effects td.next")
        assert cells.count() >= 1
        for i in range(cells.count()):
            box = cells.nth(i).bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= window, (width, box)
            assert cells.nth(i).is_visible() and cells.nth(i).inner_text().strip()
    finally:
        context.close()
