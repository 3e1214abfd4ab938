"""Moved to :mod:`casekeeper.checkpoints` (the per-record checkpoint storage is the guard package's, for any
workflow). These names stay importable from here for the app's modules that still use them; no stored
checkpoint names this module (checkpoint documents hold only the workflow's message and state types)."""

from casekeeper.checkpoints import (
    CHECKPOINTS,
    KIND_CHECKPOINT,
    KIND_SEQUENCE,
    MAX_DOCUMENT_BYTES,
    SEQUENCE_DOC_ID,
    CaseCheckpointStorage,
    CheckpointRecord,
    CheckpointUnusable,
    UnusableKind,
    type_key,
)

__all__ = [
    "CHECKPOINTS",
    "KIND_CHECKPOINT",
    "KIND_SEQUENCE",
    "MAX_DOCUMENT_BYTES",
    "SEQUENCE_DOC_ID",
    "CaseCheckpointStorage",
    "CheckpointRecord",
    "CheckpointUnusable",
    "UnusableKind",
    "type_key",
]
