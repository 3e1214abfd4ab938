"""What telemetry keeps when it samples (issue 13): the sampler, the Azure Monitor options, Agent
Framework's switch, and failures and alerts of traces the sampler dropped.

Process-wide state (the configured-once flag, Agent Framework's switch) is patched or restored here;
the end-to-end checks through ``configure()`` run in their own interpreters
(``tests/triggers/test_telemetry.py``).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from casekeeper.core.clock import ManualClock
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.app import telemetry
from shared.app.alerts import Alerter
from shared.app.settings import Settings
from shared.app.telemetry import Telemetry, sampler

BASE = {"WEBHOOK_SECRET": "s", "CASEKEEPER_QUEUE": "local"}
CONNECTION = "InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=https://127.0.0.1:9/"


def recording(ratio: float) -> tuple[Telemetry, InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler(ratio))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return Telemetry(tracer_provider=provider), spans


def remote_parent(sampled: bool) -> Any:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    parent = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=True, trace_flags=flags)
    return trace.set_span_in_context(NonRecordingSpan(parent))


# -- the sampler --


def test_the_local_sampler_is_parent_based_trace_id_ratio_with_the_configured_ratio() -> None:
    from opentelemetry.sdk.trace.sampling import ParentBased

    chosen = sampler(0.25)
    assert isinstance(chosen, ParentBased)
    assert chosen.get_description().startswith("ParentBased{root:TraceIdRatioBased{0.25},")


def test_a_case_event_follows_the_senders_decision_whatever_the_ratio() -> None:
    """The webhook decided for the whole trace; the worker, on another host, must not decide again."""
    for ratio, sampled in ((0.0, True), (1.0, False)):
        tel, spans = recording(ratio)
        with tel.span("case_event", sender=remote_parent(sampled)), tel.span("effect request_credit_note"):
            pass
        assert len(spans.get_finished_spans()) == (2 if sampled else 0), (ratio, sampled)


def test_new_traces_are_kept_in_proportion_and_whole() -> None:
    tel, spans = recording(0.25)
    for _ in range(2000):
        with tel.span("webhook"), tel.span("case_event"), tel.span("commit_status"):
            pass
    finished = spans.get_finished_spans()
    by_trace: dict[int, int] = {}
    for span in finished:
        by_trace[span.context.trace_id] = by_trace.get(span.context.trace_id, 0) + 1
    assert set(by_trace.values()) == {3}, "a trace is kept or dropped whole"
    assert 400 <= len(by_trace) <= 600, len(by_trace)


# -- configure(): what it asks of azure-monitor-opentelemetry and of Agent Framework --


@pytest.fixture
def unconfigured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """configure() as on a fresh process, with the distro and the framework switch recorded, not run."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(telemetry, "_configured", threading.Event())
    monkeypatch.setattr(telemetry, "use_framework_spans", lambda enabled: seen.__setitem__("framework", enabled))
    import azure.monitor.opentelemetry as distro

    monkeypatch.setattr(distro, "configure_azure_monitor", lambda **kwargs: seen.update(kwargs))
    return seen


@pytest.mark.parametrize(("ratio", "framework"), [("0.25", "false"), ("1", "true"), ("0", "false")])
def test_in_azure_the_distro_gets_the_ratio_and_keeps_logs_of_dropped_traces(
    unconfigured: dict[str, Any], ratio: str, framework: str
) -> None:
    settings = Settings.from_mapping(
        {
            **BASE,
            "APPLICATIONINSIGHTS_CONNECTION_STRING": CONNECTION,
            "TRACE_SAMPLING_RATIO": ratio,
            "AGENT_FRAMEWORK_SPANS": framework,
        }
    )
    assert telemetry.configure(settings) == "azure_monitor"
    assert unconfigured["sampling_ratio"] == float(ratio)
    assert unconfigured["enable_trace_based_sampling_for_logs"] is False
    assert unconfigured["logger_name"] == "casekeeper" and unconfigured["connection_string"] == CONNECTION
    assert unconfigured["framework"] is (framework == "true")


def test_a_bare_connection_string_keeps_the_defaults(unconfigured: dict[str, Any]) -> None:
    assert telemetry.configure(CONNECTION) == "azure_monitor"
    assert (unconfigured["sampling_ratio"], unconfigured["framework"]) == (1.0, False)


def test_the_distro_samples_by_ratio_only_when_given_one() -> None:
    """Why configure() always passes sampling_ratio: without it, this version rate-limits instead."""
    from azure.monitor.opentelemetry._utils.configurations import _get_configurations

    assert _get_configurations(sampling_ratio=0.25)["sampling_ratio"] == 0.25
    default = _get_configurations()
    assert "sampling_ratio" not in default and default["traces_per_second"] == 5.0


def test_agent_framework_spans_follow_the_switch() -> None:
    from agent_framework import observability

    was = observability.OBSERVABILITY_SETTINGS.ENABLED
    try:
        telemetry.use_framework_spans(False)
        assert not observability.OBSERVABILITY_SETTINGS.ENABLED
        assert isinstance(observability.workflow_tracer(), trace.NoOpTracer)
        observability.enable_instrumentation()  # what a library might call: the disable is sticky
        assert not observability.OBSERVABILITY_SETTINGS.ENABLED
        telemetry.use_framework_spans(True)
        assert observability.OBSERVABILITY_SETTINGS.ENABLED
        assert not observability.OBSERVABILITY_SETTINGS.SENSITIVE_DATA_ENABLED
    finally:
        telemetry.use_framework_spans(was)


# -- failures and alerts in traces the sampler dropped --


def test_a_failure_in_a_dropped_trace_is_logged_once_with_its_span_and_case(caplog: pytest.LogCaptureFixture) -> None:
    tel, spans = recording(0.0)
    caplog.set_level(logging.WARNING, logger="casekeeper.telemetry")
    with (
        pytest.raises(RuntimeError, match="portal down"),
        tel.span("case_event", {"casekeeper.case_id": "C-1"}),
        tel.span("workflow.run"),
        tel.span("effect request_credit_note", {"casekeeper.case_id": "C-1", "casekeeper.effect_key": "k-1"}),
    ):
        raise RuntimeError("portal down")
    assert not spans.get_finished_spans()
    [record] = [r for r in caplog.records if r.name == "casekeeper.telemetry"]
    assert record.levelno == logging.WARNING and record.exc_info is not None
    assert "effect request_credit_note failed (RuntimeError: portal down)" in record.getMessage()
    assert (record.span, record.caseId, record.effectKey, record.errorType) == (  # type: ignore[attr-defined]
        "effect request_credit_note",
        "C-1",
        "k-1",
        "RuntimeError",
    )


def test_a_failure_in_a_kept_trace_is_on_the_span_and_not_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    tel, spans = recording(1.0)
    caplog.set_level(logging.WARNING, logger="casekeeper.telemetry")
    with pytest.raises(RuntimeError), tel.span("case_event"):
        raise RuntimeError("boom")
    [span] = spans.get_finished_spans()
    assert span.status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]
    assert not [r for r in caplog.records if r.name == "casekeeper.telemetry"]


def test_without_tracing_configured_a_failure_logs_nothing_extra(caplog: pytest.LogCaptureFixture) -> None:
    tel = Telemetry(tracer_provider=trace.NoOpTracerProvider())
    caplog.set_level(logging.WARNING, logger="casekeeper.telemetry")
    with pytest.raises(RuntimeError), tel.span("case_event"):
        raise RuntimeError("boom")
    assert not [r for r in caplog.records if r.name == "casekeeper.telemetry"]


@pytest.mark.parametrize("trace_based_sampling_for_logs", [False, True])
def test_an_alert_raised_in_a_dropped_trace_is_exported_as_configured(
    tmp_path: Path, unconfigured: dict[str, Any], trace_based_sampling_for_logs: bool
) -> None:
    """The alert's ERROR record goes through the distro's own log processor with the option configure()
    passes; the opposite setting shows that this version would drop it otherwise."""
    from azure.monitor.opentelemetry.exporter.export.logs._processor import _AzureBatchLogRecordProcessor
    from opentelemetry.instrumentation.logging.handler import LoggingHandler
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

    telemetry.configure(Settings.from_mapping({**BASE, "APPLICATIONINSIGHTS_CONNECTION_STRING": CONNECTION}))
    configured = unconfigured["enable_trace_based_sampling_for_logs"]
    option = configured if not trace_based_sampling_for_logs else True
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    processor = _AzureBatchLogRecordProcessor(exporter, {"enable_trace_based_sampling_for_logs": option})
    provider.add_log_record_processor(processor)
    handler = LoggingHandler(logger_provider=provider)
    logger = logging.getLogger("casekeeper")
    logger.addHandler(handler)
    tel, spans = recording(0.0)
    try:
        with tel.span("case_event", {"casekeeper.case_id": "C-3"}):
            raised = Alerter(SqliteDocumentStore(str(tmp_path / "store.sqlite")), ManualClock()).raise_alert(
                "effect_escalated", "effect abc of case C-3 needs a person", {"caseId": "C-3"}, dedupe_key="abc"
            )
        processor.force_flush()
    finally:
        logger.removeHandler(handler)
        provider.shutdown()
    assert raised and not spans.get_finished_spans()
    alerts = [r for r in exporter.get_finished_logs() if r.log_record.attributes.get("alertKind") == "effect_escalated"]
    if trace_based_sampling_for_logs:
        assert not alerts, "the distro drops records of dropped traces when asked to"
    else:
        [alert] = alerts
        assert alert.log_record.severity_text == "ERROR"
        assert alert.log_record.trace_id, "the record still names its trace"


# -- the measurement (benchmarks/telemetry_cost.py): it runs, and counts spans right; timings not asserted --


def test_the_cost_benchmark_runs_and_counts_the_spans_of_a_case(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import telemetry_cost

    argv = ["--repeat", "1", "--rounds", "1", "--warmup", "0", "--cases", "2", "--variants", "shipped,default"]
    assert telemetry_cost.main(argv) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line[:1].isalpha()}
    # default: webhook, case_event, workflow.run, propose, effect request_credit_note, commit_status.
    assert rows["default"][1:4] == ["off", "1", "6.0"]
    assert rows["shipped"][1] == "on" and float(rows["shipped"][3]) > 6.0
