"""What the door remembers: which body a delivery id was first accepted with, and which answer an approval
request was first given.

Both are records in the ``health`` container, created if absent (the store's atomic create decides
between two racing requests), before the event is enqueued:

- **A delivery id is an idempotency key.** ``delivery/<id>`` holds a digest of the body it was first
  accepted with: the canonical JSON of the parsed body (keys sorted, no insignificant whitespace), so a
  sender that re-serialises the same event is not refused. The same id with the same body is accepted
  again (202; the broker drops the duplicate message); with another body it is refused (409), as a
  payment API refuses an idempotency key re-used with other parameters, instead of being dropped by the
  broker as a duplicate of an event it is not. It also holds the event's acceptance stamp, so a delivery
  posted again (after the broker's duplicate window too) keeps its first place in the order of facts
  (docs/design.md#fact-order) instead of taking a later one.
- **One answer per approval request.** ``approval_answer/<request id>`` holds the first answer accepted:
  the decision, the version it was given on and who gave it. The same answer again is accepted (202); any
  other is refused (409, naming the recorded one). So the first accepted answer closes the request.

The records are kept (no time to live): a delivery id re-used after a week is still caught. Each is a
few hundred bytes in one logical partition per kind; a Cosmos DB logical partition holds 20 GB, tens of
millions of deliveries. If a store write fails, nothing is enqueued and the caller is told to retry (503).

**The door answers within :data:`ANSWER_SECONDS`** (docs/design.md#door-budget), whatever the store or the
queue does: a webhook sender waits 10-30 s. Its store is opened for it alone with a short budget per call,
:data:`STORE_CALL_SECONDS` (SQLite: the busy timeout; Cosmos DB: the client's total, connect and read
timeouts, one throttling retry waiting at most a second), and so is its queue sender
(:data:`SEND_SECONDS`). The door starts a step only while the steps it still has to take fit what is left
of :data:`DOOR_BUDGET_SECONDS`; otherwise it answers 503 with ``Retry-After: RETRY_AFTER_SECONDS`` and
nothing more is done. A step cut short may still have landed (a create, a send): retrying is safe, because
every record here is created if absent and compared (the same body, the same answer: accepted), and the
broker drops a second message with the same id. So 202 means the event is enqueued; 503 means retry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from casekeeper import AlreadyExists, DocumentStore, approval_request_id
from casekeeper import Record as Case
from shared.workflow.approval import pending_ref

ANSWER_SECONDS = 5.0
"""What the door promises: every webhook and approval POST is answered within this, outage or not."""
DOOR_BUDGET_SECONDS = 4.0
"""What the door's own steps may take, leaving the rest of :data:`ANSWER_SECONDS` to the host around it."""
STORE_CALL_SECONDS = 1.0
"""The budget of one call of the door's store."""
SEND_SECONDS = 1.5
"""The budget of the door's queue send."""
RETRY_AFTER_SECONDS = 10
"""The ``Retry-After`` of a 503: long enough for a blip of the store or the queue to pass."""

HEALTH = "health"
KIND_DELIVERY = "delivery"
KIND_ANSWER = "approval_answer"
AWAITING_APPROVAL = "awaiting_approval"
CREDIT_NOTE_ACTION = "request_credit_note"


def body_digest(raw: Any) -> str:
    """The digest of a parsed JSON body, independent of key order and whitespace."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Delivery:
    """The door's verdict on a delivery: ``refusal``, the reason to refuse it (409), or ``None``; and
    ``accepted_at``, the acceptance stamp the event carries: the first acceptance's, for a delivery seen
    before with the same body (one delivery is one report, stamped once)."""

    refusal: str | None
    accepted_at: float


def record_delivery(
    store: DocumentStore, delivery_id: str, raw: Any, *, case_id: str, event_type: str, at: float
) -> str | None:
    """Remember ``delivery_id`` with the body it came with. ``None``: first seen, or seen with the same body;
    otherwise the reason to refuse it. Raises ``StoreError`` when the record cannot be written or read."""
    return check_delivery(
        store, delivery_id, raw, case_id=case_id, event_type=event_type, at=at, accepted_at=at
    ).refusal


def check_delivery(
    store: DocumentStore, delivery_id: str, raw: Any, *, case_id: str, event_type: str, at: float, accepted_at: float
) -> Delivery:
    """:func:`record_delivery`, with the stamp the event is to carry: ``accepted_at`` (this acceptance's)
    for a first delivery, the recorded one for a delivery seen before with the same body. Raises ``StoreError``
    as it does."""
    digest = body_digest(raw)
    body = {
        "id": delivery_id,
        "kind": KIND_DELIVERY,
        "bodySha256": digest,
        "caseId": case_id,
        "type": event_type,
        "at": at,
        "acceptedAt": accepted_at,
    }
    try:
        store.create(HEALTH, KIND_DELIVERY, delivery_id, body)
        return Delivery(None, accepted_at)
    except AlreadyExists:
        pass
    first = store.read(HEALTH, KIND_DELIVERY, delivery_id)
    if first is None:
        return Delivery(None, accepted_at)  # deleted meanwhile by an operator: nothing to compare with, accept
    if first.body.get("bodySha256") == digest:
        return Delivery(None, float(first.body["acceptedAt"]))
    return Delivery(
        f"delivery id {delivery_id!r} was already accepted with another body "
        f"({first.body.get('type')} for case {first.body.get('caseId')!r}); a new event needs a new delivery id",
        accepted_at,
    )


def answer_refusal(case: Case, request_id: str, case_version: int) -> str | None:
    """Why an answer to ``request_id`` on ``case_version`` cannot count, as far as the door can tell from
    the case: the request was never asked on this case, is no longer pending, or was asked on another
    version. ``None``: it is the pending request, on the case's version."""
    pending = pending_ref(case)
    if pending is not None and pending[0] == request_id and case.status == AWAITING_APPROVAL:
        if case_version != case.version or pending[1] != case.version:
            return (
                f"stale: answered on v{case_version}, and the case is {case.status} at v{case.version}; an "
                "answer counts only on the version it was asked on"
            )
        return None
    asked = any(
        t.status == AWAITING_APPROVAL and approval_request_id(case.id, CREDIT_NOTE_ACTION, t.to_version) == request_id
        for t in case.history
    )
    if not asked:
        return f"unknown request: case {case.id} was never asked for approval {request_id!r}"
    return f"request {request_id} is no longer pending: the case is {case.status} at v{case.version}"


def claim_answer(store: DocumentStore, case_id: str, request_id: str, answer: Mapping[str, Any]) -> str | None:
    """Record ``answer`` (``decision``, ``caseVersion``, ``approver``, optional ``reason``) as the request's
    answer unless one is recorded. ``None``: it is recorded now, or was already, identically; otherwise the
    reason to refuse it (the request was already answered otherwise). Raises ``StoreError``."""
    mine = {k: answer.get(k) for k in ("decision", "caseVersion", "approver")}
    body = {"id": request_id, "kind": KIND_ANSWER, "caseId": case_id, **mine, "reason": answer.get("reason")}
    try:
        store.create(HEALTH, KIND_ANSWER, request_id, body)
        return None
    except AlreadyExists:
        pass
    first = recorded_answer(store, request_id)
    if first is None or {k: first.get(k) for k in mine} == mine:
        return None
    return (
        f"already answered: {first.get('decision')} by {first.get('approver')} on v{first.get('caseVersion')}; "
        "the first answer closes the request"
    )


def recorded_answer(store: DocumentStore, request_id: str) -> dict[str, Any] | None:
    """The answer the door accepted first for ``request_id``, if any."""
    doc = store.read(HEALTH, KIND_ANSWER, request_id)
    return dict(doc.body) if doc is not None else None
