"""The operations page lists a page of what is stuck and counts the rest: after an outage with more effects
without an outcome than it lists, it shows the oldest and says how many there are, and every count by
status comes from the store's aggregate, not from listing the cases."""

from __future__ import annotations

from typing import Any

import pytest

from shared.app.bootstrap import Services
from shared.handlers.pages import OPS_PENDING_SHOWN
from tests.triggers.test_pages import OLGA, get, text

pytestmark = pytest.mark.usefixtures("behind_easy_auth")


def test_the_ops_page_lists_the_oldest_and_counts_the_rest(functions: dict[str, Any], svc: Services) -> None:
    outage = OPS_PENDING_SHOWN + 7
    for i in range(outage):
        body = {"id": f"{i:064x}", "kind": "effect", "caseId": f"OUT-{i}", "action": "request_credit_note"}
        svc.store.create("effects", f"OUT-{i}", f"{i:064x}", {**body, "caseVersion": 1, "status": "started"})
    for i in range(25):
        svc.cases.create(f"C-{i}", {"supplierId": "S-1"})
    page = text(get(functions, "ops_page", "/api/ops", OLGA))
    assert f"The oldest {OPS_PENDING_SHOWN} of {outage} (started {outage}, needs_reconciliation 0)" in page
    rows = page.split('id="pending-effects"')[1].split("</table>")[0].count("<tr>")
    assert rows == OPS_PENDING_SHOWN + 1  # and the header
    open_row = page.split('data-status="open"')[1].split("</tr>")[0]
    assert '<td class="num">25</td>' in open_row
    assert open_row.count("/page") == 20  # the first 20 listed, all 25 counted
