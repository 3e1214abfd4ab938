"""The invoice a test case is opened with: ``invoice("1250.00")`` is 250.00 over a PO of 1000.00."""

from __future__ import annotations


def invoice(invoice_amount: str, po_amount: str = "1000.00", **extra: str) -> dict[str, str]:
    """An ``invoice.received`` event's data; ``invoiceId`` and ``currency`` may be given in ``extra``."""
    return {
        "invoiceId": extra.get("invoiceId", "INV-1"),
        "supplierId": "SUP-9",
        "poNumber": "PO-77",
        "invoiceAmount": invoice_amount,
        "poAmount": po_amount,
        "currency": extra.get("currency", "EUR"),
    }
