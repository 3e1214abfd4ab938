"""A small stand-in for ``azure.servicebus.ServiceBusClient``, for the Service Bus adapters' tests.

Why a fake: no Service Bus (nor its emulator, which needs Docker) runs here, and the adapters' own
logic (a pool of links so that no sender is used by two threads at once, the dead-letter redrive
loop) is what these tests are about. It keeps only what the adapters touch, and it is strict where the
real SDK is fragile: a sender entered by a second thread while a first is inside raises, as the SDK's
README warns that its senders are not thread-safe.

Messages are the SDK's real ``ServiceBusMessage`` objects, built by the adapter under test.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class Sent:
    session_id: str
    message_id: str
    body: bytes
    scheduled_at: float | None
    application_properties: dict[Any, Any] = field(default_factory=dict)
    message: Any = field(default=None, repr=False)  # the SDK's ServiceBusMessage the adapter built


@dataclass
class Dead:
    """A dead-lettered message as a receiver hands it out (the fields the adapter reads)."""

    message_id: str
    session_id: str
    sequence_number: int
    body: bytes
    dead_letter_reason: str = "MaxDeliveryCountExceeded"
    dead_letter_error_description: str = "Message could not be consumed after 10 delivery attempts."
    delivery_count: int = 10
    enqueued_time_utc: datetime | None = None
    application_properties: dict[str, Any] = field(default_factory=dict)


class Broker:
    """What the fake clients share: the queue's messages and its dead letters."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.dead: list[Dead] = []
        self.lock = threading.Lock()
        self.clients = 0
        self.fail_sends = 0
        self.namespaces: list[str] = []  # what connection strings named (FakeClientFromConnectionString)
        self.timeouts: list[float | None] = []  # the operation timeout each send was given
        self.hold: threading.Event | None = None
        """While set to an unset event, every send waits for it inside the sender (a stalled link)."""


class FakeSender:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._inside = threading.Lock()

    def _record(self, message: Any, scheduled_at: float | None) -> None:
        from azure.servicebus.exceptions import ServiceBusConnectionError

        if not self._inside.acquire(blocking=False):
            raise AssertionError("a Service Bus sender was used by two threads at once")
        try:
            time.sleep(0.001)  # widen the window in which a second thread would collide
            with self._broker.lock:
                if self._broker.fail_sends:
                    self._broker.fail_sends -= 1
                    raise ServiceBusConnectionError(message="link detached")
                body = b"".join(bytes(part) for part in message.body)
                properties = dict(message.application_properties or {})
                sent = Sent(message.session_id, message.message_id, body, scheduled_at, properties, message)
                self._broker.sent.append(sent)
        finally:
            self._inside.release()

    def send_messages(self, message: Any, *, timeout: float | None = None) -> None:
        self._held(timeout)
        self._record(message, None)

    def schedule_messages(self, message: Any, when: datetime, *, timeout: float | None = None) -> list[int]:
        self._held(timeout)
        self._record(message, when.timestamp())
        return [0]

    def _held(self, timeout: float | None) -> None:
        from azure.servicebus.exceptions import OperationTimeoutError

        self._broker.timeouts.append(timeout)
        hold = self._broker.hold
        if hold is not None and not hold.wait(timeout):
            raise OperationTimeoutError(message="send timed out")  # as the SDK does past the operation timeout

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeDeadLetterReceiver:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._locked: list[Dead] = []

    def peek_messages(self, max_message_count: int = 1, sequence_number: int = 0) -> list[Dead]:
        """As the SDK's: browse in sequence-number order, from ``sequence_number`` (0: the start)."""
        with self._broker.lock:
            browsed = sorted(
                (d for d in self._broker.dead if d.sequence_number >= sequence_number), key=lambda d: d.sequence_number
            )
            return browsed[:max_message_count]

    def receive_messages(self, max_message_count: int = 1, max_wait_time: float | None = None) -> list[Dead]:
        with self._broker.lock:
            batch = [d for d in self._broker.dead if d not in self._locked][:max_message_count]
            self._locked.extend(batch)
            return batch

    def complete_message(self, message: Dead) -> None:
        with self._broker.lock:
            self._broker.dead.remove(message)
            self._locked.remove(message)

    def abandon_message(self, message: Dead) -> None:
        self._locked.remove(message)  # it comes straight back, as on Service Bus

    def __enter__(self) -> FakeDeadLetterReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self._locked.clear()


class FakeClient:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        with broker.lock:
            broker.clients += 1

    def get_queue_sender(self, queue_name: str) -> FakeSender:
        return FakeSender(self._broker)

    def get_queue_receiver(self, queue_name: str, sub_queue: Any = None, **kwargs: Any) -> FakeDeadLetterReceiver:
        assert sub_queue is not None and "session_id" not in kwargs, "the DLQ is read without a session"
        return FakeDeadLetterReceiver(self._broker)

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeAdmin:
    """``ServiceBusAdministrationClient``'s queue runtime properties, from the broker's messages."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def get_queue_runtime_properties(self, queue_name: str) -> Any:
        from types import SimpleNamespace

        with self._broker.lock:
            scheduled = sum(1 for s in self._broker.sent if s.scheduled_at is not None)
            return SimpleNamespace(
                active_message_count=len(self._broker.sent) - scheduled,
                scheduled_message_count=scheduled,
                dead_letter_message_count=len(self._broker.dead),
            )

    def __enter__(self) -> FakeAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class FakeClientFromConnectionString:
    """Stands in for ``azure.servicebus.ServiceBusClient`` where a test patches it, so that the adapters'
    connection-string factory (``connection_string_client_factory``) runs unchanged up to the broker.

    The string is parsed by the real SDK first (``real.from_connection_string``: no I/O at construction), so
    a string the SDK would refuse fails here too; the namespace it names is recorded on the broker."""

    real: Any = None  # the SDK's ServiceBusClient, set by the test before patching it
    broker: Broker | None = None

    @classmethod
    def from_connection_string(cls, conn_str: str, **kwargs: Any) -> FakeClient:
        assert cls.real is not None and cls.broker is not None
        parsed = cls.real.from_connection_string(conn_str, **kwargs)
        try:
            with cls.broker.lock:
                cls.broker.namespaces.append(parsed.fully_qualified_namespace)
        finally:
            parsed.close()
        return FakeClient(cls.broker)
