"""The case worker's settlement: what happens to a Service Bus message, decided by the error type.

==========================  ====================================================================
outcome                     settlement
==========================  ====================================================================
handled                     complete
``EffectInFlight``          a copy is scheduled into the same session for its ``retry_after`` (its
                            own deterministic message id), and the original completes: an
                            in-flight effect never burns the delivery count into the DLQ
``InvalidEvent``            set aside with its reason (``shared.handlers.rejected``), complete
retryable error             raised: the broker redelivers (store throttled, outcome unknown...)
anything else               raised: redelivered, dead-lettered past ``maxDeliveryCount``
==========================  ====================================================================

``effect.recheck`` messages (scheduled by the reconciler and the timer) run reconciliation rule R3
inside the case's session, so they are serialised with the case's other events.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from shared.bootstrap import Services
from shared.core.errors import EffectInFlight, InvalidEvent
from shared.domain import events as ev
from shared.handlers.rejected import set_aside
from shared.messaging import derived_message_id
from shared.workflow.worker import EventResult

log = logging.getLogger("casekeeper.case_events")

RETRY_MARGIN_SECONDS = 1.0
MAX_RECHECKS = 50


@dataclass(frozen=True)
class Settlement:
    action: str  # completed | rescheduled | set_aside | rechecked
    detail: str
    result: EventResult | None = None
    scheduled_at: float | None = None


async def handle_case_message(
    svc: Services, body: bytes, *, session_id: str | None, message_id: str, delivery_count: int
) -> Settlement:
    """Handle one message of the case-events queue. Raises to have the broker redeliver it.

    Logs one line per message handled: case, event type, outcome.
    """
    attributes = {
        "casekeeper.case_id": session_id,
        "casekeeper.event_type": _peek_type(body),
        "messaging.message.id": message_id,
        "messaging.servicebus.message.delivery_count": delivery_count,
    }
    with svc.telemetry.span("case_event", attributes) as span:
        settlement = await _handle(
            svc, body, session_id=session_id, message_id=message_id, delivery_count=delivery_count
        )
        span.set_attribute("casekeeper.settlement", settlement.action)
    result = settlement.result
    where = f" ({result.status} v{result.version})" if result is not None else ""
    log.info(
        "case %s: %s -> %s%s: %s",
        session_id,
        _peek_type(body),
        settlement.action if result is None else result.outcome,
        where,
        settlement.detail,
        extra={
            "caseId": session_id,
            "eventType": _peek_type(body),
            "settlement": settlement.action,
            "messageId": message_id,
            "deliveryCount": delivery_count,
        },
    )
    return settlement


def _peek_type(body: bytes) -> str:
    try:
        raw = json.loads(body)
    except ValueError:
        return "?"
    return str(raw.get("type", "?")) if isinstance(raw, dict) else "?"


async def _handle(
    svc: Services, body: bytes, *, session_id: str | None, message_id: str, delivery_count: int
) -> Settlement:

    def aside(case_id: str | None, reason: str, fields: dict[str, str]) -> Settlement:
        return _set_aside(svc, message_id, case_id, reason, fields=fields, body=body, delivery_count=delivery_count)

    try:
        raw = json.loads(body.decode("utf-8"))
        if not isinstance(raw, dict):
            raise ValueError("not an object")
    except (UnicodeDecodeError, ValueError) as exc:
        return aside(session_id, f"message body is not a JSON object: {exc}", {})
    envelope = {k: raw[k] for k in ("type", "caseId", "data") if k in raw}
    try:
        event = ev.parse_event(envelope, delivery_id=raw.get("deliveryId"))
    except InvalidEvent as exc:
        return aside(exc.case_id, exc.reason, exc.fields)
    if session_id is not None and event.case_id != session_id:
        reason = f"session id {session_id!r} does not match caseId {event.case_id!r}"
        return aside(event.case_id, reason, {"caseId": "does not match the session"})
    retry = int(raw.get("retry") or 0)
    root = str(raw.get("rootMessageId") or message_id)
    if event.type == ev.EFFECT_RECHECK:
        return await _recheck(svc, event, root, retry)
    try:
        result = await svc.worker.handle(event)
    except EffectInFlight as exc:
        at = time.time() + exc.retry_after + RETRY_MARGIN_SECONDS
        copy_id = derived_message_id(root, "retry", str(retry + 1))
        _schedule(svc, event, copy_id, at, retry=retry + 1, root=root)
        log.info(
            "case %s: effect in flight; re-check scheduled in %.0fs",
            event.case_id,
            at - time.time(),
            extra={"caseId": event.case_id, "effectKey": exc.key, "messageId": copy_id},
        )
        return Settlement("rescheduled", f"effect {exc.key[:12]} in flight; copy {copy_id} scheduled", scheduled_at=at)
    except InvalidEvent as exc:
        return aside(event.case_id, exc.reason, exc.fields)
    return Settlement("completed", f"{result.outcome}: {result.detail}", result=result)


async def _recheck(svc: Services, event: ev.CaseEvent, root: str, retry: int) -> Settlement:
    key = str(event.data["key"])
    with svc.telemetry.span("reconcile.recheck", {"casekeeper.case_id": event.case_id, "casekeeper.effect_key": key}):
        outcome = svc.reconciler.recheck(event.case_id, key)
    svc.telemetry.reconciled(outcome.outcome)
    log.info(
        "case %s: re-check of effect %s -> %s (%s)",
        event.case_id,
        key[:12],
        outcome.outcome,
        outcome.detail,
        extra={"caseId": event.case_id, "effectKey": key, "outcome": outcome.outcome},
    )
    if outcome.retry_after is not None and retry < MAX_RECHECKS:
        at = time.time() + outcome.retry_after + RETRY_MARGIN_SECONDS
        _schedule(svc, event, derived_message_id(root, "recheck", str(retry + 1)), at, retry=retry + 1, root=root)
        return Settlement("rechecked", f"{outcome.outcome}; next re-check scheduled", scheduled_at=at)
    if outcome.reinvestigate:
        result = await svc.worker.handle(ev.CaseEvent(ev.CASE_INVESTIGATE, event.case_id, {}))
        return Settlement("rechecked", f"{outcome.outcome}; case decided again: {result.outcome}", result=result)
    return Settlement("rechecked", f"{outcome.outcome}: {outcome.detail}")


def schedule_recheck(svc: Services, case_id: str, key: str, attempt: int, at: float, *, tag: str = "feed") -> None:
    """Schedule R3 for an effect's current attempt; the message id makes repeated calls with the same
    ``tag`` one message."""
    event = ev.CaseEvent(ev.EFFECT_RECHECK, case_id, {"key": key})
    root = derived_message_id("recheck", key, str(attempt), tag)
    _schedule(svc, event, root, at, retry=0, root=root)


def _schedule(svc: Services, event: ev.CaseEvent, message_id: str, at: float, *, retry: int, root: str) -> None:
    svc.sender.send(_with_envelope(event, retry=retry, rootMessageId=root), message_id=message_id, schedule_at=at)


def _with_envelope(event: ev.CaseEvent, **extra: Any) -> ev.CaseEvent:
    return ev.CaseEvent(event.type, event.case_id, event.data, delivery_id=event.delivery_id, envelope=extra)


def _set_aside(
    svc: Services,
    message_id: str,
    case_id: str | None,
    reason: str,
    *,
    fields: dict[str, str],
    body: bytes,
    delivery_count: int,
) -> Settlement:
    set_aside(
        svc.store,
        message_id=message_id,
        case_id=case_id,
        reason=reason,
        fields=fields,
        body=body,
        delivery_count=delivery_count,
    )
    return Settlement("set_aside", reason)
