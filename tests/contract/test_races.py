"""Races (rules R2 and R5): many attempts at one decision, on every backend.

Threads share one store object; processes each open their own, as separate Function hosts would.
The process test's downstream is the supplier stub over a real socket, so the count of requests is
what a supplier would see.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.ledger import Ledger
from casekeeper.core.ports import DocumentStore
from casekeeper.errors import EffectInFlight
from devhost.supplier_stub import SupplierStub
from shared.supplier.portal import SupplierPortal
from tests.conftest import StoreSpec
from tests.support.downstream import CountingDownstream

ACTION = "request_credit_note"


def run_until_settled(ledger: Ledger, call: Any, *, deadline: float = 30.0) -> dict[str, Any]:
    """What a well-behaved worker does: on EffectInFlight, back off and re-read (never call again)."""
    give_up = time.monotonic() + deadline
    while True:
        try:
            return ledger.run(case_id="c1", action=ACTION, decided_on_version=1, call=call).result
        except EffectInFlight as exc:
            if time.monotonic() > give_up:
                raise
            time.sleep(min(exc.retry_after, 0.05))


def test_eight_threads_one_decision_one_call_one_result(store: DocumentStore) -> None:
    cases = CaseRepository(store, ManualClock())
    cases.create("c1", {})
    ledger = Ledger(store, cases)
    downstream = CountingDownstream(delay=0.3)
    barrier = threading.Barrier(8)

    def attempt(_: int) -> dict[str, Any]:
        barrier.wait()
        return run_until_settled(ledger, downstream)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(attempt, range(8)))
    assert downstream.total == 1
    assert len({r["creditNoteId"] for r in results}) == 1


def test_eight_concurrent_commits_on_one_version_commit_once(store: DocumentStore) -> None:
    cases = CaseRepository(store, ManualClock())
    cases.create("c1", {})
    barrier = threading.Barrier(8)

    def commit(i: int) -> bool:
        barrier.wait()
        return cases.commit_status("c1", 1, f"status-{i}") is not None

    with ThreadPoolExecutor(max_workers=8) as pool:
        committed = list(pool.map(commit, range(8)))
    assert committed.count(True) == 1
    case = cases.require("c1")
    assert case.version == 2
    assert case.status == f"status-{committed.index(True)}"


def _process_attempt(spec: StoreSpec, supplier_url: str, start_at: float, out: Any) -> None:
    store = spec.open()
    try:
        ledger = Ledger(store, CaseRepository(store, ManualClock()))
        portal = SupplierPortal(supplier_url, timeout=10.0)

        def call(key: str) -> dict[str, Any]:
            time.sleep(0.2)  # hold the claim long enough for the others to collide with it
            return portal.request_credit_note(
                key, case_id="c1", invoice_id="INV-1", supplier_id="S-1", amount=Decimal("12.50"), currency="EUR"
            )

        time.sleep(max(0.0, start_at - time.time()))
        out.put(run_until_settled(ledger, call)["creditNoteId"])
    finally:
        store.close()


def test_four_processes_one_decision_one_supplier_request(store_spec: StoreSpec, supplier: SupplierStub) -> None:
    store = store_spec.open()
    CaseRepository(store, ManualClock()).create("c1", {})
    store.close()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 3.0  # spawned interpreters take a while to import; start together
    procs = [ctx.Process(target=_process_attempt, args=(store_spec, supplier.url, start_at, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    results = [out.get(timeout=5) for _ in procs]
    posts = [r for r in supplier.requests if r["method"] == "POST"]
    assert len(posts) == 1
    assert len(set(results)) == 1
