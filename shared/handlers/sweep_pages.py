"""The timer's walks over stuck work: a keyset page at a time, under a time budget, from a cursor kept in
the store, so that a tick's cost is bounded whatever is stuck and the next tick resumes where it stopped.

A walk reads a page (``casekeeper.core.ports.next_page``), hands it to the duty, then records the page's last
key in its cursor document (``health``, kind ``cursor``): a page whose duty raised is not recorded, and the
next tick handles it again (what the duties schedule is idempotent per hour, so that repeats nothing). The
budget is checked before each page, so a tick does at least one page and at most the budget plus one page.

Two kinds of walk:

- **passes** (the incident sweeps): the query's matches, start to end; at the end the cursor goes back to
  the start, and the next tick begins a new pass. Each item that is stuck throughout a pass is handed to the
  duty exactly once in it; an item that changes during a pass gets a new ``ts`` and is met again, later in
  that pass or in the next one.
- **a window** (the lagging-runs check): documents changed since the cursor; the cursor stays at the last
  document met, so each change is met once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from casekeeper import Document, DocumentStore, Query
from casekeeper.stores import HEALTH, next_page

CURSOR_KIND = "cursor"
DEFAULT_PAGE = 100
DEFAULT_BUDGET_SECONDS = 15.0
"""Per duty and tick: well inside the timer's period, so that a slow store cannot make ticks overlap."""


@dataclass
class Budget:
    """``seconds`` of ``monotonic`` time from construction."""

    seconds: float
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._deadline = self.monotonic() + self.seconds

    def spent(self) -> bool:
        return self.monotonic() >= self._deadline


@dataclass
class Walked:
    """What one tick of a walk did."""

    pages: int = 0
    documents: int = 0
    finished: bool = False
    """The walk reached the end of its matches (a pass completed, or the window is caught up)."""


def read_cursor(store: DocumentStore, cursor_id: str) -> tuple[dict[str, Any], tuple[float, str] | None]:
    """The cursor document's body (empty when absent) and the key it holds (``None``: from the start)."""
    doc = store.read(HEALTH, CURSOR_KIND, cursor_id)
    body = dict(doc.body) if doc is not None else {}
    after = body.get("after")
    if isinstance(after, list) and len(after) == 2 and isinstance(after[1], str):
        return body, (float(after[0]), after[1])
    return body, None


def write_cursor(store: DocumentStore, cursor_id: str, after: tuple[float, str] | None, **extra: Any) -> None:
    body = {"id": cursor_id, "kind": CURSOR_KIND, "after": list(after) if after is not None else None, **extra}
    store.upsert(HEALTH, CURSOR_KIND, cursor_id, body)


def walk_pages(
    store: DocumentStore,
    container: str,
    query: Query,
    *,
    cursor_id: str,
    handle: Callable[[list[Document]], None],
    budget: Budget,
    passes: bool,
    page: int = DEFAULT_PAGE,
) -> Walked:
    """One tick of a walk over ``query``'s matches in ``container``, from the cursor ``cursor_id``. ``passes``:
    go back to the start at the end (incident sweeps); otherwise stay at the last document met (a window).
    Raises what ``handle`` or the store raises, with the cursor at the last page fully handled."""
    after = read_cursor(store, cursor_id)[1]
    recorded = after  # what the cursor document holds: unchanged, not rewritten
    walked = Walked()
    while not walked.finished and (walked.pages == 0 or not budget.spent()):
        found = next_page(store, container, replace(query, paged=True, after=after), page)
        handle(found.documents)
        walked.pages += 1
        walked.documents += len(found.documents)
        if found.documents:
            after = (found.documents[-1].ts, found.documents[-1].id)
        if found.after is None:
            walked.finished = True
            if passes:
                after = None
        if after != recorded:
            write_cursor(store, cursor_id, after)
            recorded = after
    return walked
