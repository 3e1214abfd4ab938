"""Connections to one SQLite file, as every SQLite-backed part of Casekeeper opens them.

The document store, the local session queue and the local change feed share this: a connection per
thread (``sqlite3`` connections are not safe to share), WAL so readers never block the writer,
``synchronous=FULL`` so an acknowledged write survives a power cut and not only a killed process, a
busy timeout so writers from other processes wait instead of failing, and writes in
``BEGIN IMMEDIATE`` so a read-then-write is atomic across threads and processes.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from shared.core.errors import StoreError, StoreUnavailable


class SqliteConnections:
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

    def get(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use). Raises ``StoreError`` once closed."""
        if self._closed:
            raise StoreError(f"{self._what} is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with translate_sqlite_errors():
                conn = sqlite3.connect(
                    self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout * 1000)}")
                if self._on_connect is not None:
                    self._on_connect(conn)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed on success, rolled back on any exception."""
        conn = self.get()
        with translate_sqlite_errors():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection opened here; later use raises ``StoreError``."""
        self._closed = True
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


@contextmanager
def translate_sqlite_errors() -> Iterator[None]:
    """SQLite's errors, translated once: a lock timeout is transient, anything else is a ``StoreError``."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        text = str(exc).lower()
        if "locked" in text or "busy" in text:
            raise StoreUnavailable(f"sqlite busy: {exc}") from exc
        raise StoreError(f"sqlite: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite: {exc}") from exc
