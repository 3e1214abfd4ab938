"""Azure Service Bus adapters of the messaging ports, identity-based (``DefaultAzureCredential``) or from a
connection string (the Service Bus emulator; ``shared.app.connections`` says which setting holds which form).

The Python Service Bus output binding cannot set a session id or a message id, so events are sent with
``azure-servicebus`` itself. Its clients and senders are not thread-safe (the package's README, "Thread
safety"), and the Functions worker runs the HTTP functions, which share the app's one sender, on a thread
pool. :class:`ServiceBusEventSender` therefore keeps a small pool of links (a client and its sender each),
and every send takes one link for itself; a link that failed is closed and replaced, never reused.

Nothing connects at construction: a link is opened on the first send that needs one.

The dead-letter sub-queue of a session-enabled queue is read with an ordinary (non-session) receiver:
it does not keep sessions, and the SDK refuses a session receiver on a sub-queue.
"""

from __future__ import annotations

import contextlib
import queue as queue_module
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from shared.domain.events import CaseEvent
from shared.errors import QueueError, QueueUnavailable
from shared.messaging import DeadLetter, encode, message_properties, redrive_message_id

if TYPE_CHECKING:
    from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage

ClientFactory = Callable[[], "ServiceBusClient"]
DEFAULT_POOL_SIZE = 8


def identity_admin_factory(namespace: str) -> Callable[[], Any]:
    """Administration clients for ``namespace`` (queue runtime properties), with the app's identity."""
    from azure.identity import DefaultAzureCredential
    from azure.servicebus.management import ServiceBusAdministrationClient

    credential = DefaultAzureCredential()
    return lambda: ServiceBusAdministrationClient(namespace, credential=credential)


def identity_client_factory(namespace: str, **client_options: Any) -> ClientFactory:
    """Clients for ``namespace`` with the app's managed identity (one credential, shared: it is thread-safe).
    ``client_options`` go to ``ServiceBusClient`` (e.g. ``retry_total``)."""
    from azure.identity import DefaultAzureCredential
    from azure.servicebus import ServiceBusClient

    credential = DefaultAzureCredential()
    return lambda: ServiceBusClient(namespace, credential=credential, **client_options)


def connection_string_client_factory(connection_string: str, **client_options: Any) -> ClientFactory:
    """Clients from a namespace connection string. With ``UseDevelopmentEmulator=true`` in it, the SDK
    speaks plain AMQP (no TLS) to the host and port of its ``Endpoint``, as the emulator expects.
    ``client_options`` go to ``ServiceBusClient.from_connection_string`` (e.g. ``retry_total``)."""

    def make() -> ServiceBusClient:
        from azure.servicebus import ServiceBusClient

        return ServiceBusClient.from_connection_string(connection_string, **client_options)

    return make


def connection_string_admin_factory(connection_string: str) -> Callable[[], Any]:
    """Administration clients from a connection string. The emulator serves administration on its own
    HTTP port, not the AMQP one its connection string names, so against it these calls fail, and the
    dead-letter counts report the queue unavailable."""
    from azure.servicebus.management import ServiceBusAdministrationClient

    return lambda: ServiceBusAdministrationClient.from_connection_string(connection_string)


def client_factories(
    *, namespace: str | None, connection_string: str | None, **client_options: Any
) -> tuple[ClientFactory, Callable[[], Any]]:
    """The client and administration factories for whichever form the settings hold: the connection string
    when given, else the namespace with the app's identity. ``client_options`` go to every client (e.g.
    ``retry_total``). Raises ``ValueError`` when neither is given."""
    if connection_string:
        return (
            connection_string_client_factory(connection_string, **client_options),
            connection_string_admin_factory(connection_string),
        )
    if namespace:
        return identity_client_factory(namespace, **client_options), identity_admin_factory(namespace)
    raise ValueError("a Service Bus namespace or connection string is required")


class _Link:
    """One client and its queue sender, used by one thread at a time."""

    def __init__(self, client: Any, queue_name: str) -> None:
        self.client = client
        self.sender = client.get_queue_sender(queue_name=queue_name)

    def close(self) -> None:
        for closable in (self.sender, self.client):
            # Closing a broken link must not hide the error that broke it.
            with contextlib.suppress(Exception):
                closable.close()


class ServiceBusEventSender:
    """:class:`~shared.messaging.EventSender` on a session-enabled Service Bus queue, safe across threads."""

    def __init__(
        self,
        queue_name: str,
        client_factory: ClientFactory,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        send_timeout: float | None = None,
    ) -> None:
        """``send_timeout``: the most a send may take, waiting for a free link included (``None``: the SDK's
        own timeouts and retries); past it the send raises ``QueueUnavailable``."""
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self._send_timeout = send_timeout
        self._queue_name = queue_name
        self._factory = client_factory
        self._slots = threading.BoundedSemaphore(pool_size)
        self._idle: queue_module.LifoQueue[_Link] = queue_module.LifoQueue()
        self._all: set[_Link] = set()
        self._lock = threading.Lock()
        self._closed = False

    def send(self, event: CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        from azure.servicebus import ServiceBusMessage
        from azure.servicebus.exceptions import ServiceBusError

        message = ServiceBusMessage(
            encode(event),
            session_id=event.case_id,
            message_id=message_id,
            content_type="application/json",
            application_properties=_wire_properties(message_properties(event)),
        )
        timeout = self._send_timeout
        # At most pool_size sends at once, each on a link of its own.
        if not self._slots.acquire(timeout=timeout):
            raise QueueUnavailable(f"service bus: no free link within {timeout}s", queue=self._queue_name)
        options: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
        try:
            link = self._take()
            try:
                if schedule_at is None:
                    link.sender.send_messages(message, **options)
                else:
                    link.sender.schedule_messages(message, datetime.fromtimestamp(schedule_at, UTC), **options)
            except ServiceBusError as exc:
                self._discard(link)
                raise QueueUnavailable(f"service bus: {exc}", queue=self._queue_name) from exc
            except BaseException:
                self._discard(link)
                raise
            self._idle.put(link)
        finally:
            self._slots.release()

    def _take(self) -> _Link:
        try:
            return self._idle.get_nowait()
        except queue_module.Empty:
            pass
        from azure.servicebus.exceptions import ServiceBusError

        with self._lock:
            if self._closed:
                raise QueueUnavailable("the Service Bus sender is closed", queue=self._queue_name)
        try:
            link = _Link(self._factory(), self._queue_name)
        except ServiceBusError as exc:
            raise QueueUnavailable(f"service bus: {exc}", queue=self._queue_name) from exc
        with self._lock:
            self._all.add(link)
        return link

    def _discard(self, link: _Link) -> None:
        with self._lock:
            self._all.discard(link)
        link.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            links, self._all = list(self._all), set()
        for link in links:
            link.close()


class ServiceBusDeadLetters:
    """:class:`~shared.messaging.DeadLetterQueue` of a Service Bus queue. ``counts`` needs an administration
    client (``admin_factory``: its runtime properties, readable with the Data Owner role the app holds)."""

    def __init__(
        self,
        queue_name: str,
        client_factory: ClientFactory,
        *,
        admin_factory: Callable[[], Any] | None = None,
        max_wait_time: float = 5.0,
    ) -> None:
        self._queue_name = queue_name
        self._factory = client_factory
        self._admin_factory = admin_factory
        self._max_wait = max_wait_time

    def counts(self) -> dict[str, int]:
        from azure.core.exceptions import AzureError

        if self._admin_factory is None:
            raise QueueError("no Service Bus administration client configured", queue=self._queue_name)
        try:
            with self._admin_factory() as admin:
                props = admin.get_queue_runtime_properties(self._queue_name)
        except AzureError as exc:
            raise QueueUnavailable(f"service bus queue properties: {exc}", queue=self._queue_name) from exc
        return {
            "active": int(props.active_message_count),
            "scheduled": int(props.scheduled_message_count),
            "dead_lettered": int(props.dead_letter_message_count),
        }

    def peek(self, limit: int = 100, *, after_sequence: int | None = None) -> list[DeadLetter]:
        from azure.servicebus.exceptions import ServiceBusError

        # Browsing starts at a sequence number and goes up; 0 means "from the start" to the SDK.
        start = {} if after_sequence is None else {"sequence_number": after_sequence + 1}
        try:
            with self._factory() as client, self._receiver(client) as receiver:
                return [_dead_letter(m) for m in receiver.peek_messages(max_message_count=limit, **start)]
        except ServiceBusError as exc:
            raise QueueUnavailable(f"service bus dead-letter queue: {exc}", queue=self._queue_name) from exc

    def redrive(self, message_ids: Iterable[str] | None = None) -> list[DeadLetter]:
        from azure.servicebus import ServiceBusMessage
        from azure.servicebus.exceptions import ServiceBusError

        wanted = None if message_ids is None else set(message_ids)
        moved: list[DeadLetter] = []
        seen: set[int] = set()  # an abandoned message comes straight back: stop when only those remain
        try:
            with self._factory() as client, self._receiver(client) as receiver:
                sender = client.get_queue_sender(queue_name=self._queue_name)
                with sender:
                    while True:
                        batch = receiver.receive_messages(max_message_count=50, max_wait_time=self._max_wait)
                        if not batch or all((m.sequence_number or 0) in seen for m in batch):
                            for message in batch:
                                receiver.abandon_message(message)
                            break
                        for message in batch:
                            letter = _dead_letter(message)
                            seen.add(letter.sequence_number)
                            if wanted is not None and letter.message_id not in wanted:
                                receiver.abandon_message(message)
                                continue
                            copy = ServiceBusMessage(
                                letter.body,
                                session_id=letter.session_id,
                                message_id=redrive_message_id(letter.message_id, letter.sequence_number),
                                content_type="application/json",
                                application_properties=dict(message.application_properties or {}),
                            )
                            sender.send_messages(copy)
                            receiver.complete_message(message)  # after the copy is sent: at least once
                            moved.append(letter)
                        if wanted is not None and wanted <= {m.message_id for m in moved}:
                            break
        except ServiceBusError as exc:
            raise QueueUnavailable(f"service bus dead-letter queue: {exc}", queue=self._queue_name) from exc
        return moved

    def _receiver(self, client: Any) -> Any:
        from azure.servicebus import ServiceBusSubQueue

        return client.get_queue_receiver(
            queue_name=self._queue_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=self._max_wait
        )


def _wire_properties(properties: dict[str, str]) -> dict[str | bytes, Any]:
    """The trace-context properties keyed by ``bytes``, as azure-servicebus keys its own. Its tracing (on
    when azure-core tracing is, which azure-monitor-opentelemetry turns on) adds ``b"Diagnostic-Id"`` with
    ``setdefault``: under a ``str`` key ours would go on the wire a second time, as the same AMQP string
    key; under the same ``bytes`` key the SDK keeps ours."""
    return {key if key == "type" else key.encode(): value for key, value in properties.items()}


def _dead_letter(message: ServiceBusReceivedMessage) -> DeadLetter:
    body = message.body
    raw = body if isinstance(body, bytes) else b"".join(bytes(part) for part in body)
    enqueued = message.enqueued_time_utc
    return DeadLetter(
        message_id=str(message.message_id),
        session_id=str(message.session_id or ""),
        sequence_number=int(message.sequence_number or 0),
        reason=str(message.dead_letter_reason or ""),
        description=str(message.dead_letter_error_description or ""),
        delivery_count=int(message.delivery_count or 0),
        enqueued_time=enqueued.timestamp() if enqueued is not None else None,
        body=raw,
    )
