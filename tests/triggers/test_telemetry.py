"""Telemetry: a trace per case event with spans for the workflow, the effect and the commit; counters."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.app import bootstrap
from shared.app.bootstrap import Services
from shared.app.telemetry import Telemetry
from shared.domain.events import CaseEvent
from shared.handlers.case_events import handle_case_message
from shared.localhost.supplier_stub import SupplierStub
from shared.messaging import encode
from shared.workflow.capture import uninstall
from tests.triggers.conftest import INVOICE, settings_for


@pytest.fixture
def observed(
    tmp_path: Path, supplier: SupplierStub
) -> Iterator[tuple[Services, InMemorySpanExporter, InMemoryMetricReader]]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader]))
    svc = bootstrap.build(settings_for(tmp_path, supplier.url), telemetry=telemetry)
    try:
        yield svc, spans, reader
    finally:
        uninstall()
        svc.close()


def counts(reader: InMemoryMetricReader) -> dict[str, int]:
    data = reader.get_metrics_data()
    found: dict[str, int] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = sum(int(p.value) for p in metric.data.data_points)  # type: ignore[union-attr]
    return found


def handle(svc: Services, event: CaseEvent, message_id: str) -> Any:
    return asyncio.run(
        handle_case_message(
            svc.case_events, encode(event), session_id=event.case_id, message_id=message_id, delivery_count=1
        )
    )


def test_a_case_event_is_one_trace_with_workflow_effect_and_commit_spans(observed: Any) -> None:
    svc, spans, reader = observed
    handle(svc, CaseEvent("invoice.received", "C-1", INVOICE), "m-1")
    finished = spans.get_finished_spans()
    names = [s.name for s in finished]
    assert {"case_event", "workflow.run", "effect request_credit_note", "commit_status"} <= set(names)
    [root] = [s for s in finished if s.name == "case_event"]
    assert root.parent is None and root.attributes["casekeeper.case_id"] == "C-1"  # type: ignore[index]
    assert root.attributes["casekeeper.settlement"] == "completed"  # type: ignore[index]
    assert {s.context.trace_id for s in finished} == {root.context.trace_id}
    [effect] = [s for s in finished if s.name.startswith("effect ")]
    assert effect.attributes["casekeeper.effect_key"]  # type: ignore[index]
    assert [e.name for e in effect.events] == ["effect.started", "effect.done"]
    assert counts(reader)["casekeeper.effects.started"] == 1
    assert counts(reader)["casekeeper.effects.done"] == 1


def test_stale_decisions_and_replays_are_counted(observed: Any) -> None:
    svc, _, reader = observed
    svc.cases.create("C-2", INVOICE)
    svc.cases.update_facts("C-2", 1, {"poAmount": "900.00"}, reason="po edited")
    with pytest.raises(Exception, match="stale"):
        svc.ledger.run(case_id="C-2", action="request_credit_note", decided_on_version=1, call=lambda k: {})
    assert counts(reader)["casekeeper.decisions.stale"] == 1


def test_without_application_insights_spans_go_to_the_console_exporter(tmp_path: Path) -> None:
    # configure() installs process-wide providers, so it runs in its own interpreter.
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "telemetry.jsonl"
    probe = (
        "from opentelemetry import trace\n"
        "from shared.app.telemetry import Telemetry, configure\n"
        "assert configure(None) == 'console'\n"
        "with Telemetry().span('case_event', {'casekeeper.case_id': 'C-9'}):\n"
        "    pass\n"
        "trace.get_tracer_provider().force_flush()\n"
    )
    env = {**os.environ, "CASEKEEPER_TELEMETRY_FILE": str(out)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    [span] = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert span["name"] == "case_event" and span["attributes"]["casekeeper.case_id"] == "C-9"
