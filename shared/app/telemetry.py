"""Telemetry with OpenTelemetry: a trace per case event, metrics for what matters, logs with context.

Traces: one per case event, end to end. ``webhook`` (``POST /api/events``; ``approval`` and
``withdrawal`` for the other two ways in) sends the message with its trace context; the worker's
``case_event`` span (one per queue message) continues that trace, with child spans ``workflow.run``,
``propose`` (the rules or the model), ``effect <action>``, ``commit_status`` and ``reconcile.recheck``;
the supplier portal's requests carry it on in ``traceparent``. Retries and re-checks the worker
schedules carry the context of the span that scheduled them. Metrics (meter ``casekeeper``):

====================================  ==========================================================
``casekeeper.effects.started``        claims of a new effect
``casekeeper.effects.done``           outcomes recorded done by the call (attribute: action)
``casekeeper.effects.failed``         definite refusals recorded
``casekeeper.effects.reconciled``     reconciliation outcomes (attribute: outcome)
``casekeeper.decisions.stale``        calls refused because the case moved on (rule R4)
``casekeeper.commits.lost``           status commits that lost the race (rule R5)
``casekeeper.events.deferred``        events re-sent with backoff after a transient error
``casekeeper.checkpoint.failures``    failed checkpoint saves (``casekeeper.capture``)
``casekeeper.alerts``                 alerts raised (``shared.app.alerts``)
``casekeeper.model.calls``            model calls (attributes: deployment, outcome)
``casekeeper.model.tokens``           tokens the model used (deployment, model, ``gen_ai.token.type``
                                      input or output); per case from the ``propose`` spans
====================================  ==========================================================

The ``propose`` span carries ``casekeeper.proposer``, and for a model ``gen_ai.request.model`` (the
deployment), ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens`` and
``casekeeper.model.outcome`` (``shared.workflow.proposers.AgentProposer``).

Logs carry ``caseId`` and ``effectKey`` as ``extra`` fields, which Application Insights keeps as
custom dimensions when telemetry goes through ``azure-monitor-opentelemetry``.

:func:`configure` picks the exporter once per process: Application Insights when
``APPLICATIONINSIGHTS_CONNECTION_STRING`` is set (identity-based: the app's managed identity), OTLP
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, the console otherwise (``CASEKEEPER_TELEMETRY_FILE`` sends
the console exporter's output to a file, which the local host does).

What it costs, and what is kept:

- **Agent Framework's own spans are off** (``AGENT_FRAMEWORK_SPANS=false``, the default). The framework
  instruments every workflow build and run, executor, message and edge group, and its chat client and
  agent: 14 spans for an invoice case beside Casekeeper's 6, and most of the tracing CPU. One switch
  covers all of them (:func:`use_framework_spans`); off, its tracer is OpenTelemetry's no-op tracer,
  whose stand-in spans carry the current span's context, so Casekeeper's spans nest as they would
  without the framework (``case_event`` > ``workflow.run`` > ``propose``, ``effect <action>``,
  ``commit_status``). ``true`` turns them on for debugging, without message
  contents (``ENABLE_SENSITIVE_DATA`` is not honoured: prompts carry invoice data).
- **Traces are sampled per trace** (``TRACE_SAMPLING_RATIO``, 0 to 1, default 1; ``infra/`` sets 0.25):
  in Azure through azure-monitor-opentelemetry's ``sampling_ratio`` (its ``ApplicationInsightsSampler``:
  the decision is a hash of the trace id, so every process sampling at the same ratio keeps the same
  traces, and each kept span carries the rate, so Application Insights' ``ItemCount`` counts what was
  dropped); elsewhere ``ParentBased(TraceIdRatioBased)``, which follows the sender's decision carried
  in ``traceparent``. A trace is kept or dropped whole, from the webhook to the supplier call.
- **Never sampled**: log records (every alert's ERROR record on ``casekeeper.alerts`` included:
  ``enable_trace_based_sampling_for_logs`` is pinned off, so records of a dropped trace are still
  exported) and metrics (every counter above counts every event). An exception that leaves a Casekeeper
  span of a dropped trace is logged once, at WARNING on ``casekeeper.telemetry``, with the span's name,
  case and effect key and the traceback, where a kept trace records it on the span as an ERROR.
- Spans, logs and metrics are exported in batches off the request path (``BatchSpanProcessor``,
  the distro's batch log processor, a periodic metric reader).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any, Protocol

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, Status, StatusCode

from casekeeper import Effect
from shared.ports import ModelCall

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.sampling import Sampler

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
        self.model_calls = meter.create_counter("casekeeper.model.calls", description="model calls, by outcome")
        self.model_tokens = meter.create_counter(
            "casekeeper.model.tokens", unit="{token}", description="tokens the model used, input and output"
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

    def model_call(self, call: ModelCall) -> None:
        """A model call's outcome and tokens (``shared.workflow.proposers.AgentProposer``'s observer)."""
        self.model_calls.add(
            1, {"casekeeper.model.deployment": call.deployment, "casekeeper.model.outcome": call.outcome}
        )
        for kind, count in (("input", call.input_tokens), ("output", call.output_tokens)):
            if count:
                self.model_tokens.add(
                    count,
                    {
                        "casekeeper.model.deployment": call.deployment,
                        "gen_ai.response.model": call.model or "",
                        "gen_ai.token.type": kind,
                    },
                )

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
                _log_if_dropped(span, name, clean, exc)
                raise


_LOGGED = "_casekeeper_logged_by_span"


def _log_if_dropped(span: Span, name: str, attributes: Mapping[str, Any], exc: Exception) -> None:
    """A failure in a trace the sampler dropped is still recorded, as a log record (never sampled).

    Once per exception: the innermost span it leaves logs it, the spans around it see the mark. A kept
    trace records the failure on the span; no sampler at all (an invalid span context) logs nothing.
    """
    context = span.get_span_context()
    if not context.is_valid or context.trace_flags.sampled or getattr(exc, _LOGGED, False):
        return
    with contextlib.suppress(AttributeError, TypeError):
        setattr(exc, _LOGGED, True)
    log.warning(
        "%s failed (%s: %s); its trace %032x was not sampled",
        name,
        type(exc).__name__,
        exc,
        context.trace_id,
        exc_info=exc,
        extra={
            "span": name,
            "errorType": type(exc).__name__,
            "caseId": attributes.get("casekeeper.case_id"),
            "effectKey": attributes.get("casekeeper.effect_key"),
        },
    )


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


EXPORTED_LIBRARY_LOGGERS = ("agent_framework", "azure")
"""Libraries whose records an operator needs beside Casekeeper's own, at the levels set in code
(:data:`QUIET_LOGGERS`: warnings and worse): Agent Framework's "Failed to create checkpoint" warning and the
Azure SDKs' warnings (throttling, retries given up, credential failures). In Azure the exporter is attached
to the ``casekeeper`` logger, and with ``PYTHON_ENABLE_OPENTELEMETRY`` the host no longer forwards the
worker's other records, so without this they would reach nobody."""

_NOT_EXPORTED = ("azure.monitor.opentelemetry", "opentelemetry")
"""The exporter's own loggers: a record about a failed export, exported through the same exporter, would
fail again and log again."""


class _NotTheExporter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith(_NOT_EXPORTED)


def export_library_logs(handler: logging.Handler) -> None:
    """Send the records of :data:`EXPORTED_LIBRARY_LOGGERS` to ``handler`` too (the exporter's handler),
    never the exporter's own. Once per handler."""
    if not any(isinstance(f, _NotTheExporter) for f in handler.filters):
        handler.addFilter(_NotTheExporter())
    for name in EXPORTED_LIBRARY_LOGGERS:
        library = logging.getLogger(name)
        if handler not in library.handlers:
            library.addHandler(handler)


def use_framework_spans(enabled: bool) -> None:
    """Agent Framework's own instrumentation on or off, process-wide.

    In agent-framework-core 1.23 one switch gates every span the framework makes (``workflow.build``,
    ``workflow.run``, ``message.send``, ``executor.process``, ``edge_group.process``, and the chat and
    agent spans of a model call): ``OBSERVABILITY_SETTINGS.ENABLED``, read when each span starts. It
    defaults to on (``ENABLE_INSTRUMENTATION``, read once at import). ``disable_instrumentation()`` is
    sticky, so nothing in the framework turns it back on; ``enable_instrumentation(force=True)`` lifts it.
    """
    from agent_framework import observability

    if enabled:
        observability.enable_instrumentation(enable_sensitive_data=False, force=True)
    else:
        observability.disable_instrumentation()


def sampler(ratio: float) -> Sampler:
    """The local (OTLP, console) sampler: a new trace is kept with probability ``ratio``; a span whose
    parent is known (the sender's ``traceparent``, the current span) follows the parent's decision."""
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    return ParentBased(TraceIdRatioBased(ratio))


class TelemetrySettings(Protocol):
    """What :func:`configure` reads of the app's settings (``shared.app.settings.Settings`` has them)."""

    @property
    def appinsights_connection_string(self) -> str | None: ...

    @property
    def trace_sampling_ratio(self) -> float: ...

    @property
    def agent_framework_spans(self) -> bool: ...


def configure(settings: TelemetrySettings | str | None, *, service_name: str = "casekeeper") -> str:
    """Install exporters for this process, once. Returns which: ``azure_monitor``, ``otlp`` or ``console``.

    ``settings``: the app's settings (``APPLICATIONINSIGHTS_CONNECTION_STRING``, ``TRACE_SAMPLING_RATIO``,
    ``AGENT_FRAMEWORK_SPANS``); or only a connection string (``None``: none), the others at their defaults.
    """
    if settings is None or isinstance(settings, str):
        connection_string, sampling_ratio, framework_spans = settings, 1.0, False
    else:
        connection_string = settings.appinsights_connection_string
        sampling_ratio, framework_spans = settings.trace_sampling_ratio, settings.agent_framework_spans
    with _lock:
        if _configured.is_set():
            return "already"
        _configured.set()
        quiet_library_loggers()
        use_framework_spans(framework_spans)
        if connection_string:
            from azure.identity import DefaultAzureCredential
            from azure.monitor.opentelemetry import configure_azure_monitor

            own_handlers = list(logging.getLogger("casekeeper").handlers)
            # Application Insights with local auth disabled accepts only Entra-authenticated telemetry.
            # sampling_ratio: the distro's ApplicationInsightsSampler. Without it, 1.8.11 falls back to a
            # rate-limited sampler (about 5 new traces a second), whose share drifts with the load.
            # Log records of dropped traces are exported all the same (alerts are log records): pinned,
            # not left to the option's default.
            configure_azure_monitor(
                connection_string=connection_string,
                credential=DefaultAzureCredential(),
                logger_name="casekeeper",
                sampling_ratio=sampling_ratio,
                enable_trace_based_sampling_for_logs=False,
            )
            # The handler the distro attached to the casekeeper logger (its class has moved between
            # OpenTelemetry packages, so it is found as the one that was not there before).
            for handler in logging.getLogger("casekeeper").handlers:
                if handler not in own_handlers:
                    export_library_logs(handler)
            return "azure_monitor"
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = _resource_json_once(Resource.create({"service.name": service_name}))
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
        tracer_provider = TracerProvider(resource=resource, sampler=sampler(sampling_ratio))
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
        trace.set_tracer_provider(tracer_provider)
        reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=60_000)
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
        return kind


def _resource_json_once(resource: Any) -> Any:
    """``resource`` (immutable), serialised once: the console exporter's line for each span embeds the
    resource's ``to_json()``, which the SDK otherwise re-encodes for every span (with ``indent=4``, that is
    Python's slow encoder), the larger share of a span's export cost. The same lines come out."""
    from opentelemetry.sdk.resources import Resource

    class JsonOnceResource(Resource):
        def __init__(self, attributes: Any, schema_url: str | None = None) -> None:
            super().__init__(attributes, schema_url)
            self._json: dict[int | None, str] = {}

        def to_json(self, indent: int | None = 4) -> str:
            cached = self._json.get(indent)
            if cached is None:
                cached = self._json[indent] = super().to_json(indent)
            return cached

    return JsonOnceResource(resource.attributes, resource.schema_url)


def _console_stream() -> IO[str]:
    import sys

    path = os.environ.get("CASEKEEPER_TELEMETRY_FILE")
    if not path:
        return sys.stderr
    return open(path, "a", buffering=1, encoding="utf-8")
