"""The approval page shows one state at a time: one banner, and the form only while an answer can count.
A real invoice over the threshold goes through the real worker; the pages are invoked as the Functions host
invokes them."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import azure.functions as func
import pytest

from shared.app.bootstrap import Services
from shared.handlers.pages import approval_path
from shared.messaging.sqlite_queue import LocalSessionQueue
from shared.web.identity import APPROVER_ROLE
from tests.triggers.conftest import INVOICE, deliver, signed_request, user_function
from tests.triggers.test_pages import ANA, OLGA, form_token, get, open_request, post_answer, text, who

# The principal header is believed only where Easy Auth is known to be in front (as in test_pages).
pytestmark = pytest.mark.usefixtures("behind_easy_auth")

OVER = {**INVOICE, "invoiceAmount": "3400.00", "poAmount": "2000.00"}  # 1400.00 over: waits for a person


def awaiting(functions: dict[str, Any], queue: LocalSessionQueue, svc: Services) -> str:
    body = json.dumps({"type": "invoice.received", "caseId": "INV-1", "data": OVER}).encode()
    assert user_function(functions, "events")(signed_request(body)).status_code == 202
    deliver(functions, queue)
    case = svc.cases.require("INV-1")
    assert case.status == "awaiting_approval"
    return str(case.data["pendingApproval"]["requestId"])


def banners(page: str) -> list[str]:
    """The state banners under the title (the refresh script's own banner is empty and hidden)."""
    main = page[page.index("<main") :]
    return [
        html.unescape(re.sub(r"<[^>]+>", "", b)).strip()
        for b in re.findall(r'<(?:p|div) class="banner [^"]*"[^>]*>(.*?)</(?:p|div)>', main, flags=re.S)
    ]


def answered_page(functions: dict[str, Any], request_id: str, headers: dict[str, str]) -> str:
    path = approval_path("INV-1", request_id)
    req_page = get(functions, "approval_page", path, headers, caseId="INV-1", requestId=request_id)
    assert req_page.status_code == 200
    return text(req_page)


def test_after_approve_one_state_at_a_time(functions: dict[str, Any], svc: Services, queue: LocalSessionQueue) -> None:
    request_id = awaiting(functions, queue, svc)
    token = form_token(open_request(functions, "INV-1", request_id, ANA))
    form = {"csrf": token, "caseVersion": "2", "decision": "approve"}
    assert post_answer(functions, "INV-1", request_id, form, ANA).status_code == 303

    # Where the form's redirect leads: the page with ?answered=approve.
    req = func.HttpRequest(
        method="GET",
        url="http://localhost" + approval_path("INV-1", request_id),
        headers=ANA,
        body=b"",
        route_params={"caseId": "INV-1", "requestId": request_id},
        params={"answered": "approve"},
    )
    applying = text(user_function(functions, "approval_page")(req))
    [banner] = banners(applying)
    assert "was accepted and is being applied" in banner
    assert 'id="approve"' not in applying and 'id="reject"' not in applying  # nothing to press twice

    deliver(functions, queue)  # the worker applies the answer
    assert svc.cases.require("INV-1").status == "credit_requested"
    applied = text(user_function(functions, "approval_page")(req))
    [banner] = banners(applied)
    assert banner.startswith("You approved this request") and "credit_requested at v3" in banner
    assert "no longer pending" not in applied and 'id="approve"' not in applied

    # Another approver opening it later sees who answered, as information, not as an error.
    other = answered_page(functions, request_id, who("bo@example.com", APPROVER_ROLE))
    [banner] = banners(other)
    assert "This request was answered: approved by ana@example.com" in banner
    main = other[other.index("<main") :]
    assert 'class="banner stale"' not in main and 'class="banner error"' not in main


def test_an_operator_sees_the_pending_request_without_a_form(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    request_id = awaiting(functions, queue, svc)
    page = answered_page(functions, request_id, OLGA)
    assert banners(page) == [
        "olga@example.com may look but not answer: answering needs the app role Casekeeper.Approver."
    ]
    assert 'id="approve"' not in page
