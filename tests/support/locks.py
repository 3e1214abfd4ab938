"""A SQLite database held by another writer: the real lock a busy store or queue meets."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """Another process's writer holding the SQLite database at ``path``: every write waits for its busy
    timeout until the block is left."""
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        other.execute("BEGIN EXCLUSIVE")
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()
