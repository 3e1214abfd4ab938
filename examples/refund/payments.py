"""A payments service stand-in: one SQLite file, so several processes (and a killed one) share it.

It behaves as a payments API that honours idempotency keys: a payment made with a key is made once,
however often the key is sent, and can be looked up by key. Every request is counted, so the tests can
tell "called twice, paid once" from "called once". ``lose_reply`` makes the next request pay and then
fail as a lost reply would (the caller cannot tell whether it was paid); ``refuse`` makes requests fail
with a definite refusal; ``die_after_paying`` ends the process between paying and replying (failure point
F3: the payment exists, no reply ever came back); ``hold_after_paying`` holds the reply instead, for a
test to kill the process with SIGKILL meanwhile.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

from casekeeper import DownstreamRejected, OutcomeUnknown

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS payments (key TEXT PRIMARY KEY, case_id TEXT, amount TEXT, payment_id TEXT)",
    "CREATE TABLE IF NOT EXISTS requests (n INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT)",
    "CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT)",
)


class Payments:
    """The stand-in. ``pay`` and ``find`` are what the guarded call and the lookup use."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        with self._db() as db:
            for statement in _SCHEMA:
                db.execute(statement)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)  # autocommit: each write lands at once
        try:
            yield db
        finally:
            db.close()

    def pay(self, key: str, case_id: str, amount: str) -> dict[str, Any]:
        """Refund ``amount`` for ``case_id`` under idempotency key ``key``; returns the payment."""
        if Decimal(amount) <= 0:
            raise DownstreamRejected(f"amount must be positive, got {amount}", status=422)
        with self._db() as db:
            db.execute("INSERT INTO requests (key) VALUES (?)", (key,))
            if self._setting(db, "refuse"):
                raise DownstreamRejected("refused by the payments service", status=409)
            db.execute(
                "INSERT OR IGNORE INTO payments (key, case_id, amount, payment_id) VALUES (?, ?, ?, ?)",
                (key, case_id, amount, f"pay-{uuid.uuid4().hex[:12]}"),
            )
            if self._setting(db, "die_after_paying"):
                os._exit(17)
            if self._setting(db, "hold_after_paying"):
                time.sleep(60)  # the payment is made; the reply is held (a test kills the process meanwhile)
            if self._setting(db, "lose_reply"):
                db.execute("DELETE FROM settings WHERE name = 'lose_reply'")
                raise OutcomeUnknown("connection reset before the reply")
        found = self.find(key)
        assert found is not None
        return found

    def find(self, key: str) -> dict[str, Any] | None:
        """The payment made with ``key``, or ``None``."""
        with self._db() as db:
            row = db.execute("SELECT case_id, amount, payment_id FROM payments WHERE key = ?", (key,)).fetchone()
        return None if row is None else {"caseId": row[0], "amount": row[1], "paymentId": row[2]}

    def set(self, name: str, on: bool = True) -> None:
        """Turn a behaviour on or off: ``refuse``, ``lose_reply`` (next request only), ``die_after_paying``,
        ``hold_after_paying``."""
        with self._db() as db:
            if on:
                db.execute("INSERT OR REPLACE INTO settings (name, value) VALUES (?, '1')", (name,))
            else:
                db.execute("DELETE FROM settings WHERE name = ?", (name,))

    def payments(self, case_id: str | None = None) -> list[dict[str, Any]]:
        """Every payment made (of ``case_id``)."""
        with self._db() as db:
            rows = db.execute("SELECT key, case_id, amount FROM payments ORDER BY rowid").fetchall()
        return [{"key": k, "caseId": r, "amount": a} for k, r, a in rows if case_id in (None, r)]

    def requests(self) -> int:
        """How many requests reached the service."""
        with self._db() as db:
            return int(db.execute("SELECT count(*) FROM requests").fetchone()[0])

    @staticmethod
    def _setting(db: sqlite3.Connection, name: str) -> bool:
        return db.execute("SELECT 1 FROM settings WHERE name = ?", (name,)).fetchone() is not None
