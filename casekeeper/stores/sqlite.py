"""SQLite backend of the document port: one file, WAL, safe for several processes at once.

Every write runs in ``BEGIN IMMEDIATE``, so writers serialise on the database lock and a
conditional write (compare the ETag, then write) is atomic across threads and processes. Each
thread gets its own connection. ``ts`` comes from the store's clock inside the write (the machine's
wall clock, or a test's clock), never from the caller.

``seq`` orders each container's writes: the change feed the local host replays follows it (Cosmos DB's
change feed, in commit order), and it doubles as the ETag. A write takes the container's highest ``seq``
plus one, read from the ``(container, seq)`` index inside its own write transaction: writers are
serialised, so that is commit order, and it costs no row beyond the document's own. A ``seq`` is never
given out twice in a container, so that a change-feed continuation never skips a later write and an
old ETag never matches a recreated document: when a delete removes the container's highest ``seq``, it
is kept in ``seq_floors`` (deletes only). The schema's version is the file's ``user_version``.

Time to live, as Cosmos DB has it: a document whose body carries a positive ``ttl`` (seconds) expires that
long after its last write (``ts``). An expired document is gone for every read, query, conditional write
and the change feed at once; its row is purged by a write at most every :data:`PURGE_INTERVAL` seconds
(or :meth:`SqliteDocumentStore.purge_expired`), through an index on the expiry time.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from casekeeper.core.errors import AlreadyExists, ConcurrencyConflict, StoreError
from casekeeper.core.ids import check_document_id
from casekeeper.core.ports import CONTAINERS, Document, Query, Scalar, partition_of
from casekeeper.stores.sqlite_connections import SqliteConnections, translate_sqlite_errors

_NOW = "casekeeper_now()"
"""The store's clock in SQL: the wall clock of the machine (every process sharing the file shares it), or
the clock a test hands in."""
_EXPIRES = "(ts + json_extract(body, '$.ttl'))"
_HAS_TTL = "json_extract(body, '$.ttl') > 0"
_LIVE = f"NOT coalesce({_HAS_TTL} AND {_EXPIRES} <= {_NOW}, 0)"  # no ttl: NULL, which must count as live
"""True for a row that has not expired (Cosmos DB's ``ttl``: seconds after the last write)."""
PURGE_INTERVAL = 60.0
"""Seconds between two purges of expired rows by writes of one store instance."""
_FIELD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")

SCHEMA_VERSION = 1
"""The store file's layout (``PRAGMA user_version``), created whole on a new file. A file of another layout
is refused, never read as this one (docs/design.md#formats)."""

_EXPIRY_INDEX = f"CREATE INDEX IF NOT EXISTS documents_by_expiry ON documents {_EXPIRES} WHERE {_HAS_TTL}"
"""Expired rows found without a scan."""

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS documents (
        container TEXT NOT NULL,
        partition TEXT NOT NULL,
        id        TEXT NOT NULL,
        body      TEXT NOT NULL,
        etag      TEXT NOT NULL,
        ts        REAL NOT NULL,
        seq       INTEGER NOT NULL,
        PRIMARY KEY (container, partition, id)
    )""",
    "CREATE INDEX IF NOT EXISTS documents_by_seq ON documents (container, seq)",
    "CREATE INDEX IF NOT EXISTS documents_by_ts ON documents (container, ts)",
    _EXPIRY_INDEX,
    # The highest seq a delete took out of a container while it was the highest there.
    "CREATE TABLE IF NOT EXISTS seq_floors (container TEXT PRIMARY KEY, seq INTEGER NOT NULL)",
)

_QUERY_INDEXES = tuple(
    # The fields the sweeps, the pages and the drain check ask about by equality, with the keyset order
    # after them: a count or a page then reads the index entries that match, never every document of the
    # container. The expressions are the text the queries use (``_where_fields``), or SQLite would not use them.
    f"CREATE INDEX IF NOT EXISTS documents_by_{name} ON documents (container, json_extract(body, '$.{name}'), ts, id)"
    for name in ("status", "openEffects", "kind", "caseId")
)

_NEXT_SEQ = (
    "SELECT max(coalesce((SELECT max(seq) FROM documents WHERE container = ?1), 0), "
    "coalesce((SELECT seq FROM seq_floors WHERE container = ?1), 0)) + 1"
)


class SqliteDocumentStore:
    """:class:`~casekeeper.core.ports.DocumentStore` on one SQLite file."""

    def __init__(
        self, path: str | Path, *, busy_timeout: float = 30.0, clock: Callable[[], float] | None = None
    ) -> None:
        """``clock`` replaces the wall clock as the store's clock (tests move time instead of sleeping)."""
        self.path = Path(path)
        now = clock or time.time

        def register(conn: sqlite3.Connection) -> None:
            conn.create_function("casekeeper_now", 0, lambda: float(now()))

        self._db = SqliteConnections(self.path, busy_timeout=busy_timeout, what="store", on_connect=register)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._open_schema()
        self._purge_lock = threading.Lock()
        self._next_purge = 0.0

    # --- connections ----------------------------------------------------------------------------

    def _open_schema(self) -> None:
        """Create the layout in a new file; open a file of this layout as it is. Raises
        :class:`~casekeeper.core.errors.StoreError` naming both layouts for a file of another one, and for a
        file that holds tables but no layout (not a Casekeeper store)."""
        with translate_sqlite_errors():
            (version,) = self._db.get().execute("PRAGMA user_version").fetchone()
        if version == SCHEMA_VERSION:
            return
        with self._db.write() as conn:  # several processes may open a new file at once: one creates it
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version == SCHEMA_VERSION:
                return
            if version != 0:
                raise StoreError(
                    f"{self.path}: store layout {version} is not the layout this build reads ({SCHEMA_VERSION})"
                )
            (tables,) = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()
            if tables:
                raise StoreError(f"{self.path} holds tables but no Casekeeper store layout: not a store file")
            for statement in (*_SCHEMA, *_QUERY_INDEXES):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _next_seq(self, conn: sqlite3.Connection, container: str) -> int:
        """The container's next ``seq``, inside the caller's write transaction (two index lookups, no write)."""
        return int(conn.execute(_NEXT_SEQ, (container,)).fetchone()[0])

    # --- the port -------------------------------------------------------------------------------

    def create(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        """Insert if absent, in one transaction; ``AlreadyExists`` when the id is taken (``DocumentStore.create``)."""
        data = _checked(container, partition, doc_id, body)
        with self._db.write() as conn:
            self._purge_now_and_then(conn)
            self._purge(conn, "AND container = ? AND partition = ? AND id = ?", (container, partition, doc_id))
            seq = self._next_seq(conn, container)
            try:
                conn.execute(
                    f"INSERT INTO documents (container, partition, id, body, etag, ts, seq) "
                    f"VALUES (?, ?, ?, ?, ?, {_NOW}, ?)",
                    (container, partition, doc_id, data, str(seq), seq),
                )
            except sqlite3.IntegrityError as exc:
                raise AlreadyExists(f"{container}/{doc_id} exists", container=container, doc_id=doc_id) from exc
            return self._read_in(conn, container, partition, doc_id)

    def read(self, container: str, partition: str, doc_id: str) -> Document | None:
        """Point read by primary key; ``None`` when absent (``DocumentStore.read``)."""
        check_document_id(container, doc_id)
        with translate_sqlite_errors():
            row = (
                self._db.get()
                .execute(
                    "SELECT container, partition, id, body, etag, ts FROM documents "
                    f"WHERE container = ? AND partition = ? AND id = ? AND {_LIVE}",
                    (container, partition, doc_id),
                )
                .fetchone()
            )
        return _document(row) if row is not None else None

    def replace(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any], *, etag: str) -> Document:
        """Replace if the stored ETag is ``etag``, else ``ConcurrencyConflict`` (``DocumentStore.replace``)."""
        data = _checked(container, partition, doc_id, body)
        with self._db.write() as conn:
            seq = self._next_seq(conn, container)
            cur = conn.execute(
                f"UPDATE documents SET body = ?, etag = ?, ts = {_NOW}, seq = ? "
                f"WHERE container = ? AND partition = ? AND id = ? AND etag = ? AND {_LIVE}",
                (data, str(seq), seq, container, partition, doc_id, etag),
            )
            if cur.rowcount != 1:
                raise ConcurrencyConflict(
                    f"{container}/{doc_id} changed or is gone (expected etag {etag})",
                    container=container,
                    doc_id=doc_id,
                )
            return self._read_in(conn, container, partition, doc_id)

    def update_if(
        self,
        container: str,
        partition: str,
        doc_id: str,
        *,
        where: Mapping[str, Scalar],
        set_fields: Mapping[str, Any],
    ) -> Document:
        """One ``UPDATE ... WHERE`` on the fields of ``where`` (``DocumentStore.update_if``)."""
        check_document_id(container, doc_id)
        if not set_fields:
            raise ValueError("update_if needs at least one field to set")
        for name in (*where, *set_fields):
            _check_field(name)
            if name in ("id", CONTAINERS.get(container)):
                raise ValueError(f"update_if may not test or set {name!r}")
        assignments = ", ".join(f"'$.{name}', json(?)" for name in set_fields)
        values = [json.dumps(value, separators=(",", ":"), allow_nan=False) for value in set_fields.values()]
        conditions, args = _where_fields(where)
        with self._db.write() as conn:
            seq = self._next_seq(conn, container)
            cur = conn.execute(
                f"UPDATE documents SET body = json_set(body, {assignments}), etag = ?, ts = {_NOW}, seq = ? "
                f"WHERE container = ? AND partition = ? AND id = ? AND {_LIVE} {conditions}",
                (*values, str(seq), seq, container, partition, doc_id, *args),
            )
            if cur.rowcount != 1:
                raise ConcurrencyConflict(
                    f"{container}/{doc_id} does not satisfy {dict(where)} (or is gone)",
                    container=container,
                    doc_id=doc_id,
                )
            return self._read_in(conn, container, partition, doc_id)

    def upsert(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        """Create or overwrite unconditionally (``DocumentStore.upsert``)."""
        data = _checked(container, partition, doc_id, body)
        with self._db.write() as conn:
            self._purge_now_and_then(conn)
            seq = self._next_seq(conn, container)
            conn.execute(
                f"INSERT INTO documents (container, partition, id, body, etag, ts, seq) "
                f"VALUES (?, ?, ?, ?, ?, {_NOW}, ?) "
                "ON CONFLICT (container, partition, id) DO UPDATE SET "
                "body = excluded.body, etag = excluded.etag, ts = excluded.ts, seq = excluded.seq",
                (container, partition, doc_id, data, str(seq), seq),
            )
            return self._read_in(conn, container, partition, doc_id)

    def delete(self, container: str, partition: str, doc_id: str, *, etag: str | None = None) -> bool:
        """Delete, conditionally on ``etag`` if given; ``False`` when absent (``DocumentStore.delete``)."""
        check_document_id(container, doc_id)
        with self._db.write() as conn:
            self._purge(conn, "AND container = ? AND partition = ? AND id = ?", (container, partition, doc_id))
            row = conn.execute(
                "SELECT etag, seq FROM documents WHERE container = ? AND partition = ? AND id = ?",
                (container, partition, doc_id),
            ).fetchone()
            if row is None:
                if etag is not None:
                    raise ConcurrencyConflict(f"{container}/{doc_id} is gone", container=container, doc_id=doc_id)
                return False
            if etag is not None and row[0] != etag:
                raise ConcurrencyConflict(f"{container}/{doc_id} changed", container=container, doc_id=doc_id)
            conn.execute(
                "DELETE FROM documents WHERE container = ? AND partition = ? AND id = ?", (container, partition, doc_id)
            )
            (highest,) = conn.execute("SELECT max(seq) FROM documents WHERE container = ?", (container,)).fetchone()
            if highest is None or highest < row[1]:  # it held the highest seq: never give that out again
                conn.execute(
                    "INSERT INTO seq_floors (container, seq) VALUES (?, ?) "
                    "ON CONFLICT (container) DO UPDATE SET seq = max(seq, excluded.seq)",
                    (container, row[1]),
                )
            return True

    def query(self, container: str, query: Query) -> list[Document]:
        """The documents matching ``query``, one ``SELECT`` on the indexed fields (``DocumentStore.query``)."""
        sql = [f"SELECT container, partition, id, body, etag, ts FROM documents WHERE container = ? AND {_LIVE}"]
        args: list[Any] = [container]
        self._conditions(query, sql, args)
        if query.paged:
            if query.after is not None:
                sql.append("AND (ts > ? OR (ts = ? AND id > ?))")
                args.extend((query.after[0], query.after[0], query.after[1]))
            sql.append("ORDER BY ts ASC, id ASC")
        elif query.order_by_ts is not None:
            direction = "ASC" if query.order_by_ts == "asc" else "DESC"
            sql.append(f"ORDER BY ts {direction}, seq {direction}")
        if query.limit is not None:
            sql.append("LIMIT ?")
            args.append(int(query.limit))
        with translate_sqlite_errors():
            rows = self._db.get().execute(" ".join(sql), args).fetchall()
        return [_document(r) for r in rows]

    def count(self, container: str, query: Query) -> int:
        """How many documents match ``query``: one ``count(*)`` (``DocumentStore.count``)."""
        sql = [f"SELECT count(*) FROM documents WHERE container = ? AND {_LIVE}"]
        args: list[Any] = [container]
        self._conditions(query, sql, args)
        with translate_sqlite_errors():
            (found,) = self._db.get().execute(" ".join(sql), args).fetchone()
        return int(found)

    @staticmethod
    def _conditions(query: Query, sql: list[str], args: list[Any]) -> None:
        """The ``WHERE`` conditions of ``query`` (after ``container = ?``), appended to ``sql`` and ``args``."""
        if query.after is not None and not query.paged:
            raise ValueError("Query.after continues a paged query: set paged=True")
        if query.partition is not None:
            sql.append("AND partition = ?")
            args.append(query.partition)
        # Within one partition the primary key finds the documents; the fields' expression indexes must not
        # be chosen instead (a query for one case's checkpoints would scan every case's).
        conditions, condition_args = _where_fields(query.equals, indexed=query.partition is None)
        sql.append(conditions)
        args.extend(condition_args)
        if query.ts_before is not None:
            sql.append("AND ts < ?")
            args.append(query.ts_before)
        if query.ts_after is not None:
            sql.append("AND ts > ?")
            args.append(query.ts_after)

    def now(self) -> float:
        """The store's clock: this machine's wall clock, the one ``Document.ts`` is stamped with."""
        with translate_sqlite_errors():
            return float(self._db.get().execute(f"SELECT {_NOW}").fetchone()[0])

    def close(self) -> None:
        """Close this process's connections; the store is unusable afterwards."""
        self._db.close()

    # --- the change feed (what the local host replays) --------------------------------------------

    def changes_since(self, container: str, seq: int, *, limit: int = 100) -> list[tuple[int, Document]]:
        """Documents of ``container`` written after ``seq``, in commit order, each at its latest state.

        Like Cosmos DB's change feed (latest-version mode): a document written twice since ``seq``
        appears once, at its newest position. Returns ``(seq, document)`` pairs; pass the last ``seq``
        back as the continuation.
        """
        with translate_sqlite_errors():
            rows = (
                self._db.get()
                .execute(
                    "SELECT seq, container, partition, id, body, etag, ts FROM documents "
                    f"WHERE container = ? AND seq > ? AND {_LIVE} ORDER BY seq LIMIT ?",
                    (container, seq, limit),
                )
                .fetchall()
            )
        return [(int(r[0]), _document(r[1:])) for r in rows]

    # --- time to live -----------------------------------------------------------------------------

    def purge_expired(self) -> int:
        """Delete every expired row now; returns how many. Reads never see them anyway."""
        with self._db.write() as conn:
            return self._purge(conn)

    def _purge_now_and_then(self, conn: sqlite3.Connection) -> None:
        """Purge expired rows inside this write, at most every :data:`PURGE_INTERVAL` seconds."""
        with self._purge_lock:
            now = time.monotonic()
            if now < self._next_purge:
                return
            self._next_purge = now + PURGE_INTERVAL
        self._purge(conn)

    def _purge(self, conn: sqlite3.Connection, where: str = "", args: tuple[Any, ...] = ()) -> int:
        """Delete the expired rows matching ``where``, keeping each container's highest ``seq`` given out
        (as :meth:`delete` does) so that no ETag or change-feed position is reused."""
        expired = f"{_HAS_TTL} AND {_EXPIRES} <= {_NOW} {where}"
        conn.execute(
            f"INSERT INTO seq_floors (container, seq) SELECT container, max(seq) FROM documents WHERE {expired} "
            "GROUP BY container ON CONFLICT (container) DO UPDATE SET seq = max(seq, excluded.seq)",
            args,
        )
        return conn.execute(f"DELETE FROM documents WHERE {expired}", args).rowcount

    def _read_in(self, conn: sqlite3.Connection, container: str, partition: str, doc_id: str) -> Document:
        row = conn.execute(
            "SELECT container, partition, id, body, etag, ts FROM documents "
            "WHERE container = ? AND partition = ? AND id = ?",
            (container, partition, doc_id),
        ).fetchone()
        return _document(row)


def _checked(container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> str:
    if container not in CONTAINERS:
        raise ValueError(f"unknown container {container!r}")
    # SQLite could store any id; it refuses what Cosmos DB cannot, so that both backends agree.
    check_document_id(container, doc_id)
    if partition_of(container, body) != partition:
        raise ValueError(f"{container} document's partition field does not match {partition!r}")
    if body.get("id", doc_id) != doc_id:
        raise ValueError(f"body id {body.get('id')!r} does not match {doc_id!r}")
    return json.dumps({**body, "id": doc_id}, separators=(",", ":"), allow_nan=False)


def _where_fields(equals: Mapping[str, Scalar], *, indexed: bool = True) -> tuple[str, list[Any]]:
    """``AND``-ed SQL conditions for equality on top-level body fields (``id`` is the row's column).
    ``indexed=False`` writes them so that no expression index can serve them (a unary ``+``)."""
    plus = "" if indexed else "+"
    sql: list[str] = []
    args: list[Any] = []
    for name, value in equals.items():
        _check_field(name)
        if name == "id":
            sql.append("AND id = ?")
            args.append(value)
        elif value is None:
            sql.append(f"AND {plus}json_extract(body, '$.{name}') IS NULL")
        else:
            sql.append(f"AND {plus}json_extract(body, '$.{name}') = ?")
            args.append(int(value) if isinstance(value, bool) else value)
    return " ".join(sql), args


def _check_field(name: str) -> None:
    if not name or not set(name) <= _FIELD_CHARS:
        raise ValueError(f"field name {name!r} may hold only letters, digits and underscores")


def _document(row: tuple[Any, ...]) -> Document:
    container, partition, doc_id, body, etag, ts = row
    return Document(container=container, partition=partition, id=doc_id, body=json.loads(body), etag=etag, ts=float(ts))
