"""The store operations an event spends on checkpoints (issue 25's checkpoint goals), counted on the real store.

A case a freshly arrived event created holds no checkpoint: nothing is read to learn it. A run that ends
writes no checkpoint nobody resumes; a run that pauses for a person still writes its pause (and marks the
case in flight for the drain check), and the run that answers it writes its end, which supersedes the pause.
``CountingStore`` (the benchmarks' counter) wraps the real store and counts every port call.
"""

from __future__ import annotations

import pytest

from benchmarks.guarded_effect import CountingStore
from casekeeper.core.ports import DocumentStore, Query
from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.workflow.run_marker import MARKER_ID
from tests.support.app import make_harness
from tests.support.invoices import invoice
from tests.support.supplier import posts


def checkpoint_calls(counting: CountingStore) -> dict[str, int]:
    """The calls on the ``checkpoints`` container since the last take, by method."""
    return {method: n for (container, method), n in counting.take_tally().calls.items() if container == "checkpoints"}


def stored(store: DocumentStore, case_id: str) -> list[str]:
    return sorted(d.id for d in store.query("checkpoints", Query(partition=case_id)))


def test_a_new_case_decided_at_once_reads_and_writes_no_checkpoint(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    counting = CountingStore(store)
    app = make_harness(counting, supplier.url)  # type: ignore[arg-type]
    counting.take()
    result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    assert result.status == "credit_requested" and len(posts(supplier)) == 1
    assert checkpoint_calls(counting) == {}
    assert stored(store, "C-1") == []


def test_a_new_case_paused_for_a_person_writes_its_pause_and_its_mark_without_reading(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    counting = CountingStore(store)
    app = make_harness(counting, supplier.url)  # type: ignore[arg-type]
    counting.take()
    assert app.handle(ev.INVOICE_RECEIVED, "C-2", **invoice("2500.00")).status == "awaiting_approval"
    assert checkpoint_calls(counting) == {"upsert": 1, "create": 1}  # the in-flight mark, then the pause
    [pause] = [d for d in store.query("checkpoints", Query(partition="C-2")) if d.id != MARKER_ID]
    assert pause.body["pendingRequestIds"]
    assert MARKER_ID in stored(store, "C-2")  # the drain check still sees the paused run

    pending = app.cases.require("C-2").data["pendingApproval"]
    answer = {"requestId": pending["requestId"], "caseVersion": pending["caseVersion"], "approver": "ana"}
    assert app.handle(ev.APPROVAL_ANSWERED, "C-2", decision="approve", **answer).status == "credit_requested"
    calls = checkpoint_calls(counting)
    # The answer reads the case's checkpoints and resumes the pause; its end is written because it supersedes
    # the pause (an answer delivered again must not resume it), and the mark comes off.
    assert calls.get("create") == 1 and calls.get("delete") == 1
    assert MARKER_ID not in stored(store, "C-2") and len(stored(store, "C-2")) == 2


@pytest.mark.parametrize("amount", ["1100.00", "900.00"])
def test_an_invoice_received_again_looks_for_an_interrupted_run_once_and_writes_nothing(
    store: DocumentStore, supplier: SupplierStub, amount: str
) -> None:
    """The same report delivered again finds the case existing: that case may hold an interrupted run, so its
    checkpoints are read (once); it holds none, so the run that ends writes none."""
    counting = CountingStore(store)
    app = make_harness(counting, supplier.url)  # type: ignore[arg-type]
    first = app.handle(ev.INVOICE_RECEIVED, "C-3", **invoice(amount))
    counting.take()
    again = app.handle(ev.INVOICE_RECEIVED, "C-3", **invoice(amount))
    assert again.status == first.status
    assert checkpoint_calls(counting) == {"query": 1}
    assert stored(store, "C-3") == []
