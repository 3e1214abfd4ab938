"""The Service Bus sender's own behaviour, over the fake client (``tests/support/fake_servicebus.py``):
links are never shared between threads, a broken link is dropped, nothing connects before a send."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest

from shared.domain.events import CaseEvent
from shared.errors import QueueUnavailable
from shared.messaging import TRACE_PROPERTY
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
    with pytest.raises(QueueUnavailable):
        sender.send(CaseEvent("case.investigate", "C-1", {}), message_id="m-1")
    sender.send(CaseEvent("case.investigate", "C-1", {}), message_id="m-2")
    assert [s.message_id for s in broker.sent] == ["m-0", "m-2"]
    assert broker.clients == 2  # the broken link was replaced, not reused


def _recording_tracer() -> Any:
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider().get_tracer("test")


def _carried(properties: dict[Any, Any]) -> Any:
    """The span context in a sent message's ``Diagnostic-Id``, parsed by OpenTelemetry's propagator."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    value = properties[TRACE_PROPERTY.encode()]
    return trace.get_current_span(TraceContextTextMapPropagator().extract({"traceparent": value})).get_span_context()


def test_a_send_with_a_budget_gives_up_within_it_and_so_does_one_waiting_for_its_link() -> None:
    """The door's sender (docs/design.md#door-budget): the SDK's operation timeout is passed on, and a send
    that waits for a free link gives up at the same budget."""
    broker = Broker()
    broker.hold = threading.Event()
    sender = ServiceBusEventSender("case-events", lambda: FakeClient(broker), pool_size=1, send_timeout=0.3)
    event = CaseEvent("po.updated", "C-1", {"poAmount": "1.00"})
    outcomes: list[BaseException | None] = []

    def send(message_id: str) -> None:
        try:
            sender.send(event, message_id=message_id)
            outcomes.append(None)
        except QueueUnavailable as exc:
            outcomes.append(exc)

    started = time.monotonic()
    first = threading.Thread(target=send, args=("m-1",))
    first.start()
    time.sleep(0.05)
    send("m-2")  # the only link is stalled in the first send: this one waits for it, then stalls too
    first.join()
    took = time.monotonic() - started
    assert len(outcomes) == 2 and all(isinstance(o, QueueUnavailable) for o in outcomes)
    assert took < 1.0
    assert set(broker.timeouts) == {0.3} and broker.sent == []
    broker.hold.set()
    sender.send(event, message_id="m-3")
    assert [m.message_id for m in broker.sent] == ["m-3"]


def test_a_send_carries_the_current_span_as_diagnostic_id_scheduled_or_not() -> None:
    broker = Broker()
    sender = ServiceBusEventSender("case-events", lambda: FakeClient(broker))
    with _recording_tracer().start_as_current_span("webhook") as span:
        sender.send(CaseEvent("case.investigate", "C-1", {}), message_id="m-1")
        sender.send(CaseEvent("case.investigate", "C-1", {}), message_id="m-2", schedule_at=time.time() + 60)
    expected = span.get_span_context()
    for sent in broker.sent:
        assert sent.application_properties["type"] == "case.investigate"
        carried = _carried(sent.application_properties)
        assert (carried.trace_id, carried.span_id) == (expected.trace_id, expected.span_id)
        assert b"traceparent" not in sent.application_properties  # one name for it: Diagnostic-Id


def test_outside_any_span_a_send_carries_no_trace_context() -> None:
    broker = Broker()
    ServiceBusEventSender("case-events", lambda: FakeClient(broker)).send(
        CaseEvent("case.investigate", "C-1", {}), message_id="m-1"
    )
    assert broker.sent[0].application_properties == {"type": "case.investigate"}


def test_with_the_sdks_own_tracing_on_diagnostic_id_goes_on_the_wire_once_and_is_ours() -> None:
    """azure-servicebus adds its own ``Diagnostic-Id`` when azure-core tracing is on (as in Azure, through
    azure-monitor-opentelemetry), with ``setdefault`` on a ``bytes`` key: the adapter's key must be that one."""
    from azure.core.settings import settings
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus._common.tracing import trace_message
    from azure.servicebus._common.utils import transform_outbound_messages
    from azure.servicebus._pyamqp._encode import encode_application_properties
    from azure.servicebus._transport._pyamqp_transport import PyamqpTransport

    broker = Broker()
    sender = ServiceBusEventSender("case-events", lambda: FakeClient(broker))
    with _recording_tracer().start_as_current_span("webhook") as span:
        sender.send(CaseEvent("case.investigate", "C-1", {}), message_id="m-1")
        message = broker.sent[0].message
        settings.tracing_implementation = "opentelemetry"
        try:
            # What ServiceBusSender.send_messages does to the outgoing AMQP message before it is sent.
            outgoing = transform_outbound_messages(
                message, ServiceBusMessage, to_outgoing_amqp_message=PyamqpTransport.to_outgoing_amqp_message
            )
            traced = trace_message(outgoing._message, amqp_transport=PyamqpTransport)
        finally:
            settings.tracing_implementation.unset_value()
    wire = encode_application_properties(traced.application_properties)
    names = [key["VALUE"] if isinstance(key, dict) else key for key, _ in wire["VALUE"]]
    names = [n.decode() if isinstance(n, bytes) else n for n in names]
    assert names.count(TRACE_PROPERTY) == 1
    assert _carried(traced.application_properties).span_id == span.get_span_context().span_id


def test_from_a_connection_string_the_real_client_speaks_plain_amqp_to_the_emulators_address() -> None:
    """The real azure-servicebus client, from an emulator connection string (``UseDevelopmentEmulator=true``)
    pointed at a loopback listener: the first bytes it sends are AMQP's SASL protocol header, not a TLS
    handshake, to the host and port of the string's ``Endpoint``. The listener then hangs up, as a stopped
    emulator would, and the send is reported as the queue being unavailable. (No Service Bus emulator runs
    here: that is as far as the wire goes without one.)"""
    import socket

    from shared.messaging.servicebus import connection_string_client_factory

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(30)
    port = listener.getsockname()[1]
    first_bytes: list[bytes] = []

    def accept_once() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(10)
                first_bytes.append(conn.recv(8))

    server = threading.Thread(target=accept_once, daemon=True)
    server.start()
    conn_str = (
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
    )
    sender = ServiceBusEventSender("case-events", connection_string_client_factory(conn_str, retry_total=0))
    try:
        with pytest.raises(QueueUnavailable):
            sender.send(CaseEvent("case.investigate", "C-1", {}), message_id="m-1")
    finally:
        sender.close()
        server.join(timeout=30)
        listener.close()
    assert first_bytes == [b"AMQP\x03\x01\x00\x00"]
