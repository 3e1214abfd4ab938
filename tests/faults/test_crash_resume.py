"""A worker process killed at each failure point (F2-F6, docs/design.md#failure-points), then the event
redelivered to a new process (which resumes the run where a checkpoint was written, and otherwise decides
again). In every row: the supplier sees at most one request per key, the case commits once, and no
unknown outcome is dropped (F2-F4 wait for reconciliation, which then finishes them).

Real processes, a real supplier over HTTP, both backends.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.keys import effect_key
from casekeeper.core.ledger import EffectStatus, Ledger
from devhost.supplier_stub import Faults, SupplierStub
from tests.conftest import StoreSpec
from tests.support.crash import DIED, run_crash_worker
from tests.support.reconciling import credit_note_reconciler
from tests.support.supplier import posts

# Long enough that the redelivery's worker, a new Python process, starts and reads the claim inside it on
# a loaded 2-core machine (Cosmos DB's clock counts whole seconds); 3 s was not.
CALL_TIMEOUT = 6.0
EVENT = {
    "type": "invoice.received",
    "caseId": "C-crash",
    "data": {
        "invoiceId": "INV-9",
        "supplierId": "S-1",
        "poNumber": "PO-1",
        "invoiceAmount": "1300.00",
        "poAmount": "1000.00",
        "currency": "EUR",
    },
}
KEY = effect_key("C-crash", "request_credit_note", 1)


def run_worker(spec: StoreSpec, supplier: SupplierStub, die_at: str | None = None) -> tuple[int, dict[str, Any]]:
    payload = {
        "store": dataclasses.asdict(spec),
        "supplier": supplier.url,
        "callTimeout": CALL_TIMEOUT,
        "event": EVENT,
        "dieAt": die_at,
    }
    return run_crash_worker("tests.support.crash_worker", payload)


def commits_of_credit_request(spec: StoreSpec) -> int:
    store = spec.open()
    try:
        case = CaseRepository(store, ManualClock()).require("C-crash")
        return sum(1 for t in case.history if t.status == "credit_requested")
    finally:
        store.close()


def reconcile(spec: StoreSpec, supplier: SupplierStub) -> str:
    """What the reconciler function does on a re-check, in this process."""
    store = spec.open()
    try:
        reconciler = credit_note_reconciler(store, supplier.url, call_timeout=CALL_TIMEOUT)
        return reconciler.recheck("C-crash", KEY).outcome
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("point", ["F5", "F6"])
def test_crash_after_the_effect_is_recorded_decides_again_without_a_second_request(
    store_spec: StoreSpec, supplier: SupplierStub, point: str
) -> None:
    """No checkpoint is written mid-run without a pause or a model call, so the redelivered event decides
    again from the case and its effects (rule R9). The outcome and the commit are one write of the case, so
    after F5 (right after that write) as after F6 the case already shows the commit: nothing to do, and
    nothing left to finish: a done-but-uncommitted state cannot arise."""
    code, _ = run_worker(store_spec, supplier, die_at=point)
    assert code == DIED
    code, result = run_worker(store_spec, supplier)  # the redelivered event, in a new process
    assert code == 0
    assert result["status"] == "credit_requested"
    assert result["steps"][0] == "nothing_to_do"
    assert len(posts(supplier)) == 1
    assert commits_of_credit_request(store_spec) == 1


@pytest.mark.slow
@pytest.mark.parametrize("point", ["F2", "F3", "F4"])
def test_crash_around_the_call_waits_then_is_reconciled_by_key(
    store_spec: StoreSpec, supplier: SupplierStub, point: str
) -> None:
    if point == "F3":
        supplier.set_faults(Faults(hold_seconds=2.0))
    code, _ = run_worker(store_spec, supplier, die_at=point)
    assert code == DIED
    supplier.set_faults(Faults())
    expected_posts = 0 if point == "F2" else 1
    assert len(posts(supplier)) == expected_posts

    _, in_flight = run_worker(store_spec, supplier)  # redelivered at once: the claim is still in flight
    assert in_flight.get("error") == "EffectInFlight", in_flight

    time.sleep(CALL_TIMEOUT + 1.2)  # past the call timeout, by the store's clock (whole seconds on Cosmos)
    _, waiting = run_worker(store_spec, supplier)
    assert waiting["outcome"] == "waiting_for_reconciliation"  # visibly waiting, never silently stuck
    assert len(posts(supplier)) == expected_posts  # never retried blindly

    outcome = reconcile(store_spec, supplier)
    assert outcome == ("retried" if point == "F2" else "recorded")
    assert len(posts(supplier)) == 1
    assert commits_of_credit_request(store_spec) == 1
    store = store_spec.open()
    try:
        effect = Ledger(store, CaseRepository(store, ManualClock())).get("C-crash", KEY)
        assert effect is not None and effect.status is EffectStatus.DONE
    finally:
        store.close()
