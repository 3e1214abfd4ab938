"""A commit lost after its effect happened (rule R4): the case goes to a person, never re-decided
automatically, and the supplier never gets a second request under a new key."""

from __future__ import annotations

from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import DocumentStore
from casekeeper.core.reconcile import Reconciler
from shared.domain import events as ev
from shared.localhost.supplier_stub import SupplierStub
from tests.support.app import make_harness
from tests.support.downstream import leave_started
from tests.support.invoices import invoice
from tests.support.supplier import posts


def test_a_writer_between_the_effect_and_its_commit_sends_the_case_to_review(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    edits = CaseRepository(store, ManualClock())

    def po_edited_meanwhile(point: str) -> None:
        # Something that bypasses the session (an operator, a second app) edits the PO after the supplier
        # answered and before the outcome-and-commit write (F4; the effects live on the case, so there is no
        # point between the outcome and the commit any more).
        if point == "F4" and edits.require("C-1").version == 1:
            assert edits.update_facts("C-1", 1, {"poAmount": "1010.00"}, reason="edited elsewhere")

    app = make_harness(store, supplier.url, probe=po_edited_meanwhile)
    result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1250.40"))
    assert result.outcome == "needs_review" and result.status == "needs_review"
    assert "happened on v1" in result.detail
    assert len(posts(supplier)) == 1
    [effect] = app.ledger.for_case("C-1")
    assert app.cases.require("C-1").history[-1].effect_key == effect.key  # the escalation names the effect
    # Reconciliation finding the same done effect later does not escalate it again.
    guard, _ = app.deps.guarded
    version = app.cases.require("C-1").version
    assert guard.reconcile_effect("C-1", effect.key).outcome == "settled"
    assert app.cases.require("C-1").version == version
    assert len(posts(supplier)) == 1


def test_rechecks_redo_their_follow_ups_after_a_crash(store: DocumentStore, supplier: SupplierStub) -> None:

    app = make_harness(store, supplier.url)
    alerts: list[str] = []
    reconciler = Reconciler(app.ledger, app.cases, store, {}, alert=lambda message, fields: alerts.append(message))
    app.cases.create("C-2", invoice("1100.00"))
    effect = leave_started(app.ledger, "C-2")
    # Escalated, then the process died before the case went to review and before the alert:
    app.ledger.mark_needs_reconciliation(effect, "lookup kept failing")
    again = reconciler.recheck("C-2", effect.key)  # the redelivered re-check
    assert again.outcome == "escalated"
    assert app.cases.require("C-2").status == "needs_review"
    assert len(alerts) == 1
    reconciler.recheck("C-2", effect.key)
    assert app.cases.require("C-2").version == 2  # the escalation is recorded once


def test_a_case_with_many_po_edits_never_reopens_an_effect_whose_commit_landed(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    """The history keeps 100 transitions; the commit naming an effect is never the one dropped, so
    "did this effect's commit land?" keeps its answer however many PO edits follow."""
    app = make_harness(store, supplier.url)
    app.handle(ev.INVOICE_RECEIVED, "C-3", **invoice("1100.00"))
    [effect] = app.ledger.for_case("C-3")
    for i in range(150):
        case = app.cases.require("C-3")
        app.cases.update_facts("C-3", case.version, {"note": str(i)}, reason=f"edit {i}")
    case = app.cases.require("C-3")
    assert len(case.history) == 100
    assert [t.effect_key for t in case.transitions_of(effect.key)] == [effect.key]
    guard, _ = app.deps.guarded
    assert guard.reconcile_effect("C-3", effect.key).outcome == "settled"
    assert app.cases.require("C-3").version == case.version
    assert len(posts(supplier)) == 1
