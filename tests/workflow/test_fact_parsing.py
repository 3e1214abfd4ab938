"""The case's facts are parsed once per decision (issue 27): the proposer's step parses them, and the gate reads
the three strings its order needs from the snapshot instead of parsing them again.

Besides the decision, the money rule's watch (docs/design.md#money) judges each write of a case that holds a
credit-note request, once: here the claim's write and the outcome's write. A write of a case with no request
is judged without parsing anything."""

from __future__ import annotations

from typing import Any

import pytest

from casekeeper.core.ports import DocumentStore
from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.domain.invoice import InvoiceFacts
from tests.support.app import make_harness
from tests.support.invoices import invoice


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every ``InvoiceFacts.from_dict`` call, by its argument; the real parse still runs."""
    seen: list[dict[str, Any]] = []
    real = InvoiceFacts.from_dict.__func__  # type: ignore[attr-defined]

    def counted(cls: type[InvoiceFacts], facts: dict[str, Any]) -> InvoiceFacts:
        seen.append(facts)
        return real(cls, facts)  # type: ignore[no-any-return]

    monkeypatch.setattr(InvoiceFacts, "from_dict", classmethod(counted))
    return seen


def test_a_new_invoice_decided_at_once_is_parsed_once(
    store: DocumentStore, supplier: SupplierStub, parses: list[dict[str, Any]]
) -> None:
    app = make_harness(store, supplier.url)
    result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    assert result.status == "credit_requested"
    assert len(parses) == 1 + 2  # the decision; the watch on the claim's write and on the outcome's
    [effect] = app.ledger.for_case("C-1")  # the order carried the three strings the gate read unparsed
    assert {"EUR", "INV-1", "SUP-9"} <= set(_strings(effect.request))


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_a_po_change_parses_the_old_facts_to_plan_and_the_new_ones_to_decide(
    store: DocumentStore, supplier: SupplierStub, parses: list[dict[str, Any]]
) -> None:
    app = make_harness(store, supplier.url)
    assert app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1000.00")).status == "approved"
    parses.clear()
    result = app.handle(ev.PO_UPDATED, "C-1", poAmount="900.00")  # now over-billed by 100
    assert result.status == "credit_requested"
    # The plan on the old facts, the decision on the new; the watch on the claim's and the outcome's writes
    # (the facts' own write holds no request yet).
    assert [p["poAmount"] for p in parses] == ["1000.00", "900.00", "900.00", "900.00"]
