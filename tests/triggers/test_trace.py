"""One trace per case event, end to end: the webhook's span, the message on the queue (its trace context in
the application properties), the case worker's ``case_event`` span, and the supplier call's ``traceparent``.

The functions are the indexed ones, invoked as the local host invokes them; the queue is the local session
queue; the supplier is the stub, which records the ``traceparent`` each request arrived with.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from casekeeper.capture import uninstall
from shared.app import bootstrap
from shared.app.bootstrap import Services
from shared.app.telemetry import Telemetry
from shared.domain.events import CaseEvent
from shared.localhost.supplier_stub import SupplierStub
from shared.messaging import TRACE_PROPERTY, encode, message_properties, sender_context
from shared.messaging.sqlite_queue import LocalSessionQueue, to_service_bus_message
from tests.support.downstream import leave_started
from tests.triggers.conftest import settings_for, signed_request, user_function

INVOICE = {
    "invoiceId": "INV-7",
    "supplierId": "SUP-1",
    "poNumber": "PO-7",
    "invoiceAmount": "1100.00",
    "poAmount": "1000.00",
    "currency": "EUR",
}


@pytest.fixture
def traced(tmp_path: Path, supplier: SupplierStub) -> Iterator[tuple[Services, InMemorySpanExporter]]:
    """The app's services with a recording tracer, installed for the indexed functions."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    svc = bootstrap.build(settings_for(tmp_path, supplier.url), telemetry=Telemetry(tracer_provider=provider))
    bootstrap.use(svc)
    try:
        yield svc, spans
    finally:
        bootstrap.use(None)
        uninstall()
        svc.close()


def remote(traceparent: Any) -> SpanContext:
    """The span context a W3C ``traceparent`` value names, parsed by OpenTelemetry's propagator."""
    assert isinstance(traceparent, str), f"no traceparent: {traceparent!r}"
    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    span_context = trace.get_current_span(context).get_span_context()
    assert span_context.is_valid, traceparent
    return span_context


def one(spans: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = [s for s in spans.get_finished_spans() if s.name == name]
    return span


def test_one_trace_id_from_the_webhook_through_the_queue_and_the_case_worker_to_the_supplier(
    functions: dict[str, Any], traced: tuple[Services, InMemorySpanExporter], supplier: SupplierStub
) -> None:
    svc, spans = traced
    body = json.dumps({"type": "invoice.received", "caseId": "INV-7", "data": INVOICE}).encode()
    response = user_function(functions, "events")(signed_request(body, delivery="dlv-trace"))
    assert response.status_code == 202
    webhook = one(spans, "webhook")
    assert webhook.parent is None  # nothing upstream here: the webhook starts the trace

    queue = LocalSessionQueue(svc.settings.local_queue_path)
    try:
        msg = queue.receive(svc.settings.case_events_queue)
        assert msg is not None and msg.message_id == "webhook:dlv-trace"
        # The message carries the webhook span's context, as Diagnostic-Id.
        sent = remote(msg.application_properties.get(TRACE_PROPERTY))
        assert (sent.trace_id, sent.span_id) == (webhook.context.trace_id, webhook.context.span_id)
        asyncio.run(user_function(functions, "case_worker")(to_service_bus_message(msg)))
        queue.complete(msg)
    finally:
        queue.close()

    case_event = one(spans, "case_event")
    assert case_event.attributes is not None and case_event.attributes["casekeeper.settlement"] == "completed"
    assert case_event.context.trace_id == webhook.context.trace_id
    assert case_event.parent is not None and case_event.parent.span_id == webhook.context.span_id
    assert svc.cases.require("INV-7").status == "credit_requested"

    [post] = [r for r in supplier.requests if r["method"] == "POST"]
    at_supplier = remote(post["traceparent"])
    assert at_supplier.trace_id == webhook.context.trace_id
    # Sent from inside the effect's span, which is inside case_event: the supplier sees the caller's span.
    effect = one(spans, "effect request_credit_note")
    assert at_supplier.span_id == effect.context.span_id
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {webhook.context.trace_id}


def test_a_message_without_trace_context_still_gets_a_case_event_trace_of_its_own(
    functions: dict[str, Any], traced: tuple[Services, InMemorySpanExporter], supplier: SupplierStub
) -> None:
    """Messages sent before trace context was carried (or by a tool that sends none) are handled as before."""
    svc, spans = traced
    queue = LocalSessionQueue(svc.settings.local_queue_path)
    try:
        queue.send(
            svc.settings.case_events_queue,
            encode(CaseEvent("invoice.received", "INV-7", INVOICE)),
            session_id="INV-7",
            message_id="m-untraced",
        )
        msg = queue.receive(svc.settings.case_events_queue)
        assert msg is not None and TRACE_PROPERTY not in msg.application_properties
        asyncio.run(user_function(functions, "case_worker")(to_service_bus_message(msg)))
    finally:
        queue.close()
    case_event = one(spans, "case_event")
    assert case_event.parent is None
    [post] = [r for r in supplier.requests if r["method"] == "POST"]
    assert remote(post["traceparent"]).trace_id == case_event.context.trace_id


def test_a_recheck_the_worker_schedules_carries_the_trace_of_the_case_event_that_scheduled_it(
    functions: dict[str, Any], traced: tuple[Services, InMemorySpanExporter]
) -> None:
    svc, spans = traced
    svc.cases.create("INV-7", INVOICE)
    request = {"amount": "100.00", "currency": "EUR", "invoiceId": "INV-7", "supplierId": "SUP-1"}
    effect = leave_started(svc.ledger, "INV-7", request=request)  # in flight: the re-check schedules another
    queue = LocalSessionQueue(svc.settings.local_queue_path)
    name = svc.settings.case_events_queue
    try:
        queue.send(
            name, encode(CaseEvent("effect.recheck", "INV-7", {"key": effect.key})), session_id="INV-7", message_id="r"
        )
        msg = queue.receive(name)
        assert msg is not None
        asyncio.run(user_function(functions, "case_worker")(to_service_bus_message(msg)))
        queue.complete(msg)
        [scheduled] = queue.peek(name)
    finally:
        queue.close()
    assert scheduled.state == "scheduled"
    case_event = one(spans, "case_event")
    assert case_event.attributes is not None and case_event.attributes["casekeeper.settlement"] == "rechecked"
    carried = remote(scheduled.application_properties.get(TRACE_PROPERTY))
    assert (carried.trace_id, carried.span_id) == (case_event.context.trace_id, case_event.context.span_id)


def test_under_a_host_span_of_another_trace_case_event_joins_the_senders_and_links_the_hosts() -> None:
    """In Azure the worker may run inside the host's span for the trigger, in a trace of its own: the case
    event still belongs to the webhook's trace, and keeps a link to the host's span."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry, tracer = Telemetry(tracer_provider=provider), provider.get_tracer("test")
    with tracer.start_as_current_span("webhook"):
        properties = message_properties(CaseEvent("case.investigate", "C-1", {}))
    with tracer.start_as_current_span("host"), telemetry.span("case_event", sender=sender_context(properties)):
        pass
    webhook, case_event, host = one(spans, "webhook"), one(spans, "case_event"), one(spans, "host")
    assert case_event.context.trace_id == webhook.context.trace_id != host.context.trace_id
    assert case_event.parent is not None and case_event.parent.span_id == webhook.context.span_id
    assert [link.context.span_id for link in case_event.links] == [host.context.span_id]


def test_under_a_host_span_that_continued_the_senders_trace_case_event_nests_under_it() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry, tracer = Telemetry(tracer_provider=provider), provider.get_tracer("test")
    with tracer.start_as_current_span("webhook"):
        properties = message_properties(CaseEvent("case.investigate", "C-1", {}))
    sender = sender_context(properties)
    with tracer.start_as_current_span("host", context=sender), telemetry.span("case_event", sender=sender):
        pass
    webhook, case_event, host = one(spans, "webhook"), one(spans, "case_event"), one(spans, "host")
    assert {case_event.context.trace_id, host.context.trace_id} == {webhook.context.trace_id}
    assert case_event.parent is not None and case_event.parent.span_id == host.context.span_id
    assert not case_event.links


@pytest.mark.parametrize(
    "properties",
    [None, {}, {"type": "invoice.received"}, {"Diagnostic-Id": "|4bf92f3577b34da6.1."}, {"Diagnostic-Id": "junk"}],
)
def test_a_message_without_usable_trace_context_has_no_sender_context(properties: Any) -> None:
    # "|...": the old hierarchical Request-Id format some senders still write; it is not W3C, so ignored.
    assert sender_context(properties) is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("Diagnostic-Id", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        (b"Diagnostic-Id", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),  # as the SDK receives it
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),  # another sender's name
    ],
)
def test_the_sender_context_is_read_whichever_way_the_property_arrives(key: Any, value: Any) -> None:
    context = sender_context({"type": "invoice.received", key: value})
    assert context is not None
    span_context = trace.get_current_span(context).get_span_context()
    assert (span_context.trace_id, span_context.span_id) == (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7)
