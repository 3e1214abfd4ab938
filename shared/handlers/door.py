"""What the door remembers: which body a delivery id was first accepted with, and which answer an approval
request was first given.

Both are records in the ``health`` container, created if absent (the store's atomic create decides
between two racing requests), before the event is enqueued:

- **A delivery id is an idempotency key.** ``delivery/<id>`` holds a digest of the body it was first
  accepted with: the canonical JSON of the parsed body (keys sorted, no insignificant whitespace), so a
  sender that re-serialises the same event is not refused. The same id with the same body is accepted
  again (202; the broker drops the duplicate message); with another body it is refused (409), as a
  payment API refuses an idempotency key re-used with other parameters, instead of being dropped by the
  broker as a duplicate of an event it is not.
- **The store's clock stamps the acceptance.** ``fact_clock/<case id>`` is written, conditionally, once
  per acceptance of a fact of the case; the store's time of that write (Cosmos DB's ``_ts``, the SQLite
  store's own clock), moved just past the case's previous stamp when it is not already later, is the
  event's acceptance stamp, recorded in ``delivery/<id>``: one clock for every ingress instance, which no
  host's clock can skew, and no two reports of one case tie, not even within one of Cosmos DB's whole
  seconds (docs/design.md#fact-order). A delivery posted again (after the broker's duplicate window too)
  gets its first record's stamp back, so it keeps its first place in the order of facts. An
  ``occurredAt`` more than ``FUTURE_SKEW_SECONDS`` after the stamp is refused (400, the limit named) and
  nothing of it is recorded.
- **One answer per approval request.** ``approval_answer/<request id>`` holds the first answer accepted:
  the decision, the version it was given on and who gave it. The same answer again is accepted (202); any
  other is refused (409, naming the recorded one). So the first accepted answer closes the request.

The records (the fact clocks too) are kept as long as a closed case (``CLOSED_CASE_RETENTION_DAYS``,
``shared.app.retention``): within that time the door itself refuses a delivery id re-used with another
body. After it, the case still judges the id: every delivery that changed a case, or was held or
superseded on it, leaves its body's digest on the case (``shared.workflow.fact_events``, ``deliveries``),
and a delivery whose id the case knows with another body is set aside there with the reason, shown in the
case's ``rejectedEvents``. So a delivery id is judged by its body for as long as its case exists. Each
record is a few hundred bytes in one logical partition per kind; a Cosmos DB logical partition holds 20
GB, tens of millions of deliveries. If a store write fails, nothing is enqueued and the caller is told to
retry (503).

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
from decimal import Decimal
from typing import Any

from casekeeper import (
    AlreadyExists,
    Case,
    ConcurrencyConflict,
    Document,
    DocumentStore,
    StoreError,
    approval_request_id,
)
from shared.domain.order import instant
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
KIND_FACT_CLOCK = "fact_clock"
STAMP_STEP = 0.001
"""How far after the case's previous stamp the next one is, at least (a millisecond)."""
MAX_CLOCK_RACES = 16
"""Acceptances of one case racing for the next stamp, at most, before the door answers 503."""
AWAITING_APPROVAL = "awaiting_approval"
CREDIT_NOTE_ACTION = "request_credit_note"


DEFAULT_FUTURE_SKEW = 300.0
"""``FUTURE_SKEW_SECONDS``' default: how far ahead of the store's clock an ``occurredAt`` may be."""


def body_digest(raw: Any) -> str:
    """The digest of a parsed JSON body, independent of key order and whitespace."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Delivery:
    """The door's verdict on a delivery. ``status``: ``None`` to accept it, otherwise the HTTP status to
    refuse it with (409: the id was accepted with another body; 400: dated too far in the future), and
    ``refusal`` the reason. ``accepted_at``: the acceptance stamp the event carries, by the store's clock
    (the first acceptance's, for a delivery seen before with the same body: one delivery is one report,
    stamped once). ``digest``: the body's digest (:func:`body_digest`), which the event carries to its case."""

    status: int | None
    refusal: str | None
    accepted_at: float
    digest: str


def check_delivery(
    store: DocumentStore,
    delivery_id: str,
    raw: Any,
    *,
    case_id: str,
    event_type: str,
    at: float,
    occurred_at: str | None = None,
    future_skew: float = DEFAULT_FUTURE_SKEW,
) -> Delivery:
    """Remember ``delivery_id`` with the body it came with, stamped with its acceptance by the case's fact
    clock (:func:`fact_clock`). ``at``: the ingress host's time, kept on the record for people only (nothing
    is ordered by it). ``occurred_at``: the event's ``data.occurredAt``, refused (nothing recorded) when more
    than ``future_skew`` seconds after the stamp. Raises ``StoreError`` when a record cannot be written or read."""
    digest = body_digest(raw)
    # Create first (docs/design.md#create-first): a delivery seen before costs a stamp it does not use.
    stamp = fact_clock(store, case_id)
    body: dict[str, Any] = {"id": delivery_id, "kind": KIND_DELIVERY, "bodySha256": digest, "caseId": case_id}
    body.update(type=event_type, at=at, acceptedAt=stamp)
    too_early = future_problem(occurred_at, stamp, future_skew)
    first = None
    for _ in range(2):  # a record deleted between the create and the read (its retention ran) is made anew
        if too_early is not None:
            # Nothing of a refused delivery is recorded: the sender may send it again, corrected, under this
            # id. Unless the id was accepted before: then the record answers.
            first = store.read(HEALTH, KIND_DELIVERY, delivery_id)
            if first is None:
                return Delivery(400, too_early, stamp, digest)
            break
        try:
            store.create(HEALTH, KIND_DELIVERY, delivery_id, body)
        except AlreadyExists:
            first = store.read(HEALTH, KIND_DELIVERY, delivery_id)
            if first is not None:
                break
            continue
        return Delivery(None, None, stamp, digest)
    if first is None:
        raise StoreError(f"the record of delivery {delivery_id!r} kept disappearing", container=HEALTH)
    recorded = first.body.get("acceptedAt")
    accepted_at = float(recorded) if isinstance(recorded, int | float) else first.ts
    if first.body.get("bodySha256") == digest:
        too_early = future_problem(occurred_at, accepted_at, future_skew)
        if too_early is not None:
            return Delivery(400, too_early, accepted_at, digest)
        return Delivery(None, None, accepted_at, digest)
    return Delivery(
        409,
        f"delivery id {delivery_id!r} was already accepted with another body "
        f"({first.body.get('type')} for case {first.body.get('caseId')!r}); a new event needs a new delivery id",
        accepted_at,
        digest,
    )


def fact_clock(store: DocumentStore, case_id: str) -> float:
    """The next acceptance stamp of a fact of ``case_id``: the store's time of a write to the case's clock
    record (``fact_clock/<case id>``: Cosmos DB's ``_ts``, the SQLite store's own clock), and at least
    :data:`STAMP_STEP` after the case's previous stamp. So every stamp comes from one clock no ingress host
    can skew, and two reports of one case never tie, even within one of Cosmos DB's whole seconds: the
    conditional write orders them as the store received them. Raises ``StoreError``."""
    for _ in range(MAX_CLOCK_RACES):
        held = store.read(HEALTH, KIND_FACT_CLOCK, case_id)
        body = {"id": case_id, "kind": KIND_FACT_CLOCK, "caseId": case_id, "previous": _stamp(held)}
        try:
            if held is None:
                written = store.create(HEALTH, KIND_FACT_CLOCK, case_id, body)
            else:
                written = store.replace(HEALTH, KIND_FACT_CLOCK, case_id, body, etag=held.etag)
        except (AlreadyExists, ConcurrencyConflict):
            continue  # another acceptance of the case took the stamp: take the next
        stamp = _stamp(written)
        assert stamp is not None  # a written record always stands for a stamp
        return stamp
    raise StoreError(f"the fact clock of case {case_id!r} kept changing", container=HEALTH, doc_id=case_id)


def _stamp(record: Document | None) -> float | None:
    """The stamp a clock record stands for: its store time, or just after the stamp before it when that is
    later (several in one whole second)."""
    if record is None:
        return None
    previous = record.body.get("previous")
    if not isinstance(previous, int | float):
        return record.ts
    return max(record.ts, float(previous) + STAMP_STEP)


def future_problem(occurred_at: str | None, accepted_at: float, future_skew: float) -> str | None:
    """Why ``occurred_at`` cannot be taken as a fact's time, accepted at ``accepted_at`` (the store's clock):
    it is more than ``future_skew`` seconds after it. ``None``: it is not (or there is none)."""
    if occurred_at is None:
        return None
    ahead = instant(occurred_at) - Decimal(repr(accepted_at))
    if ahead <= future_skew:
        return None
    return (
        f"data.occurredAt {occurred_at} is {ahead:.0f}s ahead of the store's clock; at most FUTURE_SKEW_SECONDS="
        f"{future_skew:g}s ahead is accepted (a sender's clock that runs fast would otherwise put its reports "
        "ahead of every later one)"
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
