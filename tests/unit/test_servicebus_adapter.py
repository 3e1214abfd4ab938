"""The Service Bus sender's own behaviour, over the fake client (``tests/support/fake_servicebus.py``):
links are never shared between threads, a broken link is dropped, nothing connects before a send."""

from __future__ import annotations

import threading

import pytest

from shared.core.errors import StoreUnavailable
from shared.domain.events import CaseEvent
from shared.messaging.servicebus import ServiceBusEventSender
from tests.support.fake_servicebus import Broker, FakeClient, FakeSender


def test_the_fake_catches_a_sender_shared_between_threads() -> None:
    """The check the contract suite relies on can fail: one SDK sender used by two threads at once."""
    from azure.servicebus import ServiceBusMessage

    sender = FakeSender(Broker())
    collisions: list[BaseException] = []

    def hammer() -> None:
        for i in range(200):
            try:
                sender.send_messages(ServiceBusMessage(b"{}", session_id="C", message_id=f"m-{i}"))
            except AssertionError as exc:
                collisions.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert collisions, "two threads inside one sender went unnoticed"


def test_constructing_the_sender_connects_to_nothing() -> None:
    broker = Broker()
    ServiceBusEventSender("case-events", lambda: FakeClient(broker))
    assert broker.clients == 0


def test_a_broken_link_is_reported_as_unavailable_and_never_reused() -> None:
    broker = Broker()
    sender = ServiceBusEventSender("case-events", lambda: FakeClient(broker), pool_size=1)
    sender.send(CaseEvent("case.investigate", "C-1", {}), message_id="m-0")
    broker.fail_sends = 1
    with pytest.raises(StoreUnavailable):
        sender.send(CaseEvent("case.investigate", "C-1", {}), message_id="m-1")
    sender.send(CaseEvent("case.investigate", "C-1", {}), message_id="m-2")
    assert [s.message_id for s in broker.sent] == ["m-0", "m-2"]
    assert broker.clients == 2  # the broken link was replaced, not reused
