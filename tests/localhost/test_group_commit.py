"""Group commit of the SQLite writes (``casekeeper.stores.sqlite_connections``): writes that queue up behind a
commit share the next one, and each is still atomic, isolated and durable once acknowledged."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from casekeeper.errors import StoreError
from casekeeper.stores.sqlite_connections import SqliteConnections


def tracked(path: Path, statements: list[str]) -> SqliteConnections:
    def on_connect(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.set_trace_callback(statements.append)

    db = SqliteConnections(path, on_connect=on_connect)
    db.get().executescript(
        "CREATE TABLE IF NOT EXISTS parents (id INTEGER PRIMARY KEY);"
        "CREATE TABLE IF NOT EXISTS rows (id TEXT PRIMARY KEY, n INTEGER NOT NULL, parent INTEGER"
        "  REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED);"
    )
    return db


def committed(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT id, n FROM rows"))
    finally:
        conn.close()


def test_concurrent_writes_share_commits_and_each_is_applied_once(tmp_path: Path) -> None:
    statements: list[str] = []
    db = tracked(tmp_path / "db.sqlite", statements)
    writes_per_thread = 40

    def work(t: int) -> None:
        for i in range(writes_per_thread):
            with db.write() as conn:  # a read-then-write: atomic only if writes are isolated
                (n,) = conn.execute("SELECT coalesce(max(n), 0) FROM rows").fetchone()
                conn.execute("INSERT INTO rows (id, n) VALUES (?, ?)", (f"t{t}-{i}", n + 1))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    rows = committed(tmp_path / "db.sqlite")
    assert len(rows) == 8 * writes_per_thread
    assert sorted(rows.values()) == list(range(1, 8 * writes_per_thread + 1))  # no two read the same max
    commits = statements.count("COMMIT")
    assert commits < 8 * writes_per_thread  # some writes shared a commit
    db.close()


def test_a_write_that_raises_is_undone_alone_and_its_refusal_waits_for_the_commit(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    db = tracked(path, [])
    a_in_body = threading.Event()
    seen_by_b: list[dict[str, int]] = []

    def a() -> None:
        with db.write() as conn:
            conn.execute("INSERT INTO rows (id, n) VALUES ('x', 1)")
            a_in_body.set()
            time.sleep(0.3)  # B queues up behind A meanwhile, and joins A's transaction

    def b() -> None:
        a_in_body.wait(5)
        try:
            with db.write() as conn:
                conn.execute("INSERT INTO rows (id, n) VALUES ('y', 2)")
                conn.execute("INSERT INTO rows (id, n) VALUES ('x', 3)")  # taken: by A, not yet committed
        except sqlite3.IntegrityError:
            seen_by_b.append(committed(path))  # what B may act on, once it is told
        else:
            raise AssertionError("B's write should have been refused")

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen_by_b == [{"x": 1}]  # A's row committed before B heard of the conflict; B's 'y' undone
    db.close()


def test_when_the_commit_fails_every_write_of_its_batch_raises_and_none_happened(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    db = tracked(path, [])
    first_in_body = threading.Event()
    outcomes: dict[str, str] = {}

    def write(name: str, parent: int | None, hold: float) -> None:
        try:
            with db.write() as conn:
                conn.execute("INSERT INTO rows (id, n, parent) VALUES (?, 0, ?)", (name, parent))
                first_in_body.set()
                time.sleep(hold)
        except StoreError as exc:
            outcomes[name] = f"raised: {exc}"
        else:
            outcomes[name] = "committed"

    # 'good' is fine by itself; 'bad' names a parent that does not exist, which only COMMIT checks.
    good = threading.Thread(target=write, args=("good", None, 0.3))
    good.start()
    first_in_body.wait(5)
    bad = threading.Thread(target=write, args=("bad", 99, 0.0))
    bad.start()
    for t in (good, bad):
        t.join(10)
    assert outcomes.keys() == {"good", "bad"}
    assert all(o.startswith("raised: ") and "not committed" in o for o in outcomes.values()), outcomes
    assert committed(path) == {}
    with db.write() as conn:  # and the next write starts a transaction of its own
        conn.execute("INSERT INTO rows (id, n) VALUES ('later', 1)")
    assert committed(path) == {"later": 1}
    db.close()


def test_an_uncontended_write_commits_on_its_own_at_once(tmp_path: Path) -> None:
    statements: list[str] = []
    path = tmp_path / "db.sqlite"
    db = tracked(path, statements)
    del statements[:]
    with db.write() as conn:
        conn.execute("INSERT INTO rows (id, n) VALUES ('a', 1)")
    assert committed(path) == {"a": 1}  # durable when the block ends
    assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
    db.close()


def test_a_write_inside_a_write_of_the_same_thread_is_refused_at_once(tmp_path: Path) -> None:
    db = tracked(tmp_path / "db.sqlite", [])
    with db.write() as conn:
        conn.execute("INSERT INTO rows (id, n) VALUES ('outer', 1)")
        started = time.monotonic()
        with pytest.raises(StoreError, match="inside a write"), db.write():
            pass
        assert time.monotonic() - started < 1.0
    assert committed(tmp_path / "db.sqlite") == {"outer": 1}
    db.close()
