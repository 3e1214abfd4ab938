"""The mark a run leaves on its case while a deploy could strand it (rule R8), so that ``drain check`` asks
an indexed question ("which cases have such a run?") instead of reading every case's checkpoints.

A run is marked when it writes a checkpoint mid-run (:class:`~shared.workflow.run_checkpoints.RunCheckpoints`
writes one only when the run pauses for a person or has just asked a model): before that checkpoint is
written, so a checkpoint in flight never exists unmarked. The mark is taken off when a run ends with a
finished checkpoint and knows that its case may be marked (it marked the case, or it resumed a checkpoint).

The mark is one small document per case in the ``checkpoints`` container (partition = case id, id
:data:`MARKER_ID`, ``kind`` :data:`KIND_RUN_MARKER`), not a field of the case document: every case commit is
conditional on the case's ETag, and a write to the case in the middle of a run would make the run's own
commit lose. A mark may outlive its run (a paused run abandoned when a new fact starts another run, or a
failed removal): the drain check judges the case's newest checkpoint anyway, reports nothing for it and
removes the mark (conditionally on its ETag, so a run that marked the case again meanwhile keeps its own).
"""

from __future__ import annotations

import logging

from casekeeper import DocumentStore
from casekeeper.checkpoints import CHECKPOINTS

log = logging.getLogger("casekeeper.checkpoints")

KIND_RUN_MARKER = "runInFlight"
MARKER_ID = "run-in-flight"
"""Never a checkpoint id: the framework's checkpoint ids are UUIDs."""


def mark(store: DocumentStore, case_id: str, checkpoint_id: str) -> None:
    """Mark ``case_id``: its run is about to write checkpoint ``checkpoint_id`` mid-run. Raises what the store
    raises (the checkpoint is then not written either)."""
    body = {"id": MARKER_ID, "caseId": case_id, "kind": KIND_RUN_MARKER, "checkpointId": checkpoint_id}
    store.upsert(CHECKPOINTS, case_id, MARKER_ID, body)


def unmark(store: DocumentStore, case_id: str) -> None:
    """Take the mark off ``case_id`` (its run finished). A failure is logged, never raised: the run's decision
    is in the store, and a stale mark only costs the drain check a read."""
    try:
        store.delete(CHECKPOINTS, case_id, MARKER_ID)
    except Exception:
        log.warning("could not take the in-flight mark off case %s; drain check will read it", case_id, exc_info=True)
