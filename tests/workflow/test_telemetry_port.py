"""The workflow reports to telemetry through a port (``shared.ports.WorkflowTelemetry``, issue 27):
what it reports reaches whatever the composition root passes, the app's OpenTelemetry ``Telemetry`` among
them, and ``shared.workflow`` imports nothing of ``shared.app.telemetry`` (the import-linter contract
``workflow-telemetry``; ``tests/unit/test_import_contracts.py`` shows it can fail)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.ledger import Ledger
from casekeeper.core.ports import DocumentStore
from shared.app.alerts import Alerter
from shared.app.telemetry import Telemetry
from shared.domain import events as ev
from shared.domain.events import CaseEvent
from shared.domain.invoice import Rules
from shared.localhost.supplier_stub import SupplierStub
from shared.ports import NoTelemetry, WorkflowTelemetry
from shared.supplier.portal import SupplierPortal
from shared.workflow.deps import WorkflowDeps
from shared.workflow.proposers import RulesProposer
from shared.workflow.runner import WorkflowRunner
from shared.workflow.worker import CaseWorker
from tests.support.invoices import invoice


class Recorded:
    """What a stage's span was given. A stand-in for an OpenTelemetry span: the port promises only
    ``set_attribute``, and this records exactly that."""

    def __init__(self, name: str, attributes: Mapping[str, Any] | None) -> None:
        self.name = name
        self.attributes = dict(attributes or {})

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value


class Recorder:
    """A telemetry that records what the workflow reports: the port's whole contract, nothing of
    OpenTelemetry (which the test below shows the app's Telemetry brings)."""

    def __init__(self) -> None:
        self.spans: list[Recorded] = []
        self.lost: list[str] = []

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Recorded]:
        recorded = Recorded(name, attributes)
        self.spans.append(recorded)
        yield recorded

    def lost_commit(self, where: str) -> None:
        self.lost.append(where)


def run_one_case(store: DocumentStore, supplier: SupplierStub, telemetry: WorkflowTelemetry | None) -> str:
    cases = CaseRepository(store, ManualClock())
    deps = WorkflowDeps(
        cases=cases,
        ledger=Ledger(store, cases),
        supplier=SupplierPortal(supplier.url, timeout=10.0),
        proposer=RulesProposer(),
        rules=Rules(),
        **({"telemetry": telemetry} if telemetry is not None else {}),
    )
    worker = CaseWorker(WorkflowRunner(deps, store, alert=Alerter(store, ManualClock()).raise_alert))
    result = asyncio.run(worker.handle(CaseEvent(ev.INVOICE_RECEIVED, "C-1", invoice("1100.00"))))
    return result.outcome


def test_the_workflow_reports_its_stages_through_the_port(store: DocumentStore, supplier: SupplierStub) -> None:
    recorder = Recorder()
    assert run_one_case(store, supplier, recorder) == "committed"
    names = [s.name for s in recorder.spans]
    assert "workflow.run" in names and "propose" in names
    # The guard's commit, traced through the same port (the workflow hands it ``span`` as its trace).
    [commit] = [s for s in recorder.spans if s.name == "commit_status"]
    assert commit.attributes["casekeeper.case_id"] == "C-1"
    assert commit.attributes["casekeeper.committed"] == "committed"
    assert recorder.lost == []


def test_the_apps_telemetry_is_such_a_port_and_makes_the_spans_opentelemetry_ones(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    port: WorkflowTelemetry = Telemetry(tracer_provider=provider)  # the fit: mypy, at bootstrap.py
    assert run_one_case(store, supplier, port) == "committed"
    names = {s.name for s in spans.get_finished_spans()}
    assert {"workflow.run", "propose", "commit_status"} <= names


def test_without_telemetry_the_workflow_runs_and_reports_nothing(store: DocumentStore, supplier: SupplierStub) -> None:
    assert run_one_case(store, supplier, None) == "committed"
    with NoTelemetry().span("any", {"a": 1}) as span:
        span.set_attribute("b", 2)  # what the executors do with a commit's span
