"""Connections to one SQLite file, as every SQLite-backed part of Casekeeper opens them.

The document store, the local session queue and the local change feed share this: a connection per
thread for reads (``sqlite3`` connections are not safe to use from two threads at once), WAL so
readers never block the writer, ``synchronous=FULL`` so an acknowledged write survives a power cut and
not only a killed process, a busy timeout so writers from other processes wait instead of failing, and
writes in ``BEGIN IMMEDIATE`` so a read-then-write is atomic across threads and processes.

Writes are group-committed. ``synchronous=FULL`` makes every commit wait for the disk (an ``fsync`` of
the WAL) while holding the file's one write lock, so with several threads writing, the disk, not the
CPU, sets the pace. The writes of one instance's threads therefore go through one writer connection,
one at a time, each in a ``SAVEPOINT`` of a shared ``BEGIN IMMEDIATE`` transaction: a write whose body
raises is rolled back to its savepoint alone; a write that succeeded returns only once the transaction
holding it has committed. The transaction commits when no other thread is waiting to write (or after
:attr:`SqliteConnections.MAX_BATCH` writes), so an uncontended write commits at once, and
writes that queued up behind a commit share the next one. Each write is still atomic and isolated
(the writes of a batch run one after another), and durable once acknowledged: if the commit fails,
every write of its batch raises and none of them happened. A write that raises (a conflict, say) also
waits for the commit before raising, since what it found may be an earlier write of its batch.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from casekeeper.core.errors import StoreError, StoreUnavailable


class _Batch:
    """The writes of one group-committed transaction, and how that transaction ended."""

    __slots__ = ("done", "error", "turns")

    def __init__(self) -> None:
        self.turns = 0
        """Writes that had their turn in it (whether they succeeded or were rolled back)."""
        self.done = False
        self.error: BaseException | None = None
        """Why the transaction did not commit: every write waiting for it raises this."""


class SqliteConnections:
    MAX_BATCH = 32
    """The most writes one group-committed transaction takes before it commits."""

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 30.0,
        what: str = "store",
        on_connect: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self._on_connect = on_connect
        self._busy_timeout = busy_timeout
        self._what = what
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        # The group commit's state, all under _turn: whose turn it is to use the writer connection,
        # how many threads wait for a turn, and the batch of the open transaction.
        self._turn = threading.Condition()
        self._busy: int | None = None
        """The thread whose turn it is (``threading.get_ident()``), or ``None``."""
        self._queued = 0
        self._batch: _Batch | None = None
        self._writer: sqlite3.Connection | None = None

    def get(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use). Raises ``StoreError`` once closed."""
        if self._closed:
            raise StoreError(f"{self._what} is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _connect(self) -> sqlite3.Connection:
        with translate_sqlite_errors():
            _create_private(self.path)
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout * 1000)}")
            if self._on_connect is not None:
                self._on_connect(conn)
        with self._lock:
            self._all.append(conn)
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write (``BEGIN IMMEDIATE``, group-committed): durable when the block ends without an
        exception, undone entirely when it raises. Use only the connection it yields inside the block.

        Raises :class:`~casekeeper.core.errors.StoreUnavailable` when the file (or this instance's other
        writers) stay busy past the busy timeout, and ``StoreError`` when the commit fails.
        """
        conn, batch = self._take_turn()
        try:
            with translate_sqlite_errors():
                conn.execute("SAVEPOINT casekeeper_write")
        except BaseException:
            self._end_turn(conn, batch)
            raise
        try:
            yield conn
            with translate_sqlite_errors():
                conn.execute("RELEASE casekeeper_write")
        except BaseException as exc:
            self._undo(conn, batch)
            self._end_turn(conn, batch)
            # A refusal may rest on what earlier writes of the batch did (a create that found the id
            # taken): it is said only once they are committed, and not at all if they were not.
            self._await(batch)
            if batch.error is not None:
                raise translated(batch.error, "a write was not committed: ") from exc
            raise
        self._end_turn(conn, batch)
        self._await(batch)
        if batch.error is not None:
            raise translated(batch.error, "a write was not committed: ") from batch.error

    def _await(self, batch: _Batch) -> None:
        with self._turn:
            while not batch.done:
                self._turn.wait()

    def _take_turn(self) -> tuple[sqlite3.Connection, _Batch]:
        """Wait for the writer connection; join its open transaction, or begin one."""
        me = threading.get_ident()
        deadline = time.monotonic() + self._busy_timeout
        with self._turn:
            if self._busy == me:
                raise StoreError(f"{self._what}: a write inside a write of the same thread")
            self._queued += 1
            try:
                while self._busy is not None and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise StoreUnavailable(f"sqlite busy: {self._what} writers queued past the busy timeout")
                    self._turn.wait(left)
                if self._closed:
                    raise StoreError(f"{self._what} is closed")
                self._busy = me
            finally:
                self._queued -= 1
            batch = self._batch
        try:
            if self._writer is None:
                self._writer = self._connect()
            conn = self._writer
            if batch is None:
                with translate_sqlite_errors():
                    conn.execute("BEGIN IMMEDIATE")
                batch = _Batch()
                with self._turn:
                    self._batch = batch
        except BaseException:
            with self._turn:
                self._busy = None
                self._turn.notify_all()
            raise
        return conn, batch

    def _undo(self, conn: sqlite3.Connection, batch: _Batch) -> None:
        """Roll back this write alone; if SQLite rolled back the whole transaction, fail its batch."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK TO casekeeper_write")
                conn.execute("RELEASE casekeeper_write")
            elif batch.error is None:
                batch.error = StoreError("SQLite rolled the transaction back")
        except sqlite3.Error as exc:
            batch.error = exc

    def _end_turn(self, conn: sqlite3.Connection, batch: _Batch) -> None:
        """Let the next writer add to the transaction, or commit it when nobody waits (or it is full)."""
        with self._turn:
            batch.turns += 1
            if batch.error is None and self._queued > 0 and batch.turns < self.MAX_BATCH and not self._closed:
                self._busy = None
                self._turn.notify_all()
                return
        if batch.error is None:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                batch.error = exc
        if batch.error is not None:
            with contextlib.suppress(sqlite3.Error):  # if this fails too, the next BEGIN says why
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        with self._turn:
            batch.done = True
            self._batch = None
            self._busy = None
            self._turn.notify_all()

    def close(self) -> None:
        """Close every connection opened here; later use raises ``StoreError``."""
        self._closed = True
        with self._turn:
            if self._batch is not None:  # writes waiting for a commit that will not come now
                self._batch.error = StoreError(f"{self._what} was closed before the commit")
                self._batch.done = True
            self._turn.notify_all()
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


@contextmanager
def translate_sqlite_errors() -> Iterator[None]:
    """SQLite's errors, translated once: a lock timeout is transient, anything else is a ``StoreError``."""
    try:
        yield
    except sqlite3.Error as exc:
        raise translated(exc) from exc


def translated(exc: BaseException, context: str = "") -> StoreError:
    """The ``StoreError`` for ``exc``: ``StoreUnavailable`` for a lock timeout (transient)."""
    if isinstance(exc, StoreError):
        kind = StoreUnavailable if isinstance(exc, StoreUnavailable) else StoreError
        return kind(f"{context}{exc}")
    text = str(exc).lower()
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return StoreUnavailable(f"sqlite busy: {context}{exc}")
    return StoreError(f"sqlite: {context}{exc}")


def _create_private(path: Path) -> None:
    """Create the database file readable by this user only, before SQLite does (with the umask's mode).
    SQLite gives its -wal and -shm files the database file's permissions, so they follow."""
    name = str(path)
    if name == ":memory:" or name.startswith("file:"):
        return
    with contextlib.suppress(FileExistsError):
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
