"""The messaging ports' contract: every sender and dead-letter queue runs this file unchanged.

Backends: the local host's SQLite session queue (real), and the Service Bus adapters over a small fake
client (``tests/support/fake_servicebus.py``: no Service Bus runs here; the fake is strict about what
the real SDK is fragile about, a sender used by two threads at once), built two ways: by a factory the
test hands in, and from the Service Bus emulator's connection string by the production factory
(``client_factories``), where only ``ServiceBusClient`` itself is the fake, after the real SDK parsed the
string.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.domain.events import CaseEvent
from shared.errors import QueueError
from shared.messaging import DeadLetterQueue, EventSender, decode
from shared.messaging.local import LocalDeadLetters, LocalQueueEventSender
from shared.messaging.servicebus import ServiceBusDeadLetters, ServiceBusEventSender, client_factories
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.support.fake_servicebus import Broker, Dead, FakeAdmin, FakeClient, FakeClientFromConnectionString

QUEUE = "case-events"
# The Service Bus emulator's connection string, as docs/func-start.md's local.settings.json carries it.
EMULATOR = (
    "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
    "UseDevelopmentEmulator=true;"
)


@dataclass
class Messaging:
    sender: EventSender
    dead_letters: DeadLetterQueue
    sent: Callable[[], list[tuple[str, str, bytes, float | None]]]
    """What the broker holds: (session id, message id, body, scheduled time or None)."""
    dead_letter: Callable[[str, str, bytes], None]
    """Put a message straight into the dead-letter queue (session, message id, body)."""
    close: Callable[[], None]
    """Close the sender's connection to the queue (the fixture's teardown closes it again)."""


@pytest.fixture(params=["local", "servicebus", "servicebus-connection-string"])
def messaging(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Messaging]:
    if request.param == "local":
        queue = LocalSessionQueue(tmp_path / "queue.sqlite", max_delivery_count=1)

        def sent() -> list[tuple[str, str, bytes, float | None]]:
            return [(m.session_id, m.message_id, m.body, m.scheduled_enqueue_time) for m in queue.peek(QUEUE)]

        def dead_letter(session: str, message_id: str, body: bytes) -> None:
            queue.send(QUEUE, body, session_id=session, message_id=message_id)
            msg = queue.receive(QUEUE)
            assert msg is not None
            queue.abandon(msg)  # max_delivery_count=1: straight to the dead-letter queue

        yield Messaging(
            LocalQueueEventSender(queue, QUEUE), LocalDeadLetters(queue, QUEUE), sent, dead_letter, queue.close
        )
        queue.close()
        return
    broker = Broker()
    numbers = iter(range(1000, 10_000))

    def factory() -> FakeClient:
        return FakeClient(broker)

    if request.param == "servicebus-connection-string":
        _patch_client_class(monkeypatch, broker)
        factory, _admin = client_factories(namespace=None, connection_string=EMULATOR)  # type: ignore[assignment]

    def bus_sent() -> list[tuple[str, str, bytes, float | None]]:
        return [(s.session_id, s.message_id, s.body, s.scheduled_at) for s in broker.sent]

    def bus_dead_letter(session: str, message_id: str, body: bytes) -> None:
        broker.dead.append(Dead(message_id, session, next(numbers), body))

    sender = ServiceBusEventSender(QUEUE, factory, pool_size=4)
    # The administration client stays the fake's: the emulator serves administration on another port.
    yield Messaging(
        sender,
        ServiceBusDeadLetters(QUEUE, factory, admin_factory=lambda: FakeAdmin(broker), max_wait_time=0.1),
        bus_sent,
        bus_dead_letter,
        sender.close,
    )
    sender.close()


def event(case_id: str, n: int) -> CaseEvent:
    return CaseEvent("case.investigate", case_id, {}, delivery_id=f"d-{n}")


def test_concurrent_sends_from_many_threads_each_arrive_once_in_their_session(messaging: Messaging) -> None:
    """The HTTP functions share one sender and run on a thread pool: hammer it."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def sender_thread(t: int) -> None:
        barrier.wait()
        for i in range(25):
            try:
                messaging.sender.send(event(f"C-{t}", i), message_id=f"m-{t}-{i}")
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=sender_thread, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    sent = messaging.sent()
    assert len(sent) == 200
    assert {(s, m) for s, m, _, _ in sent} == {(f"C-{t}", f"m-{t}-{i}") for t in range(8) for i in range(25)}
    for session, message_id, body, _ in sent:
        fields, delivery, _ = decode(json.loads(body))
        assert fields["caseId"] == session and delivery == f"d-{message_id.rsplit('-', 1)[1]}"


def test_a_scheduled_send_carries_its_time_and_the_envelope(messaging: Messaging) -> None:
    envelope = {"retry": 2, "rootMessageId": "webhook:d-1", "firstFailedAt": 1_800_000_000.0}
    scheduled = CaseEvent("case.investigate", "C-1", {}, delivery_id="d-1", envelope=envelope)
    messaging.sender.send(scheduled, message_id="webhook:d-1:retry:2", schedule_at=4_000_000_000.0)
    [(session, message_id, body, at)] = messaging.sent()
    assert (session, message_id) == ("C-1", "webhook:d-1:retry:2")
    assert at == pytest.approx(4_000_000_000.0, abs=1)
    assert messaging.dead_letters.counts() == {"active": 0, "scheduled": 1, "dead_lettered": 0}
    assert decode(json.loads(body))[2].fields() == envelope


def test_dead_letters_are_listed_and_redriven_by_id_as_new_messages(messaging: Messaging) -> None:
    messaging.dead_letter("C-1", "webhook:a", b'{"type":"case.investigate","caseId":"C-1","data":{}}')
    messaging.dead_letter("C-2", "webhook:b", b'{"type":"case.investigate","caseId":"C-2","data":{}}')
    assert messaging.dead_letters.counts()["dead_lettered"] == 2
    listed = messaging.dead_letters.peek()
    assert [(d.session_id, d.message_id) for d in listed] == [("C-1", "webhook:a"), ("C-2", "webhook:b")]
    assert all(d.reason for d in listed)
    before = len(messaging.sent())
    moved = messaging.dead_letters.redrive(["webhook:b"])
    assert [m.message_id for m in moved] == ["webhook:b"]
    assert [d.message_id for d in messaging.dead_letters.peek()] == ["webhook:a"]
    [(session, message_id, body, _)] = messaging.sent()[before:]
    assert session == "C-2" and message_id.startswith("webhook:b:redrive:")
    assert b'"caseId":"C-2"' in body
    assert [m.message_id for m in messaging.dead_letters.redrive(None)] == ["webhook:a"]
    assert messaging.dead_letters.peek() == []


def test_a_send_on_a_closed_connection_raises_a_queue_error(messaging: Messaging) -> None:
    """The ports' one error family, whatever the backend: callers never see the local queue's StoreError."""
    messaging.close()
    with pytest.raises(QueueError):
        messaging.sender.send(event("C-1", 1), message_id="m-1")


def _patch_client_class(monkeypatch: pytest.MonkeyPatch, broker: Broker) -> None:
    import azure.servicebus

    monkeypatch.setattr(FakeClientFromConnectionString, "real", azure.servicebus.ServiceBusClient)
    monkeypatch.setattr(FakeClientFromConnectionString, "broker", broker)
    monkeypatch.setattr(azure.servicebus, "ServiceBusClient", FakeClientFromConnectionString)


def test_from_the_emulators_connection_string_links_are_clients_of_the_namespace_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the connection-string backend above rests on: the production factory built its clients from
    the string (parsed by the real SDK), not from a namespace and an identity."""
    broker = Broker()
    _patch_client_class(monkeypatch, broker)
    factory, _admin = client_factories(namespace="ignored.servicebus.windows.net", connection_string=EMULATOR)
    sender = ServiceBusEventSender(QUEUE, factory, pool_size=2)
    assert broker.namespaces == []  # nothing is built before a send
    sender.send(event("C-1", 1), message_id="m-1")
    assert broker.namespaces == ["localhost"] and [s.message_id for s in broker.sent] == ["m-1"]
    sender.close()


def test_the_composition_root_sends_with_the_connection_string_the_settings_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``bootstrap.open_sender`` / ``open_dead_letters`` pick the settings' form: the emulator's string here."""
    from shared.app import bootstrap
    from shared.app.settings import Settings

    broker = Broker()
    _patch_client_class(monkeypatch, broker)
    settings = Settings.from_mapping(
        {"WEBHOOK_SECRET": "s", "CASEKEEPER_QUEUE": "servicebus", "ServiceBusConnection": EMULATOR}
    )
    sender = bootstrap.open_sender(settings)
    dead_letters = bootstrap.open_dead_letters(settings)
    try:
        sender.send(event("C-1", 1), message_id="m-1")
        broker.dead.append(Dead("webhook:a", "C-1", 1, b"{}"))
        assert [d.message_id for d in dead_letters.peek()] == ["webhook:a"]
    finally:
        sender.close()  # type: ignore[attr-defined]
    assert broker.namespaces == ["localhost", "localhost"]


def test_dead_letters_page_by_sequence_number(messaging: Messaging) -> None:
    """``after_sequence`` continues where the last page ended, so a reader can see every dead letter."""
    for n in range(5):
        messaging.dead_letter(f"C-{n}", f"webhook:{n}", b'{"type":"case.investigate","caseId":"C-0","data":{}}')
    first = messaging.dead_letters.peek(limit=2)
    second = messaging.dead_letters.peek(limit=2, after_sequence=first[-1].sequence_number)
    third = messaging.dead_letters.peek(limit=2, after_sequence=second[-1].sequence_number)
    assert [d.message_id for d in first + second + third] == [f"webhook:{n}" for n in range(5)]
    assert messaging.dead_letters.peek(limit=2, after_sequence=third[-1].sequence_number) == []
