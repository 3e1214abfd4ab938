"""The in-flight mark the drain check asks about (``shared.workflow.run_marker``): a run that pauses marks its
case, the run that finishes it takes the mark off, and a mark left by a paused run that a new fact replaced
is removed by the next check; a case whose run never writes a checkpoint mid-run is never marked."""

from __future__ import annotations

from collections.abc import Callable

from casekeeper import Query
from casekeeper.checkpoints import CHECKPOINTS
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.domain import events as ev
from shared.operator.drain import main
from shared.workflow.run_marker import KIND_RUN_MARKER, MARKER_ID
from tests.operator.conftest import Ran
from tests.operator.test_drain import answer, pause_for_approval
from tests.support.app import Harness
from tests.support.invoices import invoice

Run = Callable[..., Ran]


def marked(store: SqliteDocumentStore) -> list[str]:
    return sorted(d.partition for d in store.query(CHECKPOINTS, Query(equals={"kind": KIND_RUN_MARKER})))


def test_a_pause_marks_the_case_and_its_answer_takes_the_mark_off(
    app: Harness, store: SqliteDocumentStore, run: Run
) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-0", **invoice("1100.00"))  # finished in one run: never marked
    assert marked(store) == []
    pending = pause_for_approval(app, "C-1")
    mark = store.read(CHECKPOINTS, "C-1", MARKER_ID)
    assert mark is not None and marked(store) == ["C-1"]
    assert run(main, "check", "--json").json()["examined"] == 1
    answer(app, "C-1", pending)
    assert marked(store) == []


def test_a_mark_left_by_a_replaced_pause_is_removed_by_the_next_check(
    app: Harness, store: SqliteDocumentStore, run: Run
) -> None:
    pause_for_approval(app, "C-1")
    app.handle(ev.PO_UPDATED, "C-1", poAmount="2450.00")  # a new fact: a new run decides; the pause is over
    assert app.cases.require("C-1").status != "awaiting_approval"
    assert marked(store) == ["C-1"]  # the new run did not know of the old run's mark
    first = run(main, "check", "--json").json()
    assert (first["inFlight"], first["examined"]) == (0, 1)
    assert marked(store) == []
    assert run(main, "check", "--json").json()["examined"] == 0  # not read again
