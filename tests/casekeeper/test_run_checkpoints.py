"""``casekeeper.agent.RunCheckpoints``: one run's checkpoints written only where they save work, over a real store
and a real Agent Framework workflow that pauses for a person (``tests/support/tiny_workflow``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from agent_framework import WorkflowCheckpoint

from benchmarks.guarded_effect import CountingStore
from casekeeper import DocumentStore, capture
from casekeeper.agent import CaseCheckpointStorage, RunCheckpoints
from tests.support.tiny_workflow import ALL_TYPES, WORKFLOW_NAME, CaseStarted, Decision, build_workflow, request_id_for


@pytest.fixture(autouse=True)
def _no_capture() -> Iterator[None]:
    yield
    capture.uninstall()


def calls(counting: CountingStore) -> dict[str, int]:
    return {method: n for (container, method), n in counting.take_tally().calls.items() if container == "checkpoints"}


def pause(store: DocumentStore, case_id: str) -> RunCheckpoints:
    saves = RunCheckpoints(CaseCheckpointStorage(store, case_id, ALL_TYPES))
    result = asyncio.run(build_workflow().run(CaseStarted(case_id), checkpoint_storage=saves))
    assert [e.request_id for e in result.get_request_info_events()] == [request_id_for(case_id)]
    asyncio.run(saves.finish())
    return saves


def test_a_pause_is_written_at_once_and_nothing_else_of_its_run(store: DocumentStore) -> None:
    counting = CountingStore(store)
    saves = pause(counting, "r1")  # type: ignore[arg-type]
    assert saves.written == 1 and not saves.skipped
    [record] = CaseCheckpointStorage(store, "r1", ALL_TYPES).records(WORKFLOW_NAME)
    assert record.pending_request_ids == (request_id_for("r1"),)
    assert calls(counting) == {"query": 1, "create": 1}  # the pause, numbered by one read


def test_the_end_of_a_resumed_run_is_written_because_it_supersedes_the_pause(store: DocumentStore) -> None:
    pause(store, "r1")
    storage = CaseCheckpointStorage(store, "r1", ALL_TYPES)
    paused = storage.latest_record(WORKFLOW_NAME)
    assert paused is not None
    saves = RunCheckpoints(storage)
    answer = {request_id_for("r1"): Decision(True, "ana")}
    result = asyncio.run(
        build_workflow().run(checkpoint_id=paused.checkpoint_id, responses=answer, checkpoint_storage=saves)
    )
    asyncio.run(saves.finish())
    assert result.get_outputs() and saves.written == 1
    newest = storage.latest_record(WORKFLOW_NAME)
    assert newest is not None and newest.seq > paused.seq and newest.pending_request_ids == ()


def finished(case_id: str) -> WorkflowCheckpoint:
    """A finished run's last checkpoint: no pending request, no message in flight."""
    return WorkflowCheckpoint(workflow_name=WORKFLOW_NAME, graph_signature_hash="g", state={"case": case_id})


@pytest.mark.parametrize("created", [False, True], ids=["existing", "just-created"])
def test_a_run_that_ends_on_a_case_holding_no_checkpoint_writes_none(store: DocumentStore, created: bool) -> None:
    """Nobody resumes a finished run, and there is nothing older to supersede: one read tells it (none at all
    when the caller has just created the case and says so)."""
    counting = CountingStore(store)
    saves = RunCheckpoints(CaseCheckpointStorage(counting, "r2", ALL_TYPES))  # type: ignore[arg-type]
    if created:
        saves.storage.assume_empty()
    asyncio.run(saves.save(finished("r2")))
    asyncio.run(saves.finish())
    assert saves.skipped and saves.written == 0
    assert calls(counting) == ({} if created else {"query": 1})
    assert CaseCheckpointStorage(store, "r2", ALL_TYPES).records() == []


def test_a_run_that_ends_on_a_case_holding_an_older_checkpoint_writes_its_end(store: DocumentStore) -> None:
    older = CaseCheckpointStorage(store, "r3", ALL_TYPES)
    asyncio.run(older.save(finished("r3")))
    counting = CountingStore(store)
    saves = RunCheckpoints(CaseCheckpointStorage(counting, "r3", ALL_TYPES))  # type: ignore[arg-type]
    asyncio.run(saves.save(end := finished("r3")))
    asyncio.run(saves.finish())
    assert saves.written == 1 and not saves.skipped
    assert calls(counting) == {"query": 1, "create": 1}
    assert [r.checkpoint_id for r in older.records()][-1] == end.checkpoint_id
