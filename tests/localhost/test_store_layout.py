"""The SQLite store file's layout: one row written per document write; a file of another layout refused.

A new file is given the whole layout (``PRAGMA user_version`` names it). A file of another layout, or one that
holds tables but no layout, is refused with both named: never read as if it were this one.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from casekeeper.errors import StoreError
from casekeeper.stores.sqlite import SCHEMA_VERSION, SqliteDocumentStore


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


def test_a_file_of_another_layout_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "casekeeper.sqlite"
    SqliteDocumentStore(path).close()
    sqlite3.connect(path).execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=f"layout {SCHEMA_VERSION + 1} is not the layout this build reads"):
        SqliteDocumentStore(path)


def test_a_file_with_tables_but_no_layout_is_not_taken_for_a_store(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(StoreError, match="not a store file"):
        SqliteDocumentStore(path)
    with sqlite3.connect(path) as conn:
        assert [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["notes"]
