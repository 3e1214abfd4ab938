"""CaseCheckpointStorage's contract (rules R8, R9), on every backend, with a real Agent Framework workflow."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from agent_framework import Workflow, WorkflowCheckpoint, WorkflowRunState, register_checkpoint_type
from agent_framework._workflows import _checkpoint_encoding
from agent_framework.exceptions import WorkflowCheckpointException

from casekeeper.checkpoints import (
    CHECKPOINTS,
    KIND_CHECKPOINT,
    SEQUENCE_DOC_ID,
    CaseCheckpointStorage,
    CheckpointUnusable,
    type_key,
)
from casekeeper.core.ports import DocumentStore, Query
from devhost.cosmos_server import INSECURE_REQUEST_WARNING_FILTER
from tests.support.tiny_workflow import (
    ALL_TYPES,
    WORKFLOW_NAME,
    ApprovalRequest,
    CaseNote,
    CaseStarted,
    Decision,
    build_workflow,
    request_id_for,
)

pytestmark = pytest.mark.filterwarnings(INSECURE_REQUEST_WARNING_FILTER)

T = TypeVar("T")


def wait(awaitable: Awaitable[T]) -> T:
    """Run one awaitable to completion on a fresh event loop (``workflow.run`` returns an Awaitable)."""

    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


@dataclass
class RegisteredOnly:
    """A state type allowed only through ``register_checkpoint_type`` (module-level: picklable)."""

    value: int


def run_to_pause(storage: CaseCheckpointStorage) -> Workflow:
    """Run a fresh tiny workflow for the storage's case until it asks a person."""
    workflow = build_workflow()
    result = wait(workflow.run(CaseStarted(storage.case_id), checkpoint_storage=storage))
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    return workflow


def synthetic(n: int, *, iteration: int = 0, timestamp: str | None = None, **state: Any) -> WorkflowCheckpoint:
    checkpoint = WorkflowCheckpoint(
        workflow_name=WORKFLOW_NAME,
        graph_signature_hash="hash-1",
        checkpoint_id=f"cp-{n}",
        iteration_count=iteration,
        state=dict(state),
    )
    if timestamp is not None:
        checkpoint.timestamp = timestamp
    return checkpoint


def stored_docs(store: DocumentStore, case_id: str) -> list[Any]:
    return store.query(CHECKPOINTS, Query(partition=case_id))


# --- round trip ---------------------------------------------------------------------------------


def test_real_checkpoint_round_trips_with_a_pickled_dataclass_in_state(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    workflow = run_to_pause(storage)

    latest = asyncio.run(storage.get_latest(workflow_name=WORKFLOW_NAME))
    assert latest is not None
    assert latest.state["note"] == CaseNote("case-1", "intake saw case-1")
    assert isinstance(latest.state["note"], CaseNote)
    assert list(latest.pending_request_info_events) == [request_id_for("case-1")]
    loaded = asyncio.run(storage.load(latest.checkpoint_id))
    assert loaded.checkpoint_id == latest.checkpoint_id
    assert loaded.state["note"] == latest.state["note"]
    assert loaded.timestamp == latest.timestamp

    doc = store.read(CHECKPOINTS, "case-1", latest.checkpoint_id)
    assert doc is not None
    body = doc.body
    assert body["kind"] == KIND_CHECKPOINT
    assert body["caseId"] == "case-1"
    assert body["workflowName"] == WORKFLOW_NAME
    assert body["graphHash"] == workflow.graph_signature_hash
    assert body["iteration"] == latest.iteration_count
    assert body["pendingRequestIds"] == [request_id_for("case-1")]
    assert body["createdAt"] == latest.timestamp
    assert body["previousCheckpointId"] == latest.previous_checkpoint_id
    assert isinstance(body["encoded"], str)  # JSON text: a store of JSON doubles keeps every number of it
    assert "__pickled__" in body["encoded"]  # the dataclass went in as a pickle


def test_graph_hash_in_metadata_is_the_workflows_graph_signature_hash(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    workflow = run_to_pause(storage)
    records = storage.records(WORKFLOW_NAME)
    assert len(records) == 3  # entry checkpoint, after intake, after the gate asked
    assert {r.graph_hash for r in records} == {workflow.graph_signature_hash}
    latest = storage.latest_record(WORKFLOW_NAME)
    assert latest is not None
    assert latest.graph_hash == build_workflow().graph_signature_hash  # a fresh build agrees
    assert latest.pending_request_ids == (request_id_for("case-1"),)
    assert latest.iteration == 2
    assert latest.encoded_bytes > 0


def test_load_of_a_missing_checkpoint_raises(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    with pytest.raises(WorkflowCheckpointException, match="No checkpoint found"):
        asyncio.run(storage.load("nope"))
    with pytest.raises(WorkflowCheckpointException, match="No checkpoint found"):
        asyncio.run(storage.load(SEQUENCE_DOC_ID))  # the counter is not a checkpoint
    assert asyncio.run(storage.get_latest(workflow_name=WORKFLOW_NAME)) is None
    assert storage.latest_record(WORKFLOW_NAME) is None


# --- ordering -------------------------------------------------------------------------------------


def test_get_latest_follows_save_order_not_timestamps_or_iterations(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    # Saved within one second (one Cosmos _ts), with timestamps running backwards and iterations
    # repeating as they do around a human-in-the-loop pause: neither may decide the order.
    iterations = [2, 2, 1, 0, 2]
    for n, iteration in enumerate(iterations):
        asyncio.run(storage.save(synthetic(n, iteration=iteration, timestamp=f"2026-01-01T00:00:0{9 - n}+00:00")))

    latest = asyncio.run(storage.get_latest(workflow_name=WORKFLOW_NAME))
    assert latest is not None
    assert latest.checkpoint_id == "cp-4"
    assert asyncio.run(storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)) == [f"cp-{n}" for n in range(5)]
    assert [c.checkpoint_id for c in asyncio.run(storage.list_checkpoints(workflow_name=WORKFLOW_NAME))] == [
        f"cp-{n}" for n in range(5)
    ]
    records = storage.records()
    assert [r.seq for r in records] == [1, 2, 3, 4, 5]
    assert [r.iteration for r in records] == iterations
    assert asyncio.run(storage.list_checkpoint_ids(workflow_name="other")) == []


def test_concurrent_saves_of_one_case_get_distinct_sequence_numbers(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)

    async def save_all() -> None:
        await asyncio.gather(*(storage.save(synthetic(n)) for n in range(6)))

    asyncio.run(save_all())
    seqs = [r.seq for r in storage.records()]
    assert sorted(seqs) == [1, 2, 3, 4, 5, 6]


# --- isolation ------------------------------------------------------------------------------------


def test_each_case_sees_only_its_own_checkpoints(store: DocumentStore) -> None:
    a = CaseCheckpointStorage(store, "case-a", ALL_TYPES)
    b = CaseCheckpointStorage(store, "case-b", ALL_TYPES)
    run_to_pause(a)
    run_to_pause(b)

    ids_a = asyncio.run(a.list_checkpoint_ids(workflow_name=WORKFLOW_NAME))
    ids_b = asyncio.run(b.list_checkpoint_ids(workflow_name=WORKFLOW_NAME))
    assert len(ids_a) == len(ids_b) == 3
    assert not set(ids_a) & set(ids_b)
    latest_b = asyncio.run(b.get_latest(workflow_name=WORKFLOW_NAME))
    assert latest_b is not None
    assert latest_b.state["note"].case_id == "case-b"
    for doc in stored_docs(store, "case-a"):
        assert doc.partition == "case-a"
        assert doc.body["caseId"] == "case-a"

    with pytest.raises(WorkflowCheckpointException):
        asyncio.run(a.load(ids_b[0]))
    assert asyncio.run(a.delete(ids_b[0])) is False
    assert asyncio.run(b.load(ids_b[0])).checkpoint_id == ids_b[0]
    assert a.prune(0) == 3
    assert asyncio.run(b.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)) == ids_b


# --- refusing at save time ------------------------------------------------------------------------


def pause_checkpoint(store: DocumentStore) -> WorkflowCheckpoint:
    """A real pause checkpoint (a CaseNote in state, an ApprovalRequest pending), from a scratch case."""
    scratch = CaseCheckpointStorage(store, "scratch", ALL_TYPES)
    run_to_pause(scratch)
    checkpoint = asyncio.run(scratch.get_latest(workflow_name=WORKFLOW_NAME))
    assert checkpoint is not None
    return checkpoint


def test_save_refuses_a_type_missing_from_the_allow_list_and_writes_nothing(store: DocumentStore) -> None:
    checkpoint = pause_checkpoint(store)
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES - {type_key(CaseNote)})
    with pytest.raises(WorkflowCheckpointException, match=r"'tests\.support\.tiny_workflow:CaseNote'") as caught:
        asyncio.run(storage.save(checkpoint))
    assert "refusing to save" in str(caught.value)
    assert stored_docs(store, "case-1") == []  # not even the sequence counter moved


def test_save_refusal_names_every_type_that_would_not_load(store: DocumentStore) -> None:
    checkpoint = pause_checkpoint(store)
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES - {type_key(CaseNote), type_key(ApprovalRequest)})
    with pytest.raises(WorkflowCheckpointException) as caught:
        asyncio.run(storage.save(checkpoint))
    assert type_key(CaseNote) in str(caught.value)
    assert type_key(ApprovalRequest) in str(caught.value)
    assert stored_docs(store, "case-1") == []


def test_a_type_registered_process_wide_is_allowed(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    with pytest.raises(WorkflowCheckpointException, match="RegisteredOnly"):
        asyncio.run(storage.save(synthetic(1, extra=RegisteredOnly(7))))
    register_checkpoint_type(RegisteredOnly)
    try:
        asyncio.run(storage.save(synthetic(1, extra=RegisteredOnly(7))))
        assert asyncio.run(storage.load("cp-1")).state["extra"] == RegisteredOnly(7)
    finally:
        # Registration is process-wide and has no public undo; keep other tests unaffected.
        _checkpoint_encoding._REGISTERED_CHECKPOINT_TYPE_KEYS.discard(type_key(RegisteredOnly))


def test_save_refuses_a_checkpoint_too_big_for_a_cosmos_document(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    with pytest.raises(WorkflowCheckpointException, match="over the 1,500,000-byte limit"):
        asyncio.run(storage.save(synthetic(1, blob="x" * 1_600_000)))
    assert stored_docs(store, "case-1") == []
    asyncio.run(storage.save(synthetic(2, blob="x" * 100_000)))  # big but fine
    assert storage.latest_record(WORKFLOW_NAME) is not None


def test_saving_the_same_checkpoint_twice_is_a_no_op_but_a_different_one_under_its_id_is_refused(
    store: DocumentStore,
) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    checkpoint = synthetic(1, note=CaseNote("case-1", "a"))
    assert asyncio.run(storage.save(checkpoint)) == "cp-1"
    assert asyncio.run(storage.save(checkpoint)) == "cp-1"
    assert len(storage.records()) == 1
    with pytest.raises(WorkflowCheckpointException, match="already exists"):
        asyncio.run(storage.save(synthetic(1, note=CaseNote("case-1", "b"))))
    assert asyncio.run(storage.load("cp-1")).state["note"].text == "a"


def test_save_refuses_ids_the_store_cannot_hold(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    for bad in ("a/b", SEQUENCE_DOC_ID, ""):
        checkpoint = synthetic(1)
        checkpoint.checkpoint_id = bad
        with pytest.raises(WorkflowCheckpointException, match="cannot be stored"):
            asyncio.run(storage.save(checkpoint))


# --- pause and resume -----------------------------------------------------------------------------


def test_pause_and_resume_across_two_fresh_workflows(store: DocumentStore) -> None:
    first = build_workflow()
    result = wait(
        first.run(CaseStarted("case-1"), checkpoint_storage=CaseCheckpointStorage(store, "case-1", ALL_TYPES))
    )
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    [request] = result.get_request_info_events()
    assert request.request_id == request_id_for("case-1")
    del first, result  # the process that paused is gone

    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)  # a new process: new storage, new workflow
    second = build_workflow()
    record = storage.latest_record(WORKFLOW_NAME)
    assert record is not None
    assert record.pending_request_ids == (request.request_id,)
    paused = storage.try_decode(record, expected_graph_hash=second.graph_signature_hash)
    assert paused.checkpoint_id == record.checkpoint_id

    resumed = wait(
        second.run(
            checkpoint_id=record.checkpoint_id,
            responses={request.request_id: Decision(approved=True, reviewer="alice")},
            checkpoint_storage=storage,
        )
    )
    assert resumed.get_final_state() == WorkflowRunState.IDLE
    assert resumed.get_outputs() == ["committed: case-1 approved by alice; note=intake saw case-1"]

    records = storage.records(WORKFLOW_NAME)
    assert [r.seq for r in records] == sorted(r.seq for r in records)
    after = [r for r in records if r.seq > record.seq]
    assert after, "the resumed run saved checkpoints"
    assert after[0].iteration == record.iteration  # the response-entry checkpoint repeats the iteration
    assert after[0].previous_checkpoint_id == record.checkpoint_id
    latest = asyncio.run(storage.get_latest(workflow_name=WORKFLOW_NAME))
    assert latest is not None
    assert latest.checkpoint_id == records[-1].checkpoint_id
    assert latest.pending_request_info_events == {}


# --- try_decode ------------------------------------------------------------------------------------


def test_try_decode_reports_a_corrupted_document_as_unusable(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    run_to_pause(storage)
    record = storage.latest_record(WORKFLOW_NAME)
    assert record is not None
    doc = store.read(CHECKPOINTS, "case-1", record.checkpoint_id)
    assert doc is not None
    encoded = {**json.loads(doc.body["encoded"]), "state": {"__pickled__": "!!!", "__type__": "x:Y"}}
    broken = {**doc.body, "encoded": json.dumps(encoded)}
    store.replace(CHECKPOINTS, "case-1", record.checkpoint_id, broken, etag=doc.etag)

    same = storage.latest_record(WORKFLOW_NAME)  # metadata still reads: nothing is decoded
    assert same is not None
    assert same.checkpoint_id == record.checkpoint_id
    with pytest.raises(CheckpointUnusable) as caught:
        storage.try_decode(same)
    assert caught.value.kind == "undecodable"
    assert caught.value.case_id == "case-1"
    assert caught.value.checkpoint_id == record.checkpoint_id
    assert caught.value.reason
    with pytest.raises(WorkflowCheckpointException):
        asyncio.run(storage.load(record.checkpoint_id))
    with pytest.raises(WorkflowCheckpointException):
        asyncio.run(storage.get_latest(workflow_name=WORKFLOW_NAME))  # never silently an older one
    assert record.checkpoint_id not in asyncio.run(storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME))


def test_try_decode_reports_a_type_this_build_no_longer_allows(store: DocumentStore) -> None:
    run_to_pause(CaseCheckpointStorage(store, "case-1", ALL_TYPES))
    new_build = CaseCheckpointStorage(store, "case-1", ALL_TYPES - {type_key(CaseNote)})
    record = new_build.latest_record(WORKFLOW_NAME)
    assert record is not None
    # The checkpoint's stored schemas name the type: refused as a changed state type, before anything is
    # unpickled (and without the alert a planted, unlisted type raises).
    with pytest.raises(CheckpointUnusable, match=r"tests\.support\.tiny_workflow:CaseNote") as caught:
        new_build.try_decode(record)
    assert caught.value.kind == "schema_changed"
    # A checkpoint document without its schemas is malformed: refused before anything is unpickled.
    doc = store.read(CHECKPOINTS, "case-1", record.checkpoint_id)
    assert doc is not None
    body = {k: v for k, v in doc.body.items() if k != "stateSchemas"}
    store.replace(CHECKPOINTS, "case-1", record.checkpoint_id, body, etag=doc.etag)
    with pytest.raises(CheckpointUnusable, match="stores no state schemas") as caught:
        new_build.try_decode(record)
    assert caught.value.kind == "schema_changed"


def test_try_decode_reports_a_changed_graph_and_a_missing_document(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    workflow = run_to_pause(storage)
    record = storage.latest_record(WORKFLOW_NAME)
    assert record is not None
    assert storage.try_decode(record, expected_graph_hash=workflow.graph_signature_hash).checkpoint_id == (
        record.checkpoint_id
    )
    with pytest.raises(CheckpointUnusable) as changed:
        storage.try_decode(record, expected_graph_hash="another-build")
    assert changed.value.kind == "graph_changed"

    assert asyncio.run(storage.delete(record.checkpoint_id)) is True
    assert asyncio.run(storage.delete(record.checkpoint_id)) is False
    with pytest.raises(CheckpointUnusable) as missing:
        storage.try_decode(record)
    assert missing.value.kind == "missing"
    with pytest.raises(ValueError, match="case"):
        CaseCheckpointStorage(store, "case-2", ALL_TYPES).try_decode(record)


# --- prune -----------------------------------------------------------------------------------------


def test_prune_keeps_the_newest_and_later_saves_still_sort_last(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    for n in range(5):
        asyncio.run(storage.save(synthetic(n)))

    assert storage.prune(2) == 3
    assert [r.checkpoint_id for r in storage.records()] == ["cp-3", "cp-4"]
    assert storage.prune(2) == 0
    asyncio.run(storage.save(synthetic(5)))
    record = storage.latest_record(WORKFLOW_NAME)
    assert record is not None
    assert record.checkpoint_id == "cp-5"
    assert record.seq == 6

    assert storage.prune(0) == 3
    assert storage.records() == []
    assert stored_docs(store, "case-1") == []  # no counter document: numbers come from what was read
    asyncio.run(storage.save(synthetic(6)))
    assert [r.seq for r in storage.records()] == [7]
    with pytest.raises(ValueError, match="non-negative"):
        storage.prune(-1)


def test_constructor_rejects_a_lone_string_allow_list(store: DocumentStore) -> None:
    with pytest.raises(TypeError):
        CaseCheckpointStorage(store, "case-1", "tests.support.tiny_workflow:CaseNote")
    with pytest.raises(ValueError, match="case_id"):
        CaseCheckpointStorage(store, "", ALL_TYPES)


def test_a_new_storage_numbers_its_saves_after_what_is_stored(store: DocumentStore) -> None:
    """Another event (another process) numbers its saves after the case's stored checkpoints, whether it
    read them first (as the worker does) or not (it reads them once, when it saves)."""
    first = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    for n in range(3):
        asyncio.run(first.save(synthetic(n)))
    reader = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    assert reader.latest_record(WORKFLOW_NAME) is not None
    asyncio.run(reader.save(synthetic(3)))
    blind = CaseCheckpointStorage(store, "case-1", ALL_TYPES)
    asyncio.run(blind.save(synthetic(4)))
    assert [(r.checkpoint_id, r.seq) for r in first.records()] == [(f"cp-{n}", n + 1) for n in range(5)]
