"""Sending case events into the case's session (rule R10): session id = case id.

The Python Service Bus output binding cannot set a session id or a message id, so events are sent
with ``azure-servicebus`` itself. The message id is what the broker deduplicates on: the webhook's
delivery id for ingress, a deterministic id for everything Casekeeper schedules itself, so a send
repeated after a crash is dropped by the broker instead of handled twice.

:class:`EventSender` is the port; :class:`ServiceBusEventSender` is the Azure implementation and
:class:`LocalQueueEventSender` the local host's.
"""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from shared.core.errors import StoreUnavailable
from shared.core.ids import MAX_ID_LENGTH
from shared.domain.events import CaseEvent

if TYPE_CHECKING:
    from azure.servicebus import ServiceBusClient, ServiceBusSender

    from shared.localhost.queue import LocalSessionQueue


class EventSender(Protocol):
    def send(self, event: CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        """Enqueue ``event`` into session ``event.case_id``; at ``schedule_at`` (epoch seconds) if given.

        Raises ``StoreUnavailable`` when the broker cannot be reached (the caller answers 503 or lets
        the trigger retry)."""
        ...


def encode(event: CaseEvent) -> bytes:
    """The message body: the event as JSON, plus its delivery id and envelope fields."""
    body = {**event.to_json(), "deliveryId": event.delivery_id, **event.envelope}
    return json.dumps(body, separators=(",", ":")).encode()


def derived_message_id(*parts: str) -> str:
    """A deterministic message id from parts; hashed when it would exceed Service Bus's 128 characters."""
    joined = ":".join(parts)
    if len(joined) <= MAX_ID_LENGTH:
        return joined
    return parts[0][:40] + ":" + hashlib.sha256(joined.encode()).hexdigest()


class ServiceBusEventSender:
    """Identity-based (``DefaultAzureCredential``); the client is created on first send and reused."""

    def __init__(self, namespace: str, queue: str, *, client: ServiceBusClient | None = None) -> None:
        self._namespace = namespace
        self._queue = queue
        self._client = client
        self._sender: ServiceBusSender | None = None
        self._lock = threading.Lock()

    def _get_sender(self) -> ServiceBusSender:
        with self._lock:
            if self._sender is None:
                if self._client is None:
                    from azure.identity import DefaultAzureCredential
                    from azure.servicebus import ServiceBusClient

                    self._client = ServiceBusClient(self._namespace, credential=DefaultAzureCredential())
                self._sender = self._client.get_queue_sender(queue_name=self._queue)
            return self._sender

    def send(self, event: CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        from azure.servicebus import ServiceBusMessage
        from azure.servicebus.exceptions import ServiceBusError

        message = ServiceBusMessage(
            encode(event),
            session_id=event.case_id,
            message_id=message_id,
            content_type="application/json",
            application_properties={"type": event.type},
        )
        try:
            sender = self._get_sender()
            if schedule_at is None:
                sender.send_messages(message)
            else:
                sender.schedule_messages(message, datetime.fromtimestamp(schedule_at, UTC))
        except ServiceBusError as exc:
            raise StoreUnavailable(f"service bus: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._sender is not None:
                self._sender.close()
            if self._client is not None:
                self._client.close()


class LocalQueueEventSender:
    """The local host's queue, with the same session and duplicate-detection behaviour."""

    def __init__(self, queue: LocalSessionQueue, queue_name: str) -> None:
        self._queue = queue
        self._queue_name = queue_name

    def send(self, event: CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        self._queue.send(
            self._queue_name,
            encode(event),
            session_id=event.case_id,
            message_id=message_id,
            scheduled_enqueue_time=schedule_at,
            application_properties={"type": event.type},
        )
