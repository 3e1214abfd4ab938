"""The Agent Framework pieces on both backends: the ``CheckpointStorage`` contract as the framework's own
storages keep it (numbers included: exact through a store of JSON doubles), the deliberate differences, the
rebuild path (R8) and failure capture (R7) in a user's own workflow."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Never

import pytest
from agent_framework import (
    Executor,
    FileCheckpointStorage,
    WorkflowBuilder,
    WorkflowCheckpoint,
    WorkflowContext,
    handler,
)
from agent_framework.exceptions import WorkflowCheckpointException

from casekeeper import DocumentStore, Guard, capture
from casekeeper.agent import (
    CaseCheckpointStorage,
    RunCheckpoints,
    capture_failures,
    capturing,
    checkpoint_types,
    failures_since,
    resumable,
)

NAME = "user-workflow"


def cp(state: dict[str, Any] | None = None, *, name: str = NAME, graph: str = "g1", **kw: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name=name, graph_signature_hash=graph, state=state or {}, **kw)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- the framework's CheckpointStorage contract: as its own FileCheckpointStorage keeps it, so do ours ---------

# Numbers a store that keeps JSON numbers as IEEE doubles (Cosmos DB) would change if they were stored as JSON
# numbers: an integer beyond 2^53 comes back rounded (2^60 + 1 as 1152921504606847000), an integral float as an
# int (2.0 as 2). The rest are numbers at the edges that a careless encoding could also lose.
EXACT_STATE: dict[str, Any] = {
    "big": 2**60 + 1,
    "negative_big": -(2**60) - 1,
    "huge": 10**40 + 7,
    "two": 2.0,
    "float_beyond_2^53": float(2**60),
    "nested": [1, {"deep": 10.0, "list": [2**53 + 1, -3.0]}],
    "max_exact": 2**53,
    "ratio": 0.1,
    "smallest": 5e-324,
    "negative_zero": -0.0,
    "flag": True,
    "nothing": None,
}


def same_numbers(got: Any, want: Any) -> bool:
    """Equal, of the same types all the way down, and -0.0 keeps its sign."""
    if type(got) is not type(want):
        return False
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(same_numbers(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return len(got) == len(want) and all(same_numbers(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, float):
        return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)
    return bool(got == want)


Fresh = Callable[[], Any]
"""A new storage instance over the same stored checkpoints: what it gives back was read from the store."""


def at(second: int) -> str:
    return f"2026-12-05T10:00:{second:02d}+00:00"


def saves_and_loads_the_same_checkpoint(fresh: Fresh) -> None:
    saved = cp({"n": 1, "text": "x", "nested": {"list": [1, "a", None, True]}, "ratio": 0.25})
    assert run(fresh().save(saved)) == saved.checkpoint_id
    assert run(fresh().load(saved.checkpoint_id)).to_dict() == saved.to_dict()


def gives_every_number_back_exactly(fresh: Fresh) -> None:
    saved = cp(dict(EXACT_STATE))
    run(fresh().save(saved))
    assert same_numbers(run(fresh().load(saved.checkpoint_id)).state, EXACT_STATE)
    latest = run(fresh().get_latest(workflow_name=NAME))
    assert latest is not None and same_numbers(latest.state, EXACT_STATE)
    [listed] = run(fresh().list_checkpoints(workflow_name=NAME))
    assert same_numbers(listed.state, EXACT_STATE)


def lists_and_finds_the_latest_per_workflow_name(fresh: Fresh) -> None:
    first, second = cp({"i": 1}, timestamp=at(1)), cp({"i": 2}, timestamp=at(2))
    other = cp({"i": 3}, name="other", timestamp=at(3))
    for checkpoint in (first, second, other):
        run(fresh().save(checkpoint))
    listed = run(fresh().list_checkpoints(workflow_name=NAME))
    assert {c.checkpoint_id for c in listed} == {first.checkpoint_id, second.checkpoint_id}
    assert run(fresh().list_checkpoint_ids(workflow_name="other")) == [other.checkpoint_id]
    assert run(fresh().get_latest(workflow_name=NAME)).checkpoint_id == second.checkpoint_id
    assert run(fresh().get_latest(workflow_name="none")) is None


def deletes_once_and_a_missing_one_does_not_load(fresh: Fresh) -> None:
    saved = cp()
    run(fresh().save(saved))
    assert run(fresh().delete(saved.checkpoint_id)) is True
    assert run(fresh().delete(saved.checkpoint_id)) is False
    with pytest.raises(WorkflowCheckpointException):
        run(fresh().load(saved.checkpoint_id))


CONTRACT = {
    f.__name__: f
    for f in (
        saves_and_loads_the_same_checkpoint,
        gives_every_number_back_exactly,
        lists_and_finds_the_latest_per_workflow_name,
        deletes_once_and_a_missing_one_does_not_load,
    )
}


class WriteEvery(RunCheckpoints):
    """A run's storage that writes every checkpoint at once, so that each passes through to the store."""

    def worth(self, checkpoint: WorkflowCheckpoint) -> bool:
        return True


STORAGES: dict[str, Callable[[DocumentStore], Any]] = {
    "CaseCheckpointStorage": lambda store: CaseCheckpointStorage(store, "r1"),
    "RunCheckpoints": lambda store: WriteEvery(CaseCheckpointStorage(store, "r1")),
}


@pytest.mark.parametrize("behaviour", CONTRACT.values(), ids=CONTRACT.keys())
def test_the_framework_s_own_storage_keeps_the_contract(tmp_path: Path, behaviour: Callable[[Fresh], None]) -> None:
    """The reference: what Agent Framework's own storage does, over JSON files."""
    behaviour(lambda: FileCheckpointStorage(tmp_path))


@pytest.mark.parametrize("behaviour", CONTRACT.values(), ids=CONTRACT.keys())
@pytest.mark.parametrize("make", STORAGES.values(), ids=STORAGES.keys())
def test_every_storage_of_ours_keeps_the_contract_through_the_store(
    store: DocumentStore, make: Callable[[DocumentStore], Any], behaviour: Callable[[Fresh], None]
) -> None:
    behaviour(lambda: make(store))


# --- what ours promise beyond it ---------------------------------------------------------------------------


def test_list_is_oldest_first_in_save_order_whatever_the_timestamps(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "r1")
    first, second = cp({"i": 1}, timestamp=at(9)), cp({"i": 2}, timestamp=at(1))
    for checkpoint in (first, second):
        run(storage.save(checkpoint))
    assert run(storage.list_checkpoint_ids(workflow_name=NAME)) == [first.checkpoint_id, second.checkpoint_id]
    assert run(storage.get_latest(workflow_name=NAME)).checkpoint_id == second.checkpoint_id


def test_cases_keep_their_own_checkpoints(store: DocumentStore) -> None:
    one, two = CaseCheckpointStorage(store, "r1"), CaseCheckpointStorage(store, "r2")
    run(one.save(cp({"who": 1})))
    assert run(two.list_checkpoints(workflow_name=NAME)) == []


@pytest.mark.parametrize("make", STORAGES.values(), ids=STORAGES.keys())
def test_saving_the_very_same_checkpoint_again_is_a_no_op(
    store: DocumentStore, make: Callable[[DocumentStore], Any]
) -> None:
    saved = cp(dict(EXACT_STATE))
    run(make(store).save(saved))
    assert run(make(store).save(saved)) == saved.checkpoint_id  # the stored text compares equal
    assert len(CaseCheckpointStorage(store, "r1").records()) == 1


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("make", STORAGES.values(), ids=STORAGES.keys())
def test_a_number_json_cannot_carry_is_refused_at_save_naming_it(
    store: DocumentStore, make: Callable[[DocumentStore], Any], value: float
) -> None:
    storage = make(store)
    with pytest.raises(WorkflowCheckpointException, match=rf"\$\.state\.value = {value!r}: JSON has no such number"):
        run(storage.save(cp({"value": value})))
    assert CaseCheckpointStorage(store, "r1").records() == []  # nothing written


def test_a_different_checkpoint_under_an_existing_id_is_refused_and_the_same_one_is_a_no_op(
    store: DocumentStore,
) -> None:
    storage = CaseCheckpointStorage(store, "r1")
    saved = cp({"i": 1})
    run(storage.save(saved))
    run(storage.save(saved))
    with pytest.raises(WorkflowCheckpointException, match="different content"):
        run(storage.save(cp({"i": 2}, checkpoint_id=saved.checkpoint_id)))


# --- in a user's own workflow: allow-list, capture (R7), rebuild (R8) ---------------------------------------


@dataclass
class Ask:
    case_id: str


@dataclass
class Done:
    case_id: str


class Start(Executor):
    @handler
    async def on_ask(self, msg: Ask, ctx: WorkflowContext[Done]) -> None:
        await ctx.send_message(Done(msg.case_id))


class Finish(Executor):
    @handler
    async def on_done(self, msg: Done, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(msg.case_id)


def build(finish_id: str = "finish") -> Any:
    start = Start(id="start")
    return WorkflowBuilder(name=NAME, start_executor=start).add_edge(start, Finish(id=finish_id)).build()


@pytest.fixture
def captured(store: DocumentStore) -> Iterator[DocumentStore]:
    capture_failures(store)
    yield store
    capture.uninstall()


def test_a_type_outside_the_allow_list_fails_the_save_loudly_not_the_run(captured: DocumentStore) -> None:
    storage = CaseCheckpointStorage(captured, "r1", [Ask])  # Done is missing from the allow-list
    with capturing("r1", NAME) as run_capture:
        result = run(build().run(Ask("r1"), checkpoint_storage=storage))
    assert result.get_outputs() == ["r1"]  # the framework carries on
    assert run_capture.failures and "Done" in run_capture.failures[0].error_message
    assert [f.case_id for f in failures_since(captured, None)] == ["r1"] * len(run_capture.failures)


def test_with_the_allow_list_complete_every_save_lands(captured: DocumentStore) -> None:
    storage = CaseCheckpointStorage(captured, "r1", checkpoint_types(Ask, Done))
    with capturing("r1", NAME) as run_capture:
        run(build().run(Ask("r1"), checkpoint_storage=storage))
    assert run_capture.failures == []
    assert storage.records(NAME)


def test_a_checkpoint_of_another_graph_is_not_resumed_and_the_case_says_it_is_rebuilt(
    store: DocumentStore, caplog: pytest.LogCaptureFixture
) -> None:
    guard = Guard(store)
    guard.create("r1", {})
    storage = CaseCheckpointStorage(store, "r1", [Ask, Done])
    old = build()
    # A run left mid-way: its newest checkpoint still holds a message to deliver.
    pending = cp(graph=old.graph_signature_hash, messages={"start": []}, iteration_count=1)
    run(storage.save(pending))
    assert resumable(storage, old, cases=guard.cases) is None  # no message waiting: nothing to resume
    changed = build(finish_id="finish-v2")
    assert changed.graph_signature_hash != old.graph_signature_hash
    with caplog.at_level(logging.WARNING):
        assert resumable(storage, changed, cases=guard.cases) is None
        assert resumable(storage, changed, cases=guard.cases) is None
    case = guard.get("r1")
    assert case is not None
    notes = [n for n in case.notes if n.get("kind") == "graph_changed"]
    assert len(notes) == 1 and notes[0]["checkpointId"] == pending.checkpoint_id


def test_a_run_interrupted_mid_way_is_resumable_on_the_same_graph(store: DocumentStore) -> None:
    storage = CaseCheckpointStorage(store, "r1", [Ask, Done])
    workflow = build()
    run(workflow.run(Ask("r1"), checkpoint_storage=storage))
    assert resumable(storage, build()) is None  # the run finished: nothing to resume
    # Keep only the checkpoints up to the one that still holds the Done message: as if the process died next.
    records = storage.records(NAME)
    interrupted = next(r for r in records if any(run(storage.load(r.checkpoint_id)).messages.values()))
    for later in records[records.index(interrupted) + 1 :]:
        run(storage.delete(later.checkpoint_id))
    resumed_from = resumable(storage, build())
    assert resumed_from is not None and resumed_from.checkpoint_id == interrupted.checkpoint_id
    result = run(build().run(checkpoint_id=resumed_from.checkpoint_id, checkpoint_storage=storage))
    assert result.get_outputs() == ["r1"]
