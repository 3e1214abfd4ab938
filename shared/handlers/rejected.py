"""Events set aside: malformed or impossible, never retried forever, never dropped silently.

The stock Python Service Bus binding cannot dead-letter a message explicitly, so a rejected event
is recorded here (container ``health``, kind ``rejected_event``) with its reason and body, and the
message is completed. ``GET /api/cases/{id}`` and ``casekeeper case show`` list them
(:func:`shared.views.rejected.rejected_events`).
"""

from __future__ import annotations

import logging

from casekeeper import DocumentStore
from casekeeper.stores import HEALTH, storable_id
from shared.views.rejected import KIND, rejected_events

__all__ = ["KIND", "MAX_BODY_CHARS", "rejected_events", "set_aside"]

MAX_BODY_CHARS = 8000

log = logging.getLogger("casekeeper.rejected")


def set_aside(
    store: DocumentStore,
    *,
    message_id: str,
    case_id: str | None,
    reason: str,
    fields: dict[str, str],
    body: bytes,
    delivery_count: int,
) -> None:
    text = body.decode("utf-8", errors="replace")
    # The message id came from outside (a webhook's delivery id) and may be exactly what made the event
    # unstorable: the record's own id must be storable whatever it holds.
    record_id = storable_id(message_id)
    record = {
        "id": record_id,
        "messageId": message_id,
        "kind": KIND,
        "caseId": case_id,
        "reason": reason,
        "fields": fields,
        "body": text[:MAX_BODY_CHARS],
        "truncated": len(text) > MAX_BODY_CHARS,
        "deliveryCount": delivery_count,
    }
    store.upsert(HEALTH, KIND, record_id, record)
    log.warning("event %s set aside: %s", message_id, reason, extra={"caseId": case_id, "messageId": message_id})
