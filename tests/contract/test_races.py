"""Races (rules R2 and R5): many attempts at one decision, through the public guard, on every backend.

The attempts run the product's path: each claims the effect on the case document (the claim is the version
gate) and records its outcome with the commit in one more write. Threads share one guard and one store
object; processes each open their own store and build their own guard, as separate Function hosts would.
The downstream is the supplier stub over a real socket, so the count of requests is what a supplier would see.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

from casekeeper import ConcurrencyConflict, DocumentStore, EffectInFlight, EffectResult, Guard, GuardedEffect
from shared.localhost.supplier_stub import SupplierStub
from shared.supplier.portal import SupplierPortal
from tests.conftest import StoreSpec

ACTION = "request_credit_note"
ATTEMPTS = 8
PROCESSES = 4


def declare(guard: Guard, supplier_url: str, *, hold: float) -> GuardedEffect:
    """The credit-note request against the supplier stub, holding each call ``hold`` seconds so that the other
    attempts collide with its claim."""
    portal = SupplierPortal(supplier_url, timeout=10.0)

    def request(key: str, args: Any) -> dict[str, Any]:
        time.sleep(hold)
        return portal.request_credit_note(
            key,
            case_id="c1",
            invoice_id="INV-1",
            supplier_id="S-1",
            amount=Decimal(args["amount"]),
            currency=args["currency"],
        )

    return guard.register(
        ACTION, request, commit="credit_requested", lookup=portal.find_credit_note, retry_same_key=True
    )


def run_until_settled(effect: GuardedEffect, *, deadline: float = 30.0) -> EffectResult:
    """What a well-behaved worker does: on ``EffectInFlight`` (another attempt is mid-call) or a lost race for
    the case (``ConcurrencyConflict``), back off and look again; never call on its own."""
    give_up = time.monotonic() + deadline
    while True:
        try:
            return effect.run_on("c1", 1, {"amount": "12.50", "currency": "EUR"})
        except (EffectInFlight, ConcurrencyConflict) as exc:
            if time.monotonic() > give_up:
                raise
            time.sleep(min(getattr(exc, "retry_after", 0.05) or 0.05, 0.05))


def test_eight_threads_one_decision_one_request_one_commit(store: DocumentStore, supplier: SupplierStub) -> None:
    guard = Guard(store, call_timeout=60)
    effect = declare(guard, supplier.url, hold=0.3)
    guard.create("c1", {"amount": "12.50"})
    barrier = threading.Barrier(ATTEMPTS)

    def attempt(_: int) -> EffectResult:
        barrier.wait()
        return run_until_settled(effect)

    with ThreadPoolExecutor(max_workers=ATTEMPTS) as pool:
        results = list(pool.map(attempt, range(ATTEMPTS)))
    posts = [r for r in supplier.requests if r["method"] == "POST"]
    assert len(posts) == 1
    assert len({r.result["creditNoteId"] for r in results}) == 1
    assert sorted(r.replayed for r in results) == [False] + [True] * (ATTEMPTS - 1)
    assert [r.commit for r in results].count("committed") == 1
    record = guard.get("c1")
    assert record is not None and (record.status, record.version) == ("credit_requested", 2)
    assert len(record.entries) == 1 and len(record.history) == 1


def test_eight_concurrent_commits_on_one_version_commit_once(store: DocumentStore) -> None:
    guard = Guard(store)
    guard.create("c1", {})
    decision = guard.decide("c1")
    barrier = threading.Barrier(ATTEMPTS)

    def commit(i: int) -> bool:
        barrier.wait()
        return guard.commit(decision, f"status-{i}") is not None

    with ThreadPoolExecutor(max_workers=ATTEMPTS) as pool:
        committed = list(pool.map(commit, range(ATTEMPTS)))
    assert committed.count(True) == 1
    record = guard.get("c1")
    assert record is not None and record.version == 2
    assert record.status == f"status-{committed.index(True)}"


def _process_attempt(spec: StoreSpec, supplier_url: str, start_at: float, out: Any) -> None:
    store = spec.open()
    try:
        effect = declare(Guard(store, call_timeout=60), supplier_url, hold=0.2)
        time.sleep(max(0.0, start_at - time.time()))
        result = run_until_settled(effect)
        out.put((result.result["creditNoteId"], result.replayed, result.commit))
    finally:
        store.close()


def test_four_processes_one_decision_one_supplier_request(store_spec: StoreSpec, supplier: SupplierStub) -> None:
    store = store_spec.open()
    Guard(store).create("c1", {"amount": "12.50"})
    store.close()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 3.0  # spawned interpreters take a while to import; start together
    procs = [
        ctx.Process(target=_process_attempt, args=(store_spec, supplier.url, start_at, out)) for _ in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    results = [out.get(timeout=5) for _ in procs]
    posts = [r for r in supplier.requests if r["method"] == "POST"]
    assert len(posts) == 1
    assert len({note for note, _, _ in results}) == 1
    assert sorted(replayed for _, replayed, _ in results) == [False] + [True] * (PROCESSES - 1)
    assert [commit for _, _, commit in results].count("committed") == 1
    store = store_spec.open()
    try:
        record = Guard(store).get("c1")
        assert record is not None and (record.status, record.version) == ("credit_requested", 2)
    finally:
        store.close()
