"""What a stored checkpoint means for its run, and whether this build could resume it (rule R8).

The same judgement the case worker makes before resuming (``CaseWorker._finish_interrupted_run`` and
``_approval_answered``), made without running anything, for ``case show`` and ``drain check``:

- the run is **paused** when the checkpoint has pending request ids (waiting for an approval);
  **interrupted** when it holds pending messages (the process died mid-superstep); **finished** when it
  holds neither; **unknown** when that cannot be told (the document is gone or unreadable);
- this build can **resume** it when the checkpoint's graph hash (metadata and decoded value) equals the
  current build's, the state types it holds have not changed incompatibly (``stateSchemas``, named by
  type and field), and it decodes under the allow-list.

A checkpoint that does not decode may still be of a finished run. Its pending messages are then counted
from the encoding's JSON structure alone (the framework keeps ``messages`` a plain object of lists, one
pickled envelope per message), so nothing outside the allow-list is ever unpickled.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from agent_framework import Workflow
from agent_framework.exceptions import WorkflowCheckpointException

from casekeeper.checkpoint_decoding import is_pickled, stored_value
from casekeeper.checkpoints import (
    CHECKPOINTS,
    CaseCheckpointStorage,
    CheckpointRecord,
    CheckpointUnusable,
    UnusableKind,
)
from casekeeper.stores import DocumentStore
from shared.workflow.deps import WorkflowDeps

Build = Callable[[WorkflowDeps], Workflow]
"""Builds the workflow of a build (``shared.workflow.build.build_workflow`` is the current one)."""

RunState = Literal["paused", "interrupted", "finished", "unknown"]
RUN_TEXT: dict[RunState, str] = {
    "paused": "paused for an approval",
    "interrupted": "interrupted mid-superstep (the next event resumes it)",
    "finished": "finished (nothing to resume)",
    "unknown": "unknown (the checkpoint cannot be read)",
}

PROBLEM_TEXT: dict[UnusableKind, str] = {
    "graph_changed": "graph changed",
    "undecodable": "type would not load",
    "missing": "missing",
    "schema_changed": "state type changed",
    "resume_failed": "resume failed",
}

# How the restricted unpickler names a refused type (the framework's message, quoted in the reason).
_BLOCKED_TYPE = re.compile(r"blocked for (?:nested )?type '([^']+)'")
_SUMMARY_CHARS = 160


@dataclass(frozen=True)
class Problem:
    """Why this build cannot resume a checkpoint: ``reason`` in full, ``summary`` on one short line."""

    kind: UnusableKind
    reason: str
    summary: str

    @classmethod
    def of(cls, kind: UnusableKind, reason: str) -> Problem:
        blocked = sorted(set(_BLOCKED_TYPE.findall(reason)))
        if kind == "undecodable" and blocked:
            summary = f"{', '.join(blocked)} not in this build's allowed types"
        else:
            summary = reason if len(reason) <= _SUMMARY_CHARS else reason[: _SUMMARY_CHARS - 3] + "..."
        return cls(kind, reason, summary)

    def text(self) -> str:
        return f"{PROBLEM_TEXT[self.kind]}: {self.summary}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "text": PROBLEM_TEXT[self.kind], "summary": self.summary, "reason": self.reason}


@dataclass(frozen=True)
class CheckpointView:
    """One checkpoint as this build sees it. ``run`` is what the run is if this is its newest checkpoint;
    ``pending_messages`` is ``None`` when they cannot be counted."""

    record: CheckpointRecord
    run: RunState
    pending_messages: int | None
    problems: tuple[Problem, ...]

    @property
    def resumable(self) -> bool:
        return not self.problems

    @property
    def in_flight(self) -> bool:
        """The run did not finish (or that cannot be told): a deploy that cannot resume it strands it."""
        return self.run != "finished"

    def to_json(self) -> dict[str, Any]:
        """The checkpoint; ``run`` is left out, as it describes the run only for its newest checkpoint."""
        r = self.record
        return {
            "checkpointId": r.checkpoint_id,
            "seq": r.seq,
            "iteration": r.iteration,
            "createdAt": r.created_at,
            "graphHash": r.graph_hash,
            "pendingRequestIds": list(r.pending_request_ids),
            "pendingMessages": self.pending_messages,
            "resumable": self.resumable,
            "problems": [p.to_json() for p in self.problems],
        }


def graph_hash_of(build: Build, workflow: WorkflowDeps) -> str:
    """The graph hash of the workflow ``build`` makes from this app's workflow dependencies. Building runs
    no executor: nothing is called on them."""
    return build(workflow).graph_signature_hash


def inspect_checkpoint(
    store: DocumentStore, storage: CaseCheckpointStorage, record: CheckpointRecord, graph_hash: str
) -> CheckpointView:
    """Judge ``record`` (of ``storage``'s case) against the build whose graph hash is ``graph_hash``.

    Store failures propagate (``StoreError``): "the store is down" is not "cannot be resumed".
    """
    problems: list[Problem] = []
    if record.graph_hash != graph_hash:
        problems.append(_graph_changed(record.graph_hash, graph_hash))
    pending: int | None
    try:
        # Decoded without the hash check, so that a changed graph still shows whether the run finished.
        checkpoint = storage.try_decode(record)
    except CheckpointUnusable as exc:
        problems.append(Problem.of(exc.kind, exc.reason))
        pending = None if exc.kind == "missing" else _count_encoded_messages(store, record)
    else:
        pending = sum(len(messages) for messages in checkpoint.messages.values())
        decoded_hash = checkpoint.graph_signature_hash
        if decoded_hash != graph_hash and not problems:
            # The metadata agreed but the value does not: the document was edited. Trust the value.
            problems.append(_graph_changed(decoded_hash, graph_hash))
    return CheckpointView(record, _run_state(record, pending), pending, tuple(problems))


def _graph_changed(stored: str, running: str) -> Problem:
    reason = f"checkpoint graph {stored} != this build's {running}"
    return Problem("graph_changed", reason, f"checkpoint graph {stored[:12]} != this build's {running[:12]}")


def _run_state(record: CheckpointRecord, pending_messages: int | None) -> RunState:
    if record.pending_request_ids:
        return "paused"
    if pending_messages is None:
        return "unknown"
    return "interrupted" if pending_messages else "finished"


def _count_encoded_messages(store: DocumentStore, record: CheckpointRecord) -> int | None:
    """Pending messages of a checkpoint that does not decode, counted from the encoded JSON structure
    (``{source executor id: [pickled message, ...]}``) without unpickling; ``None`` if it is not that."""
    doc = store.read(CHECKPOINTS, record.case_id, record.checkpoint_id)
    try:
        encoded = stored_value(doc.body.get("encoded")) if doc is not None else None
    except WorkflowCheckpointException:
        return None
    messages = encoded.get("messages") if isinstance(encoded, dict) else None
    if not isinstance(messages, dict) or is_pickled(messages):
        return None
    if not all(isinstance(batch, list) for batch in messages.values()):
        return None
    return sum(len(batch) for batch in messages.values())
