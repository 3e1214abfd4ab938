"""Time to live: a document carrying ``ttl`` (seconds) is gone that long after its last write.

Cosmos DB deletes such a document itself (its containers have ``defaultTtl: -1``, ``infra/app/cosmos.bicep``);
the SQLite store hides it from every read at once and purges its row. The Cosmos DB test server keeps
documents whatever their ``ttl`` (checked below, so that a release that starts honouring it is noticed):
there the Bicep and the retention policy are what is tested (tests/unit/test_retention.py,
tests/unit/test_cosmos_indexing.py).
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest

from casekeeper.core.ports import DocumentStore, Query
from casekeeper.errors import ConcurrencyConflict
from casekeeper.stores import sqlite as sqlite_store
from casekeeper.stores.sqlite import SqliteDocumentStore


class Clock:
    """The SQLite store's clock, moved by the test instead of sleeping."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def effect(doc_id: str, **fields: object) -> dict[str, object]:
    return {"id": doc_id, "caseId": "c1", **fields}


def rows(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM documents WHERE container = 'effects' ORDER BY id")]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> SqliteDocumentStore:
    return SqliteDocumentStore(tmp_path / "store.sqlite", clock=clock)


def test_an_expired_document_is_gone_for_every_read_and_conditional_write(
    store: SqliteDocumentStore, clock: Clock
) -> None:
    expiring = store.create("effects", "c1", "e1", effect("e1", status="done", ttl=10))
    store.create("effects", "c1", "kept", effect("kept", status="started"))
    store.create("effects", "c1", "forever", effect("forever", status="done", ttl=-1))
    clock.now += 9.5
    assert store.read("effects", "c1", "e1") is not None
    clock.now += 0.5  # ten seconds after its last write
    assert store.read("effects", "c1", "e1") is None
    assert sorted(d.id for d in store.query("effects", Query(partition="c1"))) == ["forever", "kept"]
    assert [d.id for _, d in store.changes_since("effects", 0)] == ["kept", "forever"]
    with pytest.raises(ConcurrencyConflict):
        store.replace("effects", "c1", "e1", effect("e1", status="done"), etag=expiring.etag)
    with pytest.raises(ConcurrencyConflict):
        store.update_if("effects", "c1", "e1", where={}, set_fields={"status": "failed"})
    assert store.delete("effects", "c1", "e1") is False
    # The id is free again, and never gets an ETag it had before.
    recreated = store.create("effects", "c1", "e1", effect("e1", status="started"))
    assert recreated.body == effect("e1", status="started") and int(recreated.etag) > int(expiring.etag)


def test_a_write_moves_the_expiry_and_a_write_without_ttl_keeps_the_document(
    store: SqliteDocumentStore, clock: Clock
) -> None:
    doc = store.create("effects", "c1", "e1", effect("e1", ttl=10))
    clock.now += 8
    doc = store.replace("effects", "c1", "e1", effect("e1", ttl=10), etag=doc.etag)
    clock.now += 8
    assert store.read("effects", "c1", "e1") is not None  # 16 s after creation, 8 after the last write
    store.replace("effects", "c1", "e1", effect("e1"), etag=doc.etag)
    clock.now += 1_000_000
    assert store.read("effects", "c1", "e1") is not None


def test_expired_rows_are_purged_without_reusing_a_seq(
    store: SqliteDocumentStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create("effects", "c1", "a", effect("a", ttl=5))
    last = store.create("effects", "c1", "b", effect("b", ttl=5))
    store.create("effects", "c1", "kept", effect("kept"))
    store.replace("effects", "c1", "b", effect("b", ttl=5), etag=last.etag)  # b now holds the highest seq
    clock.now += 5
    assert rows(store.path) == ["a", "b", "kept"]  # hidden, not yet purged
    assert store.purge_expired() == 2
    assert rows(store.path) == ["kept"]
    fresh = store.create("effects", "c1", "c", effect("c"))
    assert int(fresh.etag) > int(store.changes_since("effects", 0)[0][1].etag)
    # Writes purge on their own, at most every PURGE_INTERVAL seconds.
    monkeypatch.setattr(sqlite_store, "PURGE_INTERVAL", 0.0)
    store = SqliteDocumentStore(store.path, clock=clock)  # a new instance: its first write purges
    store.create("effects", "c1", "d", effect("d", ttl=1))
    clock.now += 1
    store.upsert("effects", "c1", "e", effect("e"))
    assert rows(store.path) == ["c", "e", "kept"]


@pytest.mark.cosmos
def test_the_cosmos_test_server_keeps_documents_whatever_their_ttl(cosmos_server: object) -> None:
    from shared.localhost.cosmos_server import make_cosmos_store

    cosmos_store: DocumentStore = make_cosmos_store(cosmos_server, f"t{uuid.uuid4().hex[:12]}")
    cosmos_store.create("effects", "c1", "e1", effect("e1", status="done", ttl=1))
    time.sleep(2.2)
    found = cosmos_store.read("effects", "c1", "e1")
    # ensure_containers turns time to live on as the Bicep does (the server keeps the setting, not the expiry).
    properties = cosmos_store._container("effects").read()  # type: ignore[attr-defined]
    cosmos_store.close()
    assert properties["defaultTtl"] == -1
    assert found is not None and found.body["ttl"] == 1, "the test server honours ttl now: test it here too"
