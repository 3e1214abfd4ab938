"""The timer's paged walks (``shared.handlers.sweep_pages``): over any sequence of ticks, with any budget,
while stuck items come, go and change, every item stuck throughout a pass is handed to its duty exactly once
in that pass, none is skipped, and every pass ends. A real SQLite store whose clock the test moves, so that
many items share one ``ts`` as they do on Cosmos DB."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from casekeeper.core.ports import Document, Query
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.handlers.sweep_pages import Budget, read_cursor, walk_pages

STUCK = Query(equals={"status": "started"})


class Clock:
    """The store's clock (seconds); the budget's clock advances one second per look."""

    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


class Ticking:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def put(store: SqliteDocumentStore, item: str, status: str) -> None:
    store.upsert("effects", "case", item, {"id": item, "caseId": "case", "status": status})


steps = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.integers(min_value=0, max_value=4)),
        st.tuples(st.just("add"), st.integers(min_value=0, max_value=3)),
        st.tuples(st.just("resolve"), st.integers(min_value=0, max_value=60)),
        st.tuples(st.just("touch"), st.integers(min_value=0, max_value=60)),
        st.tuples(st.just("time"), st.integers(min_value=0, max_value=1)),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(initial=st.integers(min_value=0, max_value=30), page=st.integers(min_value=1, max_value=7), plan=steps)
def test_every_stuck_item_is_visited_once_per_pass_and_none_is_skipped(
    tmp_path_factory: pytest.TempPathFactory, initial: int, page: int, plan: list[tuple[str, int]]
) -> None:
    clock = Clock()
    store = SqliteDocumentStore(Path(tmp_path_factory.mktemp("sweep")) / "s.sqlite", clock=clock)
    try:
        names: list[str] = []
        stuck: set[str] = set()

        def add() -> None:
            item = f"e{len(names):03d}"
            names.append(item)
            put(store, item, "started")
            stuck.add(item)
            changed.add(item)

        visits: Counter[str] = Counter()
        at_start: set[str] = set()
        changed: set[str] = set()
        passes = 0

        def handle(docs: list[Document]) -> None:
            for doc in docs:
                assert doc.id in stuck, f"{doc.id} handed over while not stuck"
                visits[doc.id] += 1

        def tick(budget: float) -> None:
            nonlocal passes, at_start
            walked = walk_pages(
                store,
                "effects",
                STUCK,
                cursor_id="prop",
                handle=handle,
                budget=Budget(budget, Ticking()),
                passes=True,
                page=page,
            )
            assert walked.pages >= 1 and walked.pages <= int(budget) + 2
            if walked.finished:
                for item in at_start & stuck - changed:
                    assert visits[item] == 1, f"{item} stuck throughout the pass, visited {visits[item]} times"
                for item in changed & stuck:
                    assert visits[item] <= 2
                assert read_cursor(store, "prop")[1] is None  # the next tick starts a new pass
                passes += 1
                visits.clear()
                changed.clear()
                at_start = set(stuck)

        for _ in range(initial):
            add()
        changed.clear()
        at_start = set(stuck)
        for action, n in plan:
            if action == "tick":
                tick(float(n))
            elif action == "add":
                for _ in range(n):
                    add()
            elif action == "time":
                clock.t += n
            elif names:
                item = names[n % len(names)]
                if action == "resolve" and item in stuck:
                    put(store, item, "done")
                    stuck.discard(item)
                    changed.add(item)
                elif action == "touch" and item in stuck:
                    put(store, item, "started")  # changed, still stuck: a new ts
                    changed.add(item)
        # Progress: with the smallest budget, the pass in progress ends within the pages that are left.
        before = passes
        for _ in range(len(names) // page + 2):
            tick(0.0)
            if passes > before:
                break
        assert passes > before, "a pass never ended"
    finally:
        store.close()
