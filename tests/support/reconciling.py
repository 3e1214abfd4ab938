"""The invoice app's reconciler for a test that re-checks effects outside the app's own wiring: a guard over
the test's store with the credit-note request declared on it, as the composition root declares it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from casekeeper import DocumentStore, Guard
from casekeeper.cases import Reconciler
from shared.supplier.portal import SupplierPortal
from shared.workflow.actions import declare_credit_note


def credit_note_reconciler(
    store: DocumentStore, supplier_url: str, *, call_timeout: float, **options: Any
) -> Reconciler:
    """The reconciler of a guard over ``store`` whose effects count as unknown after ``call_timeout``; its
    credit-note policy asks the supplier at ``supplier_url``. ``options`` set the reconciler's bounds
    (``max_lookup_failures``, ``alert``, ...)."""
    guard = Guard(store, call_timeout=call_timeout)
    declare_credit_note(guard, SupplierPortal(supplier_url, timeout=2.0))
    return replace(guard.reconciler, **options)
