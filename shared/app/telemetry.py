"""Telemetry with OpenTelemetry: a trace per case event, metrics for what matters, logs with context.

Traces: one per case event, end to end. ``webhook`` (``POST /api/events``; ``approval`` and
``withdrawal`` for the other two ways in) sends the message with its trace context; the worker's
``case_event`` span (one per queue message) continues that trace, with child spans ``workflow.run``,
``effect <action>``, ``commit_status`` and ``reconcile.recheck``; the supplier portal's requests carry
it on in ``traceparent``. Retries and re-checks the worker schedules carry the context of the span
that scheduled them. Metrics (meter ``casekeeper``):

====================================  ==========================================================
``casekeeper.effects.started``        claims of a new effect
``casekeeper.effects.done``           outcomes recorded done by the call (attribute: action)
``casekeeper.effects.failed``         definite refusals recorded
``casekeeper.effects.reconciled``     reconciliation outcomes (attribute: outcome)
``casekeeper.decisions.stale``        calls refused because the case moved on (rule R4)
``casekeeper.commits.lost``           status commits that lost the race (rule R5)
``casekeeper.events.deferred``        events re-sent with backoff after a transient error
``casekeeper.checkpoint.failures``    failed checkpoint saves (``shared.workflow.capture``)
``casekeeper.alerts``                 alerts raised (``shared.app.alerts``)
====================================  ==========================================================

Logs carry ``caseId`` and ``effectKey`` as ``extra`` fields, which Application Insights keeps as
custom dimensions when telemetry goes through ``azure-monitor-opentelemetry``.

:func:`configure` picks the exporter once per process: Application Insights when
``APPLICATIONINSIGHTS_CONNECTION_STRING`` is set (identity-based: the app's managed identity), OTLP
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, the console otherwise (``CASEKEEPER_TELEMETRY_FILE`` sends
the console exporter's output to a file, which the local host does).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, Status, StatusCode

from shared.core.ledger import Effect

log = logging.getLogger("casekeeper.telemetry")


class Telemetry:
    """The instruments. Providers are injectable (tests pass in-memory ones); by default the global ones."""

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("casekeeper")
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("casekeeper")
        self.effects_started = meter.create_counter("casekeeper.effects.started", description="new effects claimed")
        self.effects_done = meter.create_counter("casekeeper.effects.done", description="effects recorded done")
        self.effects_failed = meter.create_counter("casekeeper.effects.failed", description="definite refusals")
        self.effects_reconciled = meter.create_counter(
            "casekeeper.effects.reconciled", description="reconciliation outcomes"
        )
        self.stale_decisions = meter.create_counter("casekeeper.decisions.stale", description="stale decisions refused")
        self.lost_commits = meter.create_counter(
            "casekeeper.commits.lost", description="status commits that lost a race"
        )
        self.events_deferred = meter.create_counter(
            "casekeeper.events.deferred", description="events re-sent with backoff after a transient error"
        )

    # --- the ledger's observer --------------------------------------------------------------------

    def observe_effect(self, event: str, effect: Effect) -> None:
        """Ledger events: ``started``, ``done``, ``failed``, ``stale``. Also noted on the current span."""
        attributes = {"casekeeper.action": effect.action}
        counter = {
            "started": self.effects_started,
            "done": self.effects_done,
            "failed": self.effects_failed,
            "stale": self.stale_decisions,
        }.get(event)
        if counter is not None:
            counter.add(1, attributes)
        trace.get_current_span().add_event(f"effect.{event}", {"casekeeper.effect_key": effect.key})

    def reconciled(self, outcome: str) -> None:
        self.effects_reconciled.add(1, {"casekeeper.outcome": outcome})

    def lost_commit(self, where: str) -> None:
        self.lost_commits.add(1, {"casekeeper.where": where})

    def deferred(self, error: str) -> None:
        self.events_deferred.add(1, {"casekeeper.error": error})

    @contextmanager
    def span(
        self, name: str, attributes: Mapping[str, Any] | None = None, *, sender: Context | None = None
    ) -> Iterator[Span]:
        """A span; an exception marks it as an error and propagates.

        ``sender``: the trace context a queue message carried (``shared.messaging.sender_context``). The
        span joins the sender's trace: under the current span when that is already in the same trace (a
        host that continued it), else as a child of the sender's span, linked to the current span if any.
        """
        context: Context | None = None
        links: list[Link] = []
        if sender is not None:
            current = trace.get_current_span().get_span_context()
            sent = trace.get_current_span(sender).get_span_context()
            if not (current.is_valid and current.trace_id == sent.trace_id):
                context = sender
                links = [Link(current)] if current.is_valid else []
        clean = {k: v for k, v in (attributes or {}).items() if v is not None}
        with self.tracer.start_as_current_span(
            name, context=context, links=links, attributes=clean, record_exception=True
        ) as span:
            try:
                yield span
            except Exception as exc:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise


_configured = threading.Event()
_lock = threading.Lock()


QUIET_LOGGERS = (
    "agent_framework",  # an INFO line per superstep; its warnings (checkpoint failures) still pass
    "httpx",  # a line per request
    "azure.core.pipeline.policies.http_logging_policy",  # every SDK request and response, headers included
    "azure.cosmos._cosmos_http_logging_policy",
    "azure.identity",
)
"""Library loggers held at WARNING. The Functions host's ``logging.logLevel`` in host.json does not reach
Python loggers, so their levels are set here, in code, for Azure and the local host alike."""


def quiet_library_loggers() -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def configure(connection_string: str | None, *, service_name: str = "casekeeper") -> str:
    """Install exporters for this process, once. Returns which: ``azure_monitor``, ``otlp`` or ``console``."""
    with _lock:
        if _configured.is_set():
            return "already"
        _configured.set()
        quiet_library_loggers()
        if connection_string:
            from azure.identity import DefaultAzureCredential
            from azure.monitor.opentelemetry import configure_azure_monitor

            # Application Insights with local auth disabled accepts only Entra-authenticated telemetry.
            configure_azure_monitor(
                connection_string=connection_string, credential=DefaultAzureCredential(), logger_name="casekeeper"
            )
            return "azure_monitor"
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": service_name})
        if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            span_exporter: Any = OTLPSpanExporter()
            metric_exporter: Any = OTLPMetricExporter()
            kind = "otlp"
        else:
            from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            out = _console_stream()
            span_exporter = ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n")
            metric_exporter = ConsoleMetricExporter(out=out, formatter=lambda m: m.to_json(indent=None) + "\n")
            kind = "console"
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
        trace.set_tracer_provider(tracer_provider)
        reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=60_000)
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
        return kind


def _console_stream() -> IO[str]:
    import sys

    path = os.environ.get("CASEKEEPER_TELEMETRY_FILE")
    if not path:
        return sys.stderr
    return open(path, "a", buffering=1, encoding="utf-8")
