"""Telemetry: a trace per case event with spans for the workflow, the effect and the commit; counters."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import function_app
from casekeeper.capture import uninstall
from casekeeper.core.entries import CommitPlan
from shared.app import bootstrap
from shared.app.bootstrap import Services
from shared.app.telemetry import Telemetry, configure
from shared.domain.events import CaseEvent
from shared.handlers.case_events import handle_case_message
from shared.localhost.supplier_stub import SupplierStub
from shared.messaging import TRACE_PROPERTY, encode
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.triggers.conftest import INVOICE, QUEUE, deliver, settings_for, signed_request, user_function


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
        svc.ledger.run(
            case_id="C-2",
            action="request_credit_note",
            decided_on_version=1,
            call=lambda k: {},
            commit=CommitPlan("credit_requested"),
        )
    assert counts(reader)["casekeeper.decisions.stale"] == 1


def test_without_application_insights_spans_go_to_the_console_exporter(tmp_path: Path) -> None:
    # configure() installs process-wide providers, so it runs in its own interpreter.
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
    assert span["resource"]["attributes"]["service.name"] == "casekeeper"
    assert span["resource"]["attributes"]["telemetry.sdk.name"] == "opentelemetry"


def test_the_resource_serialised_once_is_the_resource_as_the_sdk_serialises_it() -> None:
    from opentelemetry.sdk.resources import Resource

    from shared.app.telemetry import _resource_json_once

    resource = Resource.create({"service.name": "casekeeper"})
    once = _resource_json_once(resource)
    assert once.attributes == resource.attributes and once.schema_url == resource.schema_url
    for indent in (4, None, 2):
        assert once.to_json(indent) == resource.to_json(indent)
        assert once.to_json(indent) == resource.to_json(indent)  # the second call, from the cache
    assert once.merge(Resource.create({"k": "v"})).attributes["k"] == "v"


# -- through configure(): Agent Framework's spans, sampling, and the sender's trace (issue 13) --


def probe(overrides: dict[str, str]) -> dict[str, Any]:
    """Run in a fresh interpreter: configure() as the app does, then one invoice through the indexed
    ``events`` and ``case_worker`` functions. Every span the process makes (Casekeeper's and Agent
    Framework's, which always uses the global provider) is recorded beside the configured exporter."""
    with SupplierStub(port=0) as stub, tempfile.TemporaryDirectory() as tmp:
        settings = settings_for(Path(tmp), stub.url, **overrides)
        kind = configure(settings)
        provider = trace.get_tracer_provider()
        assert isinstance(provider, TracerProvider)
        spans = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        svc = bootstrap.build(settings)
        bootstrap.use(svc)
        functions = {f.get_function_name(): f for f in function_app.create_app().get_functions()}
        body = json.dumps({"type": "invoice.received", "caseId": "INV-1", "data": INVOICE}).encode()
        assert user_function(functions, "events")(signed_request(body, delivery="d-probe")).status_code == 202
        queue = LocalSessionQueue(svc.settings.local_queue_path)
        [sent] = queue.peek(QUEUE)
        deliver(functions, queue)
        queue.close()
        status = svc.cases.require("INV-1").status
        [post] = [r for r in stub.requests if r["method"] == "POST"]
        svc.close()
    return {
        "configured": kind,
        "status": status,
        "sent": sent.application_properties.get(TRACE_PROPERTY),
        "supplier": post["traceparent"],
        "spans": [
            {
                "name": s.name,
                "scope": s.instrumentation_scope.name if s.instrumentation_scope else None,
                "trace": f"{s.context.trace_id:032x}",
                "span": f"{s.context.span_id:016x}",
                "parent": f"{s.parent.span_id:016x}" if s.parent else None,
            }
            for s in spans.get_finished_spans()
        ],
    }


def run_probe(tmp_path: Path, **overrides: str) -> dict[str, Any]:
    env = {**os.environ, "CASEKEEPER_TELEMETRY_FILE": str(tmp_path / "telemetry.jsonl")}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env.pop("APPLICATIONINSIGHTS_CONNECTION_STRING", None)
    code = (
        "import json, sys\n"
        "from tests.triggers.test_telemetry import probe\n"
        "print('PROBE ' + json.dumps(probe(json.loads(sys.argv[1]))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(overrides)],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    return json.loads(line.removeprefix("PROBE "))  # type: ignore[no-any-return]


def _ids(traceparent: str) -> tuple[str, str, str]:
    _, trace_id, span_id, flags = traceparent.split("-")
    return trace_id, span_id, flags


def _casekeeper_guarantees(found: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One trace from the webhook to the supplier; case_event continues the sender's; the supplier sees
    the effect's span. Returns Casekeeper's spans by name."""
    assert found["status"] == "credit_requested"
    ours = {s["name"]: s for s in found["spans"] if s["scope"] == "casekeeper"}
    assert {"webhook", "case_event", "workflow.run", "propose", "effect request_credit_note", "commit_status"} <= set(
        ours
    )
    webhook, case_event = ours["webhook"], ours["case_event"]
    assert _ids(found["sent"])[:2] == (webhook["trace"], webhook["span"])
    assert case_event["trace"] == webhook["trace"] and case_event["parent"] == webhook["span"]
    assert _ids(found["supplier"])[:2] == (webhook["trace"], ours["effect request_credit_note"]["span"])
    assert {s["trace"] for s in found["spans"] if s["name"] != "workflow.build"} == {webhook["trace"]}
    return ours


def test_by_default_agent_frameworks_spans_are_not_made_and_casekeepers_trace_is_whole(tmp_path: Path) -> None:
    found = run_probe(tmp_path)
    assert found["configured"] == "console"
    assert [s["name"] for s in found["spans"] if s["scope"] != "casekeeper"] == []
    ours = _casekeeper_guarantees(found)
    workflow_run = ours["workflow.run"]["span"]
    for name in ("propose", "effect request_credit_note", "commit_status"):
        assert ours[name]["parent"] == workflow_run, name
    # The configured exporter (the console, to a file here) got the same spans, in batches.
    exported = [json.loads(line) for line in (tmp_path / "telemetry.jsonl").read_text().splitlines() if line.strip()]
    assert {"case_event", "effect request_credit_note"} <= {e["name"] for e in exported if "context" in e}


def test_agent_framework_spans_true_adds_the_frameworks_spans_and_keeps_casekeepers(tmp_path: Path) -> None:
    found = run_probe(tmp_path, AGENT_FRAMEWORK_SPANS="true")
    framework = [s["name"] for s in found["spans"] if s["scope"] == "agent_framework"]
    assert {"executor.process intake", "executor.process commit", "message.send"} <= set(framework), framework
    _casekeeper_guarantees(found)


def test_a_trace_sampled_out_at_the_webhook_is_dropped_whole_and_still_carried(tmp_path: Path) -> None:
    """Nothing is exported, yet the context still travels (its "sampled" flag off), so the worker and the
    supplier agree with the webhook's decision."""
    found = run_probe(tmp_path, TRACE_SAMPLING_RATIO="0")
    assert found["status"] == "credit_requested" and found["spans"] == []
    sent_trace, _, sent_flags = _ids(found["sent"])
    supplier_trace, _, supplier_flags = _ids(found["supplier"])
    assert sent_trace == supplier_trace
    assert int(sent_flags, 16) & 1 == int(supplier_flags, 16) & 1 == 0  # the W3C "sampled" bit
