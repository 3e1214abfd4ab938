"""Agent Framework pieces for any workflow: per-case checkpoints (R7, R8, R9), usable from your executors.

- :class:`CaseCheckpointStorage`: a ``CheckpointStorage`` holding one case's checkpoints (container
  ``checkpoints``, partition = case id). Pass a new one per run: ``workflow.run(msg,
  checkpoint_storage=CaseCheckpointStorage(store, case_id, checkpoint_types(MyMessage, ...)))``.
- :class:`RunCheckpoints`: one run's ``CheckpointStorage`` over a :class:`CaseCheckpointStorage`, writing only
  where a checkpoint saves work (a pause for a person; the run's end only when the case holds older
  checkpoints, which it supersedes): ``saves = RunCheckpoints(CaseCheckpointStorage(...))``, pass ``saves`` to
  ``workflow.run`` and ``await saves.finish()`` after it.
- :func:`checkpoint_types`: the allow-list of your own types that checkpoints may hold.
- :func:`capture_failures` / :func:`capturing`: Agent Framework does not fail a run whose checkpoint save
  failed (it logs one warning); these record each failure durably (container ``health``) and tell the run.
- :func:`resumable`: the newest checkpoint of the case that this build can resume, or ``None`` when
  there is none worth resuming or it cannot be used (graph changed, a type no longer loads): then rebuild
  the run from the case, which is the truth (rule R9); the case gets a note saying so, once.

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


class _Named(Protocol):
    name: str
    graph_signature_hash: str


class _Noted(Protocol):
    """Where :func:`resumable` notes a rebuilt run: ``guard.cases`` (any object with these two methods)."""

    def get(self, case_id: str, /) -> Any: ...

    def note(self, case_id: str, text: str, /, **fields: Any) -> Any: ...


def capture_failures(store: DocumentStore) -> object:
    """Record every failed checkpoint save in ``store`` (container ``health``) from now on, process-wide;
    idempotent. Wrap each run in :func:`capturing` so a failure names its case."""
    return install(store)


def resumable(
    storage: CaseCheckpointStorage,
    workflow: _Named,
    *,
    cases: _Noted | None = None,
) -> WorkflowCheckpoint | None:
    """The newest checkpoint of ``workflow`` for the storage's case if a run is left in it (interrupted
    mid-run, or paused on requests) and this build can resume it; ``None`` otherwise.

    A checkpoint this build cannot use (its graph hash differs from ``workflow.graph_signature_hash``, a
    type no longer loads, it was pruned) gives ``None`` too (rule R8): start a fresh run from the case.
    With ``cases`` (``guard.cases``) the case gets a note saying so, once per checkpoint. Store
    failures propagate (``StoreUnavailable``): retry later; do not rebuild because the store is down."""
    newest = storage.latest_record(workflow.name)
    if newest is None:
        return None
    try:
        checkpoint = storage.try_decode(newest, expected_graph_hash=workflow.graph_signature_hash)
    except CheckpointUnusable as exc:
        log.warning(
            "case %s: checkpoint %s unusable (%s): rebuilding from the case",
            storage.case_id,
            exc.checkpoint_id,
            exc.reason,
        )
        if cases is not None:
            _note_rebuilt(cases, storage.case_id, exc)
        return None
    if newest.pending_request_ids or any(checkpoint.messages.values()):
        return checkpoint
    return None


def _note_rebuilt(cases: _Noted, case_id: str, exc: CheckpointUnusable) -> None:
    case = cases.get(case_id)
    if case is None or any(n.get("checkpointId") == exc.checkpoint_id for n in case.notes):
        return
    cases.note(case_id, "run rebuilt from the case", reason=exc.reason, checkpointId=exc.checkpoint_id, kind=exc.kind)


__all__ = [
    "CaseCheckpointStorage",
    "CheckpointFailure",
    "CheckpointRecord",
    "CheckpointUnusable",
    "RunCapture",
    "RunCheckpoints",
    "capture_failures",
    "capturing",
    "checkpoint_types",
    "failures_since",
    "mark_alerted",
    "resumable",
]
