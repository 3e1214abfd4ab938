"""Cosmos DB's change feed, locally: one container of the SQLite document store, in commit order.

:class:`LocalChangeFeed` reads :meth:`SqliteDocumentStore.changes_since` and keeps its continuation
(the last ``seq`` handled) in a small table of its own, ``change_feed_continuations``, in the same
SQLite file as the documents, keyed by feed name (e.g. ``"reconciler:cases"``), as the Functions
host keeps a lease document per trigger. It uses its own connection to that file; the store is
only read through its public method.

Delivery is at least once: :meth:`LocalChangeFeed.poll` always starts from the persisted
continuation, and only :meth:`LocalChangeFeed.commit` moves it, so a crash (or an error) between
the two delivers the same changes again. Like Cosmos DB's latest-version mode, a document written
several times since the continuation appears once, at its newest position, and deletes do not
appear at all.

One consumer per feed name at a time (the Functions host ensures it with leases): two consumers of
one name would each get every batch, and the second commit of a batch raises
:class:`~casekeeper.core.errors.ConcurrencyConflict`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from casekeeper import CONTAINERS, ConcurrencyConflict
from casekeeper.stores.sqlite import SqliteDocumentStore
from casekeeper.stores.sqlite_connections import SqliteConnections, translate_sqlite_errors

if TYPE_CHECKING:
    from azure.functions import DocumentList

_SCHEMA = """
CREATE TABLE IF NOT EXISTS change_feed_continuations (
    name      TEXT PRIMARY KEY,
    container TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    updated   REAL NOT NULL
);
"""

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


@dataclass(frozen=True)
class ChangeBatch:
    """Changed documents, as the Cosmos DB trigger would deliver them, and where the batch ends.

    Each document is the stored body plus Cosmos-like system fields: ``id``, ``_ts`` (whole seconds
    since the epoch of the last write, as Cosmos gives it), ``_etag`` (the store's ETag, usable for
    a conditional write back to the same store) and ``_lsn`` (the write's sequence number).
    ``start`` is the continuation the batch was read from, ``continuation`` the one committing it
    moves to (equal to ``start`` for an empty batch).
    """

    feed: str
    container: str
    start: int
    continuation: int
    documents: list[dict[str, Any]] = field(repr=False)

    def __len__(self) -> int:
        return len(self.documents)


class LocalChangeFeed:
    """The change feed of one container of a :class:`SqliteDocumentStore`, under a persisted name.

    Raises ``ValueError`` when ``container`` is unknown or ``name`` is already used for another
    container in this file; :class:`~casekeeper.core.errors.StoreUnavailable` when the file stays locked
    past ``busy_timeout``, :class:`~casekeeper.core.errors.StoreError` for other SQLite failures.
    """

    def __init__(self, store: SqliteDocumentStore, container: str, name: str, *, busy_timeout: float = 30.0) -> None:
        if container not in CONTAINERS:
            raise ValueError(f"unknown container {container!r}")
        if not name:
            raise ValueError("a change feed needs a name (e.g. 'reconciler:cases')")
        self.store = store
        self.container = container
        self.name = name
        self._db = SqliteConnections(self.store.path, busy_timeout=busy_timeout, what="change feed")
        with self._db.write() as conn:
            conn.execute(_SCHEMA)
            conn.execute(
                f"INSERT INTO change_feed_continuations (name, container, seq, updated) VALUES (?, ?, 0, {_NOW}) "
                "ON CONFLICT (name) DO NOTHING",
                (name, container),
            )
            (stored,) = conn.execute(
                "SELECT container FROM change_feed_continuations WHERE name = ?", (name,)
            ).fetchone()
        if stored != container:
            raise ValueError(f"change feed {name!r} follows container {stored!r}, not {container!r}")

    # --- connections ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close this feed's own connections (the store is the caller's to close)."""
        self._db.close()

    # --- the feed -------------------------------------------------------------------------------

    @property
    def continuation(self) -> int:
        """The persisted continuation: the ``seq`` of the last change committed as handled."""
        with translate_sqlite_errors():
            row = (
                self._db.get()
                .execute("SELECT seq FROM change_feed_continuations WHERE name = ?", (self.name,))
                .fetchone()
            )
        return int(row[0])

    def poll(self, max_items: int = 100) -> ChangeBatch:
        """Up to ``max_items`` changes after the persisted continuation, in commit order.

        Does not move the continuation: polling again before :meth:`commit` returns the same changes
        (plus any newer ones, within ``max_items``). Raises ``ValueError`` when ``max_items < 1``.
        """
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items!r}")
        start = self.continuation
        changes = self.store.changes_since(self.container, start, limit=max_items)
        documents = [
            # System fields last: they win over body fields of the same name, as in Cosmos DB.
            {**doc.body, "id": doc.id, "_ts": int(doc.ts), "_etag": doc.etag, "_lsn": seq}
            for seq, doc in changes
        ]
        end = changes[-1][0] if changes else start
        return ChangeBatch(feed=self.name, container=self.container, start=start, continuation=end, documents=documents)

    def commit(self, batch: ChangeBatch) -> None:
        """Record ``batch`` as handled: the next :meth:`poll` starts after it.

        Committing the batch that was committed last again is a no-op. Raises ``ValueError`` for a
        batch of another feed, and :class:`~casekeeper.core.errors.ConcurrencyConflict` when the
        continuation moved since the batch was polled (another consumer of the same name committed).
        """
        if batch.feed != self.name or batch.container != self.container:
            raise ValueError(f"batch of feed {batch.feed!r} ({batch.container}) committed to {self.name!r}")
        with self._db.write() as conn:
            (current,) = conn.execute(
                "SELECT seq FROM change_feed_continuations WHERE name = ?", (self.name,)
            ).fetchone()
            if current == batch.continuation:
                return
            if current != batch.start:
                raise ConcurrencyConflict(
                    f"change feed {self.name!r} moved to {current} since this batch was polled at {batch.start}",
                    container=self.container,
                )
            conn.execute(
                f"UPDATE change_feed_continuations SET seq = ?, updated = {_NOW} WHERE name = ?",
                (batch.continuation, self.name),
            )


def to_document_list(batch: ChangeBatch) -> DocumentList:
    """The ``azure.functions.DocumentList`` a ``cosmos_db_trigger`` function receives for ``batch``."""
    import azure.functions as func

    return func.DocumentList([func.Document.from_dict(dict(doc)) for doc in batch.documents])
