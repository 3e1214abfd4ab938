"""One run's checkpoints: written where they save work, not after every superstep (rule R9).

Agent Framework saves a checkpoint after every superstep: five or six per invoice, each a sequence
allocation and a document create, while the case document and the effect ledger already hold every fact
and decision (R9). A checkpoint only saves work in three places, and :class:`RunCheckpoints` writes it
there and nowhere else:

==========================================  ================================================================
checkpoint                                  why it is written
==========================================  ================================================================
a run paused for a person (pending          the run resumes from it when the answer comes, perhaps days later
request)                                    (R6, R8)
the superstep after a model call            a crash after it resumes without asking the model again
(the ``propose`` step, with a model)
the last one of the run, when the case      it supersedes them: the next event reads the newest to tell a
holds older checkpoints                     finished run from an interrupted or paused one, and the timer's
                                            lagging-runs check (R7) finds the run's commit covered by it
==========================================  ================================================================

Every other checkpoint is held in memory (the newest replaces the one before) and written by
:meth:`RunCheckpoints.finish` when the run ends, unless the case holds no checkpoint at all (the storage
read them and found none, or the event has just created the case: ``CaseCheckpointStorage.assume_empty``).
Then nobody would resume it and nothing older needs superseding, so a run that ends writes none; a run
that pauses for a person always writes its pause. A crash before the end loses only work the case document
already shows: the event is redelivered and decides again from the case and the ledger, whose effects
replay (R2). A deferred save that fails is reported exactly as the framework reports its own failed saves,
so the capture (:mod:`casekeeper.capture`) records it and the timer alerts (R7, F7). The save-time
check that a checkpoint loads back under the allow-list runs on every checkpoint that is written.
"""

from __future__ import annotations

import asyncio
import logging

from agent_framework import WorkflowCheckpoint

from casekeeper import DocumentStore
from casekeeper.capture import report_failed_save
from casekeeper.checkpoints import CaseCheckpointStorage
from shared.workflow import run_marker

log = logging.getLogger("casekeeper.checkpoints")

MODEL_STEP = "propose"
"""The executor whose output follows a model call (``shared.workflow.executors.Propose``)."""


class RunCheckpoints:
    """A ``CheckpointStorage`` for one run of one case, over its :class:`CaseCheckpointStorage`.

    ``model_calls``: whether the run's proposer is a model (then the checkpoint after its step is worth
    a write). Pass a fresh instance per run and call :meth:`finish` when the run returns.
    """

    def __init__(
        self,
        storage: CaseCheckpointStorage,
        *,
        model_calls: bool,
        store: DocumentStore | None = None,
        resumed: bool = False,
    ) -> None:
        """``store`` (the storage's): keep the case's in-flight mark (:mod:`shared.workflow.run_marker`);
        ``resumed``: this run resumes a checkpoint, so its case may be marked."""
        self._storage = storage
        self._model_calls = model_calls
        self._store = store
        self._may_be_marked = resumed
        self._held: WorkflowCheckpoint | None = None
        self._last_written: str | None = None
        self.written = 0
        """How many checkpoints this run wrote (for tests and the benchmark)."""
        self.skipped = False
        """Whether :meth:`finish` left the run's last checkpoint unwritten (the case holds none)."""

    @property
    def storage(self) -> CaseCheckpointStorage:
        return self._storage

    def _worth_writing(self, checkpoint: WorkflowCheckpoint) -> bool:
        if checkpoint.pending_request_info_events:
            return True
        return self._model_calls and bool(checkpoint.messages.get(MODEL_STEP))

    # --- the CheckpointStorage protocol ---------------------------------------------------------

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        if not self._worth_writing(checkpoint):
            self._held = checkpoint
            return checkpoint.checkpoint_id
        self._held = None
        if self._store is not None:  # marked before it is written: no checkpoint in flight is unmarked
            await asyncio.to_thread(run_marker.mark, self._store, self._storage.case_id, checkpoint.checkpoint_id)
            self._may_be_marked = True
        checkpoint_id = await self._storage.save(checkpoint)
        self._last_written = checkpoint_id
        self.written += 1
        return checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        if self._held is not None and self._held.checkpoint_id == checkpoint_id:
            return self._held
        return await self._storage.load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        stored = await self._storage.list_checkpoints(workflow_name=workflow_name)
        held = self._held if self._held is not None and self._held.workflow_name == workflow_name else None
        return [*stored, held] if held is not None else stored

    async def delete(self, checkpoint_id: str) -> bool:
        if self._held is not None and self._held.checkpoint_id == checkpoint_id:
            self._held = None
            return True
        return await self._storage.delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        if self._held is not None and self._held.workflow_name == workflow_name:
            return self._held
        return await self._storage.get_latest(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return [cp.checkpoint_id for cp in await self.list_checkpoints(workflow_name=workflow_name)]

    # --- the end of the run ---------------------------------------------------------------------

    async def finish(self) -> None:
        """Write the run's last checkpoint if it is still held and the case holds older checkpoints it must
        supersede (a case that holds none gets none: see the module docstring). A failure is reported as a
        failed save (captured, alerted by the timer), never raised: the run's decision is already in the store."""
        held, self._held = self._held, None
        if held is None:
            return
        if self._storage.holds_none and not held.pending_request_info_events:
            # A finished run's checkpoint is resumed by nobody; it is written only to supersede older ones.
            self.skipped = True
            return
        try:
            self._last_written = await self._storage.save(held)
        except Exception as exc:  # reported, never raised, as the framework does with its own saves
            report_failed_save(held.iteration_count, exc, self._last_written or held.previous_checkpoint_id)
            return
        self.written += 1
        if self._store is not None and self._may_be_marked:  # the run ended with a finished checkpoint
            await asyncio.to_thread(run_marker.unmark, self._store, self._storage.case_id)
