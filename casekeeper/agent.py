"""Agent Framework pieces for any workflow: per-record checkpoints (R7, R8, R9), usable from your executors.

- :class:`RecordCheckpoints`: a ``CheckpointStorage`` holding one record's checkpoints (container
  ``checkpoints``, partition = record id). Pass a new one per run: ``workflow.run(msg,
  checkpoint_storage=RecordCheckpoints(store, record_id, checkpoint_types(MyMessage, ...)))``.
- :class:`RunCheckpoints`: one run's ``CheckpointStorage`` over a :class:`RecordCheckpoints`, writing only
  where a checkpoint saves work (a pause for a person; the run's end only when the record holds older
  checkpoints, which it supersedes): ``saves = RunCheckpoints(RecordCheckpoints(...))``, pass ``saves`` to
  ``workflow.run`` and ``await saves.finish()`` after it.
- :func:`checkpoint_types`: the allow-list of your own types that checkpoints may hold.
- :func:`capture_failures` / :func:`capturing`: Agent Framework does not fail a run whose checkpoint save
  failed (it logs one warning); these record each failure durably (container ``health``) and tell the run.
- :func:`resumable`: the newest checkpoint of the record that this build can resume, or ``None`` when
  there is none worth resuming or it cannot be used (graph changed, a type no longer loads): then rebuild
  the run from the record, which is the truth (rule R9); the record gets a note saying so, once.

Differences from Agent Framework's own storages, on purpose (the rest of the ``CheckpointStorage``
contract holds on every store, numbers included: an integer beyond 2^53 and ``2.0`` come back exactly from
Cosmos DB too, whose JSON numbers are doubles; see ``tests/casekeeper/test_agent.py``):

- **save refuses what would not load back**: a type outside the allow-list, NaN or infinity (JSON has no
  such numbers; the message names where they sit), a document over 1.5 MB. The refusal is what a failed
  save is: captured (R7), never silent.
- **a different checkpoint under an existing id is refused**, not overwritten (the very same one is a no-op).
- **a damaged newest checkpoint raises** from ``get_latest`` instead of falling back to an older one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from agent_framework import WorkflowCheckpoint

from casekeeper.capture import (
    CheckpointFailure,
    RunCapture,
    capturing,
    failures_since,
    install,
    mark_alerted,
)
from casekeeper.checkpoints import CaseCheckpointStorage, CheckpointRecord, CheckpointUnusable, type_key
from casekeeper.run_checkpoints import RunCheckpoints
from casekeeper.stores import DocumentStore

log = logging.getLogger("casekeeper.agent")


def checkpoint_types(*classes: type) -> frozenset[str]:
    """The allow-list entries (``"module:QualName"``) for ``classes``: the message and state types of your
    workflow that are not plain dicts, lists, strings, numbers or ``None``."""
    return frozenset(type_key(cls) for cls in classes)


class RecordCheckpoints(CaseCheckpointStorage):
    """Agent Framework ``CheckpointStorage`` for one record's runs, over any document store.

    ``allowed_types``: your message and state classes (or :func:`checkpoint_types` keys). Save refuses,
    with ``WorkflowCheckpointException`` and nothing written, anything that would not load back exactly
    (see the module docstring); what it saves loads back exactly, every number included. Load, list, delete
    and ``get_latest`` behave as the framework's storages do. Also offers ``records()`` and
    ``latest_record()`` (metadata without decoding), ``try_decode()`` and ``prune(keep)``."""

    def __init__(
        self,
        store: DocumentStore,
        record_id: str,
        allowed_types: Iterable[str | type] = frozenset(),
        **options: Any,
    ) -> None:
        if isinstance(allowed_types, str | type):
            raise TypeError("allowed_types must be an iterable of types or 'module:QualName' strings")
        keys = [t if isinstance(t, str) else type_key(t) for t in allowed_types]
        super().__init__(store, record_id, keys, **options)

    @property
    def record_id(self) -> str:
        """The record whose checkpoints this storage holds."""
        return self.case_id


class _Named(Protocol):
    name: str
    graph_signature_hash: str


class _Noted(Protocol):
    """Where :func:`resumable` notes a rebuilt run: ``guard.records`` (any object with these two methods)."""

    def get(self, record_id: str, /) -> Any: ...

    def note(self, record_id: str, text: str, /, **fields: Any) -> Any: ...


def capture_failures(store: DocumentStore) -> object:
    """Record every failed checkpoint save in ``store`` (container ``health``) from now on, process-wide;
    idempotent. Wrap each run in :func:`capturing` so a failure names its record."""
    return install(store)


def resumable(
    storage: CaseCheckpointStorage,
    workflow: _Named,
    *,
    records: _Noted | None = None,
) -> WorkflowCheckpoint | None:
    """The newest checkpoint of ``workflow`` for the storage's record if a run is left in it (interrupted
    mid-run, or paused on requests) and this build can resume it; ``None`` otherwise.

    A checkpoint this build cannot use (its graph hash differs from ``workflow.graph_signature_hash``, a
    type no longer loads, it was pruned) gives ``None`` too (rule R8): start a fresh run from the record.
    With ``records`` (``guard.records``) the record gets a note saying so, once per checkpoint. Store
    failures propagate (``StoreUnavailable``): retry later; do not rebuild because the store is down."""
    record = storage.latest_record(workflow.name)
    if record is None:
        return None
    try:
        checkpoint = storage.try_decode(record, expected_graph_hash=workflow.graph_signature_hash)
    except CheckpointUnusable as exc:
        log.warning(
            "record %s: checkpoint %s unusable (%s): rebuilding from the record",
            storage.case_id,
            exc.checkpoint_id,
            exc.reason,
        )
        if records is not None:
            _note_rebuilt(records, storage.case_id, exc)
        return None
    if record.pending_request_ids or any(checkpoint.messages.values()):
        return checkpoint
    return None


def _note_rebuilt(records: _Noted, record_id: str, exc: CheckpointUnusable) -> None:
    record = records.get(record_id)
    if record is None or any(n.get("checkpointId") == exc.checkpoint_id for n in record.notes):
        return
    records.note(
        record_id, "run rebuilt from the record", reason=exc.reason, checkpointId=exc.checkpoint_id, kind=exc.kind
    )


__all__ = [
    "CheckpointFailure",
    "CheckpointRecord",
    "CheckpointUnusable",
    "RecordCheckpoints",
    "RunCapture",
    "RunCheckpoints",
    "capture_failures",
    "capturing",
    "checkpoint_types",
    "failures_since",
    "mark_alerted",
    "resumable",
]
