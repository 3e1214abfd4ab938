"""SQLite answers the views' and the sweeps' questions from an index: a field's equality across partitions
from that field's expression index, a partition's documents from the primary key (never a field index,
which would read every partition's matches: the drain check once read every case's checkpoints per case)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from casekeeper.stores.sqlite import SqliteDocumentStore, _where_fields


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    SqliteDocumentStore(tmp_path / "s.sqlite").close()
    return sqlite3.connect(tmp_path / "s.sqlite")


def plan(conn: sqlite3.Connection, where: str, args: list[object]) -> str:
    sql = f"EXPLAIN QUERY PLAN SELECT id FROM documents WHERE container = 'cases' {where}"
    return " ".join(str(row[-1]) for row in conn.execute(sql, args).fetchall())


@pytest.mark.parametrize("name", ["status", "openEffects", "kind", "caseId"])
def test_a_field_across_partitions_is_read_from_its_index(conn: sqlite3.Connection, name: str) -> None:
    where, args = _where_fields({name: "x"})
    assert f"USING INDEX documents_by_{name}" in plan(conn, where, args)


def test_a_partition_is_read_from_the_primary_key(conn: sqlite3.Connection) -> None:
    where, args = _where_fields({"kind": "checkpoint"}, indexed=False)
    found = plan(conn, "AND partition = ? " + where, ["C-1", *args])
    assert "sqlite_autoindex_documents_1 (container=? AND partition=?)" in found
