"""The invoice run's checkpoints: :class:`casekeeper.run_checkpoints.RunCheckpoints` with the model step and the
in-flight mark (rules R8, R9).

The guard package's run storage writes a checkpoint only where it saves work: a pause for a person, at once;
the run's end, only when the case holds older checkpoints it supersedes (a case that holds none, such as one
the event has just created, gets none; nobody would resume it). The invoice run adds:

- the superstep after a model call (the ``propose`` step, with a model proposer), written at once, so that a
  crash after it resumes without asking the model again;
- the case's in-flight mark (:mod:`shared.workflow.run_marker`), set before a checkpoint is written mid-run,
  so that no checkpoint in flight is unmarked, and taken off when a run that may have marked it (it marked
  it, or it resumed a checkpoint) ends with its end written; ``casekeeper drain check`` reads the marks.

A crash before the end loses only work the case document already shows: the event is redelivered and
decides again from the case and the ledger, whose effects replay (R2). A deferred save that fails is reported
exactly as the framework reports its own failed saves, so the capture (:mod:`casekeeper.capture`) records it
and the timer alerts (R7, F7). The save-time check that a checkpoint loads back under the allow-list runs on
every checkpoint that is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from agent_framework import WorkflowCheckpoint

from casekeeper import DocumentStore
from casekeeper.checkpoints import CaseCheckpointStorage
from casekeeper.run_checkpoints import RunCheckpoints as _RunCheckpoints
from shared.workflow import run_marker

MODEL_STEP = "propose"
"""The executor whose output follows a model call (``shared.workflow.executors.Propose``)."""


class RunCheckpoints(_RunCheckpoints):
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
        super().__init__(storage)
        self._model_calls = model_calls
        self._store = store
        self._may_be_marked = resumed

    def worth(self, checkpoint: WorkflowCheckpoint) -> bool:
        """A pause for a person, and, with a model proposer, the superstep after the model call."""
        return super().worth(checkpoint) or (self._model_calls and bool(checkpoint.messages.get(MODEL_STEP)))

    def needs_checkpoint(self, messages: Mapping[str, list[Any]], pending_requests: Mapping[str, Any]) -> bool:
        """Whether the checkpoint of a superstep that leaves ``messages`` in flight and ``pending_requests``
        waiting is worth building at all: one :meth:`worth` picks (written at once), or the run's last (no
        message in flight), which :meth:`finish` may write. Any other is only held until the next replaces
        it, and never written: Agent Framework need not build it (``shared.workflow.reuse``)."""
        if not any(messages.values()):
            return True
        probe = WorkflowCheckpoint(
            workflow_name="",
            graph_signature_hash="",
            messages=dict(messages),
            pending_request_info_events=dict(pending_requests),
        )
        return self.worth(probe)

    async def before_write(self, checkpoint: WorkflowCheckpoint) -> None:
        """Mark the case before the checkpoint is written: no checkpoint in flight is unmarked."""
        if self._store is not None:
            await asyncio.to_thread(run_marker.mark, self._store, self.storage.case_id, checkpoint.checkpoint_id)
            self._may_be_marked = True

    async def after_end(self) -> None:
        """The run ended with its end written: take the mark off, if it may be there."""
        if self._store is not None and self._may_be_marked:
            await asyncio.to_thread(run_marker.unmark, self._store, self.storage.case_id)
