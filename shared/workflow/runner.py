"""Running the invoice-review workflow for one case: a fresh run, a resumed one, a rebuilt one.

:class:`WorkflowRunner` owns the case's checkpoint storage and the running build's graph hash. It
resumes a run that a crash stopped mid-superstep (its model calls are not repeated; its effects and
commits are idempotent, so replaying the superstep is safe), and says on the case when a checkpoint
cannot be used and the decision is rebuilt from the case document instead (rules R8, R9).

A checkpoint that passed every check can still fail to resume: a state type changed in a way no check
foresaw, the framework refuses it, a restored object breaks the new code. Whatever a resume raises is
answered the same way, by a rebuild from the case document, with a note on the case and an alert
(:meth:`WorkflowRunner.resume`), never by failing the event until its message is dead-lettered. Only
Casekeeper's own errors keep their meaning (``casekeeper.core.errors``): a store outage is retried, an effect
in flight waits, exactly as they would in a rebuilt run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from agent_framework import Workflow, WorkflowRunResult

from casekeeper import Case, CasekeeperError, DocumentStore
from casekeeper.cases import AlertSink
from casekeeper.checkpoints import (
    MAX_DOCUMENT_BYTES,
    CaseCheckpointStorage,
    CheckpointRecord,
    CheckpointUnusable,
)
from shared.workflow.build import WORKFLOW_NAME, build_workflow
from shared.workflow.deps import WorkflowDeps, run_knowing
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES, RunOutcome
from shared.workflow.reuse import WorkflowPool
from shared.workflow.run_checkpoints import RunCheckpoints

log = logging.getLogger("casekeeper.worker")

CHECKPOINTS_KEPT = 10
"""Checkpoints kept per case: about one per run (``shared.workflow.run_checkpoints``), so the last ten runs."""
PRUNE_EVERY = 5
"""Prune when the case's checkpoint counter reaches a multiple of this: at most ``CHECKPOINTS_KEPT +
PRUNE_EVERY`` are stored."""
_UNREAD = object()
"""The caller did not read the newest checkpoint record: read it here."""


class WorkflowRunner:
    def __init__(
        self,
        deps: WorkflowDeps,
        store: DocumentStore,
        *,
        build: Callable[[WorkflowDeps], Workflow] = build_workflow,
        checkpoints_kept: int = CHECKPOINTS_KEPT,
        allowed_checkpoint_types: frozenset[str] = ALLOWED_CHECKPOINT_TYPES,
        checkpoint_max_bytes: int = MAX_DOCUMENT_BYTES,
        alert: AlertSink | None = None,
    ) -> None:
        """``alert``: raises the alert of a run rebuilt because its resume failed (none: only the note).

        ``build`` makes the workflow objects, once each for as many runs as they can serve
        (:mod:`shared.workflow.reuse`), over ``deps``; what a run knows about its case is passed per run."""
        self.deps = deps
        self._deps = deps
        self._store = store
        self._checkpoints_kept = checkpoints_kept
        self._allowed_types = allowed_checkpoint_types
        self._checkpoint_max_bytes = checkpoint_max_bytes
        self._alert = alert
        self.workflows = WorkflowPool(lambda: build(deps))
        # The running build's graph hash, compared with a checkpoint's before resuming it.
        self.graph_hash: str = self.workflows.graph_hash

    def checkpoints(self, case_id: str) -> CaseCheckpointStorage:
        return CaseCheckpointStorage(
            self._store, case_id, self._allowed_types, max_document_bytes=self._checkpoint_max_bytes
        )

    def check_resumable(self, storage: CaseCheckpointStorage, record: CheckpointRecord) -> None:
        """Raises ``CheckpointUnusable`` unless this build can restore ``record``."""
        storage.try_decode(record, expected_graph_hash=self.graph_hash)

    async def paused_on(
        self, storage: CaseCheckpointStorage, request_id: str, *, latest: CheckpointRecord | object | None = _UNREAD
    ) -> tuple[CheckpointRecord, Case] | None:
        """The newest checkpoint of the case's run if it is paused on ``request_id`` and this build can
        resume it, with the case as read to check that; ``None`` otherwise (a checkpoint that cannot be
        used is noted on the case). ``latest``: the newest checkpoint record as this event already read it
        (nothing saved since), so it is not queried again."""
        case_id = storage.case_id
        record = await asyncio.to_thread(storage.latest_record, WORKFLOW_NAME) if latest is _UNREAD else latest
        if not isinstance(record, CheckpointRecord) or request_id not in record.pending_request_ids:
            return None
        case = await asyncio.to_thread(self._deps.cases.get, case_id)
        if case is None or _rebuilt(case, record.checkpoint_id):
            return None
        try:
            await asyncio.to_thread(self.check_resumable, storage, record)
        except CheckpointUnusable as exc:
            await self.note_rebuilt(case_id, exc)
            return None
        return record, case

    async def finish_interrupted_run(
        self, storage: CaseCheckpointStorage, *, latest: CheckpointRecord | object | None = _UNREAD
    ) -> RunOutcome | None:
        """Resume a run that died mid-superstep, so its decision is not lost (and its model calls are
        not repeated). Its effects and commits are idempotent, so replaying the superstep is safe.

        A finished run's last checkpoint holds no pending messages; a paused one holds only pending
        requests (answered by ``approval.answered``). Anything else was interrupted.

        ``storage``: the event's storage of the case (its read here tells the next save its number).
        ``latest``: the newest checkpoint record as the caller just read it from ``storage`` (not re-read).
        """
        case_id = storage.case_id
        record = await asyncio.to_thread(storage.latest_record, WORKFLOW_NAME) if latest is _UNREAD else latest
        if not isinstance(record, CheckpointRecord) or record.pending_request_ids:
            return None
        try:
            checkpoint = await asyncio.to_thread(storage.try_decode, record)
        except CheckpointUnusable as exc:
            await self.note_rebuilt(case_id, exc)
            return None
        if not any(checkpoint.messages.values()) or await self._rebuilt_before(case_id, record.checkpoint_id):
            return None
        if checkpoint.graph_signature_hash != self.graph_hash:
            reason = "the workflow graph changed since this checkpoint was saved"
            await self.note_rebuilt(
                case_id,
                CheckpointUnusable(reason, case_id=case_id, checkpoint_id=record.checkpoint_id, kind="graph_changed"),
            )
            return None
        log.info(
            "case %s: resuming interrupted run from checkpoint %s",
            case_id,
            record.checkpoint_id,
            extra={"caseId": case_id, "checkpointId": record.checkpoint_id},
        )
        return await self.resume(storage, record)

    async def resume(
        self,
        storage: CaseCheckpointStorage,
        record: CheckpointRecord,
        *,
        responses: dict[str, Any] | None = None,
        known: Case | None = None,
    ) -> RunOutcome | None:
        """Resume the run from ``record`` (with ``responses`` to its pending requests). ``None`` when resuming
        raised: the case is noted and an alert raised, and the caller rebuilds from the case document (rule
        R8). Casekeeper's own errors (a store outage, an effect in flight, ...) propagate unchanged: they
        mean the same in a rebuilt run, and a store outage is retried, not rebuilt."""
        try:
            return await self.run(storage, checkpoint_id=record.checkpoint_id, responses=responses, known=known)
        except Exception as exc:
            signal = _casekeeper_error(exc)
            if signal is exc:
                raise
            if signal is not None:
                # The framework wraps what a restore raises ("Failed to restore from checkpoint"): unwrap it,
                # so that a store outage is settled as one (retried), not as an unknown failure.
                raise signal from None
            failed = CheckpointUnusable(
                f"resuming it raised {type(exc).__name__}: {exc}",
                case_id=storage.case_id,
                checkpoint_id=record.checkpoint_id,
                kind="resume_failed",
            )
            log.exception("case %s: resuming checkpoint %s failed", storage.case_id, record.checkpoint_id)
            await self.note_rebuilt(storage.case_id, failed)
            return None

    async def _rebuilt_before(self, case_id: str, checkpoint_id: str) -> bool:
        """Whether the case already says this checkpoint's run was rebuilt: it is not tried again."""
        case = await asyncio.to_thread(self._deps.cases.get, case_id)
        return case is not None and _rebuilt(case, checkpoint_id)

    async def note_rebuilt(self, case_id: str, exc: CheckpointUnusable) -> None:
        """Say on the case that its run is rebuilt from the case document (rule R8), once per checkpoint; a
        failed resume (``kind="resume_failed"``) is also alerted, once per checkpoint: the checks before a
        resume missed something a developer must look at."""
        if exc.kind == "resume_failed" and self._alert is not None:
            fields = {"caseId": case_id, "checkpointId": exc.checkpoint_id, "reason": exc.reason}
            message = f"case {case_id}: resuming checkpoint {exc.checkpoint_id} failed; run rebuilt from the case"
            alert = self._alert
            await asyncio.to_thread(
                lambda: alert("resume_failed", message, fields, dedupe_key=f"{case_id}:{exc.checkpoint_id}")
            )
        log.warning(
            "case %s: checkpoint %s unusable (%s); rebuilding from the case document",
            case_id,
            exc.checkpoint_id,
            exc.reason,
            extra={"caseId": case_id, "checkpointId": exc.checkpoint_id},
        )
        case = await asyncio.to_thread(self._deps.cases.get, case_id)
        if case is None or any(n.get("checkpointId") == exc.checkpoint_id for n in case.notes):
            return
        await asyncio.to_thread(
            self._deps.cases.note,
            case_id,
            "run rebuilt from the case document",
            reason=exc.reason,
            checkpointId=exc.checkpoint_id,
            kind=exc.kind,
        )

    async def run(
        self,
        storage: CaseCheckpointStorage,
        *,
        message: object | None = None,
        checkpoint_id: str | None = None,
        responses: dict[str, Any] | None = None,
        known: Case | None = None,
        new_case: bool = False,
    ) -> RunOutcome:
        """One run of the workflow for ``storage``'s case: from ``message``, or resumed from
        ``checkpoint_id`` (with ``responses`` to its pending requests). Returns the run's last outcome.

        ``known``: the case as this event just wrote it, so the run's first step need not read it again.
        Safe because every commit is conditional on the version the run decided on: were it stale, the
        commit would lose and the case be decided again. ``new_case``: the event created it (no effects)."""
        case_id = storage.case_id
        saves = RunCheckpoints(
            storage,
            model_calls=getattr(self._deps.proposer, "calls_model", True),
            store=self._store,
            resumed=checkpoint_id is not None,
        )
        workflow = self.workflows.take()
        attributes = {
            "casekeeper.case_id": case_id,
            "casekeeper.resumed_from": checkpoint_id,
            "casekeeper.message": type(message).__name__ if message is not None else None,
        }
        result: WorkflowRunResult | None = None
        try:
            with self._deps.telemetry.span("workflow.run", attributes), run_knowing(known, new_case=new_case):
                if message is not None:
                    result = await workflow.run(message, checkpoint_storage=saves)
                else:
                    result = await workflow.run(
                        checkpoint_id=checkpoint_id, responses=responses, checkpoint_storage=saves
                    )
                await saves.finish()
        finally:
            # Kept for the next run only if this one left nothing in it (shared.workflow.reuse).
            self.workflows.give_back(workflow, started_from_message=message is not None, result=result)
        assert result is not None  # the run returned (it would have raised past the finally otherwise)
        outputs = [o for o in result.get_outputs() if isinstance(o, RunOutcome)]
        # Pruning reads every checkpoint document of the case; once every few saves is enough to keep the
        # count near ``checkpoints_kept``.
        if storage.last_seq is not None and storage.last_seq % PRUNE_EVERY == 0:
            await asyncio.to_thread(storage.prune, self._checkpoints_kept)
        if not outputs:
            case = await asyncio.to_thread(self._deps.cases.get, case_id)
            return RunOutcome(
                case_id,
                "nothing_to_do",
                case.status if case else None,
                case.version if case else None,
                f"run ended {result.get_final_state().value} without an outcome",
            )
        return outputs[-1]


def _rebuilt(case: Case, checkpoint_id: str) -> bool:
    return any(n.get("checkpointId") == checkpoint_id for n in case.notes)


def _casekeeper_error(exc: BaseException) -> CasekeeperError | None:
    """``exc`` or the error it was raised because of, if that is one of Casekeeper's own errors (other than a
    checkpoint it cannot use): those are settlement signals and keep their meaning through a resume."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, CasekeeperError) and not isinstance(current, CheckpointUnusable):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
