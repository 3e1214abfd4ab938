"""The one external action of the invoice domain, requesting a credit note, as the reconciler sees it.

The supplier portal honours ``Idempotency-Key`` and can be asked by key, so an effect whose outcome
is unknown is looked up, and if the supplier has no record of it, retried with the same key.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from shared.core.ledger import Call, Effect
from shared.core.reconcile import ActionPolicy
from shared.domain.invoice import Action

REQUEST_CREDIT_NOTE = Action.REQUEST_CREDIT_NOTE.value


def credit_request_data(
    key: str, result: dict[str, Any] | None, amount: str | None, currency: str | None
) -> dict[str, Any]:
    """The case ``data`` written with the ``credit_requested`` commit, by the worker or the reconciler."""
    return {
        "creditRequest": {
            "effectKey": key,
            "creditNoteId": (result or {}).get("creditNoteId"),
            "amount": amount,
            "currency": currency,
        }
    }


def credit_note_policy(supplier: Any) -> ActionPolicy:
    """``supplier``: a ``SupplierPortal`` (``find_credit_note``, ``request_credit_note``)."""

    def retry_call(effect: Effect) -> Call:
        request = effect.request

        def call(key: str) -> dict[str, Any]:
            result: dict[str, Any] = supplier.request_credit_note(
                key,
                case_id=effect.case_id,
                invoice_id=str(request["invoiceId"]),
                supplier_id=str(request["supplierId"]),
                amount=Decimal(str(request["amount"])),
                currency=str(request["currency"]),
            )
            return result

        return call

    def commit_data(effect: Effect) -> dict[str, Any]:
        return credit_request_data(
            effect.key, effect.result, effect.request.get("amount"), effect.request.get("currency")
        )

    return ActionPolicy(lookup=supplier.find_credit_note, retry_call=retry_call, commit_data=commit_data)
