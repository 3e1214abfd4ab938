"""A case has a bounded size (docs/design.md#case-bounds), on SQLite and on the Cosmos DB test server.

- a supplier that answers a credit-note request with 3 MB: the answer is not read past the portal client's
  byte limit, the outcome is unknown and reconciled by lookup, and the case keeps only the note's fields;
- 280 credit notes of 0.01: each transition records the credit it added, not the whole list again;
- a write that would take the case past ``MAX_CASE_BYTES`` is refused and writes nothing, while the outcome
  of an effect already claimed is still recorded (its room was kept).
"""

from __future__ import annotations

import time

import pytest

from casekeeper.cases import CommitPlan, EffectStatus
from casekeeper.core.cases import (
    MAX_CASE_BYTES,
    OUTCOME_ROOM_BYTES,
    CaseRepository,
    applied,
    case_bytes,
    reserved_bytes,
)
from casekeeper.core.clock import ManualClock
from casekeeper.core.errors import CaseTooLarge, OutcomeUnknown
from casekeeper.core.ledger import Ledger
from casekeeper.core.ports import DocumentStore
from devhost.supplier_stub import Faults, SupplierStub
from shared.domain import events as ev
from shared.supplier.portal import MAX_ANSWER_BYTES
from tests.support.app import Harness, make_harness
from tests.support.downstream import leave_started
from tests.support.invoices import invoice
from tests.support.supplier import posts

CALL_TIMEOUT = 2.0


def stored_bytes(store: DocumentStore, case_id: str) -> int:
    doc = store.read("cases", case_id, case_id)
    assert doc is not None
    return case_bytes(doc.body)


def test_a_3_mb_supplier_answer_is_an_unknown_outcome_reconciled_by_lookup(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    app = make_harness(store, supplier.url, call_timeout=CALL_TIMEOUT)
    supplier.set_faults(Faults(pad_answer_bytes=3_000_000))

    with pytest.raises(OutcomeUnknown, match=f"over {MAX_ANSWER_BYTES} bytes"):
        app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))

    [effect] = app.ledger.for_case("C-1")
    assert effect.status is EffectStatus.STARTED, "an answer over the byte limit says nothing about the note"
    assert effect.result is None
    assert len(posts(supplier)) == 1 and len(supplier.notes) == 1  # the supplier did create it
    assert stored_bytes(store, "C-1") < MAX_ANSWER_BYTES

    supplier.set_faults(Faults())  # its lookup answers as usual: the reconciler finds the note by key
    time.sleep(CALL_TIMEOUT + 1.1)  # past the call timeout (the store's clock; Cosmos DB's has whole seconds)
    guard, _ = app.deps.guarded
    assert guard.reconcile_effect("C-1", effect.key).outcome == "recorded"

    [found] = app.ledger.for_case("C-1")
    assert found.status is EffectStatus.DONE
    assert found.result == {"creditNoteId": supplier.notes[0]["creditNoteId"], "amount": "100.00", "currency": "EUR"}
    assert app.cases.require("C-1").status == "credit_requested"
    assert len(posts(supplier)) == 1  # reconciled, never asked again


def test_a_transition_records_the_credit_it_added_not_the_whole_list(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    """280 credit notes of 0.01 on one case: the facts hold 280 credits, each of the last 100 transitions one."""
    app: Harness = make_harness(store, supplier.url)
    app.handle(ev.INVOICE_RECEIVED, "C-2", **invoice("1000.00", po_amount="1000.00"))
    for n in range(280):
        app.handle(ev.CREDIT_NOTE_ISSUED, "C-2", creditNoteId=f"CN-{n:04d}", amount="0.01")

    case = app.cases.require("C-2")
    assert len(case.facts["credits"]) == 280
    added = [t.changes["credits"] for t in case.history if t.changes and "credits" in t.changes]
    assert len(added) >= 40
    assert all(set(change) == {"added"} and len(change["added"]) == 1 for change in added)
    # The credits the kept transitions added are the newest the facts hold, in order.
    assert [change["added"][0] for change in added] == case.facts["credits"][-len(added) :]
    size = stored_bytes(store, "C-2")
    assert size < 100_000, f"case is {size} bytes"
    # A reader replaying the kept history from the facts before it gets the facts the case holds.
    before = {**case.facts, "credits": case.facts["credits"][: -len(added)]}
    replayed = before
    for t in case.history:
        if t.changes:
            replayed = applied(replayed, t.changes)
    assert replayed == case.facts


def test_a_write_past_the_bound_is_refused_and_an_outcome_always_fits(store: DocumentStore) -> None:
    cases = CaseRepository(store, ManualClock())
    app_facts = invoice("1100.00")
    case = cases.create("C-3", app_facts)
    ledger = Ledger(store, cases, call_timeout=120.0)
    # Fill the case to just under its bound, minus the room one claim needs.
    filler = MAX_CASE_BYTES - reserved_bytes(case.to_body()) - OUTCOME_ROOM_BYTES - 2_000
    case = cases.annotate("C-3", 1, lambda data: {**data, "filler": "f" * filler}, expected=case)
    assert case is not None
    effect = leave_started(ledger, "C-3", request={"amount": "100.00", "currency": "EUR"})
    case = cases.require("C-3")
    assert MAX_CASE_BYTES - OUTCOME_ROOM_BYTES - 2_000 < reserved_bytes(case.to_body()) <= MAX_CASE_BYTES

    # New facts that would pass the bound: refused, nothing written.
    many = [{"creditNoteId": f"CN-{n}", "amount": "0.01"} for n in range(100)]
    with pytest.raises(CaseTooLarge) as refused:
        cases.update_facts("C-3", case.version, {"credits": many}, reason="credit notes")
    assert refused.value.limit == MAX_CASE_BYTES and refused.value.size > MAX_CASE_BYTES
    assert "over its bound" in str(refused.value)
    assert cases.require("C-3").etag == case.etag
    # A second claim would pass it too (its outcome needs room): refused before anything is called.
    called: list[str] = []
    with pytest.raises(CaseTooLarge):
        ledger.run(
            case_id="C-3",
            action="another_action",
            decided_on_version=case.version,
            call=lambda key: called.append(key) or {},
            commit=CommitPlan(status="done"),
        )
    assert called == []
    # The open effect's outcome, and the hand-over to a person, are recorded whatever the size.
    ledger.record_outcome(
        effect, EffectStatus.DONE, result={"creditNoteId": "C" * 200, "amount": "100.00"}, source="test"
    )
    assert cases.escalate("C-3", "needs_review", "r" * 5_000)
    after = cases.require("C-3")
    assert after.status == "needs_review"
    assert len(after.history[-1].reason or "") <= 2_000
    assert case_bytes(after.to_body()) <= MAX_CASE_BYTES + 4_000
