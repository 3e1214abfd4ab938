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
effects        ``done`` or ``failed``                        ``started``, ``needs_reconciliation``
               (``SETTLED_EFFECT_RETENTION_DAYS``)
checkpoints    a run's checkpoints without pending requests  -
               (``FINISHED_CHECKPOINT_RETENTION_DAYS``); a
               pause awaiting a person, as a closed case;
               every checkpoint of a case once it is final
health         notified alerts (``ALERT_RETENTION_DAYS``);   unnotified alerts; checkpoint
               alerted checkpoint failures, rejected events  failures not yet alerted; cursors
               and lookup failures                           and the clock
               (``FAILURE_RETENTION_DAYS``); delivery and
               answer records, as a closed case (they
               deduplicate its events)
=============  ===========================================  =====================================

A setting of 0 keeps those documents forever. A document that moves back out of a final state (a
``po.updated`` reopens an approved case) loses its ``ttl`` with that write. A pause checkpoint that expires
before its answer comes is not a lost answer: the answer then rebuilds the decision from the case document
(``shared.workflow.runner``), as for any checkpoint it cannot use.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.core.errors import ConcurrencyConflict, StoreError
from shared.core.ports import Document, DocumentStore, Query, Scalar

log = logging.getLogger("casekeeper.retention")

DAY = 86400
TTL_FIELD = "ttl"
FINAL_CASE_STATUSES = frozenset({"closed", "approved"})
SETTLED_EFFECT_STATUSES = frozenset({"done", "failed"})
FAILURE_KINDS = frozenset({"checkpoint_failure", "rejected_event", "lookup_failures"})
DEDUPLICATION_KINDS = frozenset({"delivery", "approval_answer"})
CHECKPOINT_KIND = "checkpoint"
PAUSED_STATUS = "awaiting_approval"


def _paused(case: Mapping[str, Any]) -> bool:
    """Whether the case ever waited for a person: only then can it hold a pause checkpoint, whose ``ttl`` is
    longer than a finished run's. Other cases cost no extra store operation when they close."""
    history = case.get("history")
    return isinstance(history, list) and any(
        isinstance(t, Mapping) and t.get("status") == PAUSED_STATUS for t in history
    )


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
            final = body.get("status") in FINAL_CASE_STATUSES and not body.get("gateOpen")
            return _seconds(self.closed_case_days) if final else None
        if container == "effects":
            settled = body.get("status") in SETTLED_EFFECT_STATUSES
            return _seconds(self.settled_effect_days) if settled else None
        if container == "checkpoints":
            if body.get("kind") == CHECKPOINT_KIND and body.get("pendingRequestIds"):
                return _seconds(self.closed_case_days)  # a pause: a person's answer may still resume it
            return _seconds(self.finished_checkpoint_days)
        if container == "health":
            return self._health_ttl(body)
        return None

    def _health_ttl(self, body: Mapping[str, Any]) -> int | None:
        kind = body.get("kind")
        if kind == "alert":
            return _seconds(self.alert_days) if body.get("notified") is True else None
        if kind == "checkpoint_failure" and body.get("alerted") is False:
            return None  # still owed its alert
        if kind in FAILURE_KINDS:
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
    """A :class:`~shared.core.ports.DocumentStore` that stamps every written document's ``ttl`` from a
    :class:`Retention` before the write reaches ``inner``. Reads pass through unchanged; so does any other
    attribute of ``inner`` (the SQLite store's change feed, ``ensure_containers``).

    ``update_if`` sets only some fields, so the ``ttl`` it implies is known after the write: when it
    differs from the stored one, the document is replaced once more on its new ETag (a write that lost a
    race meanwhile is left alone: the winner stamped its own). When a case that ever waited for a person
    becomes final, its checkpoints are stamped to expire with the finished run's retention (best effort: a
    failure is logged, and those checkpoints expire on their own ``ttl`` instead)."""

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
        if doc.container == "cases" and TTL_FIELD in doc.body and _paused(doc.body):
            self._expire_checkpoints(doc.id)
        return doc

    def _expire_checkpoints(self, case_id: str) -> None:
        """Stamp the final case's checkpoints (a pause among them would otherwise wait out a longer ttl)."""
        ttl = _seconds(self.retention.finished_checkpoint_days)
        if ttl is None:
            return
        try:
            docs = self.inner.query("checkpoints", Query(partition=case_id, equals={"kind": CHECKPOINT_KIND}))
            for doc in docs:
                current = doc.body.get(TTL_FIELD)
                if isinstance(current, int) and 0 < current <= ttl:
                    continue
                try:
                    self.inner.update_if("checkpoints", case_id, doc.id, where={}, set_fields={TTL_FIELD: ttl})
                except ConcurrencyConflict:
                    continue  # pruned meanwhile
        except StoreError as exc:
            log.warning("case %s: its checkpoints keep their own ttl (%s)", case_id, exc)


def backend(store: DocumentStore) -> DocumentStore:
    """The store a :class:`RetainingStore` wraps (``store`` itself otherwise): for code that needs the
    backend's own type, such as the local host's change feed on SQLite."""
    return store.inner if isinstance(store, RetainingStore) else store
