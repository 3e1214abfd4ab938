"""Smoke test of the Cosmos DB adapter against the local test server (``@vercel/cosmosdb-server``).

The backend-independent contract lives in ``test_document_store.py``; this file proves the adapter and
the server launcher work together, including the server quirks the launcher and the SQL builder handle.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from casekeeper.core.ports import DocumentStore, Query
from casekeeper.errors import AlreadyExists, ConcurrencyConflict, InvalidDocumentId
from casekeeper.stores.cosmos import CosmosDocumentStore
from devhost.cosmos_server import (
    INSECURE_REQUEST_WARNING_FILTER,
    CosmosServer,
    CosmosServerError,
    make_cosmos_store,
    start_cosmos_server,
)

pytestmark = [pytest.mark.cosmos, pytest.mark.filterwarnings(INSECURE_REQUEST_WARNING_FILTER)]


@pytest.fixture(scope="module")
def server() -> Iterator[CosmosServer]:
    with start_cosmos_server() as running:
        yield running


@pytest.fixture
def store(server: CosmosServer) -> Iterator[CosmosDocumentStore]:
    # A database per test: the server is shared, its data is not.
    opened = make_cosmos_store(server, f"smoke{uuid.uuid4().hex[:10]}")
    try:
        yield opened
    finally:
        opened.close()


def effect(case_id: str, doc_id: str, **fields: object) -> dict[str, object]:
    return {"id": doc_id, "caseId": case_id, **fields}


def test_the_store_satisfies_the_port(store: CosmosDocumentStore) -> None:
    assert isinstance(store, DocumentStore)


def test_create_returns_the_body_and_conflicts_on_a_second_create(store: CosmosDocumentStore) -> None:
    created = store.create("effects", "c1", "e1", effect("c1", "e1", status="started"))
    assert created.body == {"id": "e1", "caseId": "c1", "status": "started"}
    assert (created.container, created.partition, created.id) == ("effects", "c1", "e1")
    assert created.etag
    assert created.ts == pytest.approx(time.time(), abs=5)
    with pytest.raises(AlreadyExists) as caught:
        store.create("effects", "c1", "e1", effect("c1", "e1", status="other"))
    assert caught.value.__cause__ is not None  # the vendor error stays reachable
    read = store.read("effects", "c1", "e1")
    assert read is not None
    assert read.body == created.body
    assert read.etag == created.etag


def test_read_of_a_missing_document_is_none(store: CosmosDocumentStore) -> None:
    # Without the launcher's header rewrite the server crashes on this read instead of answering 404.
    assert store.read("effects", "c1", "missing") is None
    store.create("effects", "c1", "e1", effect("c1", "e1"))
    assert store.read("effects", "c2", "e1") is None  # same id, other partition


def test_replace_with_a_stale_etag_conflicts(store: CosmosDocumentStore) -> None:
    first = store.create("cases", "k1", "k1", {"id": "k1", "version": 1})
    second = store.replace("cases", "k1", "k1", {"id": "k1", "version": 2}, etag=first.etag)
    assert second.etag != first.etag
    with pytest.raises(ConcurrencyConflict):
        store.replace("cases", "k1", "k1", {"id": "k1", "version": 3}, etag=first.etag)
    with pytest.raises(ConcurrencyConflict):
        store.replace("cases", "gone", "gone", {"id": "gone"}, etag=first.etag)
    assert store.read("cases", "k1", "k1").body["version"] == 2  # type: ignore[union-attr]


def test_delete_plain_and_conditional(store: CosmosDocumentStore) -> None:
    doc = store.create("effects", "c1", "e1", effect("c1", "e1"))
    assert store.delete("effects", "c1", "missing") is False
    with pytest.raises(ConcurrencyConflict):
        store.delete("effects", "c1", "missing", etag=doc.etag)
    with pytest.raises(ConcurrencyConflict):
        store.delete("effects", "c1", "e1", etag="stale")
    assert store.delete("effects", "c1", "e1", etag=doc.etag) is True
    assert store.read("effects", "c1", "e1") is None


def test_bodies_are_checked_before_sending(store: CosmosDocumentStore) -> None:
    with pytest.raises(ValueError, match="partition"):
        store.create("effects", "c1", "e1", effect("c2", "e1"))
    with pytest.raises(ValueError, match="doc_id"):
        store.create("effects", "c1", "e1", effect("c1", "e2"))
    with pytest.raises(InvalidDocumentId, match="must not contain /"):
        store.create("effects", "c1", "a/b", effect("c1", "a/b"))
    # System fields given back by a caller are dropped, not stored.
    created = store.create("effects", "c1", "e1", {**effect("c1", "e1"), "_etag": "x", "_ts": 1})
    assert created.body == {"id": "e1", "caseId": "c1"}


def test_query_with_equality_order_and_limit(store: CosmosDocumentStore) -> None:
    # _ts has one-second resolution: space the writes so the order is observable.
    for i in range(3):
        store.create("checkpoints", "c1", f"p{i}", {"id": f"p{i}", "caseId": "c1", "i": i, "value": "v"})
        if i < 2:
            time.sleep(1.05)
    store.create("checkpoints", "c2", "q0", {"id": "q0", "caseId": "c2", "i": 9, "value": "v"})
    # "value" is a reserved word in Cosmos SQL: c["value"] still works.
    newest_two = Query(partition="c1", equals={"value": "v"}, order_by_ts="desc", limit=2)
    newest = store.query("checkpoints", newest_two)
    assert [d.id for d in newest] == ["p2", "p1"]
    assert all(d.partition == "c1" for d in newest)
    oldest = store.query("checkpoints", Query(partition="c1", order_by_ts="asc", limit=1))
    assert [d.id for d in oldest] == ["p0"]
    middle = Query(partition="c1", ts_after=newest[1].ts - 0.5, ts_before=newest[0].ts)
    between = store.query("checkpoints", middle)
    assert [d.id for d in between] == ["p1"]
    assert store.query("checkpoints", Query(partition="c1", limit=0)) == []


def test_partition_query_stays_in_its_partition_and_none_crosses(store: CosmosDocumentStore) -> None:
    store.create("effects", "c1", "e1", effect("c1", "e1", status="started", stale=False))
    store.create("effects", "c1", "e2", effect("c1", "e2", status="done", stale=False))
    store.create("effects", "c2", "e3", effect("c2", "e3", status="started", stale=True))
    # The test server ignores the partition header on queries; the adapter's own filter keeps c2 out.
    assert sorted(d.id for d in store.query("effects", Query(partition="c1"))) == ["e1", "e2"]
    across = store.query("effects", Query(equals={"status": "started"}))
    assert sorted((d.partition, d.id) for d in across) == [("c1", "e1"), ("c2", "e3")]
    assert [d.id for d in store.query("effects", Query(equals={"stale": True}))] == ["e3"]
    assert store.query("effects", Query(equals={"status": "failed"})) == []


def test_now_is_the_clock_of_document_ts(store: CosmosDocumentStore) -> None:
    before = store.now()
    doc = store.create("effects", "c1", "e1", effect("c1", "e1"))
    after = store.now()
    assert before <= doc.ts <= after  # one clock, whole seconds
    assert after - before <= 1.0
    assert abs(after - time.time()) < 5.0
    clock = store.read("health", "clock", "clock")
    assert clock is not None
    assert clock.ts == after


def test_upsert_creates_then_overwrites(store: CosmosDocumentStore) -> None:
    first = store.upsert("health", "alert", "a1", {"id": "a1", "kind": "alert", "n": 1})
    second = store.upsert("health", "alert", "a1", {"id": "a1", "kind": "alert", "n": 2})
    assert second.etag != first.etag
    assert store.read("health", "alert", "a1").body == {"id": "a1", "kind": "alert", "n": 2}  # type: ignore[union-attr]


def test_point_ops_are_fast_on_a_kept_alive_connection(store: CosmosDocumentStore) -> None:
    # Guards the launcher's keepAlive: without it every call pays a TLS handshake (about 60 ms).
    store.create("effects", "c1", "e1", effect("c1", "e1"))
    rounds = 50
    started = time.perf_counter()
    for _ in range(rounds):
        store.read("effects", "c1", "e1")
    per_read = (time.perf_counter() - started) / rounds
    assert per_read < 0.030, f"{per_read * 1000:.1f} ms per point read"


def test_the_seeding_route_writes_what_a_create_writes(server: CosmosServer) -> None:
    """The benchmarks seed large stores through the server's bulk route: what it writes must read back as
    the SDK's own creates do (body, ETag, ``_ts``, the partition), be queryable, and refuse a taken id."""
    database = f"seed{uuid.uuid4().hex[:10]}"
    store = make_cosmos_store(server, database)
    try:
        _seed_and_read(server, database, store)
    finally:
        store.close()


def _seed_and_read(server: CosmosServer, database: str, store: CosmosDocumentStore) -> None:
    bodies = [
        (f"C{i:05d}", {"id": f"C{i:05d}", "kind": "case", "status": "closed" if i % 3 else "open"}) for i in range(1203)
    ]
    assert server.seed(database, "cases", bodies, batch=500) == 1203
    doc = store.read("cases", "C00007", "C00007")
    assert doc is not None and doc.body["status"] == "closed" and doc.etag and doc.ts > 0
    assert store.count("cases", Query(equals={"status": "open"})) == 401
    # A seeded document takes conditional writes like any other.
    replaced = store.replace("cases", "C00007", "C00007", {**doc.body, "status": "open"}, etag=doc.etag)
    with pytest.raises(ConcurrencyConflict):
        store.replace("cases", "C00007", "C00007", doc.body, etag=doc.etag)
    assert replaced.etag != doc.etag
    with pytest.raises(CosmosServerError, match="C00001"):
        server.seed(database, "cases", [("C00001", {"id": "C00001", "kind": "case"})])
