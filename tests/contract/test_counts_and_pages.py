"""The port's aggregate count and keyset pages (``DocumentStore.count``, ``next_page``, ``walk``) on every
backend: a count is one request and agrees with the documents; a walk meets every matching document once,
in ``(ts, id)`` order, however many share one ``ts`` (Cosmos DB's ``_ts`` has whole seconds, so the documents
written here mostly do)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from casekeeper.core.ports import DocumentStore, Query, next_page, walk
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.localhost.cosmos_server import INSECURE_REQUEST_WARNING_FILTER

pytestmark = pytest.mark.filterwarnings(INSECURE_REQUEST_WARNING_FILTER)

STATUSES = ("open", "closed", "needs_review")


def seed(store: DocumentStore, n: int) -> dict[str, str]:
    statuses = {f"c{i:03d}": STATUSES[i % 3] for i in range(n)}
    for case_id, status in statuses.items():
        store.create("cases", case_id, case_id, {"id": case_id, "status": status, "openEffects": status == "open"})
    return statuses


def test_counts_agree_with_the_documents_and_ignore_limits(store: DocumentStore) -> None:
    statuses = seed(store, 23)
    for status in STATUSES:
        expected = sum(1 for s in statuses.values() if s == status)
        assert store.count("cases", Query(equals={"status": status})) == expected
        assert store.count("cases", Query(equals={"status": status}, limit=2, order_by_ts="asc")) == expected
    assert store.count("cases", Query()) == 23
    assert store.count("cases", Query(partition="c001")) == 1
    assert store.count("cases", Query(equals={"openEffects": True})) == 8
    assert store.count("cases", Query(equals={"status": "nothing"})) == 0
    assert store.count("effects", Query()) == 0


@pytest.mark.parametrize("size", [1, 4, 7, 30])
def test_a_walk_meets_every_matching_document_once_in_ts_id_order(store: DocumentStore, size: int) -> None:
    statuses = seed(store, 17)
    walked = list(walk(store, "cases", Query(equals={"status": "closed"}), size))
    assert sorted(d.id for d in walked) == sorted(k for k, s in statuses.items() if s == "closed")
    assert [(d.ts, d.id) for d in walked] == sorted((d.ts, d.id) for d in walked)
    first = next_page(store, "cases", Query(), size)
    assert len(first.documents) == min(size, 17)
    assert (first.after is None) == (size > 17)


def test_after_without_paged_is_refused(store: DocumentStore) -> None:
    with pytest.raises(ValueError, match="paged"):
        store.query("cases", Query(after=(1.0, "x")))


class TickingClock:
    """The store's clock, moved by the test: many writes share one instant, as on Cosmos DB."""

    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


@settings(max_examples=40, deadline=None)
@given(
    plan=st.lists(st.tuples(st.booleans(), st.sampled_from(STATUSES)), min_size=0, max_size=40),
    size=st.integers(min_value=1, max_value=9),
)
def test_walks_over_ties_on_sqlite(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[bool, str]], size: int
) -> None:
    clock = TickingClock()
    store = SqliteDocumentStore(Path(tmp_path_factory.mktemp("walk")) / "s.sqlite", clock=clock)
    try:
        expected: dict[str, str] = {}
        for i, (tick, status) in enumerate(plan):
            if tick:
                clock.t += 1.0
            store.create("cases", f"k{i:02d}", f"k{i:02d}", {"id": f"k{i:02d}", "status": status})
            expected[f"k{i:02d}"] = status
        for status in STATUSES:
            ids = [d.id for d in walk(store, "cases", Query(equals={"status": status}), size)]
            assert sorted(ids) == sorted(k for k, s in expected.items() if s == status)
            assert len(ids) == len(set(ids))
            assert store.count("cases", Query(equals={"status": status})) == len(ids)
    finally:
        store.close()
