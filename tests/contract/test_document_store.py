"""The document port's contract. Every backend runs this file unchanged (see ``tests/conftest.py``)."""

from __future__ import annotations

import threading
import time

import pytest

from casekeeper.core.ports import DocumentStore, Query
from casekeeper.errors import AlreadyExists, ConcurrencyConflict, InvalidDocumentId


def effect(case_id: str, doc_id: str, **fields: object) -> dict[str, object]:
    return {"id": doc_id, "caseId": case_id, **fields}


def test_create_then_read_returns_the_body_without_system_fields(store: DocumentStore) -> None:
    created = store.create("effects", "c1", "e1", effect("c1", "e1", status="started", n=1))
    assert created.body == {"id": "e1", "caseId": "c1", "status": "started", "n": 1}
    assert created.etag
    read = store.read("effects", "c1", "e1")
    assert read is not None
    assert read.body == created.body
    assert read.etag == created.etag
    assert read.ts == pytest.approx(created.ts)


def test_create_conflicts_when_the_id_exists_in_the_partition(store: DocumentStore) -> None:
    store.create("effects", "c1", "e1", effect("c1", "e1", v=1))
    with pytest.raises(AlreadyExists):
        store.create("effects", "c1", "e1", effect("c1", "e1", v=2))
    assert store.read("effects", "c1", "e1").body["v"] == 1  # type: ignore[union-attr]


def test_the_same_id_in_another_partition_is_another_document(store: DocumentStore) -> None:
    store.create("effects", "c1", "e1", effect("c1", "e1", v=1))
    store.create("effects", "c2", "e1", effect("c2", "e1", v=2))
    assert store.read("effects", "c2", "e1").body["v"] == 2  # type: ignore[union-attr]


def test_read_of_a_missing_document_is_none(store: DocumentStore) -> None:
    assert store.read("effects", "c1", "nope") is None


def test_replace_is_conditional_on_the_etag(store: DocumentStore) -> None:
    first = store.create("cases", "k1", "k1", {"id": "k1", "version": 1})
    second = store.replace("cases", "k1", "k1", {"id": "k1", "version": 2}, etag=first.etag)
    assert second.etag != first.etag
    with pytest.raises(ConcurrencyConflict):
        store.replace("cases", "k1", "k1", {"id": "k1", "version": 3}, etag=first.etag)
    assert store.read("cases", "k1", "k1").body["version"] == 2  # type: ignore[union-attr]


def test_replace_of_a_missing_document_conflicts(store: DocumentStore) -> None:
    with pytest.raises(ConcurrencyConflict):
        store.replace("cases", "k1", "k1", {"id": "k1"}, etag="whatever")


def test_upsert_creates_and_overwrites(store: DocumentStore) -> None:
    store.upsert("health", "alert", "a1", {"id": "a1", "kind": "alert", "n": 1})
    store.upsert("health", "alert", "a1", {"id": "a1", "kind": "alert", "n": 2})
    assert store.read("health", "alert", "a1").body["n"] == 2  # type: ignore[union-attr]


def test_delete_plain_and_conditional(store: DocumentStore) -> None:
    doc = store.create("effects", "c1", "e1", effect("c1", "e1"))
    assert store.delete("effects", "c1", "missing") is False
    store.replace("effects", "c1", "e1", effect("c1", "e1", changed=True), etag=doc.etag)
    with pytest.raises(ConcurrencyConflict):
        store.delete("effects", "c1", "e1", etag=doc.etag)
    assert store.delete("effects", "c1", "e1") is True
    assert store.read("effects", "c1", "e1") is None


def test_a_document_deleted_and_created_again_does_not_take_its_old_etag(store: DocumentStore) -> None:
    store.create("effects", "c1", "e0", effect("c1", "e0"))
    old = store.create("effects", "c1", "e1", effect("c1", "e1", v=1))  # the newest write of the container
    assert store.delete("effects", "c1", "e1") is True
    again = store.create("effects", "c1", "e1", effect("c1", "e1", v=2))
    assert again.etag != old.etag
    with pytest.raises(ConcurrencyConflict):
        store.replace("effects", "c1", "e1", effect("c1", "e1", v=3), etag=old.etag)
    with pytest.raises(ConcurrencyConflict):
        store.delete("effects", "c1", "e1", etag=old.etag)


def test_partition_must_match_the_body(store: DocumentStore) -> None:
    with pytest.raises(ValueError, match="partition"):
        store.create("effects", "c1", "e1", effect("c2", "e1"))


def test_query_by_equality_within_and_across_partitions(store: DocumentStore) -> None:
    store.create("effects", "c1", "e1", effect("c1", "e1", status="started", stale=False))
    store.create("effects", "c1", "e2", effect("c1", "e2", status="done", stale=False))
    store.create("effects", "c2", "e3", effect("c2", "e3", status="started", stale=True))
    across = store.query("effects", Query(equals={"status": "started"}))
    assert sorted(d.id for d in across) == ["e1", "e3"]
    within = store.query("effects", Query(partition="c1"))
    assert sorted(d.id for d in within) == ["e1", "e2"]
    assert [d.id for d in store.query("effects", Query(equals={"stale": True}))] == ["e3"]
    assert [d.id for d in store.query("effects", Query(equals={"id": "e2"}))] == ["e2"]
    assert store.query("effects", Query(equals={"status": "failed"})) == []


def test_query_orders_by_ts_and_limits(store: DocumentStore) -> None:
    # Cosmos _ts has one-second resolution: space the writes so the order is observable.
    for i in range(3):
        store.create("checkpoints", "c1", f"p{i}", {"id": f"p{i}", "caseId": "c1", "i": i})
        if i < 2:
            time.sleep(1.05)
    newest = store.query("checkpoints", Query(partition="c1", order_by_ts="desc", limit=1))
    assert [d.id for d in newest] == ["p2"]
    oldest_first = store.query("checkpoints", Query(partition="c1", order_by_ts="asc"))
    assert [d.id for d in oldest_first] == ["p0", "p1", "p2"]
    before = store.query("checkpoints", Query(partition="c1", ts_before=oldest_first[2].ts))
    assert sorted(d.id for d in before) == ["p0", "p1"]
    after = store.query("checkpoints", Query(partition="c1", ts_after=oldest_first[0].ts))
    assert sorted(d.id for d in after) == ["p1", "p2"]


def test_now_is_the_store_clock(store: DocumentStore) -> None:
    before = store.now()
    doc = store.create("effects", "c1", "e1", effect("c1", "e1"))
    after = store.now()
    # Cosmos reports whole seconds; allow that resolution, no more.
    assert before - 1.0 <= doc.ts <= after + 1.0
    assert abs(after - time.time()) < 5.0


def test_update_if_sets_fields_only_while_the_condition_holds(store: DocumentStore) -> None:
    created = store.create("cases", "k1", "k1", {"id": "k1", "version": 3, "status": "open", "facts": {"a": 1}})
    updated = store.update_if("cases", "k1", "k1", where={"version": 3}, set_fields={"gate": {"key": "e1"}})
    assert updated.etag != created.etag
    assert updated.body == {"id": "k1", "version": 3, "status": "open", "facts": {"a": 1}, "gate": {"key": "e1"}}
    assert store.read("cases", "k1", "k1").body["gate"] == {"key": "e1"}  # type: ignore[union-attr]
    with pytest.raises(ConcurrencyConflict):
        store.update_if("cases", "k1", "k1", where={"version": 2}, set_fields={"gate": {"key": "e2"}})
    # A string condition too (lower case: the Cosmos test server lower-cases filter predicates).
    store.update_if("cases", "k1", "k1", where={"version": 3, "status": "open"}, set_fields={"n": 1})
    with pytest.raises(ConcurrencyConflict):
        store.update_if("cases", "k1", "k1", where={"status": "closed"}, set_fields={"n": 2})
    final = store.read("cases", "k1", "k1")
    assert final is not None and final.body["gate"] == {"key": "e1"} and final.body["n"] == 1


def test_update_if_of_a_missing_document_conflicts(store: DocumentStore) -> None:
    with pytest.raises(ConcurrencyConflict):
        store.update_if("cases", "k9", "k9", where={"version": 1}, set_fields={"n": 1})


def test_update_if_never_lets_two_racing_writers_both_pass_on_one_version(store: DocumentStore) -> None:
    """The version gate's primitive: of writers that each move the version on, one per version wins."""
    store.create("cases", "k1", "k1", {"id": "k1", "version": 1})
    wins: list[int] = []
    barrier = threading.Barrier(6)

    def writer(i: int) -> None:
        barrier.wait()
        try:
            store.update_if("cases", "k1", "k1", where={"version": 1}, set_fields={"version": 2, "by": i})
            wins.append(i)
        except ConcurrencyConflict:
            pass

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert store.read("cases", "k1", "k1").body == {"id": "k1", "version": 2, "by": wins[0]}  # type: ignore[union-attr]


@pytest.mark.parametrize("bad_id", ["INV/2026/0042", "a\\b", "what?", "x#1", " padded", "tab\there", ""])
def test_every_backend_refuses_the_same_ids(store: DocumentStore, bad_id: str) -> None:
    with pytest.raises(InvalidDocumentId):
        store.create("cases", bad_id or "k", bad_id, {"id": bad_id, "version": 1})
    with pytest.raises(InvalidDocumentId):
        store.read("cases", "k", bad_id)
    with pytest.raises(InvalidDocumentId):
        store.upsert("health", "alert", bad_id, {"id": bad_id, "kind": "alert"})
