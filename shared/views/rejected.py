"""The events set aside for a case (``shared.handlers.rejected`` records them): shown by ``GET
/api/cases/{id}``, the case and approval pages and ``casekeeper case show``, so that an accepted event that
was never applied does not vanish silently."""

from __future__ import annotations

from typing import Any

from casekeeper import DocumentStore, Query
from casekeeper.stores import HEALTH

KIND = "rejected_event"
"""The ``kind`` (and partition, in the ``health`` container) of a set-aside event's record."""


def rejected_events(store: DocumentStore, case_id: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """The newest ``limit`` events set aside (for ``case_id``, or for any case), newest first."""
    equals = {"caseId": case_id} if case_id is not None else {}
    docs = store.query(HEALTH, Query(partition=KIND, equals=equals, order_by_ts="desc", limit=limit))
    keys = ("id", "messageId", "caseId", "reason", "fields", "body", "deliveryCount")
    return [{k: d.body.get(k) for k in keys} for d in docs]
