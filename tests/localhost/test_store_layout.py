"""The SQLite store file's layout: one row written per document write, and older files migrated.

Layout 0 (before ``PRAGMA user_version`` was set) bumped one database-wide counter row on every write to
order the change feed and make ETags. Layout 1 takes each container's next ``seq`` from its index. A
``--data`` folder of layout 0 is migrated when opened: its documents, ETags and change-feed continuations
stay valid, and new writes land after everything already given out. A file of a newer layout is refused
by name, and a layout-0 build refuses to write to a migrated file instead of reusing positions.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from casekeeper.errors import ConcurrencyConflict, StoreError
from casekeeper.stores.sqlite import SCHEMA_VERSION, SqliteDocumentStore
from devhost.changefeed import LocalChangeFeed

# What layout 0 created, and how it wrote (from the build before layout 1).
LAYOUT_0 = """
CREATE TABLE documents (
    container TEXT NOT NULL, partition TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL,
    etag TEXT NOT NULL, ts REAL NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (container, partition, id)
);
CREATE INDEX documents_by_seq ON documents (container, seq);
CREATE INDEX documents_by_ts ON documents (container, ts);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO counters (name, value) VALUES ('seq', 0);
CREATE TABLE change_feed_continuations (
    name TEXT PRIMARY KEY, container TEXT NOT NULL, seq INTEGER NOT NULL, updated REAL NOT NULL
);
"""


def layout_0_write(conn: sqlite3.Connection, container: str, partition: str, doc_id: str, body: str) -> int:
    conn.execute("BEGIN IMMEDIATE")
    (seq,) = conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'seq' RETURNING value").fetchone()
    conn.execute(
        "INSERT INTO documents (container, partition, id, body, etag, ts, seq) VALUES (?, ?, ?, ?, ?, 0, ?) "
        "ON CONFLICT (container, partition, id) DO UPDATE SET body = excluded.body, etag = excluded.etag, "
        "seq = excluded.seq",
        (container, partition, doc_id, body, str(seq), seq),
    )
    conn.execute("COMMIT")
    return int(seq)


def test_a_write_changes_the_document_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    store = SqliteDocumentStore(path)
    store.create("effects", "c0", "e0", {"id": "e0", "caseId": "c0"})

    def everything_but_documents() -> dict[str, list[tuple[object, ...]]]:
        conn = sqlite3.connect(path)
        names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        tables = {n: conn.execute(f"SELECT * FROM {n} ORDER BY 1").fetchall() for n in names if n != "documents"}
        conn.close()
        return tables

    before = everything_but_documents()
    doc = store.create("cases", "k1", "k1", {"id": "k1", "version": 1})
    doc = store.replace("cases", "k1", "k1", {"id": "k1", "version": 2}, etag=doc.etag)
    doc = store.update_if("cases", "k1", "k1", where={"version": 2}, set_fields={"version": 3})
    store.upsert("cases", "k1", "k1", {"id": "k1", "version": 4})
    store.delete("effects", "c0", "e0")  # the container's newest: the one kind of delete that records a floor
    assert everything_but_documents() == {**before, "seq_floors": [("effects", 1)]}
    store.close()


def test_a_layout_0_folder_is_migrated_and_its_feed_and_etags_stay_valid(tmp_path: Path) -> None:
    path = tmp_path / "casekeeper.sqlite"
    old = sqlite3.connect(path, isolation_level=None)
    old.executescript(LAYOUT_0)
    layout_0_write(old, "effects", "c1", "e1", '{"id":"e1","caseId":"c1","status":"started"}')
    seen = layout_0_write(old, "effects", "c1", "e2", '{"id":"e2","caseId":"c1","status":"started"}')
    e3 = layout_0_write(old, "effects", "c1", "e3", '{"id":"e3","caseId":"c1","status":"started"}')
    old.execute("DELETE FROM documents WHERE id = 'e3'")  # e3's position was given out, then deleted
    case_seq = layout_0_write(old, "cases", "c1", "c1", '{"id":"c1","status":"open"}')
    old.execute("INSERT INTO change_feed_continuations VALUES ('reconciler:effects', 'effects', ?, 0)", (seen,))
    old.close()

    store = SqliteDocumentStore(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    case = store.read("cases", "c1", "c1")
    assert case is not None and case.etag == str(case_seq)  # ETags written by layout 0 still work
    store.replace("cases", "c1", "c1", {"id": "c1", "status": "approved"}, etag=case.etag)
    with pytest.raises(ConcurrencyConflict):
        store.replace("cases", "c1", "c1", {"id": "c1", "status": "x"}, etag=case.etag)

    store.upsert("effects", "c1", "e4", {"id": "e4", "caseId": "c1", "status": "started"})
    feed = LocalChangeFeed(store, "effects", "reconciler:effects")
    batch = feed.poll()  # from the continuation layout 0 left: e4 only, after every old position
    assert [d["id"] for d in batch.documents] == ["e4"]
    assert batch.documents[0]["_lsn"] > max(e3, case_seq)
    store.close()

    # Opening it again (any process, any number of times) leaves it as it is.
    again = SqliteDocumentStore(path)
    assert again.read("effects", "c1", "e4") is not None
    again.close()


def test_a_layout_0_build_refuses_to_write_to_a_migrated_file(tmp_path: Path) -> None:
    path = tmp_path / "casekeeper.sqlite"
    SqliteDocumentStore(path).close()
    old = sqlite3.connect(path, isolation_level=None)
    old.executescript(  # what a layout-0 build runs when it opens the file: all of it is a no-op now
        "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
        "INSERT OR IGNORE INTO counters (name, value) VALUES ('seq', 0);"
    )
    with pytest.raises(sqlite3.IntegrityError, match="layout 1"):  # and its first write stops here
        old.execute("UPDATE counters SET value = value + 1 WHERE name = 'seq' RETURNING value").fetchone()
    old.close()


def test_a_file_of_a_newer_layout_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "casekeeper.sqlite"
    SqliteDocumentStore(path).close()
    sqlite3.connect(path).execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=f"layout {SCHEMA_VERSION + 1} was written by a newer Casekeeper"):
        SqliteDocumentStore(path)
