"""Checkpoint-failure capture (rule R7), on every backend, with real Agent Framework runs.

The failure these tests provoke is the quiet one: a state type missing from the storage's allow-list.
The storage refuses each save, the framework logs one WARNING per refusal and the run carries on as if
nothing happened; only the capture makes it visible.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from agent_framework import WorkflowRunState
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from casekeeper.capture import (
    KIND_CHECKPOINT_FAILURE,
    METRIC_NAME,
    RUNNER_LOGGER,
    CheckpointFailureCapture,
    capturing,
    failure_partition,
    failures_since,
    install,
    installed,
    mark_alerted,
    uninstall,
)
from casekeeper.checkpoints import CaseCheckpointStorage, type_key
from casekeeper.core.ports import Document, DocumentStore, Query
from casekeeper.errors import StoreUnavailable
from casekeeper.stores import HEALTH
from shared.localhost.cosmos_server import INSECURE_REQUEST_WARNING_FILTER
from tests.support.tiny_workflow import ALL_TYPES, WORKFLOW_NAME, CaseNote, CaseStarted, build_workflow

pytestmark = pytest.mark.filterwarnings(INSECURE_REQUEST_WARNING_FILTER)

WITHOUT_NOTE = ALL_TYPES - {type_key(CaseNote)}
"""The intake puts a CaseNote in state: every save after the entry checkpoint is refused."""
WITHOUT_NOTE_OR_INPUT = WITHOUT_NOTE - {type_key(CaseStarted)}
"""The entry checkpoint holds the CaseStarted input as well: every save is refused."""
CHECKPOINT_EXCEPTION = "agent_framework.exceptions.WorkflowCheckpointException"


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    metric_reader = InMemoryMetricReader()
    yield metric_reader
    metric_reader.shutdown()


@pytest.fixture
def provider(reader: InMemoryMetricReader) -> MeterProvider:
    return MeterProvider(metric_readers=[reader])


@pytest.fixture
def capture(store: DocumentStore, provider: MeterProvider) -> Iterator[CheckpointFailureCapture]:
    handler = install(store, meter_provider=provider)
    try:
        yield handler
    finally:
        uninstall()


def counter_points(reader: InMemoryMetricReader) -> list[tuple[dict[str, Any], int]]:
    """(attributes, cumulative value) of every data point of the failure counter."""
    data = reader.get_metrics_data()
    points: list[tuple[dict[str, Any], int]] = []
    if data is None:
        return points
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == METRIC_NAME:
                    points.extend((dict(p.attributes or {}), int(p.value)) for p in metric.data.data_points)  # type: ignore[union-attr]
    return points


def runner_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == RUNNER_LOGGER and r.levelno == logging.WARNING]


async def run_case(store: DocumentStore, case_id: str, allowed: frozenset[str]) -> Any:
    """One run of the tiny workflow, wrapped the way the case worker wraps it."""
    with capturing(case_id, WORKFLOW_NAME) as run:
        result = await build_workflow().run(
            CaseStarted(case_id), checkpoint_storage=CaseCheckpointStorage(store, case_id, allowed)
        )
    return result, run


# --- the quiet failure, made loud --------------------------------------------------------------------


def test_quiet_failure_is_recorded_durably_and_counted(
    store: DocumentStore,
    capture: CheckpointFailureCapture,
    reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    result, run = asyncio.run(run_case(store, "case-1", WITHOUT_NOTE))

    # What the framework does on its own: the run pauses for a person as if all were well ...
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    assert len(result.get_request_info_events()) == 1
    # ... and says so only in one WARNING per refused save (here: after intake, after the gate asked).
    warnings = runner_warnings(caplog)
    assert [w.args[0] for w in warnings] == [1, 2]  # type: ignore[index]
    # The pause was not saved: the newest checkpoint is the entry one, with no pending request.
    newest = CaseCheckpointStorage(store, "case-1", WITHOUT_NOTE).latest_record(WORKFLOW_NAME)
    assert newest is not None
    assert newest.iteration == 0
    assert newest.pending_request_ids == ()

    failures = failures_since(store, None)
    assert len(failures) == len(warnings) == 2
    assert [f.iteration for f in failures] == [1, 2]
    for failure in failures:
        assert failure.case_id == "case-1"
        assert failure.workflow_name == WORKFLOW_NAME
        assert failure.error_type == CHECKPOINT_EXCEPTION
        assert type_key(CaseNote) in failure.error_message
        assert failure.last_good_checkpoint_id == newest.checkpoint_id
        assert failure.alerted is False
        assert failure.ts > 0
    assert len({f.id for f in failures}) == 2
    assert [f.id for f in run.failures] == [f.id for f in failures]  # the caller learns at once, too

    # In the case's shard of the health container, typed by its record field.
    doc = store.read(HEALTH, failure_partition("case-1", ""), failures[0].id)
    assert doc is not None and failures[0].partition == doc.body["kind"] == failure_partition("case-1", "")
    assert doc.body["record"] == KIND_CHECKPOINT_FAILURE
    assert doc.body["alerted"] is False
    assert doc.body["error"]["type"] == CHECKPOINT_EXCEPTION

    assert counter_points(reader) == [
        ({"casekeeper.workflow": WORKFLOW_NAME, "error.type": CHECKPOINT_EXCEPTION, "casekeeper.recorded": True}, 2)
    ]


def test_every_save_failing_leaves_nothing_to_resume_and_every_failure_recorded(
    store: DocumentStore, capture: CheckpointFailureCapture, reader: InMemoryMetricReader
) -> None:
    result, run = asyncio.run(run_case(store, "case-1", WITHOUT_NOTE_OR_INPUT))
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    assert CaseCheckpointStorage(store, "case-1", ALL_TYPES).latest_record(WORKFLOW_NAME) is None

    failures = failures_since(store, None)
    assert [f.iteration for f in failures] == [0, 1, 2]
    assert {f.case_id for f in failures} == {"case-1"}
    assert {f.last_good_checkpoint_id for f in failures} == {None}
    assert type_key(CaseStarted) in failures[0].error_message
    assert len(run.failures) == 3
    assert sum(value for _, value in counter_points(reader)) == 3


def test_interleaved_runs_on_one_event_loop_attribute_failures_to_their_own_case(
    store: DocumentStore, capture: CheckpointFailureCapture, reader: InMemoryMetricReader
) -> None:
    async def both() -> list[Any]:
        return await asyncio.gather(*(run_case(store, case_id, WITHOUT_NOTE) for case_id in ("case-a", "case-b")))

    outcomes = asyncio.run(both())
    for case_id, (_, run) in zip(("case-a", "case-b"), outcomes, strict=True):
        assert [f.case_id for f in run.failures] == [case_id, case_id]
    failures = failures_since(store, None)
    assert sorted(f.case_id or "" for f in failures) == ["case-a", "case-a", "case-b", "case-b"]
    # The case id is deliberately not a metric attribute: one series per workflow and error type.
    assert counter_points(reader) == [
        ({"casekeeper.workflow": WORKFLOW_NAME, "error.type": CHECKPOINT_EXCEPTION, "casekeeper.recorded": True}, 4)
    ]


def test_a_failure_outside_capturing_is_still_recorded_without_a_case(
    store: DocumentStore, capture: CheckpointFailureCapture
) -> None:
    async def bare() -> None:
        await build_workflow().run(
            CaseStarted("case-1"), checkpoint_storage=CaseCheckpointStorage(store, "case-1", WITHOUT_NOTE)
        )

    asyncio.run(bare())
    failures = failures_since(store, None)
    assert len(failures) == 2
    assert {f.case_id for f in failures} == {None}
    assert {f.workflow_name for f in failures} == {None}


def test_a_clean_run_records_nothing(
    store: DocumentStore, capture: CheckpointFailureCapture, reader: InMemoryMetricReader
) -> None:
    result, run = asyncio.run(run_case(store, "case-1", ALL_TYPES))
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    assert run.failures == []
    assert failures_since(store, None) == []
    assert counter_points(reader) == []


def test_only_the_failed_checkpoint_warning_is_recorded(
    store: DocumentStore, capture: CheckpointFailureCapture
) -> None:
    runner = logging.getLogger(RUNNER_LOGGER)
    runner.warning("Some other warning at iteration %d", 3)
    runner.error("Failed to create checkpoint at iteration %d: %s", 1, "but at ERROR")
    assert failures_since(store, None) == []
    # The template with unexpected args (a changed framework) is still recorded, not dropped.
    with capturing("case-1", WORKFLOW_NAME):
        runner.warning("Failed to create checkpoint at iteration %s", "x")
    [failure] = failures_since(store, None)
    assert failure.case_id == "case-1"
    assert failure.iteration is None
    assert failure.error_type == "unknown"
    assert "Failed to create checkpoint at iteration x" in failure.error_message


# --- the handler is safe -------------------------------------------------------------------------------


class HealthWritesFail:
    """A store whose health writes fail (the store is down for the capture, not for the checkpoints)."""

    def __init__(self, inner: DocumentStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        if container == HEALTH:
            raise StoreUnavailable("health writes are down", container=container, doc_id=doc_id)
        return self._inner.create(container, partition, doc_id, body)


def test_a_failure_to_record_never_raises_into_the_framework(
    store: DocumentStore,
    provider: MeterProvider,
    reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    install(HealthWritesFail(store), meter_provider=provider)
    try:
        result, run = asyncio.run(run_case(store, "case-1", WITHOUT_NOTE))
    finally:
        uninstall()
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    assert failures_since(store, None) == []  # nothing durable was written ...
    lost = [r for r in caplog.records if r.name == "casekeeper.capture" and r.levelno == logging.ERROR]
    assert len(lost) == 2  # ... so each failure's details went to the logs at ERROR instead
    assert "case=case-1" in lost[0].getMessage()
    assert type_key(CaseNote) in lost[0].getMessage()
    assert len(run.failures) == 2
    assert counter_points(reader) == [
        ({"casekeeper.workflow": WORKFLOW_NAME, "error.type": CHECKPOINT_EXCEPTION, "casekeeper.recorded": False}, 2)
    ]


# --- installing -------------------------------------------------------------------------------------------


def captures_on_runner() -> list[logging.Handler]:
    return [h for h in logging.getLogger(RUNNER_LOGGER).handlers if isinstance(h, CheckpointFailureCapture)]


def test_install_and_uninstall_are_idempotent(store: DocumentStore, provider: MeterProvider) -> None:
    try:
        first = install(store, meter_provider=provider)
        assert install(store, meter_provider=provider) is first
        assert captures_on_runner() == [first]
        assert installed() is first
        other = install(HealthWritesFail(store), meter_provider=provider)
        assert other is not first
        assert captures_on_runner() == [other]  # replaced, never two (each failure would be recorded twice)
    finally:
        uninstall()
        uninstall()
    assert captures_on_runner() == []
    assert installed() is None


def test_install_lowers_a_quieted_framework_logger_and_uninstall_restores_it(
    store: DocumentStore, provider: MeterProvider
) -> None:
    framework = logging.getLogger("agent_framework")
    runner = logging.getLogger(RUNNER_LOGGER)
    framework_level, runner_level = framework.level, runner.level
    framework.setLevel(logging.ERROR)  # a common way to quiet the framework: it would hide the warning
    try:
        install(store, meter_provider=provider)
        try:
            asyncio.run(run_case(store, "case-1", WITHOUT_NOTE))
        finally:
            uninstall()
        assert len(failures_since(store, None)) == 2
        assert runner.level == runner_level
    finally:
        framework.setLevel(framework_level)


# --- reading and acknowledging --------------------------------------------------------------------------


def test_failures_since_and_mark_alerted(store: DocumentStore, capture: CheckpointFailureCapture) -> None:
    asyncio.run(run_case(store, "case-1", WITHOUT_NOTE))
    first, second = failures_since(store, None)

    assert mark_alerted(store, first) is True
    assert mark_alerted(store, first) is False  # a second timer, or a retry, does not alert again
    [pending] = failures_since(store, None, alerted=False)
    assert pending.id == second.id
    [done] = failures_since(store, None, alerted=True)
    assert done.id == first.id
    assert done.alerted is True
    assert len(failures_since(store, min(first.ts, second.ts) - 1)) == 2
    assert failures_since(store, max(first.ts, second.ts) + 1) == []

    doc = store.read(HEALTH, first.partition, first.id)
    assert doc is not None
    assert doc.body["alerted"] is True
    assert doc.body["alertedAt"]
    assert {f.id for f in failures_since(store, None, case_id="case-1")} == {first.id, second.id}
    assert failures_since(store, None, case_id="case-2") == []


def test_failures_are_spread_over_partitions_by_case(store: DocumentStore) -> None:
    """An incident failing thousands of saves must not put every record in one logical partition (20 GB,
    10,000 RU/s): the records go to one of 16 shards by case id."""
    shards = {failure_partition(f"case-{i}", "") for i in range(200)}
    assert len(shards) == 16 and all(s.startswith(f"{KIND_CHECKPOINT_FAILURE}-") for s in shards)
    assert store.query(HEALTH, Query(partition=KIND_CHECKPOINT_FAILURE)) == []
