"""The case worker's settlement: what happens to a Service Bus message, decided by the error type.

=============================  =================================================================
outcome                        settlement
=============================  =================================================================
handled                        complete
``EffectInFlight``             a copy is scheduled into the same session for its ``retry_after``
                               (its own deterministic message id); the original completes. A fact
                               event's facts are already written then: its copy only decides
                               (``case.investigate``, same delivery id)
``InvalidEvent``,              set aside with its reason (``shared.handlers.rejected``); complete
``InvalidDocumentId``,
``CaseTooLarge``
an error with ``retryable``    a few short waits in place (unless its ``wait_in_place`` is off);
                               then a copy scheduled with backoff (``shared.messaging.retry``), never
                               sooner than the error's ``retry_after``; the original completes; past
                               the retry window the error is raised, for the broker's redeliveries
                               and DLQ
``ModelUnavailable``           as any retryable error, without waits in place (the model asked for
                               a wait, or is slow); each deferral is noted on the case; a fact
                               event whose facts are written comes back as ``case.investigate``
anything else                  raised: redelivered, dead-lettered past ``maxDeliveryCount``
=============================  =================================================================

The decision reads the error's ``retryable`` attribute (``casekeeper.core.errors``), never its text.

``effect.recheck`` messages (scheduled by the reconciler and the timer) run reconciliation rule R3
inside the case's session, so they are serialised with the case's other events.

Nothing here blocks the event loop: the Functions worker runs every session of an instance on one
loop, so each store, supplier and queue call runs in a thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from casekeeper import CasekeeperError, CaseTooLarge, Clock, DocumentStore, EffectInFlight, Guard, InvalidDocumentId
from shared.app.telemetry import Telemetry
from shared.domain import events as ev
from shared.errors import InvalidEvent, ModelUnavailable
from shared.handlers.rejected import set_aside
from shared.messaging import Envelope, EventSender, decode, derived_message_id, sender_context
from shared.messaging.retry import Backoff
from shared.workflow.worker import CaseWorker, EventResult

log = logging.getLogger("casekeeper.case_events")

RETRY_MARGIN_SECONDS = 1.0
MAX_RECHECKS = 50


@dataclass(frozen=True)
class CaseEventDeps:
    """What the case worker's trigger takes."""

    worker: CaseWorker
    guard: Guard
    """Re-checks an effect (rule R3) when its scheduled re-check arrives."""
    sender: EventSender
    store: DocumentStore
    """Where events that cannot be handled are set aside (``shared.handlers.rejected``)."""
    clock: Clock
    backoff: Backoff
    telemetry: Telemetry


@dataclass(frozen=True)
class Settlement:
    action: str  # completed | rescheduled | deferred | set_aside | rechecked
    detail: str
    result: EventResult | None = None
    scheduled_at: float | None = None


async def handle_case_message(
    deps: CaseEventDeps,
    body: bytes,
    *,
    session_id: str | None,
    message_id: str,
    delivery_count: int,
    properties: Mapping[Any, Any] | None = None,
) -> Settlement:
    """Handle one message of the case-events queue. Raises to have the broker redeliver it.

    ``properties``: the message's application properties; the trace context in them makes the
    ``case_event`` span part of the sender's trace (``shared.messaging.sender_context``).

    Logs one line per message handled: case, event type, outcome.
    """
    attributes = {
        "casekeeper.case_id": session_id,
        "casekeeper.event_type": _peek_type(body),
        "messaging.message.id": message_id,
        "messaging.servicebus.message.delivery_count": delivery_count,
    }
    with deps.telemetry.span("case_event", attributes, sender=sender_context(properties)) as span:
        settlement = await _handle(
            deps, body, session_id=session_id, message_id=message_id, delivery_count=delivery_count
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


REFUSED_ANSWERS = frozenset({"ignored", "stale_answer"})
"""Outcomes of an approval answer that committed nothing: it is set aside with the reason."""


def _refused_answer(event: ev.CaseEvent, result: EventResult) -> str | None:
    if event.type != ev.APPROVAL_ANSWERED or not result.steps or result.steps[0].outcome not in REFUSED_ANSWERS:
        return None
    return f"approval answer not applied: {result.steps[0].detail}"


def _peek_type(body: bytes) -> str:
    try:
        raw = json.loads(body)
    except ValueError:
        return "?"
    return str(raw.get("type", "?")) if isinstance(raw, dict) else "?"


async def _handle(
    deps: CaseEventDeps, body: bytes, *, session_id: str | None, message_id: str, delivery_count: int
) -> Settlement:
    async def aside(case_id: str | None, reason: str, fields: dict[str, str]) -> Settlement:
        await asyncio.to_thread(
            set_aside,
            deps.store,
            message_id=message_id,
            case_id=case_id,
            reason=reason,
            fields=fields,
            body=body,
            delivery_count=delivery_count,
        )
        return Settlement("set_aside", reason)

    try:
        raw = json.loads(body.decode("utf-8"))
        if not isinstance(raw, dict):
            raise ValueError("not an object")
    except (UnicodeDecodeError, ValueError) as exc:
        return await aside(session_id, f"message body is not a JSON object: {exc}", {})
    fields, delivery_id, envelope = decode(raw)
    try:
        event = ev.parse_event(fields, delivery_id=delivery_id)
    except InvalidEvent as exc:
        return await aside(exc.case_id, exc.reason, exc.fields)
    if session_id is not None and event.case_id != session_id:
        reason = f"session id {session_id!r} does not match caseId {event.case_id!r}"
        return await aside(event.case_id, reason, {"caseId": "does not match the session"})
    envelope = replace(envelope, root=envelope.root_or(message_id))
    # The door stamped when it accepted the event, by the store's clock; every copy carries the stamp, and the
    # body's digest the case judges its delivery id by (docs/design.md#fact-order, #delivery-ids).
    # Casekeeper's own messages (re-checks, investigations) carry no fact and no stamp.
    event = replace(event, accepted_at=envelope.accepted_at, body_sha256=envelope.body_sha256)

    async def attempt() -> Settlement:
        if event.type == ev.EFFECT_RECHECK:
            return await _recheck(deps, event, envelope)
        result = await deps.worker.handle(event)
        refused = _refused_answer(event, result)
        if refused is not None:
            # What only the worker can know (the request moved on while the answer was queued) is shown on
            # the case with its reason, never only logged.
            await aside(event.case_id, refused, {"requestId": str(event.data.get("requestId"))})
            return Settlement("set_aside", refused, result=result)
        return Settlement("completed", f"{result.outcome}: {result.detail}", result=result)

    try:
        return await _with_retries(deps, event, envelope, attempt)
    except EffectInFlight as exc:
        at = deps.clock.now() + exc.retry_after + RETRY_MARGIN_SECONDS
        copy_id = envelope.copy_id("retry", envelope.retry + 1)
        # A fact event whose facts are written comes back as the decision it still owes: by then newer
        # events may have changed the same facts, and writing this one's again would undo them.
        later = ev.CaseEvent(ev.CASE_INVESTIGATE, event.case_id, {}, delivery_id=event.delivery_id)
        await _schedule(
            deps,
            later if exc.facts_recorded else event,
            copy_id,
            at,
            replace(envelope, retry=envelope.retry + 1).fields(),
        )
        log.info(
            "case %s: effect in flight; re-check scheduled in %.0fs",
            event.case_id,
            at - deps.clock.now(),
            extra={"caseId": event.case_id, "effectKey": exc.key, "messageId": copy_id},
        )
        return Settlement("rescheduled", f"effect {exc.key[:12]} in flight; copy {copy_id} scheduled", scheduled_at=at)
    except InvalidEvent as exc:
        return await aside(event.case_id, exc.reason, exc.fields)
    except InvalidDocumentId as exc:
        return await aside(event.case_id, f"an id the store cannot hold: {exc}", {})
    except CaseTooLarge as exc:
        # What the event would add is refused for good; the case keeps what it holds (docs/design.md#case-bounds).
        return await aside(event.case_id, str(exc), {"caseId": f"at its size bound of {exc.limit} bytes"})


async def _with_retries(
    deps: CaseEventDeps, event: ev.CaseEvent, envelope: Envelope, attempt: Callable[[], Awaitable[Settlement]]
) -> Settlement:
    """Run ``attempt``; on a retryable error wait in place a few times, then defer a delayed copy. Raises
    what is not retryable, and a retryable error once its retry window is spent."""
    backoff = deps.backoff
    error: CasekeeperError | None = None
    number_in_place = 0
    for number_in_place, wait in enumerate((*backoff.in_place, None), start=1):
        try:
            return await attempt()
        except EffectInFlight:
            raise
        except CasekeeperError as exc:
            if not exc.retryable:
                raise
            error = exc
        if wait is None or not error.wait_in_place:
            break
        log.info(waiting_in_place(event, error, wait, number_in_place + 1), extra={"caseId": event.case_id})
        await asyncio.sleep(wait)
    assert error is not None  # the loop only ends here after a retryable error
    now = deps.clock.now()
    first = envelope.first_failed_at if envelope.first_failed_at is not None else now
    if backoff.gives_up(now - first):
        await _note_model_failure(deps, event, error, f"still failing after {now - first:.0f}s: left to the queue")
        log.error(handed_to_the_broker(event, error, now - first), extra={"caseId": event.case_id})
        raise error
    number = envelope.retry + 1
    delay = backoff.delay(number, seed=envelope.root_or(""))
    asked = getattr(error, "retry_after", None)
    if isinstance(asked, (int, float)) and asked > delay:
        delay = min(float(asked), backoff.give_up_after) + RETRY_MARGIN_SECONDS  # the service's wait, honoured
    at = now + delay
    copy_id = envelope.copy_id("retry", number)
    again = event
    if isinstance(error, ModelUnavailable) and error.facts_recorded:
        # As for an effect in flight: the facts are written, so the copy only decides.
        again = ev.CaseEvent(ev.CASE_INVESTIGATE, event.case_id, {}, delivery_id=event.delivery_id)
    await _schedule(deps, again, copy_id, at, replace(envelope, retry=number, first_failed_at=first).fields())
    await _note_model_failure(deps, event, error, f"event retried in {delay:.1f}s (attempt {number})")
    deps.telemetry.deferred(type(error).__name__)
    log.warning(
        deferred(event, error, copy_id, at - now, attempts=number_in_place),
        extra={"caseId": event.case_id, "messageId": copy_id},
    )
    return Settlement("deferred", f"{type(error).__name__}: copy {copy_id} scheduled", scheduled_at=at)


# What the log says after a failed attempt: exactly one of these three, and each says what happens next.


def waiting_in_place(event: ev.CaseEvent, error: CasekeeperError, wait: float, next_attempt: int) -> str:
    """Another attempt follows in this delivery, after a short wait, the message held."""
    return (
        f"case {event.case_id}: {event.type} attempt {next_attempt - 1} failed ({type(error).__name__}: {error});"
        f" waiting {wait:.2f}s in place before attempt {next_attempt}"
    )


def deferred(event: ev.CaseEvent, error: CasekeeperError, copy_id: str, delay: float, *, attempts: int) -> str:
    """No attempt follows in this delivery: a delayed copy of the event is scheduled, this message completes."""
    why = (
        f"after {attempts} attempts in place"
        if error.wait_in_place
        else f"not retried in place ({type(error).__name__} is never waited on)"
    )
    return (
        f"case {event.case_id}: {event.type} failed ({type(error).__name__}: {error}); {why}: deferred,"
        f" copy {copy_id} scheduled in {delay:.1f}s"
    )


def handed_to_the_broker(event: ev.CaseEvent, error: CasekeeperError, failing_for: float) -> str:
    """Past the retry window: nothing is scheduled; the error goes to the broker's redeliveries and DLQ."""
    return (
        f"case {event.case_id}: {event.type} still failing after {failing_for:.0f}s ({type(error).__name__}:"
        f" {error}): no copy scheduled; handed to the queue's redeliveries, then its dead-letter queue"
    )


async def _note_model_failure(deps: CaseEventDeps, event: ev.CaseEvent, error: CasekeeperError, then: str) -> None:
    """Say on the case why its decision waits: a model outage is otherwise only in the host's log."""
    if not isinstance(error, ModelUnavailable):
        return
    fields: dict[str, Any] = {"kind": error.kind, "eventType": event.type}
    if error.status is not None:
        fields["status"] = error.status
    if error.retry_after is not None:
        fields["retryAfter"] = error.retry_after
    if error.deployment:
        fields["deployment"] = error.deployment
    try:
        await asyncio.to_thread(
            deps.guard.cases.note, event.case_id, f"model unavailable: {error.reason}; {then}", **fields
        )
    except CasekeeperError as exc:  # the note is for people; the retry must not depend on it
        log.warning(
            "case %s: could not note the model failure: %s", event.case_id, exc, extra={"caseId": event.case_id}
        )


async def _recheck(deps: CaseEventDeps, event: ev.CaseEvent, envelope: Envelope) -> Settlement:
    key = str(event.data["key"])
    with deps.telemetry.span("reconcile.recheck", {"casekeeper.case_id": event.case_id, "casekeeper.effect_key": key}):
        outcome = await asyncio.to_thread(deps.guard.reconcile_effect, event.case_id, key)
    deps.telemetry.reconciled(outcome.outcome)
    log.info(
        "case %s: re-check of effect %s -> %s (%s)",
        event.case_id,
        key[:12],
        outcome.outcome,
        outcome.detail,
        extra={"caseId": event.case_id, "effectKey": key, "outcome": outcome.outcome},
    )
    if outcome.retry_after is not None and envelope.retry < MAX_RECHECKS:
        at = deps.clock.now() + outcome.retry_after + RETRY_MARGIN_SECONDS
        copy_id = envelope.copy_id("recheck", envelope.retry + 1)
        await _schedule(deps, event, copy_id, at, replace(envelope, retry=envelope.retry + 1).fields())
        return Settlement("rechecked", f"{outcome.outcome}; next re-check scheduled", scheduled_at=at)
    if outcome.retry_after is not None:
        await asyncio.to_thread(deps.guard.rechecks_exhausted, outcome, envelope.retry)
    if outcome.reinvestigate:
        result = await deps.worker.handle(ev.CaseEvent(ev.CASE_INVESTIGATE, event.case_id, {}))
        return Settlement("rechecked", f"{outcome.outcome}; case decided again: {result.outcome}", result=result)
    return Settlement("rechecked", f"{outcome.outcome}: {outcome.detail}")


def schedule_recheck(
    sender: EventSender, case_id: str, key: str, attempt: int, at: float, *, tag: str = "feed"
) -> None:
    """Schedule R3 for an effect's current attempt; the message id makes repeated calls with the same
    ``tag`` one message. Synchronous: for the reconciler and the timer, which run in threads."""
    event = ev.CaseEvent(ev.EFFECT_RECHECK, case_id, {"key": key})
    root = derived_message_id("recheck", key, str(attempt), tag)
    sender.send(_with_envelope(event, Envelope(root=root).fields()), message_id=root, schedule_at=at)


async def _schedule(
    deps: CaseEventDeps, event: ev.CaseEvent, message_id: str, at: float, fields: dict[str, Any]
) -> None:
    await asyncio.to_thread(deps.sender.send, _with_envelope(event, fields), message_id=message_id, schedule_at=at)


def _with_envelope(event: ev.CaseEvent, fields: dict[str, Any]) -> ev.CaseEvent:
    return ev.CaseEvent(event.type, event.case_id, event.data, delivery_id=event.delivery_id, envelope=fields)
