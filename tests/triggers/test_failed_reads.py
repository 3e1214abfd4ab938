"""A read that fails says so: with the store broken (its table gone, as when another process deleted the
data folder under a running host), no page looks empty. Pages invoked as the Functions host invokes them."""

from __future__ import annotations

import html
import sqlite3
from typing import Any

import pytest

from shared.app.bootstrap import Services
from shared.handlers.pages import approval_path
from tests.triggers.test_pages import ANA, OLGA, get, pending_case, text

# The principal header is believed only where Easy Auth is known to be in front (as in test_pages).
pytestmark = pytest.mark.usefixtures("behind_easy_auth")


def break_the_store(svc: Services) -> None:
    with sqlite3.connect(svc.settings.sqlite_path) as db:
        db.execute("DROP TABLE documents")


def test_the_ops_page_says_what_it_could_not_read(functions: dict[str, Any], svc: Services) -> None:
    break_the_store(svc)
    page = get(functions, "ops_page", "/api/ops", OLGA)
    shown = html.unescape(text(page))
    assert "Nothing escalated to a person" not in shown and "Every effect has an outcome" not in shown
    assert "No approvals are pending" not in shown
    assert shown.count("Could not read") >= 3  # cases, effects, escalations at least
    assert "no such table" in shown


def test_the_approvals_list_says_it_could_not_read_them(functions: dict[str, Any], svc: Services) -> None:
    pending_case(svc)
    break_the_store(svc)
    page = get(functions, "approvals_page", "/api/approvals", ANA)
    shown = html.unescape(text(page))
    assert page.status_code == 503
    assert "No approvals are pending" not in shown and "Could not read the pending approvals" in shown


def test_an_approval_page_says_it_could_not_read_the_case(functions: dict[str, Any], svc: Services) -> None:
    request_id = pending_case(svc)
    break_the_store(svc)
    path = approval_path("INV-7", request_id)
    page = get(functions, "approval_page", path, ANA, caseId="INV-7", requestId=request_id)
    assert page.status_code == 503
    assert "Could not read case INV-7" in html.unescape(text(page))
