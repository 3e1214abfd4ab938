"""One run's checkpoints: written where they save work, not after every superstep (rule R9).

Agent Framework saves a checkpoint after every superstep, while the case and the effect ledger already hold
every fact and decision: a run decides from the case, never from a checkpoint. A checkpoint saves work in a
few places only, and :class:`RunCheckpoints` writes it there and nowhere else:

==========================================  ================================================================
checkpoint                                  why it is written
==========================================  ================================================================
a run paused for a person (pending          the run resumes from it when the answer comes, perhaps days later
request)
a superstep :meth:`~RunCheckpoints.worth`   your choice: e.g. the one after a model call, so that a crash
picks                                       after it resumes without asking the model again
the run's end, when the case holds          it supersedes them: the newest checkpoint tells a finished run
older checkpoints                           from an interrupted or paused one
==========================================  ================================================================

Every other checkpoint is held in memory (the newest replaces the one before) and written by
:meth:`RunCheckpoints.finish` when the run ends, unless the case holds no checkpoint at all (the storage
read them, at the latest then, and found none, or was told so with ``CaseCheckpointStorage.assume_empty``
because the caller has just created the case): then nobody would resume it and nothing older needs
superseding, so a run that ends writes none. A crash before the end loses only work the case already shows:
the event is handled again, decides again from the case and the ledger, and its effects replay. A deferred
save that fails is reported exactly as the framework reports its own failed saves, so the capture
(:mod:`casekeeper.capture`) records it (rule R7).

Use::

    saves = RunCheckpoints(CaseCheckpointStorage(store, case_id, checkpoint_types(MyMessage, ...)))
    result = await workflow.run(message, checkpoint_storage=saves)
    await saves.finish()
"""

from __future__ import annotations

import asyncio

from agent_framework import WorkflowCheckpoint

from casekeeper.capture import report_failed_save
from casekeeper.checkpoints import CaseCheckpointStorage


class RunCheckpoints:
    """A ``CheckpointStorage`` for one run of one case, over its :class:`CaseCheckpointStorage`.

    Pass a fresh instance per run and call :meth:`finish` when the run returns. Override :meth:`worth` to
    write more supersteps at once, :meth:`before_write` to act before a mid-run checkpoint is written, and
    :meth:`after_end` to act once the run's end is written."""

    def __init__(self, storage: CaseCheckpointStorage) -> None:
        self._storage = storage
        self._held: WorkflowCheckpoint | None = None
        self._last_written: str | None = None
        self.written = 0
        """How many checkpoints this run wrote."""
        self.skipped = False
        """Whether :meth:`finish` left the run's end unwritten (the case holds no checkpoint)."""

    @property
    def storage(self) -> CaseCheckpointStorage:
        """The case's storage the checkpoints are written to."""
        return self._storage

    def worth(self, checkpoint: WorkflowCheckpoint) -> bool:
        """Whether ``checkpoint`` is written at once: a pause for a person always is."""
        return bool(checkpoint.pending_request_info_events)

    async def before_write(self, checkpoint: WorkflowCheckpoint) -> None:
        """Called before a checkpoint :meth:`worth` picked is written; what it raises fails the save."""

    async def after_end(self) -> None:
        """Called once the run's end is written (not when it is skipped or its save failed)."""

    # --- the CheckpointStorage protocol ---------------------------------------------------------

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        """Write ``checkpoint`` now if :meth:`worth` says so; otherwise hold it until :meth:`finish`."""
        if not self.worth(checkpoint):
            self._held = checkpoint
            return checkpoint.checkpoint_id
        self._held = None
        await self.before_write(checkpoint)
        checkpoint_id = await self._storage.save(checkpoint)
        self._last_written = checkpoint_id
        self.written += 1
        return checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """The held checkpoint with this id, or the stored one."""
        if self._held is not None and self._held.checkpoint_id == checkpoint_id:
            return self._held
        return await self._storage.load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """The stored checkpoints of ``workflow_name``, then the held one."""
        stored = await self._storage.list_checkpoints(workflow_name=workflow_name)
        held = self._held if self._held is not None and self._held.workflow_name == workflow_name else None
        return [*stored, held] if held is not None else stored

    async def delete(self, checkpoint_id: str) -> bool:
        """Drop the held checkpoint with this id, or delete the stored one."""
        if self._held is not None and self._held.checkpoint_id == checkpoint_id:
            self._held = None
            return True
        return await self._storage.delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """The held checkpoint of ``workflow_name``, else the newest stored one."""
        if self._held is not None and self._held.workflow_name == workflow_name:
            return self._held
        return await self._storage.get_latest(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        """Ids of :meth:`list_checkpoints`, oldest first."""
        return [cp.checkpoint_id for cp in await self.list_checkpoints(workflow_name=workflow_name)]

    # --- the end of the run ---------------------------------------------------------------------

    async def finish(self) -> None:
        """Write the run's last checkpoint if it is still held and the case holds older checkpoints it must
        supersede (a case that holds none gets none). A failure is reported as a failed save (captured),
        never raised: the run's decision is already in the store."""
        held, self._held = self._held, None
        if held is None:
            return
        if self._storage.stored_count is None:
            # Learn whether there is anything to supersede: the read the save would make to number it anyway.
            await asyncio.to_thread(self._storage.records)
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
        await self.after_end()
