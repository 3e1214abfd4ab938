"""Case events on the queue (rule R10): the ports, and the one wire format both ends use.

Every event is sent into its case's session (session id = case id), so a case's events are handled one
at a time. The message id is what the broker deduplicates on: the webhook's delivery id for ingress
(``webhook:<id>``), a deterministic id for everything Casekeeper schedules itself, so a send repeated
after a crash is dropped by the broker instead of handled twice.

Ports (each adapter passes ``tests/contract/test_senders.py``):

- :class:`EventSender`: send or schedule an event. Safe to call from many threads at once: the HTTP
  functions share one sender, and the Functions worker runs them on a thread pool.
- :class:`DeadLetterQueue`: the queue's dead letters, listed and put back, and its counts
  (``casekeeper events``).

Adapters: :mod:`shared.messaging.servicebus` (Azure) and ``shared.messaging.local`` (the local host's
SQLite session queue).

Wire format (:func:`encode` / :func:`decode`): the body is the event's JSON (``type``, ``caseId``,
``data``) plus ``deliveryId`` and the transport fields of :attr:`CaseEvent.envelope` (a retry count,
the first message's id, when the event first failed, when Casekeeper first accepted it).

Trace context (:func:`message_properties` / :func:`sender_context`): every message carries, in its
application properties, the W3C trace context of the span that sent it (the webhook's, or the case
event's that scheduled a retry or re-check), written and read by OpenTelemetry's own propagator, so the
case worker's ``case_event`` span continues the sender's trace.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter

from casekeeper.stores import MAX_ID_LENGTH
from shared.domain.events import CaseEvent


@dataclass(frozen=True)
class Envelope:
    """The transport fields a message carries beside its event: how many copies came before it, the id
    of the first message (copies derive their ids from it), and when the event first failed transiently
    (for the retry window). Written into the body by :func:`encode` (through ``CaseEvent.envelope``, which
    :meth:`fields` makes) and read back by :func:`decode`."""

    retry: int = 0
    root: str | None = None
    first_failed_at: float | None = None
    accepted_at: float | None = None
    """When Casekeeper first accepted the event (``acceptedAt``): the store's clock at the door's record of
    the delivery (``shared.handlers.door``), stamped once and copied unchanged into every delayed copy; a
    redrive puts the body back as it was. A fact's order rests on it (``shared.domain.order``)."""
    body_sha256: str | None = None
    """The digest of the webhook body the event came in (``bodySha256``, ``shared.handlers.door``), carried
    to the case, which judges the delivery id by it for as long as the case exists."""

    def fields(self) -> dict[str, Any]:
        """``CaseEvent.envelope`` for this envelope: the body's transport fields, absent ones left out."""
        fields = {
            "retry": self.retry,
            "rootMessageId": self.root,
            "firstFailedAt": self.first_failed_at,
            "acceptedAt": self.accepted_at,
            "bodySha256": self.body_sha256,
        }
        return {k: v for k, v in fields.items() if v is not None}

    def root_or(self, message_id: str) -> str:
        """The first message's id: this one's own when it is the first."""
        return self.root or message_id

    def copy_id(self, kind: str, number: int) -> str:
        """The message id of this event's ``number``-th copy of ``kind`` (``retry``, ``recheck``): derived
        from the first message's id and its acceptance stamp, so a copy sent twice (a crash after sending) is
        one message, while copies of two acceptances under one delivery id (posted again after the door
        forgot the id, perhaps with another body) are two: the broker would drop the later as a duplicate."""
        if self.root is None:
            raise ValueError("an envelope without the first message's id cannot name a copy")
        root = self.root if self.accepted_at is None else f"{self.root}@{round(self.accepted_at * 1000)}"
        return derived_message_id(root, kind, str(number))

    @classmethod
    def from_body(cls, raw: Mapping[str, Any]) -> Envelope:
        failed = raw.get("firstFailedAt")
        root = raw.get("rootMessageId")
        accepted = raw.get("acceptedAt")
        digest = raw.get("bodySha256")
        return cls(
            retry=int(raw.get("retry") or 0),
            root=str(root) if root else None,
            first_failed_at=float(failed) if failed is not None else None,
            # A body from outside might carry anything here: only a number is a stamp.
            accepted_at=float(accepted) if isinstance(accepted, int | float) and accepted is not True else None,
            body_sha256=digest if isinstance(digest, str) else None,
        )


class EventSender(Protocol):
    def send(self, event: CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        """Enqueue ``event`` into session ``event.case_id``; at ``schedule_at`` (epoch seconds) if given.

        Thread-safe. Raises ``QueueUnavailable`` when the broker cannot be reached (the caller answers
        503 or lets the trigger retry), ``QueueError`` for any other queue failure."""
        ...


@dataclass(frozen=True)
class DeadLetter:
    """A dead-lettered message: which case, why, after how many deliveries, and its body."""

    message_id: str
    session_id: str
    sequence_number: int
    reason: str
    description: str
    delivery_count: int
    enqueued_time: float | None
    body: bytes = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "messageId": self.message_id,
            "caseId": self.session_id,
            "sequenceNumber": self.sequence_number,
            "reason": self.reason,
            "description": self.description,
            "deliveryCount": self.delivery_count,
            "enqueuedTime": self.enqueued_time,
            "body": self.body.decode("utf-8", errors="replace"),
        }


class DeadLetterQueue(Protocol):
    def peek(self, limit: int = 100, *, after_sequence: int | None = None) -> list[DeadLetter]:
        """Up to ``limit`` dead letters in sequence-number order (oldest first), without changing them;
        with ``after_sequence``, those after it: call again from the last one seen to page through them
        all. Raises ``QueueUnavailable``."""
        ...

    def counts(self) -> dict[str, int]:
        """The queue's message counts, to watch it drain: ``active``, ``scheduled``, ``dead_lettered``.
        Raises ``QueueUnavailable``."""
        ...

    def redrive(self, message_ids: Iterable[str] | None = None) -> list[DeadLetter]:
        """Put dead letters back into their sessions as new messages (id ``<id>:redrive:<sequence>``, so
        duplicate detection lets them through) and remove them from the dead-letter queue; ``None``: all
        of them. Returns those put back. Raises ``QueueUnavailable``."""
        ...


# The trace context goes in ``Diagnostic-Id`` (its value is a W3C ``traceparent``), not in ``traceparent``:
# the Functions host's Service Bus extension reads ``Diagnostic-Id`` to connect its trigger to the sender,
# and azure-servicebus's receivers read ``traceparent`` first and fall back to ``Diagnostic-Id``, so this is
# the one name every reader understands. ``tracestate`` and ``baggage``, when there are any, keep their
# names. The propagator writes and parses the values; only the ``traceparent`` key is renamed.
TRACE_PROPERTY = "Diagnostic-Id"


class _PropertySetter(Setter[dict[str, str]]):
    def set(self, carrier: dict[str, str], key: str, value: str) -> None:
        carrier[TRACE_PROPERTY if key == "traceparent" else key] = value


class _PropertyGetter(Getter[Mapping[Any, Any]]):
    """Reads properties as the Functions worker (``str`` keys) or the SDK (``bytes`` keys and values) hands
    them over; ``traceparent`` is ``Diagnostic-Id``, or a ``traceparent`` another sender wrote."""

    def get(self, carrier: Mapping[Any, Any], key: str) -> list[str] | None:
        names = (TRACE_PROPERTY, "traceparent") if key == "traceparent" else (key,)
        for name in names:
            for candidate in (name, name.encode()):
                value = carrier.get(candidate)
                if value is not None:
                    return [value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)]
        return None

    def keys(self, carrier: Mapping[Any, Any]) -> list[str]:
        return [k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k) for k in carrier]


_SETTER = _PropertySetter()
_GETTER = _PropertyGetter()


def message_properties(event: CaseEvent) -> dict[str, str]:
    """The application properties of ``event``'s message: its type, and the current span's trace context
    (nothing when there is no recording span, e.g. telemetry not configured)."""
    properties: dict[str, str] = {"type": event.type}
    propagate.inject(properties, setter=_SETTER)
    return properties


def sender_context(properties: Mapping[Any, Any] | None) -> Context | None:
    """The sender's trace context from a received message's application properties; ``None`` when the
    message carries none (sent before this existed, or by something that does not trace) or it is invalid."""
    if not properties:
        return None
    context = propagate.extract(properties, getter=_GETTER)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def encode(event: CaseEvent) -> bytes:
    """The message body: the event as JSON, plus its delivery id and envelope fields."""
    body = {**event.to_json(), "deliveryId": event.delivery_id, **event.envelope}
    return json.dumps(body, separators=(",", ":")).encode()


def decode(raw: dict[str, Any]) -> tuple[dict[str, Any], str | None, Envelope]:
    """The parts of a decoded body: the event fields to validate, the delivery id, the envelope."""
    event: dict[str, Any] = {k: raw[k] for k in ("type", "caseId", "data") if k in raw}
    delivery = raw.get("deliveryId")
    return event, str(delivery) if delivery is not None else None, Envelope.from_body(raw)


def derived_message_id(*parts: str) -> str:
    """A deterministic message id from parts; hashed when it would exceed Service Bus's 128 characters."""
    joined = ":".join(parts)
    if len(joined) <= MAX_ID_LENGTH:
        return joined
    return parts[0][:40] + ":" + hashlib.sha256(joined.encode()).hexdigest()


def redrive_message_id(message_id: str, sequence_number: int) -> str:
    return derived_message_id(message_id, "redrive", str(sequence_number))
