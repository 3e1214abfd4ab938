"""The page of one case, ``GET /api/cases/{caseId}/page``: real cases made by the real worker, the page
invoked as the Functions host invokes it."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest

from casekeeper.core.keys import effect_key
from shared.app.bootstrap import Services
from shared.handlers.pages import approval_path
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.triggers.conftest import INVOICE, deliver, signed_request, user_function
from tests.triggers.test_failed_reads import break_the_store
from tests.triggers.test_pages import ANA, NOBODY, OLGA, escalate, form_token, get, post_answer, text

# The principal header is believed only where Easy Auth is known to be in front (as in test_pages).
pytestmark = pytest.mark.usefixtures("behind_easy_auth")


def send(functions: dict[str, Any], queue: LocalSessionQueue, case_id: str, delivery: str, **data: str) -> None:
    body = json.dumps({"type": "invoice.received", "caseId": case_id, "data": {**INVOICE, **data}}).encode()
    assert user_function(functions, "events")(signed_request(body, delivery=delivery)).status_code == 202
    deliver(functions, queue)


def case_page(functions: dict[str, Any], case_id: str, headers: dict[str, str]) -> tuple[int, str]:
    response = get(functions, "case_page", f"/api/cases/{case_id}/page", headers, caseId=case_id)
    return response.status_code, html.unescape(text(response))


def section(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</(?:table|ul|dl|section)>', page, flags=re.S)
    assert match, f"no #{element_id}"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(1)))


def test_a_credit_requested_case_shows_facts_money_effects_timeline_and_next(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    send(functions, queue, "INV-1", "d-1")  # over-billed by 100.00: requested at once
    status, page = case_page(functions, "INV-1", OLGA)
    assert status == 200
    assert "PO-1" in section(page, "facts") and "1100.00" in section(page, "facts")
    money = section(page, "money")
    assert "100.00" in money and "may still be requested" in money
    key = effect_key("INV-1", "request_credit_note", 1)
    effects = section(page, "effects")
    assert key[:12] in effects and "done" in effects and "request_credit_note" in effects
    assert "credit note CN-000001 for 100.00 EUR" in effects
    timeline = section(page, "timeline")
    assert "v1 → v2 credit_requested" in timeline and "created v1 open" in timeline
    assert "waiting for the supplier's credit note" in section(page, "next")
    assert 'href="/api/cases/INV-1"' in page  # the JSON of the same case


def test_a_case_awaiting_approval_links_its_approval_and_the_approval_page_links_back(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    send(functions, queue, "INV-2", "d-2", invoiceAmount="3400.00", poAmount="2000.00")
    request_id = svc.cases.require("INV-2").data["pendingApproval"]["requestId"]
    status, page = case_page(functions, "INV-2", ANA)
    assert status == 200
    assert approval_path("INV-2", request_id) in section(page, "next") or approval_path("INV-2", request_id) in page
    assert "Approve or reject it on its approval page" in section(page, "next")
    approval = text(
        get(functions, "approval_page", approval_path("INV-2", request_id), ANA, caseId="INV-2", requestId=request_id)
    )
    assert 'id="case-page" href="/api/cases/INV-2/page"' in approval
    listing = text(get(functions, "approvals_page", "/api/approvals", ANA))
    assert 'href="/api/cases/INV-2/page"' in listing

    # Answered and applied: the timeline and the approvals say who, and the request stays linked.
    token = form_token(approval)
    form = {"csrf": token, "caseVersion": "2", "decision": "approve"}
    assert post_answer(functions, "INV-2", request_id, form, ANA).status_code == 303
    deliver(functions, queue)
    status, page = case_page(functions, "INV-2", OLGA)
    assert status == 200, page
    assert "approved by ana@example.com" in section(page, "timeline")
    approvals = section(page, "approvals")
    assert "requested" in approvals and "approved by ana@example.com → credit_requested" in approvals


def test_an_escalated_effect_says_what_a_person_does(functions: dict[str, Any], svc: Services) -> None:
    key = escalate(svc, "INV-S")
    status, page = case_page(functions, "INV-S", OLGA)
    assert status == 200
    assert "needs_reconciliation" in section(page, "effects") and "lookups kept failing" in section(page, "effects")
    assert f"casekeeper effects resolve {key} --done" in section(page, "next")
    assert 'href="/api/cases/INV-S/page"' in html.unescape(text(get(functions, "ops_page", "/api/ops", OLGA)))


def test_who_may_see_it_and_what_is_not_there(functions: dict[str, Any], svc: Services) -> None:
    escalate(svc, "INV-S")
    assert case_page(functions, "INV-S", {})[0] == 401
    assert case_page(functions, "INV-S", NOBODY)[0] == 403
    assert case_page(functions, "INV-S", ANA)[0] == 200  # an approver may look too
    assert case_page(functions, "ghost", OLGA)[0] == 404
    status, page = case_page(functions, "INV\t1", OLGA)
    assert status == 404 and "Traceback" not in page
    break_the_store(svc)
    status, page = case_page(functions, "INV-S", OLGA)
    assert status == 503 and "Could not read case INV-S" in page
