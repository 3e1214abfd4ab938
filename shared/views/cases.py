"""The counts of cases by status, with the least recently changed few of each: the operations page's first
table. One aggregate query and one short page per status, however many cases there are."""

from __future__ import annotations

from typing import Any

from casekeeper.stores import CASES, DocumentStore, Query, next_page
from shared.domain.invoice import Status

SHOWN_PER_STATUS = 20


def cases_by_status(store: DocumentStore, shown: int = SHOWN_PER_STATUS) -> list[dict[str, Any]]:
    """For each status: how many cases (``count``) and the ids of the ``shown`` least recently changed."""
    rows = []
    for status in Status:
        query = Query(equals={"status": str(status)})
        count = store.count(CASES, query)
        ids = [doc.id for doc in next_page(store, CASES, query, shown).documents] if count else []
        rows.append({"status": str(status), "count": count, "ids": ids})
    return rows
