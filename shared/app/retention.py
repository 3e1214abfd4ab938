"""How long each stored document is kept: one policy, applied where every write passes.

Every container's documents expire by Cosmos DB's time to live: a document carrying ``ttl`` (seconds) is
deleted that long after its last write (``infra/app/cosmos.bicep`` turns it on with ``defaultTtl: -1``, so
nothing without its own ``ttl`` expires; the SQLite store honours the same field). :class:`Retention`
decides a document's ``ttl`` from its container and its body alone, and :class:`RetainingStore` stamps it
on every write, so the code that writes documents knows nothing about retention.

What expires, and what is kept however old (a person may still need it):

=============  ===========================================  =====================================
container      expires (after the setting, from last write)  kept
=============  ===========================================  =====================================
cases          ``closed`` or ``approved``, gate closed       every other status; an open gate
               (``CLOSED_CASE_RETENTION_DAYS``)
effects        ``done`` or ``failed`` once their case is     ``started``, ``needs_reconciliation``;
               closed or approved                            every effect of a case not final
               (``SETTLED_EFFECT_RETENTION_DAYS``)
checkpoints    a run's checkpoints without pending requests  -
               (``FINISHED_CHECKPOINT_RETENTION_DAYS``); a
               pause awaiting a person, as a closed case;
               every checkpoint of a case once it is final
health         notified alerts (``ALERT_RETENTION_DAYS``);   unnotified alerts; checkpoint
               alerted checkpoint failures, rejected events  failures not yet alerted; cursors
               and lookup failures                           and the clock
               (``FAILURE_RETENTION_DAYS``); delivery,
               answer and fact-clock records, as a closed
               case (they dedupe and order its events)
=============  ===========================================  =====================================

A delivery record that expired leaves the delivery id judged by its body all the same: the case it changed
remembers the body's digest for as long as the case exists (``shared.handlers.door``), and sets aside the
same id with another body.

A setting of 0 keeps those documents forever. A document that moves back out of a final state (a
``po.updated`` reopens an approved case) loses its ``ttl`` with that write. An effect's own body cannot say
whether it is still needed: the money rule counts a case's credit-note requests from the ledger for as long
as the case can decide again, so effects are stamped only when their case becomes final, and unstamped
(``ttl: -1``) when it is reopened. A pause checkpoint that expires
before its answer comes is not a lost answer: the answer then rebuilds the decision from the case document
(``shared.workflow.runner``), as for any checkpoint it cannot use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from casekeeper import Document, DocumentStore, Query
from casekeeper.errors import ConcurrencyConflict, StoreError
from casekeeper.stores import Scalar

log = logging.getLogger("casekeeper.retention")

DAY = 86400
TTL_FIELD = "ttl"
FINAL_CASE_STATUSES = frozenset({"closed", "approved"})
SETTLED_EFFECT_STATUSES = frozenset({"done", "failed"})
FAILURE_KINDS = frozenset({"checkpoint_failure", "rejected_event", "lookup_failures"})
DEDUPLICATION_KINDS = frozenset({"delivery", "approval_answer", "fact_clock"})
CHECKPOINT_KIND = "checkpoint"
PAUSED_STATUS = "awaiting_approval"
NEVER = -1
"""The ``ttl`` of a document that never expires (Cosmos DB's; a patch cannot remove a field)."""


def _history(case: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    history = case.get("history")
    return [t for t in history if isinstance(t, Mapping)] if isinstance(history, list) else []


def _seconds(days: float) -> int | None:
    """Days as whole seconds (at least one); ``None`` for 0, which means "keep forever"."""
    return max(1, round(days * DAY)) if days > 0 else None


@dataclass(frozen=True)
class Retention:
    """Days each kind of finished document is kept after its last write; 0 keeps it forever."""

    closed_case_days: float = 90.0
    settled_effect_days: float = 90.0
    finished_checkpoint_days: float = 7.0
    alert_days: float = 30.0
    failure_days: float = 30.0

    def ttl(self, container: str, body: Mapping[str, Any]) -> int | None:
        """The ``ttl`` (seconds) the document ``body`` in ``container`` is to carry; ``None``: none, kept."""
        if container == "cases":
            # Never while an effect on it is open (its entry would expire with it).
            final = body.get("status") in FINAL_CASE_STATUSES and not body.get("openEffects")
            return _seconds(self.closed_case_days) if final else None
        if container == "effects":
            return None  # stamped when its case becomes final (RetainingStore), never by its own write
        if container == "checkpoints":
            if body.get("kind") == CHECKPOINT_KIND and body.get("pendingRequestIds"):
                return _seconds(self.closed_case_days)  # a pause: a person's answer may still resume it
            return _seconds(self.finished_checkpoint_days)
        if container == "health":
            return self._health_ttl(body)
        return None

    def _health_ttl(self, body: Mapping[str, Any]) -> int | None:
        kind = body.get("kind")
        if body.get("record") == "alert":  # alerts are spread over partitions alert-NN
            return _seconds(self.alert_days) if body.get("notified") is True else None
        # Checkpoint failures are spread over partitions checkpoint_failure-NN.
        checkpoint_failure = body.get("record") == "checkpoint_failure"
        if checkpoint_failure and body.get("alerted") is False:
            return None  # still owed its alert
        if checkpoint_failure or kind in FAILURE_KINDS:
            return _seconds(self.failure_days)
        if kind in DEDUPLICATION_KINDS:
            return _seconds(self.closed_case_days)
        return None

    def stamped(self, container: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` with its ``ttl`` set as :meth:`ttl` decides, or removed when it is to be kept."""
        stamped = {key: value for key, value in body.items() if key != TTL_FIELD}
        ttl = self.ttl(container, stamped)
        if ttl is not None:
            stamped[TTL_FIELD] = ttl
        return stamped


class RetainingStore:
    """A :class:`~casekeeper.core.ports.DocumentStore` that stamps every written document's ``ttl`` from a
    :class:`Retention` before the write reaches ``inner``. Reads pass through unchanged; so does any other
    attribute of ``inner`` (the SQLite store's change feed, ``ensure_containers``).

    ``update_if`` sets only some fields, so the ``ttl`` it implies is known after the write: when it
    differs from the stored one, the document is replaced once more on its new ETag (a write that lost a
    race meanwhile is left alone: the winner stamped its own). When a case becomes final, its settled
    effects, and if it ever waited for a person its checkpoints, are stamped (best effort: a failure is
    logged, and they are kept longer). When it is reopened its effects are unstamped, and a failure there
    raises the store's error after the case's own write: the event is retried, and the next write of the
    case unstamps them, so an effect the money rule counts never expires under an open case."""

    def __init__(self, inner: DocumentStore, retention: Retention) -> None:
        self.inner = inner
        self.retention = retention

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy, pickle): never recurse
            raise AttributeError(name)
        return getattr(self.inner, name)

    def create(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        doc = self.inner.create(container, partition, doc_id, self.retention.stamped(container, body))
        return self._after(doc)

    def upsert(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        doc = self.inner.upsert(container, partition, doc_id, self.retention.stamped(container, body))
        return self._after(doc)

    def replace(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any], *, etag: str) -> Document:
        doc = self.inner.replace(container, partition, doc_id, self.retention.stamped(container, body), etag=etag)
        return self._after(doc)

    def update_if(
        self,
        container: str,
        partition: str,
        doc_id: str,
        *,
        where: Mapping[str, Scalar],
        set_fields: Mapping[str, Any],
    ) -> Document:
        doc = self.inner.update_if(container, partition, doc_id, where=where, set_fields=set_fields)
        stamped = self.retention.stamped(container, doc.body)
        if stamped.get(TTL_FIELD) == doc.body.get(TTL_FIELD):
            return self._after(doc)
        try:
            doc = self.inner.replace(container, partition, doc_id, stamped, etag=doc.etag)
        except ConcurrencyConflict:
            return doc  # written again meanwhile, through this policy too
        return self._after(doc)

    def read(self, container: str, partition: str, doc_id: str) -> Document | None:
        return self.inner.read(container, partition, doc_id)

    def delete(self, container: str, partition: str, doc_id: str, *, etag: str | None = None) -> bool:
        return self.inner.delete(container, partition, doc_id, etag=etag)

    def query(self, container: str, query: Query) -> list[Document]:
        return self.inner.query(container, query)

    def now(self) -> float:
        return self.inner.now()

    def close(self) -> None:
        self.inner.close()

    def _after(self, doc: Document) -> Document:
        """A case write's consequences for its effects and checkpoints. Only cases whose history names an
        effect, or that waited for a person, have any: the others cost no extra store operation."""
        if doc.container != "cases":
            return doc
        history = _history(doc.body)
        has_effects = any(t.get("effectKey") for t in history)
        if TTL_FIELD in doc.body:
            effect_ttl = _seconds(self.retention.settled_effect_days)
            if has_effects and effect_ttl is not None:
                self._restamp("effects", doc.id, Query(partition=doc.id), lambda body: _settled(body, effect_ttl))
            checkpoint_ttl = _seconds(self.retention.finished_checkpoint_days)
            if checkpoint_ttl is not None and any(t.get("status") == PAUSED_STATUS for t in history):
                query = Query(partition=doc.id, equals={"kind": CHECKPOINT_KIND})
                self._restamp("checkpoints", doc.id, query, lambda body: _shortened(body, checkpoint_ttl))
        elif has_effects and any(t.get("status") in FINAL_CASE_STATUSES for t in history):
            # Reopened: the money rule needs its effects again for as long as the case stays open.
            self._restamp("effects", doc.id, Query(partition=doc.id), _unstamped, strict=True)
        return doc

    def _restamp(
        self,
        container: str,
        case_id: str,
        query: Query,
        wanted: Callable[[dict[str, Any]], int | None],
        *,
        strict: bool = False,
    ) -> None:
        """Set ``ttl`` to ``wanted(body)`` on each document ``query`` finds (``None``: leave it). A store
        failure is logged, or raised when ``strict``."""
        try:
            for doc in self.inner.query(container, query):
                ttl = wanted(doc.body)
                if ttl is None or doc.body.get(TTL_FIELD) == ttl:
                    continue
                try:
                    self.inner.update_if(container, case_id, doc.id, where={}, set_fields={TTL_FIELD: ttl})
                except ConcurrencyConflict:
                    continue  # deleted meanwhile (a pruned checkpoint)
        except StoreError as exc:
            if strict:
                raise
            log.warning("case %s: the ttl of its %s was not updated (%s)", case_id, container, exc)


def _settled(effect: Mapping[str, Any], ttl: int) -> int | None:
    return ttl if effect.get("status") in SETTLED_EFFECT_STATUSES else None


def _shortened(checkpoint: Mapping[str, Any], ttl: int) -> int | None:
    current = checkpoint.get(TTL_FIELD)
    return None if isinstance(current, int) and 0 < current <= ttl else ttl


def _unstamped(effect: Mapping[str, Any]) -> int | None:
    current = effect.get(TTL_FIELD)
    return NEVER if isinstance(current, int) and current > 0 else None


def backend(store: DocumentStore) -> DocumentStore:
    """The store a :class:`RetainingStore` wraps (``store`` itself otherwise): for code that needs the
    backend's own type, such as the local host's change feed on SQLite."""
    return store.inner if isinstance(store, RetainingStore) else store
