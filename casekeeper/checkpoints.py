"""Agent Framework checkpoint storage over the document port, one case per storage (rules R8, R9).

Why not the framework's own Cosmos storage (docs/design.md#own-checkpoint-storage): it puts every checkpoint of a
workflow name in one logical partition, and it saves anything, failing only when a resume tries to
load it. :class:`CaseCheckpointStorage` instead

- keeps one case's checkpoints in one logical partition (container ``checkpoints``, partition = case
  id), so no partition grows with the number of cases;
- refuses at save time, with :class:`~agent_framework.exceptions.WorkflowCheckpointException`, any
  checkpoint it could not load back under its allow-list (naming the types that would not load), and
  any checkpoint too big for a Cosmos DB document;
- orders checkpoints by ``seq``, a per-case counter it allocates itself (see below), never by
  timestamp (Cosmos ``_ts`` has one-second resolution, caller clocks drift) nor by
  ``iteration_count`` (it repeats in human-in-the-loop flows: the pause checkpoint and the
  response-entry checkpoint share one iteration).

Documents (all in partition ``caseId``):

- ``kind="checkpoint"``, ``id`` = checkpoint id: ``workflowName``, ``graphHash``,
  ``previousCheckpointId``, ``iteration``, ``seq``, ``pendingRequestIds``, ``createdAt`` (the
  checkpoint's own ISO timestamp), ``encodedBytes`` and ``encoded`` (the framework's JSON-safe
  encoding as JSON text, a string, so that every number comes back exactly from a store that keeps JSON
  numbers as doubles: :func:`~casekeeper.checkpoint_decoding.encode_checkpoint`), and ``stateSchemas``:
  the fields of every allowed type the checkpoint holds (:mod:`.state_schemas`), compared with the running
  build's before a resume.

**The sequence.** ``seq`` is one more than the highest ``seq`` of the case's checkpoints, as this storage
instance last read them (the worker reads them at the start of every event to look for an interrupted run,
so a save costs no read of its own); an instance that has read nothing reads them once. Saves through one
instance are serialised by a lock, so they never share a number. Two instances saving for one case at the
same time could: Casekeeper never does that, because a case's events are handled one at a time
([R10](docs/design.md#r10)), and the worst it could do is make "newest" ambiguous between two runs that
ran concurrently. Older stores may hold a counter document (``kind="checkpoint_sequence"``,
:data:`SEQUENCE_DOC_ID`) from when a counter allocated the numbers; it is ignored. A save that fails after
allocating leaves a gap, which is harmless: only the order matters.

**Errors.** Missing or undecodable checkpoints raise ``WorkflowCheckpointException`` from the
protocol methods and :class:`CheckpointUnusable` from :meth:`CaseCheckpointStorage.try_decode`.
A store failure (:class:`~casekeeper.StoreError`, e.g. ``StoreUnavailable``) is *not*
translated: "the store is down right now" must not be mistaken for "this checkpoint can never be
resumed", which makes the caller rebuild the run.

**Threads.** The store is synchronous; every async protocol method runs its store calls (and the
encoding, which pickles) in a worker thread via :func:`asyncio.to_thread`, because the Functions
worker runs several sessions concurrently on one event loop.

Checkpoint data is encoded and decoded by :mod:`casekeeper.checkpoint_decoding`: only built-in value types, the
few framework types a checkpoint holds, the storage's ``allowed_types`` and types registered process-wide
with ``agent_framework.register_checkpoint_type`` load (the framework's own decoder admits every class of
``agent_framework.*`` and ``openai.types.*``). The ``checkpoints`` container must be writable by
this app only: the allow-list narrows what a pickle may build, it is not a security boundary.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from agent_framework import WorkflowCheckpoint
from agent_framework.exceptions import WorkflowCheckpointException

from casekeeper import state_schemas
from casekeeper.checkpoint_decoding import decode_checkpoint, decode_checkpoint_value, encode_checkpoint, stored_value
from casekeeper.errors import AlreadyExists, CaseError
from casekeeper.stores import Document, DocumentStore, Query, id_problem

logger = logging.getLogger("casekeeper.checkpoints")

CHECKPOINTS: Final = "checkpoints"
KIND_CHECKPOINT: Final = "checkpoint"
KIND_SEQUENCE: Final = "checkpoint_sequence"
SEQUENCE_DOC_ID: Final = "_sequence"
"""Id of the per-case counter document; no checkpoint may use it (the framework's ids are uuids)."""

MAX_DOCUMENT_BYTES: Final = 1_500_000
"""Refuse a checkpoint whose document would exceed this (UTF-8 JSON bytes). Cosmos DB caps a document
at 2 MB; the margin covers system fields and keeps a write from failing at the service instead."""

_MAX_BLOCKED_TYPES_REPORTED: Final = 16
# The restricted unpickler's refusal names the type: "... blocked for type 'mod:Name'" (or "nested type").
_BLOCKED_TYPE: Final = re.compile(r"blocked for (?:nested )?type '([^']+)'")

UnusableKind = Literal["missing", "undecodable", "graph_changed", "schema_changed", "resume_failed"]


def type_key(cls: type) -> str:
    """The ``"module:QualName"`` key that checkpoint decoding's allow-list uses for ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


class CheckpointUnusable(CaseError):
    """A stored checkpoint cannot be resumed by this build; the run must be rebuilt from the case document.

    ``kind`` says why: ``"missing"`` (deleted or pruned since it was listed), ``"undecodable"`` (a type it
    holds is not allowed or no longer importable, or the data is corrupt), ``"graph_changed"`` (its graph
    hash is not the running workflow's), ``"schema_changed"`` (a state type it holds changed incompatibly,
    :func:`~casekeeper.state_schemas.incompatibilities`), ``"resume_failed"`` (it passed those checks,
    but resuming it raised). ``reason`` is the human-readable detail.
    """

    def __init__(self, reason: str, *, case_id: str, checkpoint_id: str, kind: UnusableKind) -> None:
        super().__init__(
            f"checkpoint {checkpoint_id!r} of case {case_id!r} is unusable ({kind}): {reason}", case_id=case_id
        )
        self.checkpoint_id = checkpoint_id
        self.reason = reason
        self.kind: UnusableKind = kind


@dataclass(frozen=True)
class CheckpointRecord:
    """A stored checkpoint's metadata, read without decoding (no unpickling, no allow-list involved).

    ``seq`` orders a case's checkpoints (higher is newer); ``ts`` is the store's write time (seconds,
    store clock); ``created_at`` is the checkpoint's own ISO timestamp (the writer's clock);
    ``encoded_bytes`` is the size of the encoded checkpoint as JSON.
    """

    case_id: str
    checkpoint_id: str
    workflow_name: str
    graph_hash: str
    previous_checkpoint_id: str | None
    pending_request_ids: tuple[str, ...]
    iteration: int
    seq: int
    created_at: str
    encoded_bytes: int
    ts: float


class CaseCheckpointStorage:
    """Agent Framework ``CheckpointStorage`` for one case, over a :class:`~casekeeper.DocumentStore`.

    ``allowed_types`` are the application types the workflow puts into checkpoints (classes, or their
    ``"module:QualName"`` keys, see :func:`type_key`); save refuses, with ``WorkflowCheckpointException``
    and nothing written, anything that needs a type outside them (plus the framework's built-in set and
    process-wide registrations) or would not load back exactly. Pass the storage per run
    (``workflow.run(..., checkpoint_storage=storage)``): a storage instance is bound to its case. Load,
    list, delete and ``get_latest`` behave as the framework's storages do; :meth:`records` and
    :meth:`latest_record` read the checkpoints' metadata without decoding; :meth:`try_decode` and
    :meth:`prune` are for resuming and retention.
    """

    def __init__(
        self,
        store: DocumentStore,
        case_id: str,
        allowed_types: Iterable[str | type] = frozenset(),
        *,
        max_document_bytes: int = MAX_DOCUMENT_BYTES,
    ) -> None:
        if not isinstance(case_id, str) or not case_id:
            raise ValueError("case_id must be a non-empty string")
        if isinstance(allowed_types, str | type):
            # A lone string would otherwise become a set of characters and allow nothing useful.
            raise TypeError("allowed_types must be an iterable of types or 'module:QualName' strings")
        self._store = store
        self._case_id = case_id
        self._allowed: frozenset[str] = frozenset(t if isinstance(t, str) else type_key(t) for t in allowed_types)
        self._max_document_bytes = max_document_bytes
        self.last_seq: int | None = None
        """The sequence number of the last checkpoint this instance saved."""
        self._max_seq: int | None = None  # the highest seq seen (read or saved); None: not read yet
        self._stored: int | None = None  # how many checkpoints the case holds, as last seen; None: unknown
        self._assumed_empty = False  # told the case holds none (assume_empty): reads answer without a query
        self._seq_lock = threading.RLock()

    def __repr__(self) -> str:
        return f"CaseCheckpointStorage(case_id={self._case_id!r}, allowed_types={len(self._allowed)})"

    @property
    def case_id(self) -> str:
        """The case whose checkpoints this storage holds."""
        return self._case_id

    @property
    def allowed_types(self) -> frozenset[str]:
        """The ``"module:QualName"`` keys of the application types checkpoints may hold."""
        return self._allowed

    @property
    def stored_count(self) -> int | None:
        """How many checkpoints the case holds, as this instance last saw them (read, or told with
        :meth:`assume_empty`, plus its own saves since); ``None`` when it has not seen them."""
        with self._seq_lock:
            return self._stored

    @property
    def holds_none(self) -> bool:
        """Whether this instance knows that the case holds no checkpoint: it read them and found none, or was
        told so (:meth:`assume_empty`), and has saved none since. ``False`` when it does not know."""
        with self._seq_lock:
            return self._stored == 0

    def assume_empty(self) -> None:
        """Tell the storage that its case holds no checkpoint (the caller has just created the case), so
        that nothing is read to learn it: :meth:`records`, :meth:`latest_record`, ``get_latest`` and the
        first save's sequence number answer from that knowledge until a checkpoint is saved. Calling it
        for a case that does hold checkpoints makes them invisible to this instance, and its first save
        numbered 1: call it only for a case this caller created. (A storage that read the checkpoints and found
        none still reads them again when asked: another instance may have saved one since.)"""
        with self._seq_lock:
            self._assumed_empty = True
            self._stored = 0
            self._max_seq = self._max_seq or 0

    # --- the CheckpointStorage protocol ---------------------------------------------------------

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        """Store ``checkpoint`` and return its id.

        Every number comes back exactly (integers beyond 2^53, ``2.0`` as a float), on every backend.
        Raises ``WorkflowCheckpointException``, with nothing written, when the checkpoint could not be
        loaded back under this storage's allow-list (the message names the types), cannot be encoded
        as JSON (NaN or infinity: the message names where), is larger than ``max_document_bytes``, or its id
        is already taken by a different checkpoint. Saving the very same checkpoint twice is a no-op. Store
        failures propagate as ``StoreError``. (The framework logs any of these as one WARNING and carries on: install
        :mod:`casekeeper.capture` to make that loud.)
        """
        return await asyncio.to_thread(self._save, checkpoint)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """The checkpoint with this id. Raises ``WorkflowCheckpointException`` when it is missing or
        cannot be decoded under this storage's allow-list."""
        return await asyncio.to_thread(self._load, checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """This case's checkpoints of ``workflow_name``, oldest first. Checkpoints that cannot be decoded
        are left out (and logged), as ``FileCheckpointStorage`` does."""
        return await asyncio.to_thread(self._list_checkpoints, workflow_name)

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete one checkpoint of this case; ``False`` when there was none with this id."""
        return await asyncio.to_thread(self._delete, checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """The newest (highest ``seq``) checkpoint of ``workflow_name`` for this case, or ``None``.

        Raises ``WorkflowCheckpointException`` when the newest one cannot be decoded: silently
        resuming from an older checkpoint instead would hide the problem.
        """
        return await asyncio.to_thread(self._get_latest, workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        """Ids of :meth:`list_checkpoints` (only checkpoints that decode), oldest first."""
        return [cp.checkpoint_id for cp in await self.list_checkpoints(workflow_name=workflow_name)]

    # --- synchronous helpers for the resume logic, the timer and ``drain check`` -----------------

    def records(self, workflow_name: str | None = None) -> list[CheckpointRecord]:
        """Metadata of this case's checkpoints (of ``workflow_name``, or all), oldest first; nothing is
        decoded. A document whose metadata is malformed is left out and logged."""
        records: list[CheckpointRecord] = []
        for doc in self._documents(workflow_name):
            try:
                records.append(_record(doc))
            except (KeyError, TypeError, ValueError) as exc:
                logger.warning(
                    "checkpoint document %s of case %s has malformed metadata: %r", doc.id, doc.partition, exc
                )
        records.sort(key=lambda r: (r.seq, r.ts, r.checkpoint_id))
        return records

    def latest_record(self, workflow_name: str) -> CheckpointRecord | None:
        """Metadata of the newest checkpoint of ``workflow_name`` for this case, or ``None``; nothing is
        decoded, so this also works for checkpoints this build could not load."""
        records = self.records(workflow_name)
        return records[-1] if records else None

    def try_decode(self, record: CheckpointRecord, *, expected_graph_hash: str | None = None) -> WorkflowCheckpoint:
        """Read and decode the checkpoint ``record`` describes, or explain why it cannot be resumed.

        Raises :class:`CheckpointUnusable` when the document is gone (``"missing"``), cannot be decoded
        under this storage's allow-list (``"undecodable"``), holds a state type whose fields changed
        incompatibly since it was written (``"schema_changed"``, checked before anything is unpickled), or,
        when ``expected_graph_hash`` is given (pass ``workflow.graph_signature_hash``), was written by a
        different graph (``"graph_changed"``). Store failures propagate as ``StoreError``: retry later, do
        not rebuild.
        """
        if record.case_id != self._case_id:
            raise ValueError(
                f"checkpoint record of case {record.case_id!r} given to the storage of case {self._case_id!r}"
            )

        def unusable(kind: UnusableKind, reason: str) -> CheckpointUnusable:
            return CheckpointUnusable(reason, case_id=self._case_id, checkpoint_id=record.checkpoint_id, kind=kind)

        if expected_graph_hash is not None and record.graph_hash != expected_graph_hash:
            raise unusable("graph_changed", f"graph hash {record.graph_hash} != running {expected_graph_hash}")
        doc = self._read_checkpoint(record.checkpoint_id)
        if doc is None:
            raise unusable("missing", "no such checkpoint document (deleted or pruned)")
        changed = self.schema_changes(doc.body.get("stateSchemas"))
        if changed:
            raise unusable("schema_changed", "; ".join(problem.text() for problem in changed))
        try:
            checkpoint = self._decode(doc)
        except WorkflowCheckpointException as exc:
            raise unusable("undecodable", _describe(exc)) from exc
        if expected_graph_hash is not None and checkpoint.graph_signature_hash != expected_graph_hash:
            # The metadata said otherwise: the document was edited; trust the decoded value.
            raise unusable(
                "graph_changed", f"graph hash {checkpoint.graph_signature_hash} != running {expected_graph_hash}"
            )
        return checkpoint

    def schema_changes(self, stored: object) -> list[state_schemas.Incompatibility]:
        """Why a checkpoint whose document stores ``stored`` (its ``stateSchemas``) cannot be resumed by this
        build's types; empty when it can. A document without them is malformed: every checkpoint this storage
        writes carries them. Types outside the allow-list are left to decoding, which names them as types that
        would not load."""
        if stored is None:
            return [state_schemas.Incompatibility("stateSchemas", None, "the checkpoint stores no state schemas")]
        if not isinstance(stored, dict):
            return [state_schemas.Incompatibility("stateSchemas", None, "the stored schemas are malformed")]
        held = {key: schema for key, schema in stored.items() if key in self._allowed}
        # A type a build recorded writing that this build no longer has (renamed or removed) is a deploy's
        # change, named here before anything is unpickled; decoding would refuse it too, but as a type
        # outside the allow-list, which is also how a planted value looks (and is alerted as such).
        gone = [
            state_schemas.Incompatibility(key, None, "a state type this build no longer has (renamed or removed)")
            for key in sorted(stored)
            if key not in self._allowed
        ]
        return gone + state_schemas.incompatibilities(held, state_schemas.current(held))

    def prune(self, keep: int) -> int:
        """Delete all but the newest ``keep`` checkpoints of this case (every workflow name); return how many
        were deleted. Checkpoints are an optimisation; the case is the truth (R9); the counter is kept, so later
        saves still sort after the survivors. Deleting one that is already gone is not an error."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep must be a non-negative int, got {keep!r}")
        # Documents rather than records, so a document with malformed metadata sorts oldest and goes first.
        docs = sorted(self._documents(None), key=_order_key)
        deleted = 0
        for doc in docs[: max(len(docs) - keep, 0)]:
            if self._store.delete(CHECKPOINTS, self._case_id, doc.id):
                deleted += 1
        with self._seq_lock:
            self._stored = len(docs) - deleted
        if deleted:
            logger.info("pruned %d checkpoint(s) of case %s, kept the newest %d", deleted, self._case_id, keep)
        return deleted

    # --- implementation (runs in a worker thread) -------------------------------------------------

    def _save(self, checkpoint: WorkflowCheckpoint) -> str:
        checkpoint_id = checkpoint.checkpoint_id
        self._check_id(checkpoint_id)
        try:
            encoded = encode_checkpoint(checkpoint)
        except Exception as exc:
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id} of case {self._case_id} cannot be encoded as JSON ({exc}); "
                "refusing to save"
            ) from exc
        self._verify_loads_back(checkpoint_id, encoded)
        encoded_bytes = len(encoded.encode("utf-8"))
        body: dict[str, Any] = {
            "id": checkpoint_id,
            "caseId": self._case_id,
            "kind": KIND_CHECKPOINT,
            "workflowName": checkpoint.workflow_name,
            "graphHash": checkpoint.graph_signature_hash,
            "previousCheckpointId": checkpoint.previous_checkpoint_id,
            "iteration": checkpoint.iteration_count,
            "seq": 0,  # placeholder for the size estimate; allocated only once the checkpoint is accepted
            "pendingRequestIds": [str(rid) for rid in checkpoint.pending_request_info_events],
            "createdAt": checkpoint.timestamp,
            "encodedBytes": encoded_bytes,
            "encoded": encoded,
            "stateSchemas": state_schemas.held_by(checkpoint.to_dict(), self._allowed),
        }
        # As the store writes it: the text's quotes are escaped inside the document.
        document_bytes = len(json.dumps(body, separators=(",", ":")).encode("utf-8"))
        if document_bytes > self._max_document_bytes:
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id} of case {self._case_id} would be a {document_bytes:,}-byte document, "
                f"over the {self._max_document_bytes:,}-byte limit (Cosmos DB caps documents at 2 MB); "
                "refusing to save. Keep large data out of workflow state and messages (store it in the case "
                "document or a blob and keep a reference)"
            )
        body["seq"] = self._next_seq()
        try:
            self._store.create(CHECKPOINTS, self._case_id, checkpoint_id, body)
        except AlreadyExists:
            existing = self._read_checkpoint(checkpoint_id)
            if existing is not None and existing.body.get("encoded") == encoded:
                return checkpoint_id  # the same save, repeated (e.g. after a timeout that had in fact landed)
            raise WorkflowCheckpointException(
                f"Checkpoint id {checkpoint_id} already exists in case {self._case_id} with different content; "
                "refusing to overwrite it"
            ) from None
        self.last_seq = int(body["seq"])
        with self._seq_lock:
            if self._stored is not None:
                self._stored += 1
        logger.debug(
            "saved checkpoint %s of case %s (seq %s, iteration %s, %d bytes)",
            checkpoint_id,
            self._case_id,
            body["seq"],
            checkpoint.iteration_count,
            document_bytes,
        )
        return checkpoint_id

    def _verify_loads_back(self, checkpoint_id: str, encoded: str) -> None:
        """Decode ``encoded`` as :meth:`load` would; raise ``WorkflowCheckpointException`` naming every
        type that would not load."""
        try:
            decode_checkpoint(encoded, allowed_types=self._allowed)
        except Exception as first:
            blocked = _blocked_types(first)
            if not blocked:
                raise WorkflowCheckpointException(
                    f"Checkpoint {checkpoint_id} of case {self._case_id} would not load back "
                    f"({_describe(first)}); refusing to save"
                ) from first
            # Decoding stops at the first refused type; allow each one found and retry, so the message
            # lists all of them at once instead of one per deploy. Only our own, just-encoded data is
            # decoded here, and only on this failure path.
            extra = set(blocked)
            value = stored_value(encoded)
            for _ in range(_MAX_BLOCKED_TYPES_REPORTED):
                try:
                    decode_checkpoint_value(value, allowed_types=self._allowed | extra)
                    break
                except Exception as again:
                    more = set(_blocked_types(again)) - extra
                    if not more:
                        break
                    extra |= more
            names = ", ".join(f"'{name}'" for name in sorted(extra))
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id} of case {self._case_id} would not load back: type(s) {names} "
                "not in this storage's allowed types. Add them to allowed_types or register them with "
                "agent_framework.register_checkpoint_type; refusing to save"
            ) from first

    def _next_seq(self) -> int:
        """The case's next sequence number: one more than the highest this instance has seen (it reads the
        case's checkpoints once if it has seen none)."""
        with self._seq_lock:
            if self._max_seq is None:
                self._note_seqs(self._documents(None))
            self._max_seq = (self._max_seq or 0) + 1
            return self._max_seq

    def _note_seqs(self, docs: Iterable[Document]) -> None:
        seqs = [seq for doc in docs if isinstance(seq := doc.body.get("seq"), int) and not isinstance(seq, bool)]
        self._max_seq = max([self._max_seq or 0, *seqs])

    def _load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        doc = self._read_checkpoint(checkpoint_id)
        if doc is None:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id} in case {self._case_id}")
        return self._decode(doc)

    def _list_checkpoints(self, workflow_name: str) -> list[WorkflowCheckpoint]:
        checkpoints: list[WorkflowCheckpoint] = []
        for doc in self._sorted_documents(workflow_name):
            try:
                checkpoints.append(self._decode(doc))
            except WorkflowCheckpointException as exc:
                logger.warning("skipping checkpoint %s of case %s: %s", doc.id, self._case_id, _describe(exc))
        return checkpoints

    def _get_latest(self, workflow_name: str) -> WorkflowCheckpoint | None:
        docs = self._sorted_documents(workflow_name)
        return self._decode(docs[-1]) if docs else None

    def _delete(self, checkpoint_id: str) -> bool:
        if checkpoint_id == SEQUENCE_DOC_ID or id_problem(checkpoint_id, max_length=255) is not None:
            return False
        deleted = self._store.delete(CHECKPOINTS, self._case_id, checkpoint_id)
        if deleted:
            with self._seq_lock:
                self._stored = None if self._stored is None else max(self._stored - 1, 0)
        return deleted

    def _decode(self, doc: Document) -> WorkflowCheckpoint:
        """Decode a checkpoint document; any failure becomes ``WorkflowCheckpointException``."""
        try:
            checkpoint = decode_checkpoint(doc.body.get("encoded"), allowed_types=self._allowed)
        except WorkflowCheckpointException:
            raise
        except Exception as exc:
            raise WorkflowCheckpointException(
                f"Checkpoint {doc.id} of case {self._case_id} cannot be decoded: {exc!r}"
            ) from exc
        if checkpoint.checkpoint_id != doc.id:
            raise WorkflowCheckpointException(
                f"Checkpoint document {doc.id} of case {self._case_id} holds checkpoint {checkpoint.checkpoint_id}: "
                "the document was altered"
            )
        return checkpoint

    def _read_checkpoint(self, checkpoint_id: str) -> Document | None:
        if checkpoint_id == SEQUENCE_DOC_ID or id_problem(checkpoint_id, max_length=255) is not None:
            return None
        doc = self._store.read(CHECKPOINTS, self._case_id, checkpoint_id)
        if doc is None or doc.body.get("kind") != KIND_CHECKPOINT:
            return None
        return doc

    def _documents(self, workflow_name: str | None) -> list[Document]:
        """The case's checkpoint documents (of ``workflow_name``, or all). One query for all of them, which
        also tells the next sequence number (it counts across workflow names). None when this instance knows
        it was told the case holds none (:meth:`assume_empty`) and has saved none since."""
        with self._seq_lock:
            if self._assumed_empty and self._stored == 0:
                return []
        docs = self._store.query(CHECKPOINTS, Query(partition=self._case_id, equals={"kind": KIND_CHECKPOINT}))
        with self._seq_lock:
            self._note_seqs(docs)
            self._stored = len(docs)
        if workflow_name is None:
            return docs
        return [doc for doc in docs if doc.body.get("workflowName") == workflow_name]

    def _sorted_documents(self, workflow_name: str) -> list[Document]:
        docs = self._documents(workflow_name)
        docs.sort(key=_order_key)
        return docs

    def _check_id(self, checkpoint_id: object) -> None:
        problem = "is reserved" if checkpoint_id == SEQUENCE_DOC_ID else id_problem(checkpoint_id, max_length=255)
        if problem is not None:
            raise WorkflowCheckpointException(f"Checkpoint id {checkpoint_id!r} cannot be stored: it {problem}")


def _order_key(doc: Document) -> tuple[int, float, str]:
    # seq decides; ts and id only make the order total for documents with a malformed seq.
    seq = doc.body.get("seq")
    return (seq if isinstance(seq, int) and not isinstance(seq, bool) else -1, doc.ts, doc.id)


def _record(doc: Document) -> CheckpointRecord:
    body = doc.body
    previous = body.get("previousCheckpointId")
    return CheckpointRecord(
        case_id=str(body["caseId"]),
        checkpoint_id=doc.id,
        workflow_name=str(body["workflowName"]),
        graph_hash=str(body["graphHash"]),
        previous_checkpoint_id=None if previous is None else str(previous),
        pending_request_ids=tuple(str(rid) for rid in body.get("pendingRequestIds") or ()),
        iteration=int(body["iteration"]),
        seq=int(body["seq"]),
        created_at=str(body.get("createdAt", "")),
        encoded_bytes=int(body.get("encodedBytes", 0)),
        ts=doc.ts,
    )


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _blocked_types(exc: BaseException) -> list[str]:
    """The ``module:QualName`` keys the restricted unpickler refused, anywhere in ``exc``'s chain."""
    found: list[str] = []
    for link in _chain(exc):
        for name in _BLOCKED_TYPE.findall(str(link)):
            if name not in found:
                found.append(name)
    return found


def _describe(exc: BaseException) -> str:
    """One line: the exception and, when it wraps another, the innermost cause."""
    links = list(_chain(exc))
    text = f"{type(exc).__name__}: {exc}"
    if len(links) > 1:
        root = links[-1]
        text += f" (caused by {type(root).__name__}: {root})"
    return text
