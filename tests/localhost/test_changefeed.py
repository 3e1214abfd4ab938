"""The local change feed: commit order, latest version, a persisted continuation, at-least-once."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import azure.functions as func
import pytest

from casekeeper.errors import ConcurrencyConflict
from casekeeper.stores.sqlite import SqliteDocumentStore
from devhost.changefeed import ChangeBatch, LocalChangeFeed, to_document_list

FEED = "reconciler:effects"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteDocumentStore]:
    s = SqliteDocumentStore(tmp_path / "docs.sqlite")
    yield s
    s.close()


def effect(store: SqliteDocumentStore, doc_id: str, status: str = "started", case: str = "case-1") -> None:
    store.upsert("effects", case, doc_id, {"caseId": case, "status": status})


def ids(batch: ChangeBatch) -> list[str]:
    return [d["id"] for d in batch.documents]


def test_changes_come_in_commit_order(store: SqliteDocumentStore) -> None:
    feed = LocalChangeFeed(store, "effects", FEED)
    for doc_id, case in (("e2", "case-2"), ("e1", "case-1"), ("e3", "case-1")):
        effect(store, doc_id, case=case)
    store.upsert("cases", "case-1", "case-1", {"id": "case-1", "status": "open"})  # another container: not in this feed
    batch = feed.poll()
    assert ids(batch) == ["e2", "e1", "e3"]
    lsns = [d["_lsn"] for d in batch.documents]
    assert lsns == sorted(lsns) and batch.continuation == lsns[-1] and batch.start == 0


def test_a_document_written_twice_appears_once_at_its_newest_position(store: SqliteDocumentStore) -> None:
    feed = LocalChangeFeed(store, "effects", FEED)
    effect(store, "e1")
    effect(store, "e2")
    effect(store, "e1", status="succeeded")
    batch = feed.poll()
    assert ids(batch) == ["e2", "e1"]
    assert batch.documents[1]["status"] == "succeeded"


def test_poll_is_batched_by_max_items(store: SqliteDocumentStore) -> None:
    feed = LocalChangeFeed(store, "effects", FEED)
    for i in range(5):
        effect(store, f"e{i}")
    seen = []
    while batch := feed.poll(max_items=2):
        assert len(batch) <= 2
        seen += ids(batch)
        feed.commit(batch)
    assert seen == [f"e{i}" for i in range(5)]
    empty = feed.poll()
    assert empty.documents == [] and empty.continuation == empty.start
    feed.commit(empty)  # committing nothing is fine
    with pytest.raises(ValueError, match="max_items"):
        feed.poll(max_items=0)


def test_the_continuation_survives_a_new_feed_instance(store: SqliteDocumentStore) -> None:
    feed = LocalChangeFeed(store, "effects", FEED)
    effect(store, "e1")
    effect(store, "e2")
    batch = feed.poll()
    feed.commit(batch)
    feed.close()
    effect(store, "e3")

    reopened_store = SqliteDocumentStore(store.path)
    again = LocalChangeFeed(reopened_store, "effects", FEED)
    assert again.continuation == batch.continuation
    assert ids(again.poll()) == ["e3"]
    # Another name has its own continuation and starts from the beginning.
    assert ids(LocalChangeFeed(reopened_store, "effects", "audit:effects").poll()) == ["e1", "e2", "e3"]
    rows = sqlite3.connect(store.path).execute("SELECT name FROM change_feed_continuations ORDER BY name").fetchall()
    assert rows == [("audit:effects",), (FEED,)]
    reopened_store.close()


def test_an_uncommitted_batch_is_delivered_again(store: SqliteDocumentStore) -> None:
    feed = LocalChangeFeed(store, "effects", FEED)
    effect(store, "e1")
    effect(store, "e2")
    first = feed.poll()
    assert ids(feed.poll()) == ids(first)  # polling again before commit: the same changes
    # "Crash" between poll and commit: a new instance starts where the last commit left off.
    assert ids(LocalChangeFeed(store, "effects", FEED).poll()) == ["e1", "e2"]
    feed.commit(first)
    feed.commit(first)  # committing the same batch twice is harmless
    assert feed.poll().documents == []


def test_a_stale_batch_cannot_move_the_continuation(store: SqliteDocumentStore) -> None:
    a = LocalChangeFeed(store, "effects", FEED)
    b = LocalChangeFeed(store, "effects", FEED)
    effect(store, "e1")
    stale = a.poll()
    b.commit(b.poll())
    effect(store, "e2")
    b.commit(b.poll())
    with pytest.raises(ConcurrencyConflict, match="moved"):
        a.commit(stale)
    with pytest.raises(ValueError, match="audit"):
        a.commit(LocalChangeFeed(store, "effects", "audit").poll())


def test_a_name_follows_one_container(store: SqliteDocumentStore) -> None:
    LocalChangeFeed(store, "effects", FEED)
    with pytest.raises(ValueError, match="follows container 'effects'"):
        LocalChangeFeed(store, "cases", FEED)
    with pytest.raises(ValueError, match="unknown container"):
        LocalChangeFeed(store, "nope", "x")


def test_document_list_items_expose_the_body_and_system_fields(store: SqliteDocumentStore) -> None:
    feed = LocalChangeFeed(store, "effects", FEED)
    effect(store, "e1", status="started")
    stored = store.read("effects", "case-1", "e1")
    assert stored is not None
    docs = to_document_list(feed.poll())
    assert isinstance(docs, func.DocumentList) and len(docs) == 1
    [doc] = docs
    assert isinstance(doc, func.Document)
    assert (doc["id"], doc["caseId"], doc["status"]) == ("e1", "case-1", "started")
    assert doc["_ts"] == int(stored.ts) and isinstance(doc["_ts"], int)
    assert doc["_etag"] == stored.etag
    assert doc.to_dict()["status"] == "started"
    # The ETag is the store's own: a trigger can write back conditionally.
    store.replace("effects", "case-1", "e1", {"caseId": "case-1", "status": "succeeded"}, etag=doc["_etag"])


def test_a_write_after_deleting_the_newest_document_is_not_skipped(store: SqliteDocumentStore) -> None:
    feed = LocalChangeFeed(store, "effects", FEED)
    effect(store, "e1")
    effect(store, "e2")
    feed.commit(feed.poll())  # the continuation is e2's position, the container's newest
    assert store.delete("effects", "case-1", "e2") is True
    effect(store, "e3")  # must land after the continuation, though e2's position is free again
    batch = feed.poll()
    assert ids(batch) == ["e3"] and batch.continuation > batch.start
    # The same across a restart: the floor a delete leaves is stored, not kept in memory.
    feed.commit(batch)
    assert store.delete("effects", "case-1", "e3") is True
    reopened = SqliteDocumentStore(store.path)
    effect(reopened, "e4")
    assert ids(LocalChangeFeed(reopened, "effects", FEED).poll()) == ["e4"]
    reopened.close()


def test_each_container_is_in_commit_order_under_concurrent_writers(store: SqliteDocumentStore) -> None:
    feed = LocalChangeFeed(store, "effects", FEED)

    def write(n: int) -> None:
        for i in range(25):
            effect(store, f"w{n}-{i}", case=f"case-{n}")
            store.upsert("cases", f"case-{n}", f"case-{n}", {"id": f"case-{n}", "i": i})

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen: list[str] = []
    lsns: list[int] = []
    while batch := feed.poll(max_items=7):
        seen += ids(batch)
        lsns += [d["_lsn"] for d in batch.documents]
        feed.commit(batch)
    assert sorted(seen) == sorted(f"w{n}-{i}" for n in range(4) for i in range(25))
    assert lsns == sorted(set(lsns))  # strictly increasing: every write its own position
    for n in range(4):  # each writer's own writes in the order it made them
        mine = [int(doc_id.split("-")[1]) for doc_id in seen if doc_id.startswith(f"w{n}-")]
        assert mine == sorted(mine)
